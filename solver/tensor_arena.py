"""One memory level's tensors as an arena problem, its solution as tensor offsets, and the
tensor-level check of those offsets: what a network's L2 and L3 arenas and a language model's
activation arena share.

    plan, offsets = plan_level(lives, "cpsat", 5.0, alignment=16)   # tensor -> byte offset, checked
"""
from __future__ import annotations

from network_parser.lifetimes import Lifetime, owner_groups, owner_heights

from . import progress
from .arena import ArenaPlan, ArenaProblem, Buffer, Overlap, SolverConfig, lower_bound, plan_arena
from .cpsat import watchdog_s
from .plan_checker import check_tensor_plan


def owner_pairs(lives: list[Lifetime], overlaps) -> list:
    """The overlaps (``input``, ``output``, ``window``, ``rise``: layer_analyzer.overlap.OutputOverInput)
    between owners of bytes: (earlier owner, later owner, window, rise), for those whose tensors
    are both planned here."""
    owner = {lt.tensor: lt.owner for lt in lives}
    return [(owner[o.input], owner[o.output], o.window, o.rise) for o in overlaps
            if o.input in owner and o.output in owner and owner[o.input] != owner[o.output]]


def arena_problem(lives: list[Lifetime], alignment: int, guard: int = 0, overlaps=()) -> tuple[ArenaProblem, list[int]]:
    """One buffer per owner of bytes. Tensors sharing an owner's bytes make its height vary
    over time: at each op, the largest of them alive. ``guard`` bytes of canary on each side
    make a buffer a rectangle of its largest height plus both canaries. ``overlaps``: outputs
    that may start inside the input they consumed (overlap pairs between their owners)."""
    members = owner_groups(lives)
    buffers, owners = [], []
    for lt in lives:
        if lt.alias_of is not None:
            continue
        group = members[lt.tensor]
        first, last = min(m.first_op for m in group), max(m.last_op for m in group)
        steps: list[list[int]] = []
        for k, nxt, height in owner_heights(group):  # adjacent stretches of one height merged
            if steps and steps[-1][2] == height:
                steps[-1][1] = nxt - 1
            else:
                steps.append([k, nxt - 1, height])
        if guard:
            steps = [[first, last, max(s[2] for s in steps) + 2 * guard]]
        buffers.append(Buffer(lt.name, max(s[2] for s in steps), first, last,
                              tuple(map(tuple, steps)) if len(steps) > 1 else ()))
        owners.append(lt.tensor)
    at = {t: i for i, t in enumerate(owners)}
    pairs = tuple(Overlap(at[a], at[b], window, rise) for a, b, window, rise in owner_pairs(lives, overlaps))
    return ArenaProblem(tuple(buffers), alignment, pairs=pairs), owners


def tensor_offsets(lives: list[Lifetime], owners: list[int], plan: ArenaPlan, guard: int = 0) -> dict[int, int]:
    """Every tensor's arena offset: its buffer's (after its first canary), or its owner's when it
    reuses another's bytes."""
    offsets = {t: off + guard for t, off in zip(owners, plan.offsets)}
    for lt in lives:
        if lt.alias_of is not None:
            offsets[lt.tensor] = offsets[lt.alias_of]
    return offsets


def tensor_rows(lives: list[Lifetime], offsets: dict[int, int]) -> list[tuple]:
    """(name, group, first op, last op, offset, size) per tensor, for the tensor-level plan check."""
    return [(lt.name, lt.owner, lt.first_op, lt.last_op,
             offsets[lt.tensor], lt.size) for lt in lives]


def plan_level(lives: list[Lifetime], planner: str, time_limit_s: float, alignment: int,
               guard: int = 0, overlaps=()) -> tuple[ArenaPlan, dict[int, int]]:
    """Offsets for one memory level's tensors, checked tensor by tensor (solver.plan_checker).
    ``overlaps``: outputs that may start inside the input they consumed."""
    problem, owners = arena_problem(lives, alignment, guard, overlaps)
    with progress.step(f"arena ({planner}, {len(problem.buffers)} buffers)",
                       limit_s=watchdog_s(time_limit_s) if planner == "cpsat" else None):
        plan = plan_arena(problem, planner, SolverConfig(time_limit_s=time_limit_s))
    offsets = tensor_offsets(lives, owners, plan, guard)
    pairs = [Overlap(a, b, window, rise) for a, b, window, rise in owner_pairs(lives, overlaps)]
    check_tensor_plan(tensor_rows(lives, offsets), plan.peak, alignment, pairs)
    return plan, offsets


def plan_banked_level(lives: list[Lifetime], banks, planner: str, time_limit_s: float, alignment: int,
                      overlaps=(), weights: dict | None = None, pinned: dict | None = None):
    """``plan_level`` over several RAM banks (solver.banks; ``pinned``: tensor -> the bank index
    it must lie in): (ArenaPlan whose offsets lay the
    banks end to end and whose peak is the bytes all banks use, tensor -> that offset, the
    BankPlan, tensor -> bank index), each bank checked, then every tensor."""
    from .banks import Bank, plan_banks
    problem, owners = arena_problem(lives, alignment, 0, overlaps)
    weight = [(weights or {}).get(t, problem.buffers[i].size) for i, t in enumerate(owners)]
    with progress.step(f"banks ({planner}, {len(problem.buffers)} buffers, {len(banks)} banks)",
                       limit_s=watchdog_s(time_limit_s) if planner == "cpsat" else None):
        owner = {lt.tensor: lt.owner for lt in lives}
        at = {t: i for i, t in enumerate(owners)}
        pin = {at[owner[t]]: k for t, k in (pinned or {}).items() if t in owner}
        banked = plan_banks(problem, tuple(Bank(b.name, b.size, b.cost) for b in banks), planner,
                            SolverConfig(time_limit_s=time_limit_s), weight, pin)
    virtual = banked.virtual_offsets(alignment)
    arena = ArenaPlan(virtual, sum(banked.used), lower_bound(problem), banked.method, banked.status,
                      banked.wall_s)
    offsets = tensor_offsets(lives, owners, arena)
    bank_of = dict(zip(owners, banked.assign))
    bank_of.update({lt.tensor: bank_of[lt.alias_of] for lt in lives if lt.alias_of is not None})
    pairs = [Overlap(a, b, window, rise) for a, b, window, rise in owner_pairs(lives, overlaps)]
    span = max((o + lt.size for lt in lives for o in (offsets[lt.tensor],)), default=0)
    check_tensor_plan(tensor_rows(lives, offsets), span, alignment, pairs)
    return arena, offsets, banked, bank_of
