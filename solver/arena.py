"""Static arena offsets for buffers with known lifetimes: one interface for every planner.

    plan_arena(problem, method, config) -> ArenaPlan(offsets, peak, lower_bound, status, wall_s)

Every plan is proven sound by ``plan_checker.check_plan`` (its own code path)
before it is returned.
"""
from __future__ import annotations

import time
from dataclasses import replace

from .arena_types import ArenaPlan, ArenaProblem, Buffer, SolverConfig, align, overlaps_in_time
from .greedy_arena import best_fit, bidirectional, first_fit
from .plan_checker import PlanError, check_plan

__all__ = ["ArenaPlan", "ArenaProblem", "Buffer", "SolverConfig", "PlanError", "GREEDY", "METHODS",
           "align", "check_plan", "first_fit_decreasing", "lower_bound", "overlaps_in_time", "plan_arena"]

GREEDY = {"first-fit": first_fit, "best-fit": best_fit, "bidirectional": bidirectional}
first_fit_decreasing = first_fit


def lower_bound(problem: ArenaProblem) -> int:
    """Largest total of (aligned) bytes live at any one op: no plan can beat it. A sweep over
    births and deaths (deaths first at one op: a piece ending at op k - 1 is gone at op k)."""
    events = sorted((k, delta) for b in problem.buffers for first, last, size in b.segments()
                    for k, delta in ((first, align(size, problem.alignment)),
                                     (last + 1, -align(size, problem.alignment))))
    live = best = 0
    for _, delta in events:
        live += delta
        best = max(best, live)
    return best


def _greedy_plan(problem: ArenaProblem, method: str, config: SolverConfig) -> ArenaPlan:
    start = time.perf_counter()
    offsets = GREEDY[method](problem)
    peak = align(check_plan(problem.buffers, offsets, problem.alignment), problem.alignment)
    bound = lower_bound(problem)
    return ArenaPlan(tuple(offsets), peak, bound, method, "OPTIMAL" if peak <= bound else "FEASIBLE",
                     time.perf_counter() - start)


def _cpsat_plan(problem: ArenaProblem, method: str, config: SolverConfig) -> ArenaPlan:
    from . import cpsat
    from .arena_cpsat import plan_cpsat
    start = time.perf_counter()
    deadline = time.monotonic() + cpsat.watchdog_s(config.time_limit_s)  # the whole planner's watchdog
    greedy = {m: _greedy_plan(problem, m, config) for m in GREEDY}
    if not any(b.steps for b in problem.buffers):
        return plan_cpsat(problem, config, greedy, deadline)
    # Buffers whose height changes over time: CP-SAT plans each at its largest height (sound,
    # maybe not optimal); the greedy planners and the bound know the steps.
    bound = lower_bound(problem)
    best = min(greedy.values(), key=lambda p: (p.peak, p.method))
    if best.peak > bound:
        flat = replace(problem, buffers=tuple(replace(b, steps=()) for b in problem.buffers))
        solved = plan_cpsat(flat, config, {m: _greedy_plan(flat, m, config) for m in GREEDY}, deadline)
        if solved.peak < best.peak:
            best = solved
    note = ("" if best.method == "cpsat" else f"{best.method} plan meets the lower bound" if best.peak <= bound
            else f"{best.method} plan; CP-SAT found nothing better")
    return replace(best, method="cpsat", lower_bound=bound, status="OPTIMAL" if best.peak <= bound else "FEASIBLE",
                   wall_s=time.perf_counter() - start, note=note)


METHODS = {**{m: _greedy_plan for m in GREEDY}, "cpsat": _cpsat_plan}


def plan_arena(problem: ArenaProblem, method: str = "first-fit", config: SolverConfig = SolverConfig()) -> ArenaPlan:
    plan = METHODS[method](problem, method, config)
    check_plan(problem.buffers, plan.offsets, problem.alignment, plan.peak)
    return plan
