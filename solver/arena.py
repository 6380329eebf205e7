"""Static arena offsets for buffers with known lifetimes: one interface for every planner.

    plan_arena(problem, method, config) -> ArenaPlan(offsets, peak, lower_bound, status, wall_s)

Every plan is proven sound by ``plan_checker.check_plan`` (its own code path)
before it is returned.
"""
from __future__ import annotations

import time
from dataclasses import replace

from .arena_bound import lower_bound
from .arena_types import ArenaPlan, ArenaProblem, Buffer, Overlap, SolverConfig, align, overlaps_in_time
from .greedy_arena import best_fit, bidirectional, first_fit
from .plan_checker import PlanError, check_plan

__all__ = ["ArenaPlan", "ArenaProblem", "Buffer", "Overlap", "SolverConfig", "PlanError", "GREEDY", "METHODS",
           "align", "check_plan", "first_fit_decreasing", "lower_bound", "overlaps_in_time", "plan_arena"]

GREEDY = {"first-fit": first_fit, "best-fit": best_fit, "bidirectional": bidirectional}
first_fit_decreasing = first_fit


def _greedy_plan(problem: ArenaProblem, method: str, config: SolverConfig) -> ArenaPlan:
    start = time.perf_counter()
    offsets = GREEDY[method](problem)
    peak = align(check_plan(problem.buffers, offsets, problem.alignment, pairs=problem.pairs), problem.alignment)
    bound = lower_bound(problem)
    return ArenaPlan(tuple(offsets), peak, bound, method, "OPTIMAL" if peak <= bound else "FEASIBLE",
                     time.perf_counter() - start)


def _cpsat_plan(problem: ArenaProblem, method: str, config: SolverConfig) -> ArenaPlan:
    from . import cpsat
    from .arena_cpsat import plan_cpsat
    start = time.perf_counter()
    deadline = time.monotonic() + cpsat.watchdog_s(config.time_limit_s)  # the whole planner's watchdog
    greedy = {m: _greedy_plan(problem, m, config) for m in GREEDY}
    return replace(plan_cpsat(problem, config, greedy, deadline), wall_s=time.perf_counter() - start)


METHODS = {**{m: _greedy_plan for m in GREEDY}, "cpsat": _cpsat_plan}


def plan_arena(problem: ArenaProblem, method: str = "first-fit", config: SolverConfig = SolverConfig()) -> ArenaPlan:
    plan = METHODS[method](problem, method, config)
    check_plan(problem.buffers, plan.offsets, problem.alignment, plan.peak, problem.pairs)
    return plan
