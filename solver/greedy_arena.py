"""Greedy arena planners: the baselines and the hints for the CP-SAT planner.

Each takes an ArenaProblem and returns one offset per buffer; ``solver.arena``
checks and scores the plan.

Overlap pairs (a layer writing its output over the input it has consumed): first-fit and
best-fit overlap the pairs that live where the bytes live without overlapping exceed the
problem's lower bound (elsewhere overlapping saves nothing and only lengthens chains), placing
a chain of such pairs from its last buffer down to its first, each earlier buffer just above
where its later one may start; DORY's stacks keep every pair disjoint (always sound).
"""
from __future__ import annotations

import heapq

import numpy as np

from .arena_bound import live_per_op, lower_bound
from .arena_types import ArenaProblem, Buffer, align, shared_ops


class _Placed:
    """The buffers placed so far, as arrays: the ones live during [first, last] are found with
    one vectorized comparison instead of a Python loop over every placed buffer."""

    def __init__(self, n: int):
        self.index = np.empty(n, np.int64)
        self.first = np.empty(n, np.int64)
        self.last = np.empty(n, np.int64)
        self.start = np.empty(n, np.int64)
        self.end = np.empty(n, np.int64)
        self.count = 0

    def add(self, i: int, b: Buffer, offset: int) -> None:
        k = self.count
        self.index[k] = i
        self.first[k], self.last[k], self.start[k], self.end[k] = b.first, b.last, offset, offset + b.size
        self.count += 1


def useful_pairs(problem: ArenaProblem) -> tuple:
    """The overlap pairs worth taking greedily: live at an op whose bytes, without overlapping,
    exceed what the problem needs at least with it."""
    if not problem.pairs:
        return ()
    live, bound = live_per_op(problem), lower_bound(problem)
    return tuple(p for p in problem.pairs
                 if max(live[op] for op in range(shared_ops(problem.buffers, p)[0],
                                                  shared_ops(problem.buffers, p)[1] + 1)) > bound)


def _size_order(problem: ArenaProblem, pairs=()) -> list[int]:
    """Largest first; longer lifetimes first among equals (TFLite Micro's greedy order). The
    buffers of a chain of overlap pairs go together, by its largest, the last-born first."""
    chain = list(range(len(problem.buffers)))

    def find(i: int) -> int:
        while chain[i] != i:
            i = chain[i]
        return i
    rank = [0] * len(problem.buffers)  # a buffer's place along its chain (pairs come in op order)
    for p in sorted(pairs, key=lambda p: problem.buffers[p.later].first):
        chain[find(p.later)] = find(p.earlier)
        rank[p.later] = max(rank[p.later], rank[p.earlier] + 1)
    b = problem.buffers
    key: dict[int, tuple] = {}
    for i in range(len(b)):
        r = find(i)
        size, length = key.get(r, (0, 0))
        key[r] = (max(size, b[i].size), max(length, b[i].last - b[i].first))
    return sorted(range(len(b)), key=lambda i: (-key[find(i)][0], -key[find(i)][1], find(i), -rank[i], i))


def _partner_starts(problem: ArenaProblem, i: int, pairs, offsets) -> dict[int, tuple[int, int]]:
    """The offsets each placed overlap partner of buffer ``i`` forbids it: the open interval
    (z0, z1) of starts that would put it neither within the pair's window nor clear of the partner."""
    forbidden = {}
    for p in pairs:
        lo, hi = problem.forbidden(p)  # later - earlier may not lie in (lo, hi)
        if p.later == i and p.earlier in offsets:
            forbidden[p.earlier] = (offsets[p.earlier] + lo, offsets[p.earlier] + hi)
        elif p.earlier == i and p.later in offsets:
            forbidden[p.later] = (offsets[p.later] - hi, offsets[p.later] - lo)
    return forbidden


def _stepped_place(problem: ArenaProblem, i: int, offsets: dict[int, int], best: bool, pairs=()) -> int:
    """Offset for a buffer when heights change over time: the lowest (first-fit) or the
    tightest (best-fit: least free space left under the next blocker) candidate offset, clear of
    every placed buffer live with it but its overlap partners, and outside the starts those
    forbid (``_partner_starts``)."""
    b = problem.buffers[i]
    forbidden = _partner_starts(problem, i, pairs, offsets)
    clashes = [(sa, offsets[j], sb) for j in offsets if j not in forbidden for sa in b.segments()
               for sb in problem.buffers[j].segments() if sa[0] <= sb[1] and sb[0] <= sa[1]]
    a = problem.alignment
    candidates = sorted({0} | {align(o + sb[2], a) for _, o, sb in clashes}
                        | {align(z1, a) for _, z1 in forbidden.values() if z1 > 0})

    def fits(at: int) -> bool:
        return (all(at + sa[2] <= o or at >= o + sb[2] for sa, o, sb in clashes)
                and not any(z0 < at < z1 for z0, z1 in forbidden.values()))

    valid = [c for c in candidates if fits(c)]
    if not best:
        return valid[0]

    def slack(at: int) -> int:
        above = [o - (at + sa[2]) for sa, o, sb in clashes if o >= at + sa[2]]
        return min(above, default=1 << 62)
    return min(valid, key=lambda c: (slack(c), c))


def _stepped(problem: ArenaProblem) -> bool:
    return any(b.steps for b in problem.buffers)


def _gap_place(problem: ArenaProblem, i: int, placed: _Placed, best: bool, partners=None) -> int:
    """The lowest gap that holds the buffer (first-fit), or the smallest one (best-fit), else the
    aligned top. The gaps lie between the byte ranges of the placed buffers live at the same
    time, taken by start: below each range, from the aligned end of all before it. ``partners``:
    placed overlap partners, by the starts each forbids (``_partner_starts``)."""
    b, a = problem.buffers[i], problem.alignment
    n = placed.count
    live = (placed.first[:n] <= b.last) & (b.first <= placed.last[:n])
    if partners:
        live &= ~np.isin(placed.index[:n], list(partners))
    start, end = placed.start[:n][live], placed.end[:n][live]
    if partners:
        return _partnered_place(start, end, b.size, a, best, list(partners.values()))
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


def _partnered_place(start: np.ndarray, end: np.ndarray, size: int, a: int, best: bool, forbidden) -> int:
    """Where a buffer with placed overlap partners goes: among 0, the aligned ends of the ranges
    live with it and the ends of the starts its partners forbid, the lowest (first-fit) or
    tightest (best-fit) start clear of every range and outside every forbidden interval."""
    ends = -(-end // a) * a
    candidates = sorted({0, *ends.tolist(), *(-(-z1 // a) * a for _, z1 in forbidden)})
    valid = []
    for c in candidates:
        if c < 0 or np.any((start < c + size) & (end > c)) or any(z0 < c < z1 for z0, z1 in forbidden):
            continue
        if not best:
            return c
        above = start[start >= c + size]
        valid.append(((int(above.min()) - c - size) if above.size else 1 << 62, c))
    return min(valid)[1]


def _decreasing(problem: ArenaProblem, best: bool) -> list[int]:
    offsets: dict[int, int] = {}
    pairs = useful_pairs(problem)
    if _stepped(problem):
        for i in _size_order(problem, pairs):
            offsets[i] = _stepped_place(problem, i, offsets, best, pairs)
    else:
        placed = _Placed(len(problem.buffers))
        for i in _size_order(problem, pairs):
            offsets[i] = _gap_place(problem, i, placed, best, _partner_starts(problem, i, pairs, offsets))
            placed.add(i, problem.buffers[i], offsets[i])
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
