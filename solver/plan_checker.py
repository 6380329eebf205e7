"""An independent proof that an arena plan is sound.

Deliberately shares no code with the planners: a sweep over op indices, not pairwise interval
logic, so a bug in one is unlikely to hide in the other. It runs in O(n log n): op by op, the
pieces that die leave and the pieces born there are checked, then join, against the live ones
in a segment tree over the plan's byte coordinates (``_Live``). Once the sweep has found the
first op where two pieces collide, that op's live set is sorted by offset and the collision is
named exactly as a reader walking the arena upwards at that op would find it first.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import groupby

import numpy as np


class PlanError(AssertionError):
    """A plan violates a constraint: a bug in a planner, never a user error."""


@dataclass(frozen=True)
class _Pair:
    """An overlap pair by position (the checker's own record)."""
    earlier: int
    later: int
    shift: int
    rise: int | None = None


_EMPTY, _MIXED = object(), object()  # summaries besides "one group": no piece / pieces of several groups


def _merge(a, b):
    if a is _EMPTY:
        return b
    if b is _EMPTY or a is b or a == b:
        return a
    return _MIXED


class _Live:
    """The live pieces over compressed byte coordinates, each piece tagged with its group.

    A segment tree: a piece is recorded (count per group) at the O(log n) nodes that tile its
    byte range; every node keeps a summary of the groups recorded in its subtree (empty, one
    group, or mixed), so "does a live piece of another group overlap [a, b)" walks two root to
    leaf paths."""

    def __init__(self, coords: list[int]):
        self.coords = coords  # sorted distinct byte coordinates; leaf i is [coords[i], coords[i + 1])
        self.leaves = max(1, len(coords) - 1)
        size = 4 * self.leaves
        self.here: list[dict | None] = [None] * size  # group -> count of pieces recorded at the node
        self.summary: list = [_EMPTY] * size

    def _span(self, start: int, end: int) -> tuple[int, int]:
        return bisect_left(self.coords, start), bisect_left(self.coords, end)

    def _own(self, node: int):
        here = self.here[node]
        if not here:
            return _EMPTY
        return next(iter(here)) if len(here) == 1 else _MIXED

    def change(self, start: int, end: int, group, delta: int) -> None:
        lo, hi = self._span(start, end)
        self._change(1, 0, self.leaves, lo, hi, group, delta)

    def _change(self, node: int, nlo: int, nhi: int, lo: int, hi: int, group, delta: int) -> None:
        if lo <= nlo and nhi <= hi:
            here = self.here[node]
            if here is None:
                here = self.here[node] = {}
            count = here.get(group, 0) + delta
            if count:
                here[group] = count
            else:
                del here[group]
        else:
            mid = (nlo + nhi) // 2
            if lo < mid:
                self._change(2 * node, nlo, mid, lo, hi, group, delta)
            if hi > mid:
                self._change(2 * node + 1, mid, nhi, lo, hi, group, delta)
        own = self._own(node)
        if nhi - nlo > 1:
            own = _merge(own, _merge(self.summary[2 * node], self.summary[2 * node + 1]))
        self.summary[node] = own

    def foreign(self, start: int, end: int, group) -> bool:
        """Whether a live piece of a group other than ``group`` shares a byte with [start, end)."""
        lo, hi = self._span(start, end)
        return self._foreign(1, 0, self.leaves, lo, hi, group)

    def _foreign(self, node: int, nlo: int, nhi: int, lo: int, hi: int, group) -> bool:
        if lo <= nlo and nhi <= hi:
            s = self.summary[node]
            return s is not _EMPTY and (s is _MIXED or s != group)
        own = self._own(node)  # pieces covering this whole node cover the part of it asked about
        if own is not _EMPTY and (own is _MIXED or own != group):
            return True
        mid = (nlo + nhi) // 2
        return ((lo < mid and self._foreign(2 * node, nlo, mid, lo, hi, group))
                or (hi > mid and self._foreign(2 * node + 1, mid, nhi, lo, hi, group)))


def _first_collision(pieces) -> int | None:
    """The first op at which two live pieces of different groups share a byte, or None.

    ``pieces``: (first, last, start, end, group) with end > start. Op by op: the pieces that
    died leave, then each piece born at the op is checked against the live ones (and the ones
    born before it at that op) and joins them."""
    if not pieces:
        return None
    live = _Live(sorted({p[2] for p in pieces} | {p[3] for p in pieces}))
    deaths = sorted(pieces, key=lambda p: p[1])
    d = 0
    for op, born in groupby(sorted(pieces, key=lambda p: p[0]), key=lambda p: p[0]):
        while d < len(deaths) and deaths[d][1] < op:
            _, _, start, end, group = deaths[d]
            live.change(start, end, group, -1)
            d += 1
        for _, _, start, end, group in born:
            if live.foreign(start, end, group):
                return op
            live.change(start, end, group, +1)
    return None


def _pair_groups(n: int, pairs, lives, name) -> list[int]:
    """The group of each of ``n`` buffers (or tensors): its own, or one shared by every buffer
    linked to it by a declared pair (a chain of layers writing over what they consumed). Each
    pair must be one whose buffers live together only over a span where the earlier one dies and
    the later one is born, and within a group only declared pairs may live together."""
    root = list(range(n))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i
    declared = set()
    for p in pairs:
        e, lt = p.earlier, p.later
        if not (0 <= e < n and 0 <= lt < n) or e == lt:
            raise PlanError(f"overlap pair ({e}, {lt}) names no two buffers of the plan")
        (ef, el), (lf, ll) = lives(e), lives(lt)
        if not (ef <= lf <= el <= ll):
            raise PlanError(f"{name(lt)} may overlap {name(e)} only if it is born while {name(e)} lives and "
                            f"outlives it: ops {lf}..{ll} against {ef}..{el}")
        declared.add((e, lt))
        root[find(lt)] = find(e)
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(find(i), []).append(i)
    for group in members.values():
        for x in group:
            for y in group:
                if x < y and (x, y) not in declared and (y, x) not in declared:
                    (xf, xl), (yf, yl) = lives(x), lives(y)
                    if xf <= yl and yf <= xl:
                        raise PlanError(f"{name(x)} and {name(y)} live together but are no declared pair")
    return [find(i) for i in range(n)]


def _taken(pairs, offset) -> list:
    """The pairs whose later buffer starts within a window (at most ``shift`` bytes above the
    earlier one, or at least ``rise``): those may share bytes; any other pair must keep clear as
    any two buffers."""
    def inside(d, p):
        return d <= p.shift or (p.rise is not None and d >= p.rise)
    return [p for p in pairs if inside(offset(p.later) - offset(p.earlier), p)]


def check_plan(buffers, offsets, alignment: int, arena_bytes: int | None = None, pairs=()) -> int:
    """Raise PlanError unless no two simultaneously live buffers share a byte (but the buffers of
    a declared overlap pair, within their window), every offset is aligned and (when given)
    inside ``arena_bytes``; return the bytes the plan spans."""
    if len(offsets) != len(buffers):
        raise PlanError(f"{len(offsets)} offsets for {len(buffers)} buffers")
    end = 0
    for b, o in zip(buffers, offsets):
        if o < 0 or o % alignment:
            raise PlanError(f"buffer {b.name}: offset {o} is negative or not {alignment}-byte aligned")
        end = max(end, o + b.size)
    if arena_bytes is not None and end > arena_bytes:
        raise PlanError(f"plan reaches byte {end}, beyond the arena of {arena_bytes}")
    group = list(range(len(buffers)))
    if pairs:
        group = _pair_groups(len(buffers), _taken(pairs, lambda i: offsets[i]),
                             lambda i: (buffers[i].first, buffers[i].last), lambda i: f"buffer {buffers[i].name}")
    pieces = [(first, last, o, o + size, b.name, group[k]) for k, (b, o) in enumerate(zip(buffers, offsets))
              for first, last, size in (b.steps or ((b.first, b.last, b.size),)) if size > 0]
    # pieces of one buffer never live together; those of a pair's buffers may share bytes
    op = _first_collision([(first, last, s, e, g) for first, last, s, e, _, g in pieces])
    if op is None:
        return end
    # at that op, sorted by offset, some piece starts below the end of one of another group
    live = sorted((start, stop, name, g) for first, last, start, stop, name, g in pieces if first <= op <= last)
    for i, (s1, e1, n1, g1) in enumerate(live):
        for s0, e0, n0, g0 in live[:i]:
            if g0 != g1 and s1 < e0:
                raise PlanError(f"buffers {n0} [{s0}, {e0}) and {n1} [{s1}, {e1}) overlap while both "
                                f"are live at op {op}")
    raise AssertionError(f"the sweep found a collision at op {op} that the ordered walk does not")


def check_tensor_plan(tensors, arena_bytes: int, alignment: int, pairs=()) -> None:
    """The same proof at the level of the tensors the engine uses, before any code is emitted.

    ``tensors``: (name, group, first, last, offset, size) per tensor; tensors of one group
    share bytes on purpose (in-place ops, zero-copy reshapes), so only pairs from different
    groups are checked against each other. ``pairs``: overlap pairs between groups (``earlier``,
    ``later``: group keys; ``shift``), whose tensors may share bytes within their window.
    """
    for name, _, _, _, offset, size in tensors:
        if offset < 0 or offset % alignment or offset + size > arena_bytes:
            raise PlanError(f"tensor {name}: bytes [{offset}, {offset + size}) misaligned or outside "
                            f"the {arena_bytes}-byte arena")
    if pairs:
        keys = sorted({t[1] for t in tensors})
        at = {g: i for i, g in enumerate(keys)}
        span = {g: (min(t[2] for t in tensors if t[1] == g), max(t[3] for t in tensors if t[1] == g)) for g in keys}
        start = {g: min(t[4] for t in tensors if t[1] == g) for g in keys}
        label = {g: next(t[0] for t in tensors if t[1] == g) for g in keys}
        for p in pairs:
            if p.earlier not in at or p.later not in at:
                raise PlanError(f"overlap pair ({p.earlier}, {p.later}) names no tensors of the plan")
        indexed = _taken([_Pair(at[p.earlier], at[p.later], p.shift, p.rise) for p in pairs], lambda i: start[keys[i]])
        merged = _pair_groups(len(keys), indexed, lambda i: span[keys[i]], lambda i: f"tensor {label[keys[i]]}")
        tensors = [(t[0], keys[merged[at[t[1]]]], *t[2:]) for t in tensors]
    op = _first_collision([(t[2], t[3], t[4], t[4] + t[5], t[1]) for t in tensors if t[5] > 0])
    if op is None:
        return
    # at that op, walking up the arena: the first tensor that starts below the furthest byte
    # another group's tensors reach
    live = sorted((t[4], t[4] + t[5], t[1], t[0]) for t in tensors if t[2] <= op <= t[3] and t[5] > 0)
    reach: dict = {}  # the furthest byte reached so far, per group, among lower offsets
    top = [(0, None), (0, None)]  # the two furthest reaches of different groups: (end, group)
    for start, end, group, name in live:
        if start < (top[0][0] if top[0][1] != group else top[1][0]):  # some other group reaches past it
            for other, (other_end, other_name) in reach.items():  # the first such group, as recorded
                if other != group and start < other_end:
                    raise PlanError(f"tensors {other_name} and {name} share bytes from {start} while both "
                                    f"are live at op {op}")
        if end > reach.get(group, (0, ""))[0]:
            reach[group] = (end, name)
            if group == top[0][1] or end > top[0][0]:
                top = [(end, group), top[1] if group == top[0][1] else top[0]]
            elif end > top[1][0]:
                top[1] = (end, group)
    raise AssertionError(f"the sweep found a collision at op {op} that the ordered walk does not")


def check_schedule(reads, writes, ahead: int, in_offset: int, out_offset: int, what: str) -> None:
    """Replay one layer's recorded order at its planned addresses, byte by byte: no write may
    reach a byte a read still needs, a read of its own step or a later one (``ahead`` 0), or of
    a step ``ahead`` or more after it (the DMA schedules, whose stores trail their loads).
    ``reads``/``writes``: rows of (step, first byte, end) relative to the input's / output's
    first byte, every byte the step touches inside. Independent of how the window was derived:
    it sees only the recorded steps and the two offsets."""
    r = np.asarray(reads, np.int64).reshape(-1, 3)
    w = np.asarray(writes, np.int64).reshape(-1, 3)
    r = r[r[:, 2] > r[:, 1]]
    w = w[w[:, 2] > w[:, 1]]
    if r.size == 0 or w.size == 0:
        return
    r = r[np.argsort(r[:, 0], kind="stable")]
    r_lo, r_hi = r[:, 1] + in_offset, r[:, 2] + in_offset
    w_lo, w_hi = w[:, 1] + out_offset, w[:, 2] + out_offset
    # from read i on: the lowest first byte and the highest end (a sentinel past the last read)
    lowest = np.append(np.minimum.accumulate(r_lo[::-1])[::-1], np.iinfo(np.int64).max)
    highest = np.append(np.maximum.accumulate(r_hi[::-1])[::-1], np.iinfo(np.int64).min)
    first_later = np.searchsorted(r[:, 0], w[:, 0] + ahead, side="left")
    clear = (w_hi <= lowest[first_later]) | (w_lo >= highest[first_later])
    for n in np.flatnonzero(~clear):  # writes between later reads: each against every one of them
        i = first_later[n]
        hit = np.flatnonzero((r_lo[i:] < w_hi[n]) & (r_hi[i:] > w_lo[n]))
        if hit.size:
            j = i + hit[0]
            raise PlanError(f"{what}: step {w[n, 0]} writes bytes [{w_lo[n]}, {w_hi[n]}) that step {r[j, 0]} still "
                            f"reads ([{r_lo[j]}, {r_hi[j]}))")
