"""An analytical cycle model of one tiled layer: compute per tile, DMA per tile, double buffering.

    modeled_cycles(g, tile_h, tile_w, tile_c, cost) -> int
    dma_transfers(g, tile, cost=None) -> int
    schedule(g, tile, cost) -> Schedule (cycles, compute, DMA, transfers, bytes)

``g`` is a layer's tiling view (layer_analyzer.tiling.TileGeometry); ``cost`` is the
backend's parameter dict (every key optional, ``{}`` gives the defaults in ``DEFAULTS``).

The tile loop (the order the generated C walks the tiles): output-channel tiles outermost
(each channel tile's weights are loaded once), then tile rows, then tile columns. The tile
grid is exact: along a dimension of extent ``E`` cut in tiles of ``t``, the first
``ceil(E/t) - 1`` tiles have ``t`` and the last (border) tile ``E - (n-1) t``.

Per tile ``i`` of sizes ``(h, w, c)``:

compute_i
    ``ceil(macs / rate) + ceil(outputs * per_output) + tile_setup_cycles + leftover``, where
    ``rate`` is ``macs_per_cycle_<kind>`` (else ``macs_per_cycle``), ``per_output`` is
    ``cycles_per_output_<kind>`` (else 0: requantization and stores per output on a core
    without a SIMD epilogue), ``macs`` counts
    rows, columns and channels rounded *up* to ``h_multiple`` / ``w_multiple`` /
    ``c_multiple`` (a leftover group runs with idle cores or SIMD lanes: PULP splits rows
    over 8 cores and produces 4 channels x 2 pixels per inner loop, a Cortex-M DSP family makes
    pairs of channels and pixels), times the MACs per output of the layer; ``leftover`` is
    ``leftover_penalty`` cycles for every dimension whose tile size is not a multiple of its
    group (the leftover loop's setup and branches). A fully connected layer has no rows or
    columns to split, so only ``c_multiple`` applies to it.
load_i
    the DMA cycles of what tile ``i`` needs and tile ``i-1`` did not have: its input tile
    (the halo included, ``operands`` tensors) when the input tile changes and its weights
    and per-channel parameters when the channel tile changes.
store_i
    the DMA cycles of its output tile.

A DMA of ``b`` bytes in ``k`` transfers costs ``ceil(b / dma_bytes_per_cycle) +
k * dma_setup_cycles``. With ``dma_dims`` 3 (default: a 3-D DMA such as PULP's mchan
loops) a tile of one tensor is one transfer; with 2 it is one per row unless its rows are
whole pixels (all channels); with 1 one per contiguous run.

Double buffering (``double_buffer`` True, the default): while tile ``i`` computes, the DMA
loads tile ``i+1`` and stores tile ``i-1``, so

    cycles = load_0 + sum_i max(compute_i, load_{i+1} + store_{i-1}) + store_{N-1}

Without it every tile is ``load_i + compute_i + store_i`` in sequence.

The sum is exact yet costs O(1): along each dimension the tiles ``1 .. n-3`` all see the
same neighbours (full tiles on both sides), so each dimension needs at most four
representative indices (0, one middle index with multiplicity ``n-3``, ``n-2``, ``n-1``)
and the layer at most 64 representative steps, whatever the number of tiles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "DEFAULTS",
    "Schedule",
    "compute_cycles",
    "cost_params",
    "dma_transfers",
    "modeled_cycles",
    "schedule",
]

DEFAULTS = dict(
    macs_per_cycle=1.0,  # aggregate throughput of the kernel on all cores
    dma_bytes_per_cycle=4.0,
    dma_setup_cycles=50,  # per DMA transfer (programming the channel, waiting on its event)
    leftover_penalty=0,  # cycles per tile and per dimension with a partial group
    tile_setup_cycles=0,  # per tile: kernel call, pointer arithmetic
    h_multiple=1,
    w_multiple=1,
    c_multiple=1,
    dma_dims=3,
    double_buffer=True,
)


def cost_params(cost: dict | None) -> dict:
    """The cost dict with defaults filled in; a key the model does not know is an error (a
    mistyped key would otherwise be ignored silently)."""
    unknown = [k for k in (cost or {}) if k not in DEFAULTS and not _per_kind(k)]
    if unknown:
        raise ValueError(f"unknown cost model keys: {', '.join(sorted(unknown))} (known: {', '.join(DEFAULTS)}, "
                         f"and macs_per_cycle_<kind> / cycles_per_output_<kind> for kind in {', '.join(KINDS)})")
    return {**DEFAULTS, **(cost or {})}


KINDS = ("conv", "depthwise", "fc", "pool", "eltwise", "resize", "bilinear", "transpose_conv")  # layer_analyzer.tiling.TileGeometry.kind


def _per_kind(key: str) -> bool:
    return any(key == f"{base}_{kind}" for base in ("macs_per_cycle", "cycles_per_output") for kind in KINDS)


@dataclass(frozen=True, slots=True)
class Schedule:
    cycles: int  # the modeled latency of the layer
    compute_cycles: int  # sum over tiles
    dma_cycles: int  # sum over tiles (loads and stores)
    transfers: int  # DMA transfers (input, weights, parameters, output)
    dma_bytes: int
    tiles: int


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def compute_cycles(g, h: int, w: int, c: int, p: dict) -> int:
    """Cycles of the kernel on one tile of ``h x w x c`` outputs (``p``: filled cost params).
    ``macs_per_cycle_<kind>`` and ``cycles_per_output_<kind>`` (a layer kind: conv, depthwise,
    fc, pool, eltwise) override the throughput and add the per-output work (requantization,
    stores) of that kind's kernels."""
    hm, wm, cm = (1, 1, p["c_multiple"]) if g.kind == "fc" else (p["h_multiple"], p["w_multiple"], p["c_multiple"])
    macs = _round_up(h, hm) * _round_up(w, wm) * _round_up(c, cm) * g.macs_per_output()
    leftovers = (h % hm != 0) + (w % wm != 0) + (c % cm != 0)
    rate = p.get(f"macs_per_cycle_{g.kind}", p["macs_per_cycle"])
    per_output = p.get(f"cycles_per_output_{g.kind}", 0)
    return (math.ceil(macs / rate) + math.ceil(h * w * c * per_output) + p["tile_setup_cycles"]
            + p["leftover_penalty"] * leftovers)


def _chunks(rows: int, cols: int, chans: int, whole_rows: bool, whole_pixels: bool, dims: int) -> int:
    """DMA transfers for a rows x cols x chans box of an HWC tensor (``whole_pixels``: all channels,
    ``whole_rows``: all columns too, so the box is one contiguous run)."""
    if dims >= 3 or (whole_rows and whole_pixels):
        return 1
    if dims == 2:
        return 1 if whole_pixels else rows  # one 2-D transfer, or one per row
    return rows if whole_pixels else rows * cols  # contiguous runs


class _Layer:
    """The tile grid of one layer and the per-tile quantities of the model."""

    def __init__(self, g, tile, p):
        self.g, self.p = g, p
        self.t = tile
        self.ext = (g.out_c, g.out_h, g.out_w)
        self.tc = (tile[2], tile[0], tile[1])  # in loop order: c, h, w
        self.n = tuple(-(-e // t) for e, t in zip(self.ext, self.tc))
        self.bw = p["dma_bytes_per_cycle"]
        self.setup = p["dma_setup_cycles"]
        self.dims = p["dma_dims"]
        self.border = tuple(e - (n - 1) * t for e, n, t in zip(self.ext, self.n, self.tc))

    def sizes(self, idx):
        """(h, w, c) of the tile at loop index ``idx`` = (c, h, w)."""
        n, t, b = self.n, self.tc, self.border
        return (t[1] if idx[1] < n[1] - 1 else b[1], t[2] if idx[2] < n[2] - 1 else b[2],
                t[0] if idx[0] < n[0] - 1 else b[0])

    def dma(self, nbytes: int, transfers: int) -> tuple[int, int, int]:
        if nbytes == 0:
            return 0, 0, 0
        return math.ceil(nbytes / self.bw) + self.setup * transfers, transfers, nbytes

    def input(self, h, w, c):
        g = self.g
        rows, cols = g.in_rows(h), g.in_cols(w)
        ch = c if g.channels_follow_output else g.in_c
        k = g.operands * _chunks(rows, cols, ch, cols == g.in_w, ch == g.in_c, self.dims)
        return self.dma(g.operands * rows * cols * ch * g.elem, k)

    def weights(self, c):
        g = self.g
        staged = g.stage_weights  # weights read where they are cost no transfer
        wt = self.dma(c * g.weight_bytes_per_channel * staged, 1)
        pr = self.dma(c * g.param_bytes * staged, 1)
        return tuple(a + b for a, b in zip(wt, pr))

    def output(self, h, w, c):
        g = self.g
        return self.dma(h * w * c * g.elem, _chunks(h, w, c, w == g.out_w, c == g.out_c, self.dims))

    def step(self, idx, forward: bool):
        """The neighbour of tile ``idx`` in loop order and whether the input / weights change."""
        n = self.n
        c, h, w = idx
        if forward:
            if w < n[2] - 1:
                return (c, h, w + 1), "w"
            if h < n[1] - 1:
                return (c, h + 1, 0), "h"
            if c < n[0] - 1:
                return (c + 1, 0, 0), "c"
            return None, None
        if w > 0:
            return (c, h, w - 1), "w"
        if h > 0:
            return (c, h - 1, n[2] - 1), "h"
        if c > 0:
            return (c - 1, n[1] - 1, n[2] - 1), "c"
        return None, None

    def load(self, idx, kind):
        """DMA to bring tile ``idx`` in after the tile before it (``kind``: which index moved; None: first)."""
        h, w, c = self.sizes(idx)
        g = self.g
        new_input = kind is None or g.channels_follow_output or kind in ("w", "h") or self.n[1] * self.n[2] > 1
        new_weights = kind is None or kind == "c"
        parts = ((self.input(h, w, c) if new_input else (0, 0, 0)),
                 (self.weights(c) if new_weights else (0, 0, 0)))
        return tuple(a + b for a, b in zip(*parts))


def _representatives(n: int) -> list[tuple[int, int]]:
    """(index, multiplicity) along one dimension: indices 1..n-3 behave alike."""
    reps = [(i, 1) for i in sorted({0, max(n - 2, 0), n - 1})]
    if n >= 4:
        reps.append((1, n - 3))
    return reps


def schedule(g, tile, cost: dict | None = None) -> Schedule:
    """The modeled cycles, DMA traffic and transfers of the layer cut in ``tile`` (tile_h, tile_w, tile_c)."""
    p = cost_params(cost)
    L = _Layer(g, tuple(int(x) for x in tile), p)
    last = tuple(k - 1 for k in L.n)
    first_load = L.load((0, 0, 0), None)
    total = first_load[0]
    compute = 0
    dma = list(first_load)  # cycles, transfers, bytes
    memo: dict = {}  # steps with the same tile sizes and neighbours cost the same
    for ci, mc in _representatives(L.n[0]):
        for hi, mh in _representatives(L.n[1]):
            for wi, mw in _representatives(L.n[2]):
                idx = (ci, hi, wi)
                nxt, kind = L.step(idx, True)
                prv, _ = L.step(idx, False)
                here = L.sizes(idx)
                key = (here, kind, nxt and L.sizes(nxt), prv and L.sizes(prv))
                if key not in memo:
                    cyc = compute_cycles(g, *here, p)
                    ld = L.load(nxt, kind) if nxt is not None else (0, 0, 0)
                    st_prev = L.output(*L.sizes(prv))[0] if prv is not None else 0
                    st = L.output(*here)
                    step = max(cyc, ld[0] + st_prev) if p["double_buffer"] else cyc + ld[0] + st[0]
                    memo[key] = (step, cyc, ld[0] + st[0], ld[1] + st[1], ld[2] + st[2])
                step, cyc, *moved = memo[key]
                mult = mc * mh * mw
                total += mult * step
                compute += mult * cyc
                for k in range(3):
                    dma[k] += mult * moved[k]
    total += L.output(*L.sizes(last))[0] if p["double_buffer"] else 0
    tiles = L.n[0] * L.n[1] * L.n[2]
    return Schedule(int(total), int(compute), int(dma[0]), int(dma[1]), int(dma[2]), tiles)


def modeled_cycles(g, tile_h: int, tile_w: int, tile_c: int, cost: dict | None = None) -> int:
    """Modeled latency in cycles of the layer cut in tiles of ``tile_h x tile_w x tile_c`` outputs."""
    return schedule(g, (tile_h, tile_w, tile_c), cost).cycles


def dma_transfers(g, tile, cost: dict | None = None) -> int:
    """DMA transfers the whole layer issues for ``tile`` (input tiles, weights and parameters, outputs)."""
    return schedule(g, tile, cost).transfers
