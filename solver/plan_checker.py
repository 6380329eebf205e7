"""An independent proof that an arena plan is sound.

Deliberately shares no code with the planners: a sweep over op indices, not
pairwise interval logic, so a bug in one is unlikely to hide in the other.
"""
from __future__ import annotations


class PlanError(AssertionError):
    """A plan violates a constraint: a bug in a planner, never a user error."""


def check_plan(buffers, offsets, alignment: int, arena_bytes: int | None = None) -> int:
    """Raise PlanError unless no two simultaneously live buffers share a byte, every offset is
    aligned and (when given) inside ``arena_bytes``; return the bytes the plan spans."""
    if len(offsets) != len(buffers):
        raise PlanError(f"{len(offsets)} offsets for {len(buffers)} buffers")
    end = 0
    for b, o in zip(buffers, offsets):
        if o < 0 or o % alignment:
            raise PlanError(f"buffer {b.name}: offset {o} is negative or not {alignment}-byte aligned")
        end = max(end, o + b.size)
    if arena_bytes is not None and end > arena_bytes:
        raise PlanError(f"plan reaches byte {end}, beyond the arena of {arena_bytes}")
    # Sweep: at each op, the live pieces sorted by offset must not overlap their neighbour.
    pieces = [(first, last, o, o + size, b.name) for b, o in zip(buffers, offsets)
              for first, last, size in (b.steps or ((b.first, b.last, b.size),)) if size > 0]
    for op in sorted({p[0] for p in pieces}):
        live = sorted((start, end, name) for first, last, start, end, name in pieces if first <= op <= last)
        for (s0, e0, n0), (s1, e1, n1) in zip(live, live[1:]):
            if s1 < e0:
                raise PlanError(f"buffers {n0} [{s0}, {e0}) and {n1} [{s1}, {e1}) overlap while both "
                                f"are live at op {op}")
    return end


def check_tensor_plan(tensors, arena_bytes: int, alignment: int) -> None:
    """The same proof at the level of the tensors the engine uses, before any code is emitted.

    ``tensors``: (name, group, first, last, offset, size) per tensor; tensors of one group
    share bytes on purpose (in-place ops, zero-copy reshapes), so only pairs from different
    groups are checked against each other.
    """
    for name, _, _, _, offset, size in tensors:
        if offset < 0 or offset % alignment or offset + size > arena_bytes:
            raise PlanError(f"tensor {name}: bytes [{offset}, {offset + size}) misaligned or outside "
                            f"the {arena_bytes}-byte arena")
    for op in sorted({t[2] for t in tensors}):
        live = sorted((t[4], t[4] + t[5], t[1], t[0]) for t in tensors if t[2] <= op <= t[3] and t[5] > 0)
        reach: dict = {}  # the furthest byte reached so far, per group, among lower offsets
        for start, end, group, name in live:
            for other, (other_end, other_name) in reach.items():
                if other != group and start < other_end:
                    raise PlanError(f"tensors {other_name} and {name} share bytes from {start} while both "
                                    f"are live at op {op}")
            if end > reach.get(group, (0, ""))[0]:
                reach[group] = (end, name)
