"""Greedy arena planners: the baselines and the hints for the CP-SAT planner.

Each takes an ArenaProblem and returns one offset per buffer; ``solver.arena``
checks and scores the plan.
"""
from __future__ import annotations

import heapq

import numpy as np

from .arena_types import ArenaProblem, Buffer, align


class _Placed:
    """The buffers placed so far, as arrays: the ones live during [first, last] are found with
    one vectorized comparison instead of a Python loop over every placed buffer."""

    def __init__(self, n: int):
        self.first = np.empty(n, np.int64)
        self.last = np.empty(n, np.int64)
        self.start = np.empty(n, np.int64)
        self.end = np.empty(n, np.int64)
        self.count = 0

    def add(self, b: Buffer, offset: int) -> None:
        k = self.count
        self.first[k], self.last[k], self.start[k], self.end[k] = b.first, b.last, offset, offset + b.size
        self.count += 1


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


def _gap_place(problem: ArenaProblem, i: int, placed: _Placed, best: bool) -> int:
    """The lowest gap that holds the buffer (first-fit), or the smallest one (best-fit), else the
    aligned top. The gaps lie between the byte ranges of the placed buffers live at the same
    time, taken by start: below each range, from the aligned end of all before it."""
    b, a = problem.buffers[i], problem.alignment
    n = placed.count
    live = (placed.first[:n] <= b.last) & (b.first <= placed.last[:n])
    start, end = placed.start[:n][live], placed.end[:n][live]
    if start.size == 0:
        return 0
    order = np.lexsort((end, start))
    start, end = start[order], -(-end[order] // a) * a
    reach = np.maximum.accumulate(end)  # the aligned top of everything before and at each range
    cursor = np.concatenate(([0], np.maximum(reach[:-1], 0)))
    length = start - cursor
    fitting = (length >= b.size) & (length > 0)
    top = int(max(reach[-1], 0))
    if not fitting.any():
        return top
    if best:
        lengths, starts = length[fitting], cursor[fitting]
        k = np.lexsort((starts, lengths))[0]
        return int(starts[k])
    return int(cursor[fitting].min())


def _decreasing(problem: ArenaProblem, best: bool) -> list[int]:
    offsets: dict[int, int] = {}
    if _stepped(problem):
        for i in _size_order(problem):
            offsets[i] = _stepped_place(problem, i, offsets, best)
    else:
        placed = _Placed(len(problem.buffers))
        for i in _size_order(problem):
            offsets[i] = _gap_place(problem, i, placed, best)
            placed.add(problem.buffers[i], offsets[i])
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
    stacks: tuple[list, list] = ([], [])  # per stack, a max-heap of (-top, last op) of its buffers
    last_side = 1
    for i in order:
        b = problem.buffers[i]
        s = 1 - last_side
        heap = stacks[s]
        while heap and heap[0][1] < b.first:  # buffers come by first op: one that died stays dead
            heapq.heappop(heap)
        height[i] = align(-heap[0][0] if heap else 0, problem.alignment)
        heapq.heappush(heap, (-(height[i] + b.size), b.last))
        side[i] = last_side = s
    # Smallest arena where no bottom buffer meets a top buffer alive at the same time.
    ends = [(i, align(height[i] + problem.buffers[i].size, problem.alignment)) for i in order]
    arena = max((e for _, e in ends), default=0)
    top = [(problem.buffers[j].first, problem.buffers[j].last, ej) for j, ej in ends if side[j] == 1]
    if top:
        t_first, t_last, t_end = (np.array(v, np.int64) for v in zip(*top))
        for i, ei in ends:
            if side[i] == 0:
                b = problem.buffers[i]
                live = (t_first <= b.last) & (b.first <= t_last)
                if live.any():
                    arena = max(arena, ei + int(t_end[live].max()))
    return [height[i] if side[i] == 0 else arena - align(height[i] + problem.buffers[i].size, problem.alignment)
            for i in range(len(problem.buffers))]
