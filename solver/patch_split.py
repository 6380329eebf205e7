"""Patch-based inference, planning side: the stages that run patch by patch (solver.fusion picks
them from the network's stages and their grids), each as a plan of its patches, and what running
them that way does to the lifetimes."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import AxisPlan, Spatial, Stage, Stages, axis_plan, patch_buffers
from network_parser.errors import UsageError
from network_parser.ir import Graph
from network_parser.lifetimes import Lifetime, scratch_key

from . import progress
from .fusion import (FusionChoice, StageOption, Surroundings, axis_table, candidates, plan_fusion, stage_grids)
from .l3_placement import data_inputs


@dataclass(frozen=True)
class PatchPlan:
    """One stage run patch by patch: its grid per axis, every per-patch buffer's bytes, and the
    option it was chosen as (estimated peak, MACs recomputed)."""
    stage: Stage
    rows: AxisPlan
    cols: AxisPlan
    option: StageOption
    buffers: dict  # patch tensor -> bytes

    @property
    def layers(self) -> range:
        return range(self.stage.start, self.stage.end + 1)

    @property
    def grid(self) -> tuple[int, int]:
        return self.rows.parts, self.cols.parts


def stage_plan(graph: Graph, kernels, option: StageOption, spatial: Spatial | None = None) -> PatchPlan:
    """The patch plan of a chosen stage option."""
    stage = Stages(graph, kernels, data_inputs, start=option.start, spatial=spatial).stage(option.end)
    rows, cols = axis_plan(stage, option.grid[0], "rows"), axis_plan(stage, option.grid[1], "cols")
    return PatchPlan(stage, rows, cols, option, patch_buffers(stage, rows, cols))


def plan_stages(graph: Graph, kernels, lives, profile: list[int], alignment: int, max_overhead: float,
                sram: int | None, cache: dict | None = None, outside=frozenset()) -> tuple[FusionChoice, tuple]:
    """The stages the exact search picks (solver.fusion.plan_fusion) and their patch plans.
    ``cache`` keeps the network's stage candidates across calls with other targets; ``outside``:
    tensors not in the arena (an input the application keeps)."""
    cache = {} if cache is None else cache
    if "candidates" not in cache:
        with progress.step("fused stages: candidates", total=len(graph.layers)) as step:
            cache["candidates"] = candidates(graph, kernels, lives, data_inputs, alignment, outside=outside,
                                             on_start=step.advance)
    macs = max(sum(K.macs(k) for k in kernels), 1)
    choice = plan_fusion(profile, cache["candidates"], macs, max_overhead, sram)
    spatial = Spatial.of(graph, kernels, data_inputs)
    return choice, tuple(stage_plan(graph, kernels, o, spatial) for o in choice.stages)


def single_stage(graph: Graph, kernels, lives, profile: list[int], alignment: int, max_overhead: float,
                 sram: int | None, cache: dict | None = None, outside=frozenset()) -> FusionChoice:
    """The twin: one stage at the network's head (MCUNetV2's split), by the same search."""
    cache = {} if cache is None else cache
    if "candidates" not in cache:
        cache["candidates"] = candidates(graph, kernels, lives, data_inputs, alignment, outside=outside)
    head = Stages(graph, kernels, data_inputs).start
    macs = max(sum(K.macs(k) for k in kernels), 1)
    return plan_fusion(profile, [c for c in cache["candidates"] if c.stage.start == head], macs, max_overhead, sram,
                       most=1, method="single")


def parse_patch(text: str) -> tuple[int, int, int] | None:
    """'RxC@LAYER' -> (R, C, LAYER); None for 'auto' and 'off'."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*@\s*(\d+)\s*", text)
    if m is None:
        raise UsageError(f"--patch '{text}': expected auto, off or RxC@LAYER (e.g. 4x4@12)")
    r, c, end = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if r < 1 or c < 1:
        raise UsageError(f"--patch '{text}': a grid has at least one patch per axis (e.g. 2x2@{end})")
    return r, c, end


def _listed(ends: list[int], most: int = 12) -> str:
    """Stage ends for a message: all of them, or the first and last of a long run."""
    if len(ends) > most:
        return ", ".join(map(str, ends[:most - 2])) + f", ... ({len(ends) - most + 1} more), {ends[-1]}"
    return ", ".join(map(str, ends)) or "none"


def forced_plan(graph: Graph, kernels, lives, profile: list[int], alignment: int, grid_at: tuple[int, int, int],
                outside=frozenset()) -> tuple[FusionChoice, tuple]:
    """--patch RxC@LAYER: the stage from the network's first spatial op to op LAYER, on that grid."""
    r, c, end = grid_at
    found = Stages(graph, kernels, data_inputs)
    if all(e.end != end for e in found.ends):
        raise UsageError(f"--patch {r}x{c}@{end}: op {end} cannot end a patch stage (possible ends: "
                         f"{_listed([e.end for e in found.ends])})")
    stage = found.stage(end)
    if r > stage.out_h or c > stage.out_w:
        raise UsageError(f"--patch {r}x{c}@{end}: the stage output is {stage.out_h}x{stage.out_w}, so at most "
                         f"{stage.out_h}x{stage.out_w} patches")
    rows, cols = axis_plan(stage, r, "rows"), axis_plan(stage, c, "cols")
    if (rows.parts, cols.parts) == (1, 1):
        raise UsageError(f"--patch {r}x{c}@{end}: a 1x1 grid is no split")
    around = Surroundings.of(graph, lives, found.readers, outside)
    (_, _, peak, extra), = stage_grids(stage, graph, kernels, around, alignment, axis_table(rows), axis_table(cols))
    option = StageOption(stage.start, stage.end, (rows.parts, cols.parts), peak, extra)
    macs = max(sum(K.macs(k) for k in kernels), 1)
    covered = range(stage.start, stage.end + 1)
    total = max([peak] + [p for k, p in enumerate(profile) if k not in covered])
    choice = FusionChoice((option,), total, extra, extra / macs, max(profile, default=0), "forced")
    return choice, (PatchPlan(stage, rows, cols, option, patch_buffers(stage, rows, cols)),)


def patch_lifetimes(lives: list[Lifetime], patches) -> list[Lifetime]:
    """Lifetimes once each stage runs patch by patch: its inner tensors shrink to their largest
    patch region, living (per patch) from the op writing them to the last op reading them in
    the stage; the full tensors it reads live through the whole stage (every patch reads
    them) and its full output from the stage's start (the first patch writes it); the output's
    patch is computed into a buffer of its own (``scratch_key(end)``) and copied over."""
    for plan in patches:
        s = plan.stage
        result = []
        for lt in lives:
            if lt.tensor == s.output:
                result.append(replace(lt, first_op=min(lt.first_op, s.start)))
            elif lt.tensor in plan.buffers:
                first, last = s.span[lt.tensor]
                result.append(replace(lt, size=plan.buffers[lt.tensor], first_op=first, last_op=last))
            elif lt.tensor in s.inputs:
                result.append(replace(lt, last_op=max(lt.last_op, s.end)))
            else:
                result.append(lt)
        result.append(Lifetime(scratch_key(s.end), f"op{s.end}_patch", plan.buffers[s.output], s.end, s.end, None))
        lives = result
    return lives


def stage_of(patches, k: int):
    """The stage (PatchPlan) op ``k`` runs in, or None."""
    return next((p for p in patches if p.stage.start <= k <= p.stage.end), None)


def region_windows(kern, patch: PatchPlan, k: int) -> list[list[tuple]]:
    """Per patch (row, column) of the stage, what spatial op ``k`` reads: (rows, cols, offset,
    buffer width), rows and cols each (outputs, inputs read, padding before) and the offset in
    elements (pixels x channels) of that window in its input's buffer (the input's patch buffer, or
    the whole input tensor), whose rows are ``buffer width`` pixels wide."""
    view = next(v for v in patch.stage.layers if v.layer == k)
    src = view.inputs[0]

    def window(intervals, i, stride, pad, eff, extent):
        o0, o1 = intervals[i][view.output]
        raw0, raw1 = o0 * stride - pad, (o1 - 1) * stride - pad + eff
        w0, w1 = max(raw0, 0), min(raw1, extent)
        b0, b1 = intervals[i][src] if src in patch.buffers else (0, extent)
        return (o1 - o0, w1 - w0, w0 - raw0), w0 - b0, b1 - b0

    if isinstance(kern, K.Pool):
        eff_h, eff_w = kern.f_h, kern.f_w
    else:
        eff_h, eff_w = (kern.k_h - 1) * kern.dil_h + 1, (kern.k_w - 1) * kern.dil_w + 1
    table = []
    for r in range(patch.rows.parts):
        rows, dy, _ = window(patch.rows.intervals, r, kern.stride_h, kern.pad_t, eff_h, kern.in_h)
        row = []
        for c in range(patch.cols.parts):
            cols, dx, width = window(patch.cols.intervals, c, kern.stride_w, kern.pad_l, eff_w, kern.in_w)
            row.append((rows, cols, dy * width + dx, width))
        table.append(row)
    return table


def binary_windows(patch: PatchPlan, k: int, widths: dict[int, int]) -> list[list[tuple]]:
    """Per patch (row, column) of the stage, what elementwise op ``k`` reads: (rows, columns, and
    per input its (offset, buffer width)): the offset in pixels of the output region's first pixel in
    that input's buffer (its patch buffer, or the whole tensor, ``widths[t]`` pixels wide), whose
    rows are ``buffer width`` pixels wide."""
    view = next(v for v in patch.stage.layers if v.layer == k)
    table = []
    for r in range(patch.rows.parts):
        o0, o1 = patch.rows.intervals[r][view.output]
        row = []
        for c in range(patch.cols.parts):
            p0, p1 = patch.cols.intervals[c][view.output]
            ins = []
            for t in view.inputs:
                if t in patch.buffers:
                    (b0, _), (x0, x1) = patch.rows.intervals[r][t], patch.cols.intervals[c][t]
                    ins.append(((o0 - b0) * (x1 - x0) + p0 - x0, x1 - x0))
                else:
                    ins.append((o0 * widths[t] + p0, widths[t]))
            row.append((o1 - o0, p1 - p0, ins))
        table.append(row)
    return table
