"""Multi-stage fusion: runs of the network computed patch by patch, anywhere along it, chosen
together.

A stage is a run of ops s..e (layer_analyzer.receptive_field.Stages, from any start) computed on
an R x C grid of its output, each patch computing only the region of every stage tensor it needs
(halos recomputed). While it runs the arena holds the tensors that pass it by (produced before
it, read after it), its inputs (every patch reads them), its output (every patch writes its
part) and the per-patch buffers. The input that dies in the stage and the output may share bytes:
patch by patch (layer_analyzer.overlap.patch_walk) the output may start within a window below
that input, or walking the patches backwards a rise above it:

    peak(stage, R, C)  = passing + inputs but the dying one + span(dying input, output | R, C)
                         + the per-patch buffers live at once
    extra(stage, R, C) = the MACs the patches recompute

Outside every stage op k holds what the unsplit plan holds there (``profile``: its live bytes
with every overlap pair at its least span, the arena's lower bound per op). A choice of disjoint
stages is a path over the op boundaries, and its peak is the largest of the stage peaks and the
profile at the ops no stage covers. ``plan_fusion`` solves it exactly by dynamic programming:
for a byte target, the least recomputed MACs whose peak stays within it (``cheapest``); for a
MAC budget, the least peak (a search over the targets that matter). The single stage at the
network's head (MCUNetV2's split) is the same search restricted to one stage there: the twin.
The estimate is the arena's lower bound; the arena planner then places the buffers (the
pipeline aims lower where it misses).
"""
from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import Spatial, Stage, Stages, axis_extents, stage_macs
from network_parser.ir import DTYPE_BYTES

from .arena_types import pair_footprint

MAX_PARTS = 16  # patches per axis considered


@dataclass(frozen=True)
class StageOption:
    """One stage on one grid: its estimated peak and the MACs its patches recompute."""
    start: int
    end: int
    grid: tuple[int, int]
    peak: int
    macs_extra: int


@dataclass(frozen=True)
class StageCandidate:
    """A stage and its grids, least peak first, each recomputing less than the one before."""
    stage: Stage
    source: int | None  # the input that dies in it (overlapped by its output), if any
    options: tuple[StageOption, ...]
    peaks: tuple[int, ...] = field(repr=False)  # of the options, for bisection

    def cheapest(self, target: int) -> StageOption | None:
        """The option recomputing least whose peak is within ``target``."""
        i = bisect_right(self.peaks, target)
        return self.options[i - 1] if i else None


@dataclass(frozen=True)
class FusionChoice:
    """Disjoint stages with their grids (none: the network runs whole), the peak estimated and
    the MACs recomputed."""
    stages: tuple[StageOption, ...]
    peak: int
    macs_extra: int
    overhead: float
    unsplit_peak: int
    method: str = "dp"  # "dp" (the exact search), "single" (one stage at the head: the twin), "forced"
    wall_s: float = 0.0

    @property
    def split(self) -> bool:
        return bool(self.stages)


# ---- the stages and their grids -------------------------------------------------------------

@dataclass(frozen=True)
class Surroundings:
    """What the unsplit plan says about any stage: the buffers' spans (what passes a stage by)
    and each tensor's last reader (what dies in it)."""
    spans: tuple  # (first op, last op, bytes, member tensors) per owner of bytes
    last_read: dict
    kept: frozenset  # read after the run: never dies
    outside: frozenset = frozenset()  # not in the arena (an input the application keeps)

    @classmethod
    def of(cls, graph, lives, readers, outside=frozenset()) -> Surroundings:
        groups: dict[int, list] = {}
        for lt in lives:
            groups.setdefault(lt.owner, []).append(lt)
        spans = tuple((min(m.first_op for m in g), max(m.last_op for m in g), max(m.size for m in g),
                       frozenset(m.tensor for m in g)) for g in groups.values())
        return cls(spans, {t: r[-1] for t, r in readers.items()}, frozenset(graph.outputs), frozenset(outside))

    def passing(self, stage: Stage) -> int:
        """Bytes of the buffers live all through the stage that it neither reads nor writes."""
        touched = set(stage.inputs) | set(stage.patch_tensors)
        return sum(size for first, last, size, members in self.spans
                   if first < stage.start and last > stage.end and not members & touched)

    def dying(self, stage: Stage) -> set:
        """The stage's inputs in the arena that nothing reads after it."""
        return {t for t in stage.inputs if t not in self.kept and t not in self.outside
                and self.last_read.get(t, -1) <= stage.end}

    def inputs_bytes(self, stage: Stage, graph, but: int | None) -> int:
        """Bytes of the stage's inputs in the arena (but ``but``)."""
        return sum(graph.tensors[t].nbytes for t in stage.inputs if t != but and t not in self.outside)


def dying_source(stage: Stage, graph, dying: set) -> int | None:
    """The input that dies in a stage and that its output may overlap: the largest."""
    sources = sorted((t for t in stage.inputs if t in dying), key=lambda t: (-graph.tensors[t].nbytes, t))
    return sources[0] if sources else None


def reads_planes(stage: Stage, source: int, kernels) -> bool:
    """Whether the stage reads ``source`` plane by plane (an NCHW input a transpose opens it with)."""
    first = next(v.layer for v in stage.layers if source in v.inputs)
    return isinstance(kernels[first], K.Transpose)


def axis_table(plan) -> dict:
    """One grid's axis (a receptive_field.AxisPlan) as ``axis_extents`` gives every grid's."""
    tensors = list(plan.intervals[0])
    return {plan.parts: ({t: plan.largest(t) for t in tensors}, {t: plan.total(t) for t in tensors}, plan.size,
                         {t: (np.array([iv[t][0] for iv in plan.intervals], np.int64),
                              np.array([iv[t][1] for iv in plan.intervals], np.int64)) for t in tensors})}


def _window_and_rise(rows: dict, cols: dict, source: int, out: int, shapes: dict, elems: tuple[int, int], nchw: bool):
    """Per grid, the forward window and the backward rise of the stage output over its dying
    input, patch by patch in row order (layer_analyzer.overlap.patch_walk's order): what patches
    read and write only moves forwards from one to the next, so the next patch's first byte read
    bounds what a patch may write, and the previous patch's last byte read what it may write
    walking backwards."""
    elem_in, elem_out = elems
    if nchw:
        _, planes, h, w = shapes[source]
        in_c, plane = 1, h * w
    else:
        _, h, w, in_c = shapes[source]
        planes, plane = 1, 0
    _, oh, ow, oc = shapes[out]
    windows = np.zeros((len(rows), len(cols)), np.int64)
    rises = np.zeros((len(rows), len(cols)), np.int64)
    for i, r in enumerate(sorted(rows)):
        (ya, yb), (a0, a1) = rows[r][3][source], rows[r][3][out]
        for j, c in enumerate(sorted(cols)):
            (xa, xb), (b0, b1) = cols[c][3][source], cols[c][3][out]
            read_lo = ((ya[:, None] * w + xa[None, :]) * in_c).reshape(-1) * elem_in
            read_hi = ((planes - 1) * plane + ((yb - 1)[:, None] * w + xb[None, :]) * in_c).reshape(-1) * elem_in
            write_lo = ((a0[:, None] * ow + b0[None, :]) * oc).reshape(-1) * elem_out
            write_hi = (((a1 - 1)[:, None] * ow + b1[None, :]) * oc).reshape(-1) * elem_out
            windows[i, j] = (read_lo[1:] - write_hi[:-1]).min(initial=planes * h * w * in_c * elem_in)
            rises[i, j] = (read_hi[:-1] - write_lo[1:]).max(initial=-oh * ow * oc * elem_out)
    return windows, rises


def stage_grids(stage: Stage, graph, kernels, around: Surroundings, alignment: int, rows: dict, cols: dict
                ) -> list[tuple[int, int, int, int]]:
    """(R, C, peak, extra MACs) of the stage on every grid of ``rows`` x ``cols`` (axis tables as
    ``axis_extents`` gives them, with the intervals of the dying input and the output) but 1 x 1."""
    tensors = graph.tensors
    source = dying_source(stage, graph, around.dying(stage))
    xs = list(stage.pixel_bytes)
    rs, cs = sorted(rows), sorted(cols)
    first = stage.start
    fixed = around.passing(stage) + around.inputs_bytes(stage, graph, source)
    # the per-patch buffers live at each op of the stage, grid by grid
    ch = np.array([stage.pixel_bytes[x] for x in xs], np.int64)
    rl = np.array([[rows[r][0][x] for x in xs] for r in rs], np.int64)
    cl = np.array([[cols[c][0][x] for x in xs] for c in cs], np.int64)
    buf = rl[:, None, :] * cl[None, :, :] * ch
    live = np.zeros((len(rs), len(cs), stage.end - first + 2), np.int64)
    for n, x in enumerate(xs):
        a, b = stage.span[x]
        live[:, :, a - first] += buf[:, :, n]
        live[:, :, b - first + 1] -= buf[:, :, n]
    inner = np.cumsum(live[:, :, :-1], axis=2).max(axis=2)
    out_bytes = tensors[stage.output].nbytes
    if source is None:
        pair = np.full((len(rs), len(cs)), out_bytes, np.int64)
    else:
        windows, rises = _window_and_rise(
            rows, cols, source, stage.output, {t: tensors[t].shape for t in (source, stage.output)},
            (DTYPE_BYTES[tensors[source].dtype], DTYPE_BYTES[tensors[stage.output].dtype]),
            len(tensors[source].shape) == 4 and reads_planes(stage, source, kernels))
        a = alignment
        pair = np.array([[pair_footprint(int(w) // a * a, tensors[source].nbytes, out_bytes, -(-int(r) // a) * a)
                          for w, r in zip(wrow, rrow)] for wrow, rrow in zip(windows, rises)], np.int64)
    peaks = fixed + pair + inner
    outs = [v.output for v in stage.layers]
    mpp = np.array([v.macs_per_pixel for v in stage.layers], np.int64)
    rt = np.array([[rows[r][1][o] for o in outs] for r in rs], np.int64)
    ct = np.array([[cols[c][1][o] for o in outs] for c in cs], np.int64)
    extra = (rt * mpp) @ ct.T - stage_macs(stage)
    return [(r, c, int(peaks[i, j]), int(extra[i, j])) for i, r in enumerate(rs) for j, c in enumerate(cs)
            if r * c > 1]


def stage_candidate(stage: Stage, graph, kernels, around: Surroundings, alignment: int,
                    max_parts: int = MAX_PARTS) -> StageCandidate | None:
    """A stage's grids as options, least peak first, or None when no grid splits it."""
    source = dying_source(stage, graph, around.dying(stage))
    also = (source, stage.output) if source is not None else ()
    rows = axis_extents(stage, "rows", max_parts, also)
    cols = axis_extents(stage, "cols", max_parts, also)
    if not stage.pixel_bytes or len(rows) * len(cols) < 2:
        return None
    options, least = [], None
    grids = stage_grids(stage, graph, kernels, around, alignment, rows, cols)
    for r, c, peak, macs in sorted(grids, key=lambda g: (g[2], g[3], g[0] * g[1], g[0], g[1])):
        if least is None or macs < least:
            options.append(StageOption(stage.start, stage.end, (r, c), peak, macs))
            least = macs
    return StageCandidate(stage, source, tuple(options), tuple(o.peak for o in options))


def candidates(graph, kernels, lives, data_inputs, alignment: int, max_parts: int = MAX_PARTS,
               outside=frozenset(), on_start=None) -> list[StageCandidate]:
    """Every stage of the network, from every op that can start one, with its grids. ``lives``:
    the unsplit plan's lifetimes (what passes each stage by, and what dies in it); ``outside``:
    tensors not in the arena; ``on_start`` is called after each op (progress)."""
    spatial = Spatial.of(graph, kernels, data_inputs)
    around = Surroundings.of(graph, lives, spatial.readers, outside)
    found = []
    for s, view in enumerate(spatial.views):
        if view is not None:
            starts = Stages(graph, kernels, data_inputs, start=s, spatial=spatial)
            for e in starts.ends:
                c = stage_candidate(starts.stage(e.end), graph, kernels, around, alignment, max_parts)
                if c is not None:
                    found.append(c)
        if on_start is not None:
            on_start()
    return found


# ---- the choice -------------------------------------------------------------------------------

def cheapest(profile: list[int], stages: list[StageCandidate], target: int, most: int | None = None
             ) -> tuple[int, tuple] | None:
    """(MACs recomputed, stage options) of the plan recomputing least (then with fewest stages)
    whose peak stays within ``target``, or None when none does: dynamic programming over the op
    boundaries (an op runs whole where the profile allows it, or a stage starting there covers it
    and the ops after it). ``most``: at most that many stages."""
    n = len(profile)
    by_start: dict[int, list[StageCandidate]] = {}
    for c in stages:
        by_start.setdefault(c.stage.start, []).append(c)
    none = (float("inf"), 0)
    best: list[tuple] = [(none, ())] * (n + 1)  # per op boundary: ((MACs, stages), the stages)
    best[0] = ((0, 0), ())
    for i in range(n):
        (cost, count), path = best[i]
        if cost == float("inf"):
            continue
        if profile[i] <= target and (cost, count) < best[i + 1][0]:
            best[i + 1] = ((cost, count), path)
        if most is not None and count >= most:
            continue
        for c in by_start.get(i, ()):
            o = c.cheapest(target)
            if o is not None and (cost + o.macs_extra, count + 1) < best[o.end + 1][0]:
                best[o.end + 1] = ((cost + o.macs_extra, count + 1), (*path, o))
    (cost, _), path = best[n]
    return None if cost == float("inf") else (cost, path)


def estimated_peak(profile: list[int], path) -> int:
    """The estimated peak of a plan: its stages' and the profile's where no stage runs."""
    covered = {k for o in path for k in range(o.start, o.end + 1)}
    return max([o.peak for o in path] + [p for k, p in enumerate(profile) if k not in covered], default=0)


def _targets(profile: list[int], stages: list[StageCandidate]) -> list[int]:
    """The peaks a plan can have: the profile's and the stage options'."""
    return sorted({*profile, *(o.peak for c in stages for o in c.options)})


def plan_fusion(profile: list[int], stages: list[StageCandidate], network_macs: int, max_overhead: float,
                sram: int | None, most: int | None = None, method: str = "dp") -> FusionChoice:
    """The stages to run patch by patch, recomputing at most ``max_overhead`` of the network's
    MACs. With ``sram``: none when the profile fits it, else the least recomputed MACs whose peak
    fits it, else (nothing fits) the least peak. Without: the least peak. ``most``: at most that
    many stages (1, at the head: the single split)."""
    start = time.perf_counter()
    unsplit = max(profile, default=0)
    budget = int(max_overhead * network_macs)

    def choice(found) -> FusionChoice:
        cost, path = found
        return FusionChoice(tuple(path), estimated_peak(profile, path), cost, cost / max(network_macs, 1), unsplit,
                            method, time.perf_counter() - start)
    if sram is not None:
        if unsplit <= sram:
            return choice((0, ()))
        found = cheapest(profile, stages, sram, most)
        if found is not None and found[0] <= budget:
            return choice(found)
    # the least peak within the MAC budget: bisect the peaks a plan can have on "the cheapest
    # plan within it recomputes no more than the budget" (the unsplit peak always passes)
    targets = [t for t in _targets(profile, stages) if t <= unsplit]
    lo, hi, best = 0, len(targets) - 1, (0, ())
    while lo <= hi:
        mid = (lo + hi) // 2
        found = cheapest(profile, stages, targets[mid], most)
        if found is not None and found[0] <= budget:
            best, hi = found, mid - 1
        else:
            lo = mid + 1
    return choice(best)
