"""Static arena offsets for buffers with known lifetimes.

One interface, ``plan_arena(problem, method)``; methods are registered in
``METHODS``. Every plan is checked by ``check_plan`` (independent of the
planner) before it is returned.
"""
from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    size: int
    first: int  # first op index where the buffer is live
    last: int  # last op index where the buffer is live (inclusive)


@dataclass(frozen=True, slots=True)
class ArenaProblem:
    buffers: tuple[Buffer, ...]
    alignment: int = 16


@dataclass(frozen=True, slots=True)
class ArenaPlan:
    offsets: tuple[int, ...]
    peak: int
    lower_bound: int
    method: str
    status: str  # "OPTIMAL" when peak == lower_bound, else "FEASIBLE"
    wall_s: float


class PlanError(AssertionError):
    """A plan violates a constraint: a bug in a planner, never a user error."""


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def overlaps_in_time(a: Buffer, b: Buffer) -> bool:
    return a.first <= b.last and b.first <= a.last


def lower_bound(problem: ArenaProblem) -> int:
    """Largest total of (aligned) bytes live at any one op: no plan can beat it."""
    if not problem.buffers:
        return 0
    ops = range(min(b.first for b in problem.buffers), max(b.last for b in problem.buffers) + 1)
    return max(sum(align(b.size, problem.alignment) for b in problem.buffers if b.first <= k <= b.last)
               for k in ops)


def first_fit_decreasing(problem: ArenaProblem) -> list[int]:
    """Largest buffers first; each at the lowest aligned offset that does not collide."""
    order = sorted(range(len(problem.buffers)),
                   key=lambda i: (-problem.buffers[i].size,
                                  -(problem.buffers[i].last - problem.buffers[i].first), i))
    offsets = [0] * len(problem.buffers)
    placed: list[int] = []
    for i in order:
        b = problem.buffers[i]
        busy = sorted((offsets[j], offsets[j] + problem.buffers[j].size) for j in placed
                      if overlaps_in_time(b, problem.buffers[j]))
        offset = 0
        for start, end in busy:
            if offset + b.size <= start:
                break
            offset = max(offset, align(end, problem.alignment))
        offsets[i] = offset
        placed.append(i)
    return offsets


METHODS = {"first-fit": first_fit_decreasing}


def check_plan(problem: ArenaProblem, offsets) -> int:
    """Prove no two buffers live at the same op share a byte; return the peak."""
    bufs = problem.buffers
    if len(offsets) != len(bufs):
        raise PlanError(f"{len(offsets)} offsets for {len(bufs)} buffers")
    for i, (b, o) in enumerate(zip(bufs, offsets)):
        if o < 0 or o % problem.alignment:
            raise PlanError(f"buffer {b.name}: offset {o} is negative or not {problem.alignment}-aligned")
        for j in range(i):
            c, p = bufs[j], offsets[j]
            if overlaps_in_time(b, c) and o < p + c.size and p < o + b.size:
                raise PlanError(f"buffers {b.name} [{o}, {o + b.size}) and {c.name} [{p}, {p + c.size}) "
                                f"are both live at ops {max(b.first, c.first)}..{min(b.last, c.last)}")
    return align(max((o + b.size for b, o in zip(bufs, offsets)), default=0), problem.alignment)


def plan_arena(problem: ArenaProblem, method: str = "first-fit") -> ArenaPlan:
    start = time.perf_counter()
    offsets = METHODS[method](problem)
    peak = check_plan(problem, offsets)
    bound = lower_bound(problem)
    return ArenaPlan(tuple(offsets), peak, bound, method,
                     "OPTIMAL" if peak <= bound else "FEASIBLE", time.perf_counter() - start)
