"""CP-SAT static-arena planner: exact offsets for buffers with fixed lifetimes.

    plan_cpsat(problem, config, greedy) -> ArenaPlan

Shaped like OR-Tools' samples: ``build_arena_model`` states the geometry (a fixed time
interval and a variable offset interval per buffer, no two overlapping rectangles),
``add_redundant_constraints`` / ``add_symmetry_breaking`` / ``add_search_strategy`` add
what only speeds the search up, and ``solve`` runs CP-SAT under ``SolverConfig``.

What makes it strong on MiniMalloc's benchmark (see bench/arena_bench.py):

* exact scaling: every canonical plan (each buffer at 0 or on top of a buffer live at the
  same time) puts offsets at sums of aligned sizes, so offsets and sizes are counted in
  units of the gcd of the aligned sizes, never losing an optimum;
* temporal decomposition: where no buffer crosses an op boundary the problem splits into
  sections whose arenas all start at offset 0; the peak is the largest section's;
* a 1-D ``NoOverlap`` per maximal clique of the interval graph (the buffers live at one
  op) next to the ``NoOverlap2D``: the cross-section at a busy op is nearly a perfect
  packing and 1-D edge finding propagates that much harder;
* a "fits at the lower bound" pass first (MiniMalloc's decision mode) with a bottom-up
  fixed search (lowest possible offset first, placed there), then minimisation;
* identical buffers (same size and lifetime) placed in index order.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import reduce

from ortools.sat.python import cp_model

from .arena_types import ArenaPlan, ArenaProblem, Buffer, SolverConfig, align

__all__ = ["ArenaVars", "SolveResult", "build_arena_model", "add_redundant_constraints", "add_symmetry_breaking",
           "add_search_strategy", "add_hint", "solve", "plan_cpsat", "sections", "max_live"]


# --------------------------------------------------------------------------- data

@dataclass(frozen=True, slots=True)
class Item:
    """One buffer as the model sees it: size in units, lifetime [start, end) in op indices."""
    index: int  # position in problem.buffers
    size: int
    start: int
    end: int


@dataclass(slots=True)
class ArenaVars:
    model: cp_model.CpModel
    items: tuple[Item, ...]
    offsets: list[cp_model.IntVar]
    y_intervals: list[cp_model.IntervalVar]
    peak: cp_model.IntVar
    cliques: list[list[int]] = field(default_factory=list)  # positions in items


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE / UNKNOWN / MODEL_INVALID
    objective: int | None  # peak in units
    best_bound: int  # proven lower bound on the peak in units
    wall_s: float
    offsets: tuple[int, ...] | None  # in units, per item


# --------------------------------------------------------------------------- geometry

def max_live(items) -> int:
    """The largest total size live at one op (the cross-section lower bound)."""
    events = sorted([(it.start, it.size) for it in items] + [(it.end, -it.size) for it in items],
                    key=lambda e: (e[0], e[1]))  # ends (negative) before starts at the same op
    live = best = 0
    for _, delta in events:
        live += delta
        best = max(best, live)
    return best


def sections(items) -> list[list[Item]]:
    """Split at every op boundary no lifetime crosses: the sections are independent."""
    out: list[list[Item]] = []
    reach = None
    for it in sorted(items, key=lambda it: (it.start, it.end, it.index)):
        if reach is None or it.start >= reach:
            out.append([])
            reach = it.end
        out[-1].append(it)
        reach = max(reach, it.end)
    return out


def maximal_cliques(items) -> list[list[int]]:
    """Positions of the buffers live at each op where the live set is maximal (interval graph)."""
    starts = sorted({it.start for it in items})
    live_sets = [[k for k, it in enumerate(items) if it.start <= t < it.end] for t in starts]
    cliques = []
    for n, live in enumerate(live_sets):
        nxt = starts[n + 1] if n + 1 < len(starts) else None
        # live ⊆ next live set exactly when nobody in it ends before the next start
        if nxt is not None and all(items[k].end > nxt for k in live):
            continue
        if len(live) > 1:
            cliques.append(live)
    return cliques


def build_arena_model(items, upper: int, lower: int = 0) -> ArenaVars:
    """Geometric model: per buffer a fixed time interval and an offset interval, no overlap, peak >= every top."""
    model = cp_model.CpModel()
    offsets, y_intervals, x_intervals = [], [], []
    for k, it in enumerate(items):
        y = model.new_int_var(0, max(0, upper - it.size), f"y{it.index}")
        offsets.append(y)
        y_intervals.append(model.new_fixed_size_interval_var(y, it.size, f"yi{it.index}"))
        x_intervals.append(model.new_fixed_size_interval_var(it.start, it.end - it.start, f"xi{it.index}"))
    model.add_no_overlap_2d(x_intervals, y_intervals)
    peak = model.new_int_var(lower, upper, "peak")
    for y, it in zip(offsets, items):
        model.add(y + it.size <= peak)
    model.minimize(peak)
    return ArenaVars(model, tuple(items), offsets, y_intervals, peak)


def add_redundant_constraints(v: ArenaVars) -> None:
    """A 1-D NoOverlap per maximal clique (buffers live at the same op): implied by the 2-D
    constraint, propagated far harder (edge finding on a nearly perfect packing)."""
    v.cliques = maximal_cliques(v.items)
    for clique in v.cliques:
        v.model.add_no_overlap([v.y_intervals[k] for k in clique])


def add_symmetry_breaking(v: ArenaVars) -> int:
    """Buffers of the same size and lifetime are interchangeable: keep them in index order."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for k, it in enumerate(v.items):
        groups.setdefault((it.size, it.start, it.end), []).append(k)
    n = 0
    for same in groups.values():
        for a, b in zip(same, same[1:]):
            v.model.add(v.offsets[a] + v.items[a].size <= v.offsets[b])
            n += 1
    return n


def add_search_strategy(v: ArenaVars) -> None:
    """Bottom-up placement (MiniMalloc's canonical order): take the buffer whose lowest possible
    offset is smallest (ties: earliest, then largest), put it there."""
    order = sorted(range(len(v.items)), key=lambda k: (v.items[k].start, -v.items[k].size, v.items[k].index))
    v.model.add_decision_strategy([v.offsets[k] for k in order], cp_model.CHOOSE_LOWEST_MIN,
                                  cp_model.SELECT_MIN_VALUE)


def add_hint(v: ArenaVars, offsets_units) -> None:
    for y, o in zip(v.offsets, offsets_units):
        v.model.add_hint(y, o)
    v.model.add_hint(v.peak, max((o + it.size for o, it in zip(offsets_units, v.items)), default=0))


# --------------------------------------------------------------------------- solving

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
           cp_model.UNKNOWN: "UNKNOWN", cp_model.MODEL_INVALID: "MODEL_INVALID"}


def solve(v: ArenaVars, config: SolverConfig, time_limit_s: float | None = None, fixed_search: bool = True,
          **params) -> SolveResult:
    """Run CP-SAT under the config (time limit, workers, seed) and read the answer back."""
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.0, config.time_limit_s if time_limit_s is None else time_limit_s)
    p.num_workers = max(1, config.workers)
    p.random_seed = config.seed
    if fixed_search and p.num_workers > 1:
        # One worker follows the bottom-up strategy, the others the default portfolio.
        p.search_branching = cp_model.AUTOMATIC_SEARCH
    elif fixed_search:
        p.search_branching = cp_model.FIXED_SEARCH
    for key, value in params.items():
        setattr(p, key, value)
    start = time.perf_counter()
    code = solver.solve(v.model)
    wall = time.perf_counter() - start
    status = _STATUS.get(code, "UNKNOWN")
    if status in ("OPTIMAL", "FEASIBLE"):
        offsets = tuple(solver.value(y) for y in v.offsets)
        objective = max((o + it.size for o, it in zip(offsets, v.items)), default=0)
        bound = int(math.ceil(solver.best_objective_bound - 1e-6))
        return SolveResult(status, objective, min(bound, objective), wall, offsets)
    return SolveResult(status, None, v.peak.proto.domain[0] if status != "INFEASIBLE" else v.peak.proto.domain[-1] + 1,
                       wall, None)


# --------------------------------------------------------------------------- the planner

def _unit(problem: ArenaProblem) -> int:
    sizes = [align(b.size, problem.alignment) for b in problem.buffers if b.size > 0]
    return reduce(math.gcd, sizes, 0) or problem.alignment


def _items(problem: ArenaProblem, unit: int) -> list[Item]:
    return [Item(i, align(b.size, problem.alignment) // unit, b.first, b.last + 1)
            for i, b in enumerate(problem.buffers) if b.size > 0]


def _solve_section(items, lower: int, upper: int, hint, config: SolverConfig, deadline: float,
                   decision: bool) -> tuple[tuple[int, ...], int, str]:
    """Offsets (units) for one section with peak <= upper, the proven bound, and the status."""
    raise NotImplementedError


def plan_cpsat(problem: ArenaProblem, config: SolverConfig, greedy: dict[str, ArenaPlan]) -> ArenaPlan:
    raise NotImplementedError
