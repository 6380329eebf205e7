"""Where and how to split a network's first stage into patches (MCUNetV2-style).

    plan_split(tables, method, max_overhead, sram, config) -> SplitChoice

One ``StageTable`` per candidate stage end holds plain numbers (built by
deployer.patching from layer_analyzer.receptive_field): per patch tensor its channels and
the ops it lives across inside a patch, per op the tensor it writes and its MACs per output
pixel, and per number of patch rows (columns) every tensor's largest and summed extent.
For a stage end ``e`` and a grid ``R x C``:

    buffer(t)  = rows_largest[R][t] * cols_largest[C][t] * channels[t]
    peak       = max(rest, full + max over stage ops k of sum of buffer(t) live at k)
    macs       = sum over stage ops of rows_total[R][out] * cols_total[C][out] * macs_per_pixel
    overhead   = (macs - stage_macs) / network_macs

``full`` is the full tensors live through the stage (its inputs and output), ``rest`` the
largest live bytes after it. Without ``sram``: least peak with overhead <= max_overhead,
then least overhead, then fewest patches. With ``sram``: least overhead whose peak fits,
then least peak; when no split fits, the least peak. Not splitting is always a candidate.

``exhaustive`` walks every (stage end, R, C); ``cpsat`` poses each stage end as a CP-SAT
model (element constraints pick the extents of R and C, products give buffers and MACs)
seeded with the exhaustive answer's grid when it has one, and keeps the best across stage
ends. The two must agree on the objective (tests check it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from . import cpsat
from .cpsat import new_solver


@dataclass(frozen=True)
class StageTable:
    end: int
    full: int  # bytes of full tensors live through the stage
    rest: int  # largest live bytes after the stage
    stage_macs: int  # the stage's MACs unsplit
    channels: dict  # patch tensor -> channels
    span: dict  # patch tensor -> (first op, last op)
    ops: tuple  # (op index, output tensor, MACs per output pixel)
    rows: dict  # parts -> ({tensor: largest}, {tensor: total}, stage-output rows per patch)
    cols: dict  # parts -> same, for columns


@dataclass(frozen=True)
class SplitChoice:
    end: int | None  # None: not split
    grid: tuple[int, int]  # patches (rows, cols)
    peak: int  # estimated peak live bytes
    macs_extra: int  # MACs recomputed by the patches
    overhead: float  # macs_extra / network MACs
    method: str = "exhaustive"
    status: str = "OPTIMAL"
    wall_s: float = 0.0
    unsplit_peak: int = 0

    @property
    def patches(self) -> int:
        return self.grid[0] * self.grid[1]


def evaluate(t: StageTable, r: int, c: int) -> tuple[int, int]:
    """(peak, extra MACs) of stage ``t`` cut into r x c patches."""
    (rl, rt, _), (cl, ct, _) = t.rows[r], t.cols[c]
    buf = {x: rl[x] * cl[x] * ch for x, ch in t.channels.items()}
    inner = max((sum(b for x, b in buf.items() if t.span[x][0] <= k <= t.span[x][1]) for k, _, _ in t.ops),
                default=0)
    macs = sum(rt[out] * ct[out] * mpp for _, out, mpp in t.ops)
    return max(t.rest, t.full + inner), macs - t.stage_macs


def _key(choice: SplitChoice, sram: int | None):
    if sram is not None:
        fits = choice.peak <= sram
        return (0, choice.macs_extra, choice.peak, choice.patches) if fits else (1, choice.peak, choice.macs_extra,
                                                                                   choice.patches)
    return (choice.peak, choice.macs_extra, choice.patches)


def _allowed(macs_extra: int, network_macs: int, max_overhead: float, sram: int | None) -> bool:
    return sram is not None or macs_extra <= max_overhead * network_macs


def exhaustive(tables, network_macs: int, unsplit_peak: int, max_overhead: float = 0.2,
               sram: int | None = None) -> SplitChoice:
    start = time.perf_counter()
    best = SplitChoice(None, (1, 1), unsplit_peak, 0, 0.0, unsplit_peak=unsplit_peak)
    for t in tables:
        for r in t.rows:
            for c in t.cols:
                if r * c == 1:
                    continue
                peak, extra = evaluate(t, r, c)
                if not _allowed(extra, network_macs, max_overhead, sram):
                    continue
                choice = SplitChoice(t.end, (r, c), peak, extra, extra / network_macs, unsplit_peak=unsplit_peak)
                if _key(choice, sram) < _key(best, sram):
                    best = choice
    return replace(best, wall_s=time.perf_counter() - start)


def _stage_model(t: StageTable, network_macs: int, max_overhead: float):
    """CP-SAT over one stage end: indices into the row and column options; extents by element
    constraints, buffers and MACs by products; the peak as a max over the stage's ops."""
    m = cp_model.CpModel()
    r_opts, c_opts = sorted(t.rows), sorted(t.cols)
    ri = m.NewIntVar(0, len(r_opts) - 1, "ri")
    ci = m.NewIntVar(0, len(c_opts) - 1, "ci")
    one_r, one_c = m.NewBoolVar("one_r"), m.NewBoolVar("one_c")
    m.Add(ri == r_opts.index(1)).OnlyEnforceIf(one_r)
    m.Add(ri != r_opts.index(1)).OnlyEnforceIf(one_r.Not())
    m.Add(ci == c_opts.index(1)).OnlyEnforceIf(one_c)
    m.Add(ci != c_opts.index(1)).OnlyEnforceIf(one_c.Not())
    m.AddBoolOr([one_r.Not(), one_c.Not()])  # a split, not 1 x 1

    def product(a_values, b_values, name):
        """a[ri] * b[ci] as a variable."""
        a = m.NewIntVar(min(a_values), max(a_values), f"{name}_r")
        b = m.NewIntVar(min(b_values), max(b_values), f"{name}_c")
        m.AddElement(ri, list(a_values), a)
        m.AddElement(ci, list(b_values), b)
        ab = m.NewIntVar(min(a_values) * min(b_values), max(a_values) * max(b_values), name)
        m.AddMultiplicationEquality(ab, [a, b])
        return ab

    area = {x: product([t.rows[r][0][x] for r in r_opts], [t.cols[c][0][x] for c in c_opts], f"area{x}")
            for x in t.channels}
    top = t.full + sum(max(t.rows[r][0][x] for r in r_opts) * max(t.cols[c][0][x] for c in c_opts) * ch
                       for x, ch in t.channels.items())
    peak = m.NewIntVar(t.rest, max(top, t.rest), "peak")
    for k, _, _ in t.ops:
        m.Add(peak >= t.full + sum(area[x] * ch for x, ch in t.channels.items()
                                   if t.span[x][0] <= k <= t.span[x][1]))
    macs = sum(product([t.rows[r][1][out] for r in r_opts], [t.cols[c][1][out] for c in c_opts], f"px{k}") * mpp
               for k, out, mpp in t.ops)
    return m, ri, ci, peak, macs, r_opts, c_opts


def _solve(m, time_limit_s: float):
    solver = new_solver(time_limit_s)
    return solver, cpsat.solve(solver, m)


def plan_split_cpsat(tables, network_macs: int, unsplit_peak: int, max_overhead: float = 0.2,
                     sram: int | None = None, time_limit_s: float = 1.0) -> SplitChoice:
    start = time.perf_counter()
    best = SplitChoice(None, (1, 1), unsplit_peak, 0, 0.0, method="cpsat", unsplit_peak=unsplit_peak)
    status = "OPTIMAL"
    # with --sram: least recompute among the grids that fit (stages whose tail alone is over
    # cannot), and only when none fits, least peak; without: least peak within the limit
    phases = [("fit", True), ("peak", False)] if sram is not None else [("limit", False)]
    for phase, _ in phases:
        for n, t in enumerate(tables):
            floor = max(t.rest, t.full)  # no grid of this stage goes below it
            if len(t.rows) * len(t.cols) < 2 or (phase == "fit" and floor > sram) or \
                    (phase != "fit" and floor > best.peak):
                continue
            # one deadline for the whole split: each stage end gets a share of what is left
            left = time_limit_s - (time.perf_counter() - start)
            if left <= 0:
                status = "TIME_LIMIT"  # the stage ends not tried: plan_split completes them
                break
            m, ri, ci, peak, macs, r_opts, c_opts = _stage_model(t, network_macs, max_overhead)
            if phase == "fit":
                m.Add(peak <= sram)
                m.Minimize(macs * (sram + 1) + peak)
            else:
                if phase == "limit":
                    m.Add(macs - t.stage_macs <= int(max_overhead * network_macs))
                m.Minimize(peak * (4 * network_macs + 1) + macs)
            solver, result = _solve(m, left / max(1, len(tables) - n))
            if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                if result != cp_model.INFEASIBLE:
                    status = "FEASIBLE"
                continue
            if result == cp_model.FEASIBLE:
                status = "FEASIBLE"
            grid = r_opts[solver.Value(ri)], c_opts[solver.Value(ci)]
            p, extra = evaluate(t, *grid)
            choice = SplitChoice(t.end, grid, p, extra, extra / network_macs, method="cpsat", unsplit_peak=unsplit_peak)
            if _key(choice, sram) < _key(best, sram):
                best = choice
        if best.end is not None and (sram is None or best.peak <= sram):
            break
    return replace(best, status=status, wall_s=time.perf_counter() - start)
