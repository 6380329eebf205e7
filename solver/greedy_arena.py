"""Greedy arena planners: the baselines and the hints for the CP-SAT planner.

Each takes an ArenaProblem and returns one offset per buffer; ``solver.arena``
checks and scores the plan.
"""
from __future__ import annotations

from .arena_types import ArenaProblem, Buffer, align, overlaps_in_time


def _busy(problem: ArenaProblem, b: Buffer, offsets: dict[int, int]) -> list[tuple[int, int]]:
    """Byte ranges taken by already-placed buffers live at the same time as b, by start."""
    return sorted((offsets[j], offsets[j] + problem.buffers[j].size) for j in offsets
                  if overlaps_in_time(b, problem.buffers[j]))


def _gaps(busy: list[tuple[int, int]], alignment: int):
    """(start, length) of every free aligned gap below the top, then the open space above."""
    cursor = 0
    for start, end in busy:
        if start > cursor:
            yield cursor, start - cursor
        cursor = max(cursor, align(end, alignment))
    yield cursor, None  # unbounded


def _size_order(problem: ArenaProblem) -> list[int]:
    """Largest first; longer lifetimes first among equals (TFLite Micro's greedy order)."""
    return sorted(range(len(problem.buffers)),
                  key=lambda i: (-problem.buffers[i].size,
                                 -(problem.buffers[i].last - problem.buffers[i].first), i))


def _stepped_place(problem: ArenaProblem, i: int, offsets: dict[int, int], best: bool) -> int:
    """Offset for a buffer when heights change over time: the lowest (first-fit) or the
    tightest (best-fit: least free space left under the next blocker) candidate offset."""
    b = problem.buffers[i]
    clashes = [(sa, offsets[j], sb) for j in offsets for sa in b.segments()
               for sb in problem.buffers[j].segments() if sa[0] <= sb[1] and sb[0] <= sa[1]]
    candidates = sorted({0} | {align(o + sb[2], problem.alignment) for _, o, sb in clashes})

    def fits(at: int) -> bool:
        return all(at + sa[2] <= o or at >= o + sb[2] for sa, o, sb in clashes)

    valid = [c for c in candidates if fits(c)]
    if not best:
        return valid[0]

    def slack(at: int) -> int:
        above = [o - (at + sa[2]) for sa, o, sb in clashes if o >= at + sa[2]]
        return min(above, default=1 << 62)
    return min(valid, key=lambda c: (slack(c), c))


def _stepped(problem: ArenaProblem) -> bool:
    return any(b.steps for b in problem.buffers)


def _gap_place(problem: ArenaProblem, i: int, offsets: dict[int, int], best: bool) -> int:
    """The lowest gap that holds the buffer (first-fit), or the smallest one (best-fit)."""
    b = problem.buffers[i]
    gaps = list(_gaps(_busy(problem, b, offsets), problem.alignment))
    fitting = [(length, start) for start, length in gaps if length is not None and length >= b.size]
    if best:
        return min(fitting)[1] if fitting else gaps[-1][0]
    return min([start for _, start in fitting] + [gaps[-1][0]])


def _decreasing(problem: ArenaProblem, best: bool) -> list[int]:
    place = _stepped_place if _stepped(problem) else _gap_place
    offsets: dict[int, int] = {}
    for i in _size_order(problem):
        offsets[i] = place(problem, i, offsets, best)
    return [offsets[i] for i in range(len(problem.buffers))]


def first_fit(problem: ArenaProblem) -> list[int]:
    """Decreasing size; each buffer at the lowest offset where it fits (TFLite Micro's greedy planner)."""
    return _decreasing(problem, best=False)


def best_fit(problem: ArenaProblem) -> list[int]:
    """Decreasing size; each buffer in the smallest gap that holds it (TFLite's arena planner)."""
    return _decreasing(problem, best=True)


def bidirectional(problem: ArenaProblem) -> list[int]:
    """DORY's two stacks: buffers in creation order, alternately on the bottom and the top stack.

    Each new buffer goes on top of the live buffers of its stack (a stack does not
    reuse holes below a live buffer, so residual tensors pin their stack until they
    die). Top-stack buffers are placed from the arena's end once its size is known.
    """
    order = sorted(range(len(problem.buffers)),
                   key=lambda i: (problem.buffers[i].first, -problem.buffers[i].last, i))
    side: dict[int, int] = {}
    height: dict[int, int] = {}  # offset from the stack's own end
    last_side = 1
    for i in order:
        b = problem.buffers[i]
        s = 1 - last_side
        live = [j for j in side if side[j] == s and problem.buffers[j].last >= b.first]
        height[i] = align(max((height[j] + problem.buffers[j].size for j in live), default=0),
                          problem.alignment)
        side[i] = last_side = s
    # Smallest arena where no bottom buffer meets a top buffer alive at the same time.
    ends = [(i, align(height[i] + problem.buffers[i].size, problem.alignment)) for i in order]
    arena = max((e for _, e in ends), default=0)
    for i, ei in ends:
        if side[i] == 0:
            for j, ej in ends:
                if side[j] == 1 and overlaps_in_time(problem.buffers[i], problem.buffers[j]):
                    arena = max(arena, ei + ej)
    return [height[i] if side[i] == 0 else arena - align(height[i] + problem.buffers[i].size, problem.alignment)
            for i in range(len(problem.buffers))]
