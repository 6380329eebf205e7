"""Where and how to split a network's first stage into patches (MCUNetV2-style).

    plan_split(tables, method, max_overhead, sram, config) -> SplitChoice

One ``StageTable`` per candidate stage end holds plain numbers (built by
solver.patch_split from layer_analyzer.receptive_field): per patch tensor its pixel's bytes and
the ops it lives across inside a patch, per op the tensor it writes and its MACs per output
pixel, and per number of patch rows (columns) every tensor's largest and summed extent.
For a stage end ``e`` and a grid ``R x C``:

    buffer(t)  = rows_largest[R][t] * cols_largest[C][t] * pixel_bytes[t]
    peak       = max(rest, full + max over stage ops k of sum of buffer(t) live at k)
    macs       = sum over stage ops of rows_total[R][out] * cols_total[C][out] * macs_per_pixel
    overhead   = (macs - stage_macs) / network_macs

``full`` is the full tensors live through the stage (its inputs and output), ``rest`` the
largest live bytes after it. Without ``sram``: least peak with overhead <= max_overhead,
then least overhead, then fewest patches. With ``sram``: least overhead whose peak fits,
then least peak; when no split fits, the least peak. Not splitting is always a candidate.

``exhaustive`` walks every (stage end, R, C), scoring all grids of a stage at once;
``cpsat`` poses each stage end as a CP-SAT model (element constraints pick the extents of R
and C, products give buffers and MACs) and keeps the best across stage ends. The two must
agree on the objective (tests check it). Among splits that score the same, the first by
(stage end, R, C) wins, whatever order the stage ends were tried in.

Which stage ends get a table at all is ``search``'s call: a branch and bound over them, most
promising first by a floor no grid of the stage goes below (its full tensors, the live bytes
after it), stopped when no stage end left can beat the best split, or when the tables built
reach a work budget (a count of stage ops, so the same stage ends on any machine).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from . import cpsat
from .cpsat import new_solver


@dataclass(frozen=True)
class StageTable:
    end: int
    full: int  # bytes of full tensors live through the stage
    rest: int  # largest live bytes after the stage
    stage_macs: int  # the stage's MACs unsplit
    pixel_bytes: dict  # patch tensor -> bytes of one of its pixels (channels x element size)
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
    """(peak, extra MACs) of stage ``t`` cut into r x c patches: the buffers live at each op
    summed by a difference array over the stage's ops."""
    (rl, rt, _), (cl, ct, _) = t.rows[r], t.cols[c]
    first = t.ops[0][0] if t.ops else 0
    diff = [0] * (len(t.ops) + 1)
    for x, ch in t.pixel_bytes.items():
        a, b = t.span[x]
        diff[a - first] += rl[x] * cl[x] * ch
        diff[b - first + 1] -= rl[x] * cl[x] * ch
    inner = live = 0
    for d in diff[:-1]:
        live += d
        inner = max(inner, live)
    macs = sum(rt[out] * ct[out] * mpp for _, out, mpp in t.ops)
    return max(t.rest, t.full + inner), macs - t.stage_macs


def evaluate_all(t: StageTable) -> list[tuple[int, int, int, int]]:
    """(R, C, peak, extra MACs) of every grid of stage ``t`` but 1 x 1, in (R, C) order: what
    ``evaluate`` gives, for all grids at once (arrays of grids x tensors)."""
    rs, cs = list(t.rows), list(t.cols)
    xs = list(t.pixel_bytes)
    if not xs:
        return []
    first = t.ops[0][0]
    ch = np.array([t.pixel_bytes[x] for x in xs], dtype=np.int64)
    rl = np.array([[t.rows[r][0][x] for x in xs] for r in rs], dtype=np.int64)
    cl = np.array([[t.cols[c][0][x] for x in xs] for c in cs], dtype=np.int64)
    buf = rl[:, None, :] * cl[None, :, :] * ch  # grids x tensors
    diff = np.zeros((len(rs), len(cs), len(t.ops) + 1), dtype=np.int64)
    starts = np.array([t.span[x][0] - first for x in xs])
    stops = np.array([t.span[x][1] - first + 1 for x in xs])
    for i in range(len(rs)):  # np.add.at: a tensor's start may be another's
        for j in range(len(cs)):
            np.add.at(diff[i, j], starts, buf[i, j])
            np.add.at(diff[i, j], stops, -buf[i, j])
    inner = np.maximum(np.cumsum(diff[:, :, :-1], axis=2).max(axis=2), 0)
    outs = [out for _, out, _ in t.ops]
    mpp = np.array([m for _, _, m in t.ops], dtype=np.int64)
    rt = np.array([[t.rows[r][1][o] for o in outs] for r in rs], dtype=np.int64)
    ct = np.array([[t.cols[c][1][o] for o in outs] for c in cs], dtype=np.int64)
    macs = (rt * mpp) @ ct.T
    peak = np.maximum(t.rest, t.full + inner)
    return [(r, c, int(peak[i, j]), int(macs[i, j]) - t.stage_macs)
            for i, r in enumerate(rs) for j, c in enumerate(cs) if r * c != 1]


def _key(choice: SplitChoice, sram: int | None):
    if sram is not None:
        fits = choice.peak <= sram
        return (0, choice.macs_extra, choice.peak, choice.patches) if fits else (1, choice.peak, choice.macs_extra,
                                                                                   choice.patches)
    return (choice.peak, choice.macs_extra, choice.patches)


def _allowed(macs_extra: int, network_macs: int, max_overhead: float, sram: int | None) -> bool:
    return sram is not None or macs_extra <= max_overhead * network_macs


def _rank(choice: SplitChoice, sram: int | None) -> tuple:
    """The order splits are chosen in: the key, then the first by stage end and grid (not
    splitting comes first)."""
    return (_key(choice, sram), -1 if choice.end is None else choice.end, choice.grid)


def _best_of(t: StageTable, best: SplitChoice, network_macs: int, max_overhead: float, sram: int | None
             ) -> SplitChoice:
    for r, c, peak, extra in evaluate_all(t):
        if _allowed(extra, network_macs, max_overhead, sram):
            choice = SplitChoice(t.end, (r, c), peak, extra, extra / network_macs, unsplit_peak=best.unsplit_peak)
            if _rank(choice, sram) < _rank(best, sram):
                best = choice
    return best


def exhaustive(tables, network_macs: int, unsplit_peak: int, max_overhead: float = 0.2,
               sram: int | None = None) -> SplitChoice:
    start = time.perf_counter()
    best = SplitChoice(None, (1, 1), unsplit_peak, 0, 0.0, unsplit_peak=unsplit_peak)
    for t in tables:
        best = _best_of(t, best, network_macs, max_overhead, sram)
    return replace(best, wall_s=time.perf_counter() - start)


@dataclass(frozen=True)
class Candidate:
    """A stage end before its table is built."""
    end: int
    floor: int  # no grid of the stage peaks lower: max(its full tensors, the live bytes after it)
    work: int  # what building and scoring its table costs (its ops)


def _floor_key(c: Candidate, sram: int | None) -> tuple:
    """The least ``_key`` any grid of the stage can have: peak >= floor, no extra MACs, 2 patches."""
    if sram is not None:
        return (0, 0, c.floor, 2) if c.floor <= sram else (1, c.floor, 0, 2)
    return (c.floor, 0, 2)


@dataclass(frozen=True)
class Search:
    tables: tuple  # the StageTables built, by stage end
    best: SplitChoice  # the best split among them (the exhaustive answer)
    complete: bool  # every stage end that could beat it had its table built
    work: int  # stage ops of the tables built


def search(candidates, build, network_macs: int, unsplit_peak: int, max_overhead: float = 0.2,
           sram: int | None = None, budget: int | None = None, on_table=None) -> Search:
    """Branch and bound over stage ends: the candidates by floor (then end), each one's table
    built (``build(end)``) and every grid scored, until the next candidate's floor cannot beat
    the best split found. A candidate whose work would take the tables built past ``budget``
    is passed over (the answer is then the best of those built: ``complete`` is False).
    ``on_table`` is called after each table (progress)."""
    best = SplitChoice(None, (1, 1), unsplit_peak, 0, 0.0, unsplit_peak=unsplit_peak)
    tables, work, complete = [], 0, True
    for c in sorted(candidates, key=lambda c: (_floor_key(c, sram), c.end)):
        if (_floor_key(c, sram), c.end) >= _rank(best, sram)[:2]:
            break  # neither it nor any after it scores below the best
        if budget is not None and work + c.work > budget:
            complete = False
            continue
        t = build(c.end)
        work += c.work
        tables.append(t)
        best = _best_of(t, best, network_macs, max_overhead, sram)
        if on_table is not None:
            on_table()
    return Search(tuple(sorted(tables, key=lambda t: t.end)), best, complete, work)


def _stage_model(t: StageTable, network_macs: int, max_overhead: float):
    """CP-SAT over one stage end: indices into the row and column options; extents by element
    constraints, buffers and MACs by products; the peak as a max over the stage's ops of the
    bytes live there, each op's total the previous one's plus the buffers born, minus those
    that died (a model linear in the stage's size, however long its tensors live)."""
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
            for x in t.pixel_bytes}
    top = t.full + sum(max(t.rows[r][0][x] for r in r_opts) * max(t.cols[c][0][x] for c in c_opts) * ch
                       for x, ch in t.pixel_bytes.items())
    peak = m.NewIntVar(t.rest, max(top, t.rest), "peak")
    born: dict[int, list] = {}
    dead: dict[int, list] = {}  # op -> tensors whose last op it was
    for x, ch in t.pixel_bytes.items():
        born.setdefault(t.span[x][0], []).append(area[x] * ch)
        dead.setdefault(t.span[x][1], []).append(area[x] * ch)
    live = 0
    for k, _, _ in t.ops:
        step = m.NewIntVar(0, top - t.full, f"live{k}")
        m.Add(step == live + sum(born.get(k, ())) - sum(dead.get(k - 1, ())))
        m.Add(peak >= t.full + step)
        live = step
    macs = sum(product([t.rows[r][1][out] for r in r_opts], [t.cols[c][1][out] for c in c_opts], f"px{k}") * mpp
               for k, out, mpp in t.ops)
    return m, ri, ci, peak, macs, r_opts, c_opts


# CP-SAT's deterministic time per second of limit for these models: small ones, which it works
# through at 0.05-0.15 deterministic units a second (most prove their optimum in under 0.02)
DTIME_PER_S = 0.1


def _solve(m, time_limit_s: float, deadline: float):
    solver = new_solver(time_limit_s, deadline=deadline, dtime_per_s=DTIME_PER_S)
    # no warning when the watchdog stops it: the exhaustive twin settles the split either way
    return solver, cpsat.solve(solver, m, warn=False)


def plan_split_cpsat(tables, network_macs: int, unsplit_peak: int, max_overhead: float = 0.2,
                     sram: int | None = None, time_limit_s: float = 1.0, on_model=None,
                     budget: int | None = None) -> SplitChoice:
    """The best split of ``tables`` by CP-SAT, one model per stage end. The time limit is shared
    between them by what each search is charged in deterministic time (solver.cpsat), never by
    the clock; the watchdog of the limit bounds the whole. Models stop once their stages'
    ops reach ``budget`` (their building and presolve cost wall time CP-SAT does not count).
    ``on_model`` is called per model."""
    start = time.perf_counter()
    deadline = time.monotonic() + cpsat.watchdog_s(time_limit_s)
    best = SplitChoice(None, (1, 1), unsplit_peak, 0, 0.0, method="cpsat", unsplit_peak=unsplit_peak)
    status = "OPTIMAL"
    spent, work = 0.0, 0
    # with --sram: least recompute among the grids that fit (stages whose tail alone is over
    # cannot), and only when none fits, least peak; without: least peak within the limit
    phases = [("fit", True), ("peak", False)] if sram is not None else [("limit", False)]
    for phase, _ in phases:
        for n, t in enumerate(tables):
            floor = max(t.rest, t.full)  # no grid of this stage goes below it
            if len(t.rows) * len(t.cols) < 2 or (phase == "fit" and floor > sram) or \
                    (phase != "fit" and floor > best.peak):
                continue
            # one budget for the whole split: each stage end gets a share of what is left
            left = time_limit_s - spent
            if left <= 0 or (budget is not None and work + len(t.ops) > budget):
                status = "TIME_LIMIT"  # the stage ends not tried: plan_split completes them
                break
            work += len(t.ops)
            m, ri, ci, peak, macs, r_opts, c_opts = _stage_model(t, network_macs, max_overhead)
            if phase == "fit":
                m.Add(peak <= sram)
                m.Minimize(macs * (sram + 1) + peak)
            else:
                if phase == "limit":
                    m.Add(macs - t.stage_macs <= int(max_overhead * network_macs))
                m.Minimize(peak * (4 * network_macs + 1) + macs)
            share = left / max(1, len(tables) - n)
            solver, result = _solve(m, share, deadline)
            spent += cpsat.spent_s(solver, share) if result in (cp_model.OPTIMAL, cp_model.INFEASIBLE) else share
            if on_model is not None:
                on_model()
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
