"""Patch-based inference, planning side: the split tables of every candidate stage, built
from the network's lifetimes and the receptive fields of its first ops, and the split the
solver picks (solver.patching)."""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace

from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import AxisPlan, Stage, axis_plan, patch_buffers, stage_macs, stages
from network_parser.errors import UsageError
from network_parser.ir import Graph
from network_parser.lifetimes import Lifetime, live_bytes_per_op, scratch_key
from solver.patching import SplitChoice, StageTable, _key, evaluate, exhaustive, plan_split_cpsat

from .placement import data_inputs

MAX_PARTS = 8  # patches per axis considered


def stage_table(stage: Stage, graph: Graph, live: list[int]) -> StageTable:
    full = sum(graph.tensors[t].nbytes for t in (*stage.inputs, stage.output))
    rest = max(live[stage.end + 1:], default=0)
    patch = stage.patch_tensors

    def axis(name, extent):
        options = {}
        for parts in range(1, min(MAX_PARTS, extent) + 1):
            plan = axis_plan(stage, parts, name)
            if plan.parts in options:
                continue
            options[plan.parts] = ({t: plan.largest(t) for t in patch}, {t: plan.total(t) for t in patch}, plan.size)
        return options

    return StageTable(stage.end, full, rest, stage_macs(stage), {t: stage.channels[t] for t in patch},
                      {t: stage.span[t] for t in patch}, tuple((s.layer, s.output, s.macs_per_pixel) for s in stage.layers),
                      axis("rows", stage.out_h), axis("cols", stage.out_w))


def split_tables(graph: Graph, kernels, lives: list[Lifetime]) -> tuple[list[StageTable], int]:
    """Tables of every candidate stage and the unsplit peak (live bytes, the arena's lower bound)."""
    live = live_bytes_per_op(lives, len(graph.layers))
    return [stage_table(s, graph, live) for s in stages(graph, kernels, data_inputs)], max(live, default=0)


def plan_split(graph: Graph, kernels, lives: list[Lifetime], method: str = "cpsat", max_overhead: float = 0.2,
               sram: int | None = None, time_limit_s: float = 1.0) -> SplitChoice:
    tables, unsplit = split_tables(graph, kernels, lives)
    macs = max(sum(K.macs(k) for k in kernels), 1)
    if method == "exhaustive":
        return exhaustive(tables, macs, unsplit, max_overhead, sram)
    try:
        choice = plan_split_cpsat(tables, macs, unsplit, max_overhead, sram, time_limit_s)
    except Exception as e:  # noqa: BLE001 - any solver failure: the exhaustive twin's split, with a warning
        warnings.warn(f"patch split: CP-SAT failed ({type(e).__name__}: {e}); using the exhaustive search's split",
                      RuntimeWarning, stacklevel=2)
        return replace(exhaustive(tables, macs, unsplit, max_overhead, sram), status="FALLBACK")
    # The exhaustive twin (every grid of every stage end, cheap to score) checks the answer and
    # settles it: it completes a search the time limit cut short, and among splits that score
    # the same it takes the first, so the output never depends on how fast the solver ran.
    other = exhaustive(tables, macs, unsplit, max_overhead, sram)
    if _key(choice, sram) < _key(other, sram):  # cannot happen: the exhaustive search is complete
        return choice
    return replace(other, method=choice.method, status="OPTIMAL", wall_s=choice.wall_s + other.wall_s)


@dataclass(frozen=True)
class PatchPlan:
    """The chosen split: the stage, its grid per axis, every per-patch buffer's bytes."""
    stage: Stage
    rows: AxisPlan
    cols: AxisPlan
    choice: SplitChoice
    buffers: dict  # patch tensor -> bytes

    @property
    def layers(self) -> range:
        return range(self.stage.start, self.stage.end + 1)


def _grid_at(graph: Graph, kernels, end: int, r: int, c: int) -> tuple[Stage, AxisPlan, AxisPlan]:
    """The stage ending at op ``end`` and its r x c grid, axis by axis."""
    stage = next(s for s in stages(graph, kernels, data_inputs) if s.end == end)
    return stage, axis_plan(stage, r, "rows"), axis_plan(stage, c, "cols")


def make_plan(graph: Graph, kernels, choice: SplitChoice) -> PatchPlan | None:
    if choice.end is None:
        return None
    stage, rows, cols = _grid_at(graph, kernels, choice.end, *choice.grid)
    return PatchPlan(stage, rows, cols, choice, patch_buffers(stage, rows, cols))


def parse_patch(text: str) -> tuple[int, int, int] | None:
    """'RxC@LAYER' -> (R, C, LAYER); None for 'auto' and 'off'."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*@\s*(\d+)\s*", text)
    if m is None:
        raise UsageError(f"--patch '{text}': expected auto, off or RxC@LAYER (e.g. 4x4@12)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def forced_plan(graph: Graph, kernels, lives, grid_at: tuple[int, int, int]) -> PatchPlan:
    r, c, end = grid_at
    tables, unsplit = split_tables(graph, kernels, lives)
    table = next((t for t in tables if t.end == end), None)
    if table is None:
        ends = ", ".join(str(t.end) for t in tables) or "none"
        raise UsageError(f"--patch {r}x{c}@{end}: op {end} cannot end a patch stage (possible ends: {ends})")
    stage, rows, cols = _grid_at(graph, kernels, end, r, c)
    if (rows.parts, cols.parts) == (1, 1):
        raise UsageError(f"--patch {r}x{c}@{end}: a 1x1 grid is no split")
    macs = max(sum(K.macs(k) for k in kernels), 1)
    peak, extra = evaluate(table, rows.parts, cols.parts)
    choice = SplitChoice(end, (rows.parts, cols.parts), peak, extra, extra / macs, method="forced",
                         unsplit_peak=unsplit)
    return PatchPlan(stage, rows, cols, choice, patch_buffers(stage, rows, cols))


def patch_lifetimes(lives: list[Lifetime], plan: PatchPlan) -> list[Lifetime]:
    """Lifetimes once the stage runs patch by patch: its inner tensors shrink to their largest
    patch region, living (per patch) from the op writing them to the last op reading them in
    the stage; the full tensors it reads live through the whole stage (every patch reads
    them) and its full output from the stage's start (the first patch writes it); the output's
    patch is computed into a buffer of its own (``scratch_key(end)``) and copied over."""
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
    return result
