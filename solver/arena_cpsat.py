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
* decision searches (MiniMalloc's decision mode: the arena's height fixed to a capacity, no
  objective), bottom-up (the buffer with the lowest possible offset first, placed there, its
  ties broken by a static order) with CP-SAT's restarts and clause learning on top; how long
  one order takes on one instance is heavy-tailed, so ``fits`` runs a portfolio: a short
  probe per order, then two orders for the rest of the limit (``portfolio``);
* with a capacity (``ArenaProblem.capacity``), a plan within it first, then the peak is
  minimised for the time left; without one, a "fits at the lower bound" search first, then
  lower capacities, then CP-SAT's minimisation from the best plan;
* identical buffers (same size and lifetime) placed in index order.

Reproducible: every search runs one CP-SAT worker on deterministic time (solver.cpsat), and
the time limit is shared between sections and searches by what each search is charged in
deterministic time, never by the clock, so the plan is the same on a fast or a busy machine.
``SolverConfig.workers`` is how many of the portfolio's single-worker searches run side by
side. The wall clock only bounds the whole planner (a watchdog, ``cpsat.watchdog_s``).
"""
from __future__ import annotations

import heapq
import math
import threading
import time
import warnings
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from functools import reduce
from itertools import pairwise

import numpy as np
from ortools.sat.python import cp_model

from . import cpsat
from .cpsat import new_solver
from .arena_types import ArenaPlan, ArenaProblem, SolverConfig, align, pair_footprint

__all__ = ["MAIN_ORDERS", "ORDERS", "PROBE_ORDERS", "ArenaVars", "SolveResult", "add_hint", "add_redundant_constraints",
           "add_search_strategy", "add_symmetry_breaking", "build_arena_model", "canonical", "crowding", "fits",
           "max_live", "plan_cpsat", "portfolio", "sections", "solve"]


# --------------------------------------------------------------------------- data

@dataclass(frozen=True, slots=True)
class Item:
    """One buffer as the model sees it: size in units, lifetime [start, end) in op indices;
    ``over``: (later buffer's index, forward window, backward rise or None, in units) of each
    overlap pair it is the earlier of (solver.arena_types.Overlap); ``steps``: (start, end, size) pieces of a buffer whose height
    changes over time (an in-place layer writing a smaller tensor over a larger one), ``size``
    their largest."""
    index: int  # position in problem.buffers
    size: int
    start: int
    end: int
    over: tuple[tuple[int, int, int | None], ...] = ()
    steps: tuple[tuple[int, int, int], ...] = ()

    def pieces(self) -> tuple[tuple[int, int, int], ...]:
        return self.steps or ((self.start, self.end, self.size),)

    def height(self, a: int, b: int) -> int:
        """Its largest height over ops [a, b)."""
        return max((size for s, e, size in self.pieces() if s < b and a < e), default=0)


@dataclass(frozen=True, slots=True)
class PairVars:
    """An overlap pair in the model: positions in items, and whether the later buffer takes the
    window (``lit``: then the two span one hull while both live) or stays clear of the earlier."""
    earlier: int
    later: int
    lit: cp_model.IntVar
    hull: cp_model.IntervalVar
    apart: tuple  # the two buffers' offset intervals, present when they stay clear of each other


def item_pairs(items) -> list[tuple[int, int, int, int | None]]:
    """(earlier, later, window, rise) of every overlap pair among ``items``, by position."""
    pos = {it.index: k for k, it in enumerate(items)}
    return [(k, pos[later], window, rise) for k, it in enumerate(items) for later, window, rise in it.over
            if later in pos]


@dataclass(slots=True)
class ArenaVars:
    model: cp_model.CpModel
    items: tuple[Item, ...]
    offsets: list[cp_model.IntVar]
    y_intervals: list[cp_model.IntervalVar]
    peak: cp_model.IntVar
    cliques: list[list[int]] = field(default_factory=list)  # positions in items
    pairs: list[PairVars] = field(default_factory=list)
    y_at: object = None  # (position, height) -> that buffer's offset interval of that height


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE / UNKNOWN / MODEL_INVALID
    objective: int | None  # peak in units
    best_bound: int  # proven lower bound on the peak in units
    wall_s: float
    offsets: tuple[int, ...] | None  # in units, per item
    note: str = ""
    spent_s: float = 0.0  # the time limit this search is charged for, deterministic (see solve)


# --------------------------------------------------------------------------- geometry

def max_live(items) -> int:
    """The largest total size live at one op (the cross-section lower bound): an overlap pair,
    while both its buffers live, counts as the least the two span together."""
    events = [e for it in items for s, end, size in it.pieces() for e in ((s, size), (end, -size))]
    for e, later, window, rise in item_pairs(items):
        a, b = items[e], items[later]
        for t in range(b.start, a.end):
            ha, hb = a.height(t, t + 1), b.height(t, t + 1)
            saving = ha + hb - pair_footprint(window, ha, hb, rise)
            if saving > 0:
                events += [(t, -saving), (t + 1, saving)]
    events.sort(key=lambda e: (e[0], e[1]))  # ends (negative) before starts at the same op
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


def maximal_cliques(items, at: list | None = None) -> list[list[int]]:
    """Positions of the buffers live at each op where the live set is maximal (interval graph):
    a sweep over the starts, the live buffers in a heap by end. ``at`` receives an op of each."""
    starts = sorted({it.start for it in items})
    by_start = sorted(range(len(items)), key=lambda k: items[k].start)
    ends: list[tuple[int, int]] = []  # (end, position) of the live buffers
    live: set[int] = set()
    cliques, j = [], 0
    for n, t in enumerate(starts):
        while ends and ends[0][0] <= t:
            live.discard(heapq.heappop(ends)[1])
        while j < len(by_start) and items[by_start[j]].start <= t:
            live.add(by_start[j])
            heapq.heappush(ends, (items[by_start[j]].end, by_start[j]))
            j += 1
        nxt = starts[n + 1] if n + 1 < len(starts) else None
        # live ⊆ next live set exactly when nobody in it ends before the next start
        if nxt is not None and (not ends or ends[0][0] > nxt):
            continue
        if len(live) > 1:
            cliques.append(sorted(live))
            if at is not None:
                at.append(t)
    return cliques


def build_arena_model(items, upper: int, lower: int = 0, minimize: bool = True) -> ArenaVars:
    """Geometric model: per buffer a fixed time interval and an offset interval, no two rectangles
    overlapping, ``lower <= peak <= upper`` above every buffer; minimise the peak (or, with
    ``minimize=False``, any plan fitting under ``upper``: the decision model). The two buffers of
    an overlap pair, over the ops both live, are either two rectangles or, when the later one
    starts within the window, one rectangle spanning both (``PairVars``)."""
    model = cp_model.CpModel()
    offsets, y_intervals = [], []
    for it in items:
        y = model.new_int_var(0, max(0, upper - it.size), f"y{it.index}")
        offsets.append(y)
        y_intervals.append(model.new_fixed_size_interval_var(y, it.size, f"yi{it.index}"))
    heights: dict[tuple[int, int], cp_model.IntervalVar] = {}  # a stepped buffer's offset interval per height

    def y_interval(k: int, size: int) -> cp_model.IntervalVar:
        if size == items[k].size:
            return y_intervals[k]
        if (k, size) not in heights:
            heights[k, size] = model.new_fixed_size_interval_var(offsets[k], size, f"yi{items[k].index}_{size}")
        return heights[k, size]
    pairs = item_pairs(items)
    shared = {k: [] for k in range(len(items))}  # position -> the [start, end) of each pair span it is in
    for e, later, _, _ in pairs:
        for k in (e, later):
            shared[k].append((items[later].start, items[e].end))
    xs, ys = [], []
    for k, it in enumerate(items):  # each piece of a buffer's life outside its pair spans: fixed rectangles
        for a, b, size in it.pieces():
            t = a
            for s0, s1 in sorted(shared[k]) + [(b, b)]:
                if min(s0, b) > t:
                    xs.append(model.new_fixed_size_interval_var(t, min(s0, b) - t, f"xi{it.index}_{t}"))
                    ys.append(y_interval(k, size))
                t = max(t, s1)
                if t >= b:
                    break
    pair_vars = []
    for n, (e, later, window, rise) in enumerate(pairs):
        a, b = items[e], items[later]
        s0, s1 = b.start, a.end
        ha, hb = a.height(s0, s1), b.height(s0, s1)  # their heights while both live
        lit = model.new_bool_var(f"over{n}")
        if rise is None:
            model.add(offsets[later] - offsets[e] <= window).only_enforce_if(lit)
        else:  # walking forwards (the later one low) or backwards (high)
            up = model.new_bool_var(f"up{n}")
            model.add(offsets[later] - offsets[e] <= window).only_enforce_if([lit, ~up])
            model.add(offsets[later] - offsets[e] >= rise).only_enforce_if([lit, up])
        apart = tuple(model.new_optional_fixed_size_interval_var(offsets[k], h, ~lit, f"ya{n}_{k}")
                      for k, h in ((e, ha), (later, hb)))
        for k, y in zip((e, later), apart):
            xs.append(model.new_optional_fixed_size_interval_var(s0, s1 - s0, ~lit, f"xa{n}_{k}"))
            ys.append(y)
        lo, hi = model.new_int_var(0, upper, f"lo{n}"), model.new_int_var(0, upper, f"hi{n}")
        model.add_min_equality(lo, [offsets[e], offsets[later]])
        model.add_max_equality(hi, [offsets[e] + ha, offsets[later] + hb])
        hull = model.new_optional_interval_var(lo, model.new_int_var(0, upper, f"span{n}"), hi, lit, f"hull{n}")
        xs.append(model.new_optional_fixed_size_interval_var(s0, s1 - s0, lit, f"xh{n}"))
        ys.append(hull)
        pair_vars.append(PairVars(e, later, lit, hull, apart))
    model.add_no_overlap_2d(xs, ys)
    peak = model.new_int_var(lower, upper, "peak")
    for y, it in zip(offsets, items):
        model.add(y + it.size <= peak)
    if minimize:
        model.minimize(peak)
    v = ArenaVars(model, tuple(items), offsets, y_intervals, peak, pairs=pair_vars)
    v.y_at = y_interval
    return v


def add_redundant_constraints(v: ArenaVars) -> None:
    """A 1-D NoOverlap per maximal clique (buffers live at the same op): implied by the 2-D
    constraint, propagated far harder (edge finding on a nearly perfect packing). In a clique
    holding both buffers of an overlap pair, they are their hull or two intervals apart."""
    at: list[int] = []
    v.cliques = maximal_cliques(v.items, at)
    for clique, t in zip(v.cliques, at):
        members = set(clique)
        intervals = {k: [v.y_at(k, v.items[k].height(t, t + 1))] for k in clique}
        for p in v.pairs:
            if p.earlier in members and p.later in members:
                intervals[p.earlier] = [p.apart[0], p.hull]
                intervals[p.later] = [p.apart[1]]
        v.model.add_no_overlap([y for k in clique for y in intervals[k]])


def add_symmetry_breaking(v: ArenaVars) -> int:
    """Buffers of the same size and lifetime are interchangeable: keep them in index order (not
    those of overlap pairs: their partners tell them apart)."""
    paired = {k for p in v.pairs for k in (p.earlier, p.later)}
    groups: dict[tuple, list[int]] = {}
    for k, it in enumerate(v.items):
        if k not in paired:
            groups.setdefault((it.size, it.start, it.end, it.steps), []).append(k)
    n = 0
    for same in groups.values():
        for a, b in pairwise(same):
            v.model.add(v.offsets[a] + v.items[a].size <= v.offsets[b])
            n += 1
    return n


def crowding(items) -> list[int]:
    """Per buffer, the most bytes live at one op during its life (its busiest cross-section)."""
    coords = sorted({t for it in items for a, b, _ in it.pieces() for t in (a, b)})
    if not coords:
        return []
    diff = np.zeros(len(coords), np.int64)
    for it in items:
        for a, b, size in it.pieces():
            diff[bisect_left(coords, a)] += size
            diff[bisect_left(coords, b)] -= size
    live = np.cumsum(diff)
    return [int(live[bisect_left(coords, it.start):bisect_left(coords, it.end)].max()) for it in items]


# Tie-break orders for the bottom-up search, as keys of (buffer, its crowding): no single one
# solves every instance fast (the search time of one order on one instance is heavy-tailed), so
# ``fits`` runs several (``PROBE_ORDERS``, ``MAIN_ORDERS``).
ORDERS = {
    "start": lambda it, crowd: (it.start, -it.size, it.index),  # earliest first, then largest
    "length": lambda it, crowd: (it.start - it.end, -it.size, it.index),  # longest-lived first
    "area": lambda it, crowd: ((it.start - it.end) * it.size, it.index),  # largest time x bytes first
    "end": lambda it, crowd: (-it.end, it.start - it.end, it.index),  # latest end first, then longest-lived
    # longest-lived, then largest time x bytes, then busiest cross-section (MiniMalloc's first preorder)
    "width": lambda it, crowd: (it.start - it.end, (it.start - it.end) * it.size, -crowd, it.index),
    "start-area": lambda it, crowd: (it.start, (it.start - it.end) * it.size, it.index),
}
PROBE_ORDERS = ("end", "width", "start", "start-area")  # a short search each: most instances fall to one
MAIN_ORDERS = ("end", "width")  # then the rest of the limit, side by side
PROBE_SHARE = 0.075  # of the limit, per probe


def portfolio(time_limit_s: float, workers: int) -> tuple[tuple[str, float], ...]:
    """The runs of a ``fits`` portfolio: (order, its share of the limit). A short probe per order
    of ``PROBE_ORDERS`` first, then what is left of ``time_limit_s`` (times the searches run side
    by side) shared by the ``MAIN_ORDERS``."""
    limit = max(0.0, time_limit_s)
    side = max(1, min(workers, len(MAIN_ORDERS)))
    probe = PROBE_SHARE * limit
    rest = (limit * side - probe * len(PROBE_ORDERS)) / len(MAIN_ORDERS)
    return tuple((o, probe) for o in PROBE_ORDERS) + tuple((o, rest) for o in MAIN_ORDERS)


def add_search_strategy(v: ArenaVars, order: str = "start") -> None:
    """Bottom-up placement (MiniMalloc's canonical solutions): take the buffer whose lowest possible
    offset is smallest (ties broken by ``ORDERS[order]``) and put it there; on backtrack it is
    pushed above that offset. CP-SAT follows it, restarting and learning as its search goes."""
    key, crowd = ORDERS[order], crowding(v.items)
    ranked = sorted(range(len(v.items)), key=lambda k: key(v.items[k], crowd[k]))
    v.model.add_decision_strategy([v.offsets[k] for k in ranked], cp_model.CHOOSE_LOWEST_MIN,
                                  cp_model.SELECT_MIN_VALUE)


def add_hint(v: ArenaVars, offsets_units) -> None:
    for y, o in zip(v.offsets, offsets_units):
        v.model.add_hint(y, o)
    for p in v.pairs:  # the window taken where the two share bytes
        d = offsets_units[p.later] - offsets_units[p.earlier]
        v.model.add_hint(p.lit, -v.items[p.later].size < d < v.items[p.earlier].size)
    v.model.add_hint(v.peak, max((o + it.size for o, it in zip(offsets_units, v.items)), default=0))


# --------------------------------------------------------------------------- solving

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
           cp_model.UNKNOWN: "UNKNOWN", cp_model.MODEL_INVALID: "MODEL_INVALID"}


def solve(v: ArenaVars, config: SolverConfig, time_limit_s: float | None = None, on_solver=None,
          deadline: float | None = None, **params) -> SolveResult:
    """Run CP-SAT under the config (time limit, seed; one worker) and read the answer back.

    ``on_solver`` receives the CpSolver before the search starts (to stop it from another
    thread); ``deadline`` (time.monotonic) ends the search's watchdog no later; ``params``
    override SatParameters fields. The search is charged its deterministic time when it decided
    (a plan found or none possible), else its whole limit: the same charge however and whenever
    it was stopped."""
    limit = config.time_limit_s if time_limit_s is None else time_limit_s
    solver = new_solver(limit, 1, config.seed, deadline)
    p = solver.parameters
    for key, value in params.items():
        setattr(p, key, value)
    if on_solver is not None:
        on_solver(solver)
    start = time.perf_counter()
    code = cpsat.solve(solver, v.model, what="arena planner")
    wall = time.perf_counter() - start
    status = _STATUS.get(code, "UNKNOWN")
    spent = cpsat.spent_s(solver, limit) if status in ("OPTIMAL", "INFEASIBLE") else max(0.0, limit)
    lower = v.peak.proto.domain[0]
    if status in ("OPTIMAL", "FEASIBLE"):
        offsets = tuple(solver.value(y) for y in v.offsets)
        objective = max((o + it.size for o, it in zip(offsets, v.items)), default=0)
        bound = objective if status == "OPTIMAL" else max(lower, math.ceil(solver.best_objective_bound - 1e-6))
        if not v.model.has_objective():
            bound = lower  # a decision model proves nothing about lower peaks
        return SolveResult(status, objective, min(bound, objective), wall, offsets, spent_s=spent)
    if status == "INFEASIBLE":  # nothing fits under the peak's upper end
        return SolveResult(status, None, v.peak.proto.domain[-1] + 1, wall, None, spent_s=spent)
    return SolveResult(status, None, lower, wall, None, spent_s=spent)


# --------------------------------------------------------------------------- fits: a portfolio

def fits(items, capacity: int, config: SolverConfig, time_limit_s: float, runs=None,
         deadline: float | None = None) -> SolveResult:
    """Is there a plan with peak <= capacity? The decision model (the arena's height fixed to the
    capacity, no objective) searched bottom-up once per run of ``runs`` ((order, share of the
    limit) pairs; default ``portfolio(time_limit_s, config.workers)``), each a single-worker
    search, ``config.workers`` of them at a time in threads.

    Deterministic: each search is single-threaded with a fixed seed and its own share of the
    limit in deterministic time, and the answer is the success of the first run in ``runs``
    that succeeds (a later run's success waits for the earlier ones to finish or time out).
    INFEASIBLE from any of them is a proof. The portfolio is charged the shares of the runs
    before the one that succeeded plus what that one used (spread over the searches run side by
    side), or its whole limit when none succeeded."""
    start = time.perf_counter()
    runs = tuple(portfolio(time_limit_s, config.workers) if runs is None else runs)
    results: dict[int, SolveResult] = {}
    solvers: dict[int, cp_model.CpSolver] = {}
    stopped: set[int] = set()
    lock = threading.Lock()
    done = threading.Condition(lock)

    def run(k: int, order: str, slice_s: float) -> None:
        try:
            v = build_arena_model(items, capacity, 0, minimize=False)
            add_redundant_constraints(v)
            add_symmetry_breaking(v)
            add_search_strategy(v, order)

            def register(solver):
                with lock:
                    solvers[k] = solver
                    if k in stopped:
                        solver.stop_search()
            res = solve(v, config, slice_s, on_solver=register, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - reported through the status and note
            res = SolveResult("MODEL_INVALID", None, 0, 0.0, None, note=f"{type(exc).__name__}: {exc}")
        with lock:
            results[k] = res
            _stop_losers(k, res)
            done.notify_all()

    def _stop_losers(k: int, res: SolveResult) -> None:
        if res.offsets is None and res.status != "INFEASIBLE":
            return
        losers = range(len(runs)) if res.status == "INFEASIBLE" else range(k + 1, len(runs))
        for j in losers:
            if j != k and j not in results:
                stopped.add(j)
                if j in solvers:
                    solvers[j].stop_search()

    def decided() -> SolveResult | None:
        for k in range(len(runs)):
            res = results.get(k)
            if res is not None and res.status == "INFEASIBLE":
                return res
        for k in range(len(runs)):
            res = results.get(k)
            if res is None:
                return None  # an earlier run may still succeed
            if res.offsets is not None:
                return res
        return results[len(runs) - 1] if len(results) == len(runs) else None

    side_by_side = min(max(1, config.workers), len(runs))
    threads: list[threading.Thread] = []
    pending = list(enumerate(runs))
    with lock:
        while True:
            answer = decided()
            running = sum(t.is_alive() for t in threads)
            if answer is not None or (not pending and running == 0):
                break
            while pending and running < max(1, config.workers):
                k, (order, slice_s) = pending.pop(0)
                if k in stopped:
                    results[k] = SolveResult("UNKNOWN", None, 0, 0.0, None)
                    continue
                t = threading.Thread(target=run, args=(k, order, slice_s), daemon=True)
                threads.append(t)
                t.start()
                running += 1
            done.wait(timeout=0.05)
        for j in range(len(runs)):  # release every search still running
            stopped.add(j)
            if j in solvers and j not in results:
                solvers[j].stop_search()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if answer is None:
        answer = SolveResult("UNKNOWN", None, 0, wall, None)
    if answer.offsets is not None:
        k = next(k for k in range(len(runs)) if results.get(k) is answer)
        spent = (sum(slice_s for _, slice_s in runs[:k]) + answer.spent_s) / side_by_side
    else:
        spent = max(0.0, time_limit_s)
    return replace(answer, wall_s=wall, spent_s=spent)


# --------------------------------------------------------------------------- the planner

def _unit(problem: ArenaProblem, hint=()) -> int:
    """The gcd of the aligned sizes (a multiple of the alignment): canonical plans sit on its
    multiples. With overlap pairs, plans also sit at a window from a partner, and the hint (the
    greedy plan's offsets, ``hint``) is kept as it is: their gcd too."""
    sizes = [align(size, problem.alignment) for b in problem.buffers for _, _, size in b.segments() if size > 0]
    if problem.pairs or any(b.steps for b in problem.buffers):
        sizes += [abs(w) for p in problem.pairs for w in (problem.window(p), problem.rise(p)) if w] + list(hint)
    return reduce(math.gcd, sizes, 0) or problem.alignment


def _items(problem: ArenaProblem, unit: int) -> list[Item]:
    over: dict[int, list[tuple[int, int]]] = {}
    for p in problem.pairs:
        if problem.buffers[p.earlier].size > 0 and problem.buffers[p.later].size > 0:
            rise = problem.rise(p)
            over.setdefault(p.earlier, []).append((p.later, problem.window(p) // unit,
                                                   None if rise is None else rise // unit))
    return [Item(i, align(b.size, problem.alignment) // unit, b.first, b.last + 1, tuple(over.get(i, ())),
                 tuple((first, last + 1, align(size, problem.alignment) // unit) for first, last, size in b.steps))
            for i, b in enumerate(problem.buffers) if b.size > 0]


class _Skyline:
    """The top of the buffers dropped so far, over time: the highest top over [a, b), and [a, b)
    raised to a new top (at least the highest there). A segment tree over the ops' coordinates
    with lazy assignment: O(log n) per buffer."""

    def __init__(self, coords: list[int]):
        self.coords = coords
        self.n = max(1, len(coords) - 1)
        self.top = [0] * (4 * self.n)
        self.pending: list[int | None] = [None] * (4 * self.n)

    def _push(self, node: int) -> None:
        value = self.pending[node]
        if value is not None:
            for child in (2 * node, 2 * node + 1):
                self.top[child], self.pending[child] = value, value
            self.pending[node] = None

    def highest(self, a: int, b: int, node: int = 1, lo: int = 0, hi: int | None = None) -> int:
        hi = self.n if hi is None else hi
        if node == 1:
            a, b = bisect_left(self.coords, a), bisect_left(self.coords, b)
        if b <= lo or hi <= a:
            return 0
        if a <= lo and hi <= b:
            return self.top[node]
        self._push(node)
        mid = (lo + hi) // 2
        return max(self.highest(a, b, 2 * node, lo, mid), self.highest(a, b, 2 * node + 1, mid, hi))

    def raise_to(self, a: int, b: int, value: int, node: int = 1, lo: int = 0, hi: int | None = None) -> None:
        hi = self.n if hi is None else hi
        if node == 1:
            a, b = bisect_left(self.coords, a), bisect_left(self.coords, b)
        if b <= lo or hi <= a:
            return
        if a <= lo and hi <= b:
            self.top[node], self.pending[node] = value, value
            return
        self._push(node)
        mid = (lo + hi) // 2
        self.raise_to(a, b, value, 2 * node, lo, mid)
        self.raise_to(a, b, value, 2 * node + 1, mid, hi)
        self.top[node] = max(self.top[2 * node], self.top[2 * node + 1])


def canonical(items, offsets_bytes, unit: int) -> tuple[int, ...]:
    """Drop every buffer as low as it goes, keeping the plan's vertical order (gravity): the peak
    never grows and every offset lands on a multiple of ``unit``. Returns offsets in units.
    Gravity knows neither overlap windows nor heights changing over time: such a plan is kept as
    it is (already on ``unit``)."""
    if any(it.over or it.steps for it in items):
        return tuple(offsets_bytes[it.index] // unit for it in items)
    order = sorted(range(len(items)), key=lambda k: (offsets_bytes[items[k].index], k))
    sky = _Skyline(sorted({it.start for it in items} | {it.end for it in items}))
    out = [0] * len(items)
    for k in order:
        it = items[k]
        out[k] = sky.highest(it.start, it.end)  # the highest top among those live at the same time
        sky.raise_to(it.start, it.end, out[k] + it.size)
    return tuple(out)


def _peak(items, offsets) -> int:
    return max((o + it.size for o, it in zip(offsets, items)), default=0)


@dataclass(slots=True)
class _Section:
    items: list[Item]
    offsets: tuple[int, ...]  # units, the best known plan
    bound: int  # units, proven
    solved: bool = False  # the solver (not the greedy plan) produced the offsets
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return _peak(self.items, self.offsets)


def _decide_section(sec: _Section, cap: int, config: SolverConfig, budget_s: float,
                    deadline: float | None = None) -> float:
    """The decision phase: fit the section under the capacity ``cap`` (units). Returns the share of
    the limit the searches were charged (deterministic)."""
    res = fits(sec.items, cap, config, budget_s, deadline=deadline)
    if res.note:
        sec.notes.append(res.note)
    if res.offsets is not None:
        sec.offsets, sec.solved = res.offsets, True
    elif res.status == "INFEASIBLE":
        sec.bound = max(sec.bound, cap + 1)
    return res.spent_s


def _improve_section(sec: _Section, goal: int, config: SolverConfig, budget_s: float,
                     deadline: float | None = None) -> float:
    """Minimise the section's peak: fit it under ``goal`` (its lower bound, or the peak another
    section already needs; 30 % of the time); failing that, under lower capacities between goal
    and its best peak, then CP-SAT's own minimisation from the best plan so far. Returns the
    share of the limit the searches were charged (deterministic)."""
    res = fits(sec.items, goal, config, budget_s * 0.3, deadline=deadline)
    spent = res.spent_s
    if res.note:
        sec.notes.append(res.note)
    if res.offsets is not None:
        sec.offsets, sec.solved = res.offsets, True
        return spent
    if res.status == "INFEASIBLE":
        sec.bound = max(sec.bound, goal + 1)
    # A capacity search: rounds of decision searches under lower capacities (one per worker,
    # spread between the lowest capacity not yet given up on and the best peak), each round half
    # of what is left of 60 % of the time; then CP-SAT's own minimisation from the best plan so
    # far for the rest.
    lo = max(sec.bound, goal + 1)  # below it: proven impossible, or a search already gave up
    search_s = 0.6 * (budget_s - spent)
    while lo <= sec.peak - 1 and search_s > 1.0:
        hi = sec.peak - 1
        caps = sorted({lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3}) if config.workers > 1 else [lo + (hi - lo) // 2]
        round_s = search_s / 2
        results = _fits_many(sec.items, caps, config, round_s, deadline)
        charged = max(r.spent_s for r in results)  # side by side
        spent, search_s = spent + charged, search_s - charged
        for cap, res in zip(caps, results):
            if res.offsets is not None and _peak(sec.items, res.offsets) < sec.peak:
                sec.offsets, sec.solved = res.offsets, True
                break  # the lowest capacity that fitted
            if res.status == "INFEASIBLE":
                sec.bound = max(sec.bound, cap + 1)
            lo = max(lo, sec.bound, cap + 1)
    remaining = budget_s - spent
    if remaining <= 0.1 or sec.peak <= sec.bound:
        return spent
    v = build_arena_model(sec.items, sec.peak, sec.bound)
    add_redundant_constraints(v)
    add_symmetry_breaking(v)
    add_hint(v, sec.offsets)
    res = solve(v, config, remaining, deadline=deadline)
    spent += res.spent_s
    if res.note:
        sec.notes.append(res.note)
    if res.offsets is not None and _peak(sec.items, res.offsets) <= sec.peak:
        sec.offsets, sec.solved = res.offsets, True
    sec.bound = max(sec.bound, res.best_bound)
    return spent


def _fits_many(items, caps, config: SolverConfig, time_limit_s: float,
               deadline: float | None = None) -> list[SolveResult]:
    """One bottom-up search (the first of ``MAIN_ORDERS``) per capacity, in parallel threads."""
    out: list[SolveResult | None] = [None] * len(caps)

    def run(k: int) -> None:
        out[k] = fits(items, caps[k], replace(config, workers=1), time_limit_s,
                      runs=((MAIN_ORDERS[0], time_limit_s),), deadline=deadline)
    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(caps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r or SolveResult("UNKNOWN", None, 0, 0.0, None, spent_s=time_limit_s) for r in out]


def _with_method(plan: ArenaPlan, **changes) -> ArenaPlan:
    return replace(plan, method="cpsat", **changes)


def plan_cpsat(problem: ArenaProblem, config: SolverConfig, greedy: dict[str, ArenaPlan],
               deadline: float | None = None) -> ArenaPlan:
    """The best plan CP-SAT finds within ``config.time_limit_s``, never worse than ``greedy``'s best.

    Without ``problem.capacity``: minimise the peak. With it: first a plan within the capacity
    (the decision phase: status INFEASIBLE, with the best greedy plan's offsets, when none
    exists), then, for the time left, the lowest peak below it. Every search ends by
    ``deadline`` (time.monotonic; default: the watchdog of the limit from now)."""
    start = time.perf_counter()
    if deadline is None:
        deadline = time.monotonic() + cpsat.watchdog_s(config.time_limit_s)

    def elapsed() -> float:
        return time.perf_counter() - start
    best = min(greedy.values(), key=lambda p: p.peak)
    unit = _unit(problem, best.offsets)
    items = _items(problem, unit)
    bound_units = max_live(items)
    bound = bound_units * unit
    cap = problem.capacity
    if cap is not None and cap < bound:
        return _with_method(best, lower_bound=bound, status="INFEASIBLE", wall_s=elapsed(),
                            note=f"no plan fits in {cap} bytes: {bound} bytes are live at one op")
    if best.peak <= bound:
        return _with_method(best, lower_bound=max(best.lower_bound, bound), status="OPTIMAL", wall_s=elapsed())
    try:
        secs = _plan_sections(items, best, unit, bound_units, None if cap is None else cap // unit, config, deadline)
    except Exception as exc:  # noqa: BLE001 - any solver failure falls back to the greedy plan
        return _fallback(best, bound, elapsed(), f"CP-SAT failed ({type(exc).__name__}: {exc})")
    notes = [n for s in secs for n in s.notes]
    if notes and not any(s.solved for s in secs):
        return _fallback(best, bound, elapsed(), "CP-SAT failed: " + "; ".join(notes))
    offsets = [0] * len(problem.buffers)
    for s in secs:
        for it, o in zip(s.items, s.offsets):
            offsets[it.index] = o * unit
    peak = max((s.peak for s in secs), default=0) * unit
    lower = max([bound] + [s.bound * unit for s in secs])
    if cap is not None and peak > cap:
        if any(s.bound * unit > cap for s in secs):
            return _with_method(best, lower_bound=lower, status="INFEASIBLE", wall_s=elapsed(),
                                note=f"no plan fits in {cap} bytes (proven by CP-SAT; at least {lower} needed)")
        return _fallback(best, lower, elapsed(), f"no plan within {cap} bytes found in {config.time_limit_s:g} s "
                                                 f"(none proven impossible either)")
    if peak > best.peak:  # cannot happen (the sections start from the greedy plan), kept as a guard
        return _fallback(best, lower, elapsed(), "CP-SAT plan worse than greedy")
    if not any(s.solved for s in secs) and peak == best.peak and lower < peak:
        if cap is not None:  # the greedy plan already fits: the decision is made, only the peak could not drop
            return _with_method(best, lower_bound=lower, status="FEASIBLE", wall_s=elapsed(),
                                note=f"the {best.method} plan fits in {cap} bytes; CP-SAT found no lower peak "
                                     f"in {config.time_limit_s:g} s")
        return _fallback(best, lower, elapsed(), f"CP-SAT found nothing better in {config.time_limit_s:g} s")
    note = "; ".join(notes)
    return ArenaPlan(tuple(offsets), peak, lower, "cpsat", "OPTIMAL" if peak <= lower else "FEASIBLE",
                     elapsed(), note)


def _fallback(best: ArenaPlan, lower: int, wall_s: float, why: str) -> ArenaPlan:
    warnings.warn(f"arena planner: {why}; keeping the {best.method} plan ({best.peak} bytes)", RuntimeWarning,
                  stacklevel=3)
    return _with_method(best, lower_bound=max(best.lower_bound, lower), status="FALLBACK", wall_s=wall_s,
                        note=f"{why}; greedy {best.method} plan kept")


def _plan_sections(items, best: ArenaPlan, unit: int, bound_units: int, cap_units: int | None,
                   config: SolverConfig, deadline: float | None = None) -> list[_Section]:
    """Solve every independent section, the most crowded first, sharing the time left fairly
    (what the searches so far were charged, not the clock: the same shares on any machine).

    With a capacity, every section is first fitted under it (the decision phase; it stops at the
    first section that does not fit); then, for what is left of the limit, the peak is minimised."""
    secs = [_Section(part, canonical(part, best.offsets, unit), max_live(part))
            for part in sections(items)]
    spent = 0.0

    def crowded_first(group):
        return sorted(group, key=lambda s: (-s.bound, -len(s.items)))
    if cap_units is not None:
        over = crowded_first(s for s in secs if s.peak > cap_units)
        for n, sec in enumerate(over):
            left = config.time_limit_s - spent
            if left > 0:
                spent += _decide_section(sec, cap_units, config, left * len(sec.items) /
                                         sum(len(s.items) for s in over[n:]), deadline)
            if sec.peak > cap_units:
                return secs
    todo = crowded_first(secs)
    reached = bound_units  # a section below the peak already reached elsewhere needs no work
    for n, sec in enumerate(todo):
        goal = max(reached, sec.bound)
        if sec.peak > goal:
            left = config.time_limit_s - spent
            if left > 0:
                weight = len(sec.items) / sum(len(s.items) for s in todo[n:] if s.peak > goal)
                spent += _improve_section(sec, goal, config, left * weight, deadline)
        reached = max(reached, sec.peak)
    return secs
