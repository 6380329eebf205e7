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
class Overlap:
    """Two buffers that may share bytes while both are live: ``later`` is written by the layer
    (or patch stage) that reads ``earlier`` for the last time, in an order that never overwrites
    an input byte before its last read. Walking forwards, ``later`` may start at most ``shift``
    bytes above ``earlier`` (``shift`` < 0: below it); walking backwards (``rise`` not None), at
    least ``rise`` bytes above it. Elsewhere they are disjoint as any two buffers."""
    earlier: int  # index in ArenaProblem.buffers
    later: int
    shift: int
    rise: int | None = None


@dataclass(frozen=True, slots=True)
class ArenaProblem:
    buffers: tuple[Buffer, ...]
    alignment: int = 16
    capacity: int | None = None  # bytes available, when known: a plan within it first, then the least peak
    pairs: tuple[Overlap, ...] = ()  # buffers that may share bytes while both live (solver.arena_types.Overlap)

    def window(self, pair: Overlap) -> int:
        """The pair's forward shift on the alignment grid (offsets are multiples of it)."""
        return pair.shift // self.alignment * self.alignment

    def rise(self, pair: Overlap) -> int | None:
        """The pair's backward rise on the alignment grid, if it may walk backwards."""
        return None if pair.rise is None else -(-pair.rise // self.alignment) * self.alignment

    def forbidden(self, pair: Overlap) -> tuple[int, int]:
        """The open interval of offset differences (later - earlier) the pair may not take: past
        the forward window, short of the backward one and not clear of the earlier buffer."""
        earlier = self.buffers[pair.earlier].size
        rise = self.rise(pair)
        return self.window(pair), earlier if rise is None else min(rise, earlier)


def pair_span(d: int, earlier: int, later: int) -> int:
    """Bytes two buffers span when the later one starts ``d`` bytes above the earlier one."""
    return max(earlier, d + later) - min(0, d)


def pair_footprint(shift: int, earlier: int, later: int, rise: int | None = None) -> int:
    """The fewest bytes two buffers of a pair span together: the later one at the forward window
    (or at the earlier one's start, for a positive shift), or at the backward one."""
    best = pair_span(min(shift, 0), earlier, later)
    return best if rise is None else min(best, pair_span(max(rise, 0), earlier, later))


def shared_ops(buffers, pair: Overlap) -> tuple[int, int]:
    """The ops both buffers of a pair are live: from the later one's first to the earlier one's last."""
    return buffers[pair.later].first, buffers[pair.earlier].last


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
