"""Outputs over consumed inputs: how far a layer's output may overlap the input it reads, from the
order in which it reads the one and writes the other (no MAC is recomputed).

A layer run in a known order is a ``Schedule``: step by step, the bytes of its input it reads and
the bytes of its output it writes, each as a hull (every byte the step touches lies inside, so a
proof on hulls holds for the bytes). Orders:

- ``pixel_walk``: a whole kernel walking its output pixels row by row (every channel of a pixel
  before the next), each pixel reading its window. The step writes while it still reads (the
  portable kernels re-read the window for every output channel), so a write must miss its own
  step's reads too (``ahead`` 0).
- ``tile_walk``: L1 tiles in the tile loop's order, moved by the double-buffered DMA: the store of
  tile t comes after the load of tile t + 1 (finished: ``ahead`` 2; an asynchronous engine may
  still be loading it: ``ahead`` 1).
- ``patch_walk``: a patch stage, patch by patch: a patch reads its regions of the stage's inputs,
  then copies its output region into the whole output (``ahead`` 1).

With the output's first byte ``d`` bytes above the input's, the layer is sound when no write of a
step reaches a byte that a step from ``ahead`` steps later still reads. ``Schedule.window`` is
the largest such ``d`` for which the output stays below every later read (and any lower ``d`` is
sound too); an output wholly above its input is always sound. NCHW inputs read plane by plane
give one read hull per plane and step, so what a step has consumed is strided planes, not a
prefix: the window counts only what lies below every plane's next read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from network_parser.ir import DTYPE_BYTES

from . import kernels as K

NO_READ = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class OutputOverInput:
    """A layer (or a patch stage, recorded on its last op) whose output may start inside an input
    that dies there: walking its ``order`` forwards, at most ``window`` bytes above the input's
    first byte (negative: below it); backwards, at least ``rise`` bytes above it. Once the arena
    is planned, ``reverse`` says which way the layer walks."""
    layer: int
    input: int  # tensor
    output: int  # tensor
    order: str  # "pixels" | "tiles" | "patches"
    window: int
    rise: int
    reverse: bool = False


@dataclass(frozen=True, eq=False)
class Schedule:
    """Reads and writes of one layer in its order: rows of (step, lo, hi), byte hulls relative to
    the input's and the output's first byte."""
    reads: np.ndarray  # (n, 3) int64
    writes: np.ndarray  # (m, 3) int64
    ahead: int  # a write of step s must miss the reads of steps >= s + ahead
    order: str  # "pixels" | "tiles" | "patches"
    in_bytes: int
    out_bytes: int

    @property
    def steps(self) -> int:
        return int(max(self.reads[:, 0].max(initial=-1), self.writes[:, 0].max(initial=-1))) + 1

    def reversed(self) -> Schedule:
        """The same steps, last first."""
        n = self.steps

        def flip(rows: np.ndarray) -> np.ndarray:
            out = rows.copy()
            out[:, 0] = n - 1 - rows[:, 0]
            return out
        return Schedule(flip(self.reads), flip(self.writes), self.ahead, self.order, self.in_bytes, self.out_bytes)

    def rise(self) -> int:
        """The least shift of the output's start above the input's that keeps every write above
        every read still to come; at least minus the output's bytes (from there down the output
        lies below the whole input)."""
        n = self.steps
        last = np.full(n + 1, -NO_READ, np.int64)  # per step, the end of what it reads
        reads = self.reads[self.reads[:, 2] > self.reads[:, 1]]
        np.maximum.at(last, reads[:, 0], reads[:, 2])
        later = np.maximum.accumulate(last[::-1])[::-1]  # later[s]: the highest end read from step s on
        writes = self.writes[self.writes[:, 2] > self.writes[:, 1]]
        if writes.size == 0:
            return -self.out_bytes
        above = later[np.minimum(writes[:, 0] + self.ahead, n)]
        limits = above[above != -NO_READ] - writes[above != -NO_READ, 1]
        return int(max(limits.max(initial=-self.out_bytes), -self.out_bytes))

    def window(self) -> int:
        """The largest shift of the output's start above the input's (negative: below) that keeps
        every write below every read still to come; at most the input's bytes (from there on the
        output lies above the whole input)."""
        n = self.steps
        first = np.full(n + 1, NO_READ, np.int64)  # per step, the lowest byte it reads
        reads = self.reads[self.reads[:, 2] > self.reads[:, 1]]
        np.minimum.at(first, reads[:, 0], reads[:, 1])
        later = np.minimum.accumulate(first[::-1])[::-1]  # later[s]: the lowest byte read from step s on
        writes = self.writes[self.writes[:, 2] > self.writes[:, 1]]
        if writes.size == 0:
            return self.in_bytes
        below = later[np.minimum(writes[:, 0] + self.ahead, n)]
        limits = below[below != NO_READ] - writes[below != NO_READ, 2]
        return int(min(limits.min(initial=self.in_bytes), self.in_bytes))


def _hulls(step, n, h, w, c, y0, y1, x0, x1, c0, c1, elem) -> np.ndarray:
    """(step, lo, hi) of the NHWC boxes [y0, y1) x [x0, x1) x [c0, c1) of image ``n`` of a tensor
    of h x w x c, in bytes of ``elem``; an empty box reads nothing (lo = hi = 0)."""
    lo = ((n * h + y0) * w + x0) * c + c0
    hi = ((n * h + y1 - 1) * w + x1 - 1) * c + c1
    empty = (y1 <= y0) | (x1 <= x0) | (c1 <= c0)
    return np.stack([step, np.where(empty, 0, lo * elem), np.where(empty, 0, hi * elem)], axis=1).astype(np.int64)


def _axis(out: int, stride: int, pad: int, eff: int, extent: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output index along one axis, the input interval [a, b) its window reads (clipped)."""
    o = np.arange(out, dtype=np.int64)
    return np.maximum(o * stride - pad, 0), np.minimum(o * stride - pad + eff, extent)


def pixel_walk(kern, in_elem: int = 1, out_elem: int = 1) -> Schedule | None:
    """A whole convolution, depthwise convolution or pooling walking its output pixels in row
    order, or a fully connected layer its rows; None for other kernels."""
    match kern:
        case K.FullyConnected():
            b = np.arange(kern.batch, dtype=np.int64)
            f, u = kern.in_features, kern.units
            reads = np.stack([b, b * f * in_elem, (b + 1) * f * in_elem], axis=1)
            writes = np.stack([b, b * u * out_elem, (b + 1) * u * out_elem], axis=1)
            return Schedule(reads, writes, 0, "pixels", kern.batch * f * in_elem, kern.batch * u * out_elem)
        case K.Conv():
            eff_h, eff_w = (kern.k_h - 1) * kern.dil_h + 1, (kern.k_w - 1) * kern.dil_w + 1
            in_c, out_c = kern.in_c, kern.out_c
        case K.Pool() if kern.float_avg is None:
            eff_h, eff_w, in_c, out_c = kern.f_h, kern.f_w, kern.channels, kern.channels
        case _:
            return None
    ya, yb = _axis(kern.out_h, kern.stride_h, kern.pad_t, eff_h, kern.in_h)
    xa, xb = _axis(kern.out_w, kern.stride_w, kern.pad_l, eff_w, kern.in_w)
    n, oy, ox = (a.reshape(-1) for a in np.meshgrid(np.arange(kern.batch), np.arange(kern.out_h),
                                                     np.arange(kern.out_w), indexing="ij"))
    step = (n * kern.out_h + oy) * kern.out_w + ox
    reads = _hulls(step, n, kern.in_h, kern.in_w, in_c, ya[oy], yb[oy], xa[ox], xb[ox], 0, in_c, in_elem)
    writes = np.stack([step, step * out_c * out_elem, (step + 1) * out_c * out_elem], axis=1)
    return Schedule(reads, writes, 0, "pixels", kern.batch * kern.in_h * kern.in_w * in_c * in_elem,
                    step.size * out_c * out_elem)


def _tile_axis(out: int, tile: int, stride: int, pad: int, eff: int, extent: int) -> list[tuple[int, int, int, int]]:
    """Per tile along one axis: its first output, outputs, and the input interval [a, b) it loads."""
    spans = []
    for o0 in range(0, out, tile):
        o = min(tile, out - o0)
        spans.append((o0, o, max(o0 * stride - pad, 0), min((o0 + o - 1) * stride - pad + eff, extent)))
    return spans


def tile_walk(g, tiling, async_dma: bool) -> Schedule | None:
    """The tiles of a tiled layer in the tile loop's order (channel tiles outermost, then rows,
    columns and input-channel slices), loaded and stored by the double-buffered DMA; None for
    layers whose input windows are not strided windows (resizes, transposed convolutions)."""
    if g.kind not in ("conv", "depthwise", "pool", "fc", "eltwise") or g.rows:
        return None
    t, elem = tiling, g.elem
    if g.kind == "eltwise":
        rows = _tile_axis(g.out_h, t.tile_h, 1, 0, 1, g.in_h)
        cols = _tile_axis(g.out_w, t.tile_w, 1, 0, 1, g.in_w)
    else:
        rows = _tile_axis(g.out_h, t.tile_h, g.stride_h, g.pad_t, (g.k_h - 1) * g.dil_h + 1, g.in_h)
        cols = _tile_axis(g.out_w, t.tile_w, g.stride_w, g.pad_l, (g.k_w - 1) * g.dil_w + 1, g.in_w)
    split = 0 < t.tile_ci < g.in_c
    slices = [(i, min(t.tile_ci, g.in_c - i)) for i in range(0, g.in_c, t.tile_ci)] if split else [(0, g.in_c)]
    reads, writes, step = [], [], 0
    for c0 in range(0, g.out_c, t.tile_c):
        oc = min(t.tile_c, g.out_c - c0)
        for y0, oh, ia, ib in rows:
            for x0, ow, ja, jb in cols:
                for n, (i0, ic) in enumerate(slices):
                    ca, cb = (c0, c0 + oc) if g.channels_follow_output else (i0, i0 + ic)
                    if g.kind == "fc":
                        reads.append((step, i0 * elem, (i0 + ic) * elem))
                    elif ib > ia and jb > ja:
                        reads.append((step, ((ia * g.in_w + ja) * g.in_c + ca) * elem,
                                      (((ib - 1) * g.in_w + jb - 1) * g.in_c + cb) * elem))
                    if n == len(slices) - 1:  # the last input-channel slice stores the tile
                        if g.kind == "fc":
                            writes.append((step, c0 * elem, (c0 + oc) * elem))
                        else:
                            writes.append((step, ((y0 * g.out_w + x0) * g.out_c + c0) * elem,
                                           (((y0 + oh - 1) * g.out_w + x0 + ow - 1) * g.out_c + c0 + oc) * elem))
                    step += 1
    in_bytes = (g.in_c if g.kind == "fc" else g.in_h * g.in_w * g.in_c) * elem
    out_bytes = (g.out_c if g.kind == "fc" else g.out_h * g.out_w * g.out_c) * elem
    return Schedule(np.array(reads, np.int64).reshape(-1, 3), np.array(writes, np.int64).reshape(-1, 3),
                    1 if async_dma else 2, "tiles", in_bytes, out_bytes)


def patch_walk(patch, source: int, shapes: dict, dtypes: dict, nchw: bool = False) -> Schedule:
    """A patch stage's whole input ``source`` against its whole output, patch by patch (rows of
    patches, columns inside): each patch reads its region of the input (of every plane, for an
    NCHW input ``nchw``, which a transpose opening the stage reads) and then writes its region of
    the output. ``shapes``/``dtypes``: tensor -> shape / type."""
    out = patch.stage.output
    reads, writes = [], []
    _, oh, ow, oc = shapes[out]
    oe, ie = DTYPE_BYTES[dtypes[out]], DTYPE_BYTES[dtypes[source]]
    for r, rows in enumerate(patch.rows.intervals):
        for c, cols in enumerate(patch.cols.intervals):
            step = r * patch.cols.parts + c
            (y0, y1), (x0, x1) = rows[source], cols[source]
            if nchw:
                _, planes, h, w = shapes[source]
                reads += [(step, (p * h * w + y0 * w + x0) * ie, (p * h * w + (y1 - 1) * w + x1) * ie)
                          for p in range(planes) if y1 > y0 and x1 > x0]
            elif y1 > y0 and x1 > x0:
                _, h, w, ch = shapes[source]
                reads.append((step, (y0 * w + x0) * ch * ie, ((y1 - 1) * w + x1) * ch * ie))
            (a0, a1), (b0, b1) = rows[out], cols[out]
            writes.append((step, (a0 * ow + b0) * oc * oe, ((a1 - 1) * ow + b1) * oc * oe))
    in_bytes = int(np.prod(shapes[source])) * ie
    return Schedule(np.array(reads, np.int64).reshape(-1, 3), np.array(writes, np.int64).reshape(-1, 3), 1,
                    "patches", in_bytes, oh * ow * oc * oe)


def element_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]
