"""Patch-based inference, planning side: the split tables of every candidate stage, built
from the network's lifetimes and the receptive fields of its first ops, and the split the
solver picks (solver.patching)."""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace

from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import AxisPlan, Stage, Stages, axis_extents, axis_plan, patch_buffers, stage_macs
from network_parser.errors import UsageError
from network_parser.ir import Graph
from network_parser.lifetimes import Lifetime, live_bytes_per_op, scratch_key
from solver.patching import Candidate, SplitChoice, StageTable, _key, evaluate, exhaustive, plan_split_cpsat, search

from . import progress
from .l3_placement import data_inputs

MAX_PARTS = 8  # patches per axis considered
# Stage ops whose tables the split search may build per second of time limit, and those CP-SAT
# may pose models for: counts, so the same stage ends are searched on any machine. A table
# costs ~0.07 ms per op of its stage (its receptive fields for every patch count, every grid
# scored), a CP-SAT model ~0.5 ms (building and presolve). Real networks need up to ~1,000:
# the floors prune most stage ends; a long chain meets the budget.
SPLIT_WORK_PER_S = 5_000
CPSAT_SPLIT_WORK_PER_S = 2_000


def stage_table(stage: Stage, graph: Graph, live: list[int], grid: tuple[AxisPlan, AxisPlan] | None = None
                ) -> StageTable:
    """The numbers the split solvers score a stage's grids by: every grid up to MAX_PARTS
    patches per axis, or just ``grid`` (a forced split's, which may have more)."""
    full = sum(graph.tensors[t].nbytes for t in (*stage.inputs, stage.output))
    rest = max(live[stage.end + 1:], default=0)
    patch = stage.patch_tensors
    if grid is None:
        rows, cols = axis_extents(stage, "rows", MAX_PARTS), axis_extents(stage, "cols", MAX_PARTS)
    else:
        rows, cols = ({a.parts: ({t: a.largest(t) for t in patch}, {t: a.total(t) for t in patch}, a.size)}
                      for a in grid)
    return StageTable(stage.end, full, rest, stage_macs(stage), {t: stage.pixel_bytes[t] for t in patch},
                      {t: stage.span[t] for t in patch}, tuple((s.layer, s.output, s.macs_per_pixel) for s in stage.layers),
                      rows, cols)


def split_tables(graph: Graph, kernels, lives: list[Lifetime]) -> tuple[list[StageTable], int]:
    """Tables of every candidate stage and the unsplit peak (live bytes, the arena's lower bound).
    Every stage end: quadratic in a long chain's length (the split search builds fewer)."""
    live = live_bytes_per_op(lives, len(graph.layers))
    found = Stages(graph, kernels, data_inputs)
    return [stage_table(found.stage(e.end), graph, live) for e in found.ends], max(live, default=0)


def _candidates(graph: Graph, found: Stages, live: list[int]) -> list[Candidate]:
    """Every stage end with its floor: the bytes of its full tensors (inputs and output), or the
    largest live bytes after it when more (suffix maxima: O(ops) for all of them)."""
    after = [0] * (len(live) + 1)  # after[k]: the largest live bytes at ops >= k
    for k in range(len(live) - 1, -1, -1):
        after[k] = max(live[k], after[k + 1])
    out = []
    for e in found.ends:
        full = e.input_bytes + graph.tensors[e.output].nbytes
        out.append(Candidate(e.end, max(full, after[min(e.end + 1, len(live))]), e.length))
    return out


def plan_split(graph: Graph, kernels, lives: list[Lifetime], method: str = "cpsat", max_overhead: float = 0.2,
               sram: int | None = None, time_limit_s: float = 1.0) -> SplitChoice:
    """The split: tables for the stage ends worth one (``solver.patching.search``, within a work
    budget of ``SPLIT_WORK_PER_S`` per second of ``time_limit_s``), then CP-SAT over them,
    checked and settled by the exhaustive twin."""
    live = live_bytes_per_op(lives, len(graph.layers))
    unsplit = max(live, default=0)
    macs = max(sum(K.macs(k) for k in kernels), 1)
    found = Stages(graph, kernels, data_inputs)
    candidates = _candidates(graph, found, live)
    with progress.step("patch split: stage ends", total=len(candidates)) as step:
        tried = search(candidates, lambda end: stage_table(found.stage(end), graph, live), macs, unsplit,
                       max_overhead, sram, int(SPLIT_WORK_PER_S * time_limit_s), step.advance)
    tables = list(tried.tables)
    status = "OPTIMAL" if tried.complete else "FEASIBLE"  # FEASIBLE: the budget left stage ends untried
    if method == "exhaustive":
        return replace(exhaustive(tables, macs, unsplit, max_overhead, sram), status=status)
    try:
        with progress.step("patch split (CP-SAT)", total=len(tables)) as step:
            choice = plan_split_cpsat(tables, macs, unsplit, max_overhead, sram, time_limit_s, step.advance,
                                      int(CPSAT_SPLIT_WORK_PER_S * time_limit_s))
    except Exception as e:  # noqa: BLE001 - any solver failure: the exhaustive twin's split, with a warning
        warnings.warn(f"patch split: CP-SAT failed ({type(e).__name__}: {e}); using the exhaustive search's split",
                      RuntimeWarning, stacklevel=2)
        return replace(exhaustive(tables, macs, unsplit, max_overhead, sram), status="FALLBACK")
    # The exhaustive twin (every grid of every stage end tried, cheap to score) checks the
    # answer and settles it: it completes a search the time limit cut short, and among splits
    # that score the same it takes the first, so the output never depends on how fast the
    # solver ran.
    other = exhaustive(tables, macs, unsplit, max_overhead, sram)
    if _key(choice, sram) < _key(other, sram):  # cannot happen: the exhaustive search is complete
        return choice
    return replace(other, method=choice.method, status=status, wall_s=choice.wall_s + other.wall_s)


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
    stage = Stages(graph, kernels, data_inputs).stage(end)
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
    r, c, end = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if r < 1 or c < 1:
        raise UsageError(f"--patch '{text}': a grid has at least one patch per axis (e.g. 2x2@{end})")
    return r, c, end


def _listed(ends: list[int], most: int = 12) -> str:
    """Stage ends for a message: all of them, or the first and last of a long run."""
    if len(ends) > most:
        return ", ".join(map(str, ends[:most - 2])) + f", ... ({len(ends) - most + 1} more), {ends[-1]}"
    return ", ".join(map(str, ends)) or "none"


def forced_plan(graph: Graph, kernels, lives, grid_at: tuple[int, int, int]) -> PatchPlan:
    r, c, end = grid_at
    found = Stages(graph, kernels, data_inputs)
    if all(e.end != end for e in found.ends):
        raise UsageError(f"--patch {r}x{c}@{end}: op {end} cannot end a patch stage (possible ends: "
                         f"{_listed([e.end for e in found.ends])})")
    live = live_bytes_per_op(lives, len(graph.layers))
    unsplit = max(live, default=0)
    stage = found.stage(end)
    if r > stage.out_h or c > stage.out_w:
        raise UsageError(f"--patch {r}x{c}@{end}: the stage output is {stage.out_h}x{stage.out_w}, so at most "
                         f"{stage.out_h}x{stage.out_w} patches")
    rows, cols = axis_plan(stage, r, "rows"), axis_plan(stage, c, "cols")
    table = stage_table(stage, graph, live, (rows, cols))
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
