"""The arena problem and plan records shared by every planner."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Buffer:
    """Bytes at one offset, live over ops [first, last].

    ``steps`` describes a buffer whose height changes over time, as when an
    in-place op writes a smaller tensor over a larger one: time-disjoint
    (first, last, size) pieces covering [first, last]; ``size`` is their maximum.
    """
    name: str
    size: int
    first: int  # first op index where the buffer is live
    last: int  # last op index where the buffer is live (inclusive)
    steps: tuple[tuple[int, int, int], ...] = ()

    def segments(self) -> tuple[tuple[int, int, int], ...]:
        return self.steps or ((self.first, self.last, self.size),)


@dataclass(frozen=True, slots=True)
class ArenaProblem:
    buffers: tuple[Buffer, ...]
    alignment: int = 16
    capacity: int | None = None  # bytes available, when known (decision mode)


@dataclass(frozen=True, slots=True)
class SolverConfig:
    time_limit_s: float = 5.0
    workers: int = 2
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ArenaPlan:
    offsets: tuple[int, ...]
    peak: int
    lower_bound: int
    method: str
    status: str  # OPTIMAL (peak == a proven bound), FEASIBLE (a gap remains), FALLBACK (greedy after a solver failure)
    wall_s: float
    note: str = ""

    @property
    def gap(self) -> float:
        """Relative distance to the lower bound (0 when proven optimal)."""
        return 0.0 if self.peak == 0 else (self.peak - self.lower_bound) / self.peak


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def overlaps_in_time(a: Buffer, b: Buffer) -> bool:
    return a.first <= b.last and b.first <= a.last
