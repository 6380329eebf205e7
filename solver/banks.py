"""One arena across several RAM banks: which bank each buffer goes to (never straddling two),
then its offset inside that bank.

    plan = plan_banks(problem, banks, "cpsat", config, weights)   # BankPlan, every bank checked

Three ways to assign, each followed by the arena planners inside every bank:

* greedy: buffers largest first, each into the cheapest bank where the bank's first-fit plan
  still fits (the baseline, the hint and the fallback);
* hill climb (as TVM's memory pools planner): from the greedy assignment, move one buffer to
  another bank while that lowers (bytes over the banks' sizes, access cost);
* CP-SAT: an assignment whose bytes live at every op fit each bank (a relaxation of the packing:
  offsets are then planned bank by bank, and a bank that does not pack lowers its capacity in
  the model by what it lacked), at the least access cost (sum of each buffer's weight, the bytes
  its layers move, times its bank's cost).

Buffers that may share bytes (an output over the input it consumes: an overlap pair) share them
only when they land in one bank; in two banks they share none, which is always allowed. A bank's
offsets are its own; ``virtual_offsets`` lays the banks end to end for what needs one address
space (the tensor-level check, the overlap walks).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .arena import ArenaPlan, ArenaProblem, Overlap, SolverConfig, align, plan_arena
from .arena_types import pair_footprint
from .plan_checker import PlanError, check_plan


@dataclass(frozen=True, slots=True)
class Bank:
    """A RAM bank as the placement sees it: its size and relative access cost."""
    name: str
    size: int
    cost: float = 1.0


@dataclass(frozen=True)
class BankPlan:
    banks: tuple[Bank, ...]
    assign: tuple[int, ...]  # bank index per buffer
    offsets: tuple[int, ...]  # per buffer, inside its bank
    used: tuple[int, ...]  # bytes each bank's plan spans
    cost: float  # modelled access cost: sum of weight x bank cost
    cost_bound: float  # the least cost any assignment could have (CP-SAT's bound; else the cost)
    method: str  # "cpsat", "hill-climb" or a greedy planner's name: the assignment that was kept
    status: str  # OPTIMAL (cost proven least), FEASIBLE, INFEASIBLE (some bank over its size)
    plans: tuple[ArenaPlan, ...]  # each bank's arena plan
    wall_s: float = 0.0

    @property
    def over(self) -> int:
        """Bytes the banks lack, summed."""
        return sum(max(0, u - b.size) for u, b in zip(self.used, self.banks))

    def bases(self, alignment: int) -> tuple[int, ...]:
        """Each bank's start when the banks are laid end to end (one address space)."""
        out, at = [], 0
        for b, u in zip(self.banks, self.used):
            out.append(at)
            at += align(max(b.size, u), alignment)
        return tuple(out)

    def virtual_offsets(self, alignment: int) -> tuple[int, ...]:
        bases = self.bases(alignment)
        return tuple(bases[k] + o for k, o in zip(self.assign, self.offsets))


@dataclass(frozen=True)
class BankLayout:
    """The plan's banks: the part's memories (backends.base.MemoryBank), where each starts in the
    arena's one address space, the bytes each uses and each tensor's bank."""
    memories: tuple  # MemoryBank per bank, in the plan's order
    bases: tuple[int, ...]
    used: tuple[int, ...]
    bank_of: Any  # tensor (or scratch key) -> bank index
    plan: BankPlan

    def bank(self, offset: int) -> int:
        """The bank an arena offset falls in."""
        return max(k for k, b in enumerate(self.bases) if b <= offset)


def units(problem: ArenaProblem) -> list[list[int]]:
    """What is assigned to a bank as one: each buffer on its own."""
    return [[i] for i in range(len(problem.buffers))]


def subproblem(problem: ArenaProblem, members: list[int], capacity: int | None) -> ArenaProblem:
    at = {b: i for i, b in enumerate(members)}
    pairs = tuple(Overlap(at[p.earlier], at[p.later], p.shift, p.rise) for p in problem.pairs
                  if p.earlier in at and p.later in at)
    return ArenaProblem(tuple(problem.buffers[b] for b in members), problem.alignment, capacity, pairs)


class _Packer:
    """Each bank's buffers packed by one planner, remembered by the set packed."""

    def __init__(self, problem: ArenaProblem, banks, method: str, config: SolverConfig):
        self.problem, self.banks, self.method, self.config = problem, banks, method, config
        self.memo: dict[tuple, ArenaPlan] = {}

    def pack(self, k: int, members) -> ArenaPlan:
        key = (k, tuple(sorted(members)))
        if key not in self.memo:
            sub = subproblem(self.problem, list(key[1]), self.banks[k].size)
            self.memo[key] = plan_arena(sub, self.method, self.config) if key[1] else \
                ArenaPlan((), 0, 0, self.method, "OPTIMAL", 0.0)
        return self.memo[key]

    def used(self, k: int, members) -> int:
        return self.pack(k, members).peak


def _score(packer: _Packer, assign: list[int], groups, weights) -> tuple[int, float]:
    members = _members(assign, groups, len(packer.banks))
    over = sum(max(0, packer.used(k, m) - b.size) for k, (b, m) in enumerate(zip(packer.banks, members)))
    return over, _cost(assign, groups, weights, packer.banks)


def _members(assign: list[int], groups, n_banks: int) -> list[list[int]]:
    out = [[] for _ in range(n_banks)]
    for g, k in zip(groups, assign):
        out[k].extend(g)
    return out


def _cost(assign, groups, weights, banks) -> float:
    return sum(sum(weights[b] for b in g) * banks[k].cost for g, k in zip(groups, assign))


def _order(banks) -> list[int]:
    """Cheapest banks first, the larger of equal cost first."""
    return sorted(range(len(banks)), key=lambda k: (banks[k].cost, -banks[k].size, k))


def greedy_assign(packer: _Packer, groups, pinned=None) -> list[int]:
    """First fit decreasing across banks: largest buffer first, at the lowest offset of the
    cheapest bank where it ends inside the bank (else where it overflows least)."""
    problem, banks = packer.problem, packer.banks
    placed = [[] for _ in banks]  # per bank: (offset, buffer) placed so far
    assign = [-1] * len(groups)
    order = sorted(range(len(groups)), key=lambda g: (-max(problem.buffers[i].size for i in groups[g]), g))
    for g in order:
        best = None
        fixed = {pinned[i] for i in groups[g] if i in (pinned or {})}
        for k in (sorted(fixed) if fixed else _order(banks)):
            starts = [_lowest_gap(placed[k], problem.buffers[i], problem.alignment) for i in groups[g]]
            end = max(at + problem.buffers[i].size for at, i in zip(starts, groups[g]))
            if end <= banks[k].size:
                best = (0, k, starts)
                break
            if best is None or end - banks[k].size < best[0]:
                best = (end - banks[k].size, k, starts)
        _, k, starts = best
        placed[k].extend((at, problem.buffers[i]) for at, i in zip(starts, groups[g]))
        assign[g] = k
    return assign


def _lowest_gap(placed, buffer, alignment: int) -> int:
    """The lowest aligned offset where ``buffer`` meets none of the placed buffers live with it."""
    spans = sorted((o, o + b.size) for o, b in placed if b.first <= buffer.last and buffer.first <= b.last)
    at = 0
    for lo, hi in spans:
        if at + buffer.size <= lo:
            break
        at = max(at, align(hi, alignment))
    return at


def hill_climb(packer: _Packer, groups, weights, start: list[int], pinned=None, rounds: int = 20) -> list[int]:
    """From ``start``, move single buffers (largest first) to another bank while that lowers
    (bytes live beyond the banks' sizes, access cost): the live bytes per op stand in for each
    bank's packing, which is planned once at the end."""
    import numpy as np
    problem, banks = packer.problem, packer.banks
    n_ops = 1 + max((s[1] for b in problem.buffers for s in b.segments()), default=0)
    height = []
    for members in groups:
        h = np.zeros(n_ops, np.int64)
        for i in members:
            for first, last, size in problem.buffers[i].segments():
                h[first:last + 1] += size
        height.append(h)
    live = np.zeros((len(banks), n_ops), np.int64)
    for g, k in enumerate(start):
        live[k] += height[g]
    caps = np.array([b.size for b in banks], np.int64)

    def over(k) -> int:
        return max(0, int(live[k].max()) - int(caps[k]))
    assign = list(start)
    weight = [sum(weights[i] for i in members) for members in groups]
    order = sorted((g for g in range(len(groups)) if not any(i in (pinned or {}) for i in groups[g])),
                   key=lambda g: (-int(height[g].max()), g))
    for _ in range(rounds):
        improved = False
        for g in order:
            a = assign[g]
            for k in _order(banks):
                if k == a:
                    continue
                before = (over(a) + over(k), weight[g] * banks[a].cost)
                live[a] -= height[g]
                live[k] += height[g]
                after = (over(a) + over(k), weight[g] * banks[k].cost)
                if after < before:
                    assign[g], a, improved = k, k, True
                else:
                    live[k] -= height[g]
                    live[a] += height[g]
        if not improved:
            break
    return assign


def cpsat_assign(problem: ArenaProblem, banks, groups, weights, config: SolverConfig, caps: list[int],
                 hint: list[int], pinned=None):
    """(assignment, proven least cost, status) whose bytes live at every op fit ``caps``, at the
    least cost; None when CP-SAT finds none."""
    from ortools.sat.python import cp_model
    from . import cpsat
    m = cp_model.CpModel()
    x = [[m.new_bool_var(f"x{g}_{k}") for k in range(len(banks))] for g in range(len(groups))]
    for g, row in enumerate(x):
        m.add_exactly_one(row)
        for i in groups[g]:
            if i in (pinned or {}):
                m.add(row[pinned[i]] == 1)
        for k, v in enumerate(row):
            m.add_hint(v, hint[g] == k)
    # bytes live per op in each bank: its buffers' heights, less what an overlap pair saves when
    # both of its buffers are there (its footprint instead of the two sizes)
    group_of = {b: g for g, members in enumerate(groups) for b in members}
    both = {}
    for i, p in enumerate(problem.pairs):
        ga, gb = group_of[p.earlier], group_of[p.later]
        if ga != gb:
            for k in range(len(banks)):
                y = m.new_bool_var(f"pair{i}_{k}")
                m.add_implication(y, x[ga][k])
                m.add_implication(y, x[gb][k])
                both[i, k] = y
    times = sorted({s[0] for b in problem.buffers for s in b.segments()})
    for t in times:
        heights = []
        for g, members in enumerate(groups):
            h = sum(s[2] for b in members for s in problem.buffers[b].segments() if s[0] <= t <= s[1])
            if h:
                heights.append((g, h))
        savings = []
        for i, p in enumerate(problem.pairs):
            a, b = problem.buffers[p.earlier], problem.buffers[p.later]
            if b.first <= t <= a.last and (i, 0) in both:
                saved = a.size + b.size - pair_footprint(problem.window(p), a.size, b.size, problem.rise(p))
                if saved > 0:
                    savings.append((i, saved))
        for k in range(len(banks)):
            if sum(h for _, h in heights) > caps[k]:
                m.add(sum(h * x[g][k] for g, h in heights) - sum(sv * both[i, k] for i, sv in savings) <= caps[k])
    scale = 1000  # costs are relative: three decimals kept as integers
    m.minimize(sum(int(round(sum(weights[b] for b in groups[g]) * banks[k].cost * scale)) * x[g][k]
                   for g in range(len(groups)) for k in range(len(banks))))
    solver = cpsat.new_solver(config.time_limit_s, 1, config.seed)  # one worker: interleaved workers abort on some of these models (an OR-Tools check)
    status = cpsat.solve(solver, m, what="bank assignment")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    assign = [next(k for k in range(len(banks)) if solver.value(x[g][k])) for g in range(len(groups))]
    return assign, solver.best_objective_bound / scale, "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE"


def plan_banks(problem: ArenaProblem, banks: tuple[Bank, ...], method: str = "cpsat",
               config: SolverConfig = SolverConfig(), weights: list[float] | None = None,
               pinned: dict[int, int] | None = None) -> BankPlan:
    """Every buffer in one bank and at an offset inside it, each bank checked. ``weights``: per
    buffer, the bytes its layers move (default its size); ``pinned``: buffer -> the bank it must
    go to (a camera's frame buffer in its own RAM)."""
    pinned = dict(pinned or {})
    started = time.perf_counter()
    weights = list(weights) if weights is not None else [b.size for b in problem.buffers]
    groups = units(problem)
    packer = _Packer(problem, banks, "first-fit" if method in ("cpsat", "hill-climb") else method, config)
    greedy = greedy_assign(packer, groups, pinned)
    candidates = [(_score(packer, greedy, groups, weights), packer.method, greedy)]
    bound, status = None, None
    if method in ("cpsat", "hill-climb"):  # hill-climb: the baseline the CP-SAT assignment is measured against
        climbed = hill_climb(packer, groups, weights, greedy, pinned)
        candidates.append((_score(packer, climbed, groups, weights), "hill-climb", climbed))
    exact = _Packer(problem, banks, "cpsat", config)  # each bank's offsets by the CP-SAT arena planner
    if method == "cpsat":
        caps = [b.size for b in banks]
        for _ in range(4):  # a bank the relaxation fits but its planner does not: lower its capacity
            found = cpsat_assign(problem, banks, groups, weights, config, caps, min(candidates)[2], pinned)
            if found is None:
                break
            assign, bound, status = found
            members = _members(assign, groups, len(banks))
            over = [max(0, exact.used(k, m) - b.size) for k, (b, m) in enumerate(zip(banks, members))]
            candidates.append(((sum(over), _cost(assign, groups, weights, banks)), "cpsat", assign))
            if not any(over):
                break
            caps = [c - align(o, problem.alignment) for c, o in zip(caps, over)]
    (over, cost), chosen, assign = min(candidates, key=lambda c: (c[0], c[1] != "cpsat"))
    members = _members(assign, groups, len(banks))
    packing = exact if method == "cpsat" else packer
    plans = tuple(packing.pack(k, m) for k, m in enumerate(members))
    offsets = [0] * len(problem.buffers)
    bank_of = [0] * len(problem.buffers)
    for k, (m, p) in enumerate(zip(members, plans)):
        for b, o in zip(sorted(m), p.offsets):  # a bank's plan lists its buffers in index order
            offsets[b], bank_of[b] = o, k
    used = tuple(p.peak for p in plans)
    fits = all(u <= b.size for u, b in zip(used, banks))
    cost = _cost(assign, groups, weights, banks)
    least = bound if chosen == "cpsat" and bound is not None else cost
    result = BankPlan(tuple(banks), tuple(bank_of), tuple(offsets), used, cost, min(least, cost), chosen,
                      ("OPTIMAL" if chosen == "cpsat" and status == "OPTIMAL" else "FEASIBLE") if fits else "INFEASIBLE",
                      plans, time.perf_counter() - started)
    check_banks(problem, result)
    return result


def check_banks(problem: ArenaProblem, plan: BankPlan) -> None:
    """Raise PlanError unless every buffer lies in one bank and each bank's buffers pass the arena
    check on their own (an overlap pair shares bytes only inside one bank)."""
    for k, bank in enumerate(plan.banks):
        members = [i for i, a in enumerate(plan.assign) if a == k]
        sub = subproblem(problem, members, None)
        end = check_plan(sub.buffers, [plan.offsets[i] for i in members], problem.alignment, None, sub.pairs)
        if end > plan.used[k]:
            raise PlanError(f"bank {bank.name}: its plan spans {end} bytes, beyond the {plan.used[k]} recorded")
