"""What no arena plan can beat: the bytes live at each op, with overlap pairs counted as the
least their two buffers span together."""
from __future__ import annotations

from .arena_types import ArenaProblem, Buffer, align, pair_footprint, shared_ops


def height_at(b: Buffer, op: int) -> int:
    """A buffer's bytes at one op (0 outside its life)."""
    return next((size for first, last, size in b.segments() if first <= op <= last), 0)


def _events(problem: ArenaProblem, pairs) -> list[tuple[int, int]]:
    """(op, bytes born or dead there), sorted: every piece's birth and death, and for each pair of
    ``pairs`` while both its buffers live, what overlapping saves (the two count as the least
    bytes they can span together)."""
    a = problem.alignment
    events = [(k, delta) for b in problem.buffers for first, last, size in b.segments()
              for k, delta in ((first, align(size, a)), (last + 1, -align(size, a)))]
    for pair in pairs:
        earlier, later = problem.buffers[pair.earlier], problem.buffers[pair.later]
        k0, k1 = shared_ops(problem.buffers, pair)
        for op in range(k0, k1 + 1):
            he, hl = align(height_at(earlier, op), a), align(height_at(later, op), a)
            saving = he + hl - pair_footprint(problem.window(pair), he, hl, problem.rise(pair)) if he and hl else 0
            if saving > 0:
                events += [(op, -saving), (op + 1, saving)]
    events.sort()
    return events


def lower_bound(problem: ArenaProblem) -> int:
    """Largest total of (aligned) bytes live at any one op: no plan can beat it. A sweep over
    births and deaths (deaths first at one op: a piece ending at op k - 1 is gone at op k); the
    two buffers of an overlap pair count, while both live, as the least they can span."""
    events = _events(problem, problem.pairs)
    live = best = 0
    for _, delta in events:
        live += delta
        best = max(best, live)
    return best


def live_per_op(problem: ArenaProblem, pairs=()) -> list[int]:
    """Aligned bytes live at every op (0 to the last buffer's last), counting ``pairs`` as
    overlapped."""
    n = max((b.last for b in problem.buffers), default=-1) + 2
    diff = [0] * (n + 1)
    for op, delta in _events(problem, pairs):
        diff[op] += delta
    out, live = [], 0
    for d in diff[:n - 1]:
        live += d
        out.append(live)
    return out
