"""The CP-SAT arena planner: bounds, soundness, decision mode, fallback, the alloc-bench reader."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver import arena_cpsat
from solver.alloc_bench import read_alloc_bench
from solver.arena import (
    GREEDY,
    ArenaProblem,
    Buffer,
    SolverConfig,
    lower_bound,
    plan_arena,
)
from solver.arena_types import overlaps_in_time
from solver.plan_checker import PlanError, check_plan
from tests.models import ALLOC_BENCH

FAST = SolverConfig(time_limit_s=2.0, workers=2, seed=0)

# A small problem no greedy planner solves optimally (greedy 256 bytes, optimum 240).
HARD = ArenaProblem((Buffer("t0", 48, 5, 5), Buffer("t1", 64, 5, 5), Buffer("t2", 48, 3, 5),
                     Buffer("t3", 32, 2, 3), Buffer("t4", 80, 0, 4), Buffer("t5", 64, 1, 3),
                     Buffer("t6", 80, 4, 6)), alignment=16)


@st.composite
def problems(draw, max_buffers: int = 12):
    alignment = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(1, max_buffers))
    horizon = draw(st.integers(1, 8))
    scale = draw(st.sampled_from([1, 8, 24]))
    buffers = []
    for i in range(n):
        first = draw(st.integers(0, horizon))
        last = draw(st.integers(first, horizon))
        size = draw(st.integers(0, 12)) * scale
        buffers.append(Buffer(f"t{i}", size, first, last))
    return ArenaProblem(tuple(buffers), alignment=alignment)


@st.composite
def packings(draw, max_cuts: int = 10):
    """A perfect packing cut from a (time x bytes) rectangle: optimum = bound, greedy often misses it."""
    unit = draw(st.sampled_from([1, 16]))
    pieces = [(0, draw(st.integers(2, 8)), 0, draw(st.integers(2, 12)))]  # (t0, t1, y0, y1)
    for _ in range(draw(st.integers(1, max_cuts))):
        k = draw(st.integers(0, len(pieces) - 1))
        t0, t1, y0, y1 = pieces[k]
        if draw(st.booleans()) and t1 - t0 > 1:
            cut = draw(st.integers(t0 + 1, t1 - 1))
            pieces[k:k + 1] = [(t0, cut, y0, y1), (cut, t1, y0, y1)]
        elif y1 - y0 > 1:
            cut = draw(st.integers(y0 + 1, y1 - 1))
            pieces[k:k + 1] = [(t0, t1, y0, cut), (t0, t1, cut, y1)]
    order = draw(st.permutations(range(len(pieces))))
    return ArenaProblem(tuple(Buffer(f"p{i}", (pieces[i][3] - pieces[i][2]) * unit * 8, pieces[i][0],
                                     pieces[i][1] - 1) for i in order), alignment=unit)


def greedy_peaks(problem):
    return {m: plan_arena(problem, m).peak for m in GREEDY}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), packings()))
def test_cpsat_between_bound_and_every_greedy_plan(problem):
    plan = plan_arena(problem, "cpsat", FAST)
    assert plan.method == "cpsat"
    assert check_plan(problem.buffers, plan.offsets, problem.alignment, plan.peak) <= plan.peak
    assert plan.peak >= plan.lower_bound >= lower_bound(problem)
    assert all(plan.peak <= peak for peak in greedy_peaks(problem).values())
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert (plan.status == "OPTIMAL") == (plan.peak == plan.lower_bound)
    # Seeded with the weakest greedy plan only, the solver itself must do the work.
    weak = plan_arena(problem, "bidirectional")
    solved = arena_cpsat.plan_cpsat(problem, FAST, {"bidirectional": weak})
    check_plan(problem.buffers, solved.offsets, problem.alignment, solved.peak)
    assert lower_bound(problem) <= solved.lower_bound <= solved.peak <= weak.peak
    if solved.status == "OPTIMAL" and plan.status == "OPTIMAL":
        assert solved.peak == plan.peak


def test_hard_instance_beats_greedy_and_is_optimal():
    plan = plan_arena(HARD, "cpsat", FAST)
    assert min(greedy_peaks(HARD).values()) == 256
    assert (plan.peak, plan.lower_bound, plan.status) == (240, 240, "OPTIMAL")


def test_deterministic():
    a = plan_arena(HARD, "cpsat", FAST)
    b = plan_arena(HARD, "cpsat", FAST)
    assert a.offsets == b.offsets


@settings(max_examples=15, deadline=None)
@given(st.one_of(problems(max_buffers=8), packings()))
def test_decision_mode_fits_at_the_best_greedy_peak(problem):
    capacity = min(greedy_peaks(problem).values())
    plan = plan_arena(dataclasses.replace(problem, capacity=capacity), "cpsat", FAST)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    check_plan(problem.buffers, plan.offsets, problem.alignment, capacity)


@settings(max_examples=15, deadline=None)
@given(problems(max_buffers=8))
def test_decision_mode_infeasible_below_the_max_live_bound(problem):
    bound = lower_bound(problem)
    if bound == 0:
        return
    plan = plan_arena(dataclasses.replace(problem, capacity=bound - 1), "cpsat", FAST)
    assert plan.status == "INFEASIBLE"
    assert plan.lower_bound >= bound and plan.note


def test_decision_mode_fits_at_the_optimum_of_a_hard_instance():
    plan = plan_arena(dataclasses.replace(HARD, capacity=240), "cpsat", FAST)
    assert plan.peak == 240 and plan.status == "OPTIMAL"
    proof = plan_arena(dataclasses.replace(HARD, capacity=239), "cpsat", FAST)
    assert proof.status == "INFEASIBLE" and proof.lower_bound >= 240  # proven by CP-SAT, not max-live


def test_capacity_mode_fits_first_then_minimises():
    """Greedy needs 256 bytes: under a capacity of 250 the decision phase finds a plan within it,
    and the time left lowers the peak to the optimum."""
    plan = plan_arena(dataclasses.replace(HARD, capacity=250), "cpsat", FAST)
    check_plan(HARD.buffers, plan.offsets, HARD.alignment, 250)
    assert (plan.peak, plan.lower_bound, plan.status) == (240, 240, "OPTIMAL")


def test_capacity_mode_is_deterministic():
    problem = dataclasses.replace(HARD, capacity=240)
    a, b = plan_arena(problem, "cpsat", FAST), plan_arena(problem, "cpsat", FAST)
    assert a.offsets == b.offsets and a.peak == b.peak == 240


def test_capacity_the_greedy_plan_meets_is_kept_without_a_warning():
    """A greedy plan already within the capacity is a decision made: no fallback warning, and the
    plan is never worse than it."""
    import warnings
    problem = dataclasses.replace(HARD, capacity=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = plan_arena(problem, "cpsat", FAST)
    assert plan.status in ("OPTIMAL", "FEASIBLE") and plan.peak <= 256
    check_plan(HARD.buffers, plan.offsets, HARD.alignment, 300)


@settings(max_examples=10, deadline=None)
@given(packings(max_cuts=14))
def test_fits_packs_a_perfect_packing_at_its_bound(problem):
    """A rectangle cut into pieces: the decision portfolio fits them back at the max-live bound,
    the same offsets every time."""
    unit = arena_cpsat._unit(problem)
    items = arena_cpsat._items(problem, unit)
    bound = arena_cpsat.max_live(items)
    runs = [arena_cpsat.fits(items, bound, FAST, FAST.time_limit_s) for _ in range(2)]
    assert runs[0].offsets is not None and runs[0].offsets == runs[1].offsets
    offsets = [0] * len(problem.buffers)
    for it, o in zip(items, runs[0].offsets):
        offsets[it.index] = o * unit
    check_plan(problem.buffers, offsets, problem.alignment, bound * unit)
    assert 0 <= runs[0].spent_s <= FAST.time_limit_s


def test_fits_proves_a_capacity_below_the_bound_infeasible():
    items = arena_cpsat._items(HARD, arena_cpsat._unit(HARD))
    res = arena_cpsat.fits(items, 239 // 16, FAST, FAST.time_limit_s)
    assert res.status == "INFEASIBLE" and res.offsets is None


def test_portfolio_shares_the_limit_between_its_searches():
    for workers in (1, 2, 4):
        runs = arena_cpsat.portfolio(10.0, workers)
        side = min(workers, len(arena_cpsat.MAIN_ORDERS))
        assert [o for o, _ in runs] == [*arena_cpsat.PROBE_ORDERS, *arena_cpsat.MAIN_ORDERS]
        assert sum(s for _, s in runs) == pytest.approx(10.0 * side)
        assert all(s > 0 for _, s in runs) and all(o in arena_cpsat.ORDERS for o, _ in runs)
    assert all(s == 0 for _, s in arena_cpsat.portfolio(0.0, 2))


def test_crowding_is_the_busiest_cross_section_of_each_life():
    items = [arena_cpsat.Item(0, 4, 0, 2), arena_cpsat.Item(1, 3, 1, 4), arena_cpsat.Item(2, 5, 3, 5)]
    assert arena_cpsat.crowding(items) == [7, 8, 8]  # ops 0-1: 4, 7; ops 1-3: 7, 3, 8; ops 3-4: 8, 5


def test_fallback_when_the_solver_raises(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("solver exploded")
    monkeypatch.setattr(arena_cpsat, "solve", broken)
    with pytest.warns(RuntimeWarning, match="solver exploded"):
        plan = plan_arena(HARD, "cpsat", FAST)
    assert plan.status == "FALLBACK" and "solver exploded" in plan.note
    assert plan.peak == min(greedy_peaks(HARD).values())


def test_fallback_with_no_time():
    with pytest.warns(RuntimeWarning):
        plan = plan_arena(HARD, "cpsat", SolverConfig(time_limit_s=0.0, workers=2, seed=0))
    assert plan.status == "FALLBACK" and plan.peak == 256 and plan.note


def test_greedy_already_optimal_skips_the_solver():
    problem = ArenaProblem((Buffer("a", 32, 0, 1), Buffer("b", 16, 1, 2)), alignment=16)
    plan = plan_arena(problem, "cpsat", FAST)
    assert (plan.peak, plan.status, plan.method) == (48, "OPTIMAL", "cpsat")


# --------------------------------------------------------------------------- the checker on real plans

def _overlapping_pair(problem):
    n = len(problem.buffers)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = problem.buffers[i], problem.buffers[j]
            if a.size and b.size and overlaps_in_time(a, b):
                return i, j
    return None


@settings(max_examples=20, deadline=None)
@given(st.one_of(problems(), packings()))
def test_checker_catches_planted_overlap(problem):
    plan = plan_arena(problem, "cpsat", FAST)
    pair = _overlapping_pair(problem)
    if pair is None:
        return
    i, j = pair
    mutated = list(plan.offsets)
    mutated[j] = mutated[i]
    with pytest.raises(PlanError, match="overlap"):
        check_plan(problem.buffers, mutated, problem.alignment)


def test_checker_catches_misalignment_and_overflow():
    plan = plan_arena(HARD, "cpsat", FAST)
    for k in range(len(HARD.buffers)):
        mutated = list(plan.offsets)
        mutated[k] += 8
        with pytest.raises(PlanError, match="aligned"):
            check_plan(HARD.buffers, mutated, HARD.alignment)
    with pytest.raises(PlanError, match="beyond"):
        check_plan(HARD.buffers, plan.offsets, HARD.alignment, plan.peak - 16)


# --------------------------------------------------------------------------- the alloc-bench reader

@pytest.mark.skipif(not ALLOC_BENCH.is_dir(), reason="the alloc-bench instances are absent")
def test_reader_on_a_real_instance():
    problem = read_alloc_bench(ALLOC_BENCH / "A.1048576.csv")
    assert len(problem.buffers) == 154 and problem.alignment == 1 and problem.capacity == 1048576
    first = problem.buffers[0]
    assert (first.name, first.first, first.last, first.size) == ("0", 995328, 1000447, 656384)
    assert lower_bound(problem) == 1048576
    plan = plan_arena(problem, "cpsat", SolverConfig(time_limit_s=10.0, workers=2, seed=0))
    assert plan.status == "OPTIMAL" and plan.peak == 1048576  # decision mode at the capacity


@pytest.mark.skipif(not ALLOC_BENCH.is_dir(), reason="the alloc-bench instances are absent")
@pytest.mark.parametrize("name", ["E", "H"])
def test_decision_phase_fits_instances_no_single_order_solves_quickly(name):
    """E and H: the bottom-up search under one tie-break order runs long on one of them, another
    order fits it at once; the portfolio fits both at their capacity (= their max-live bound)."""
    problem = read_alloc_bench(ALLOC_BENCH / f"{name}.1048576.csv")
    plan = plan_arena(problem, "cpsat", SolverConfig(time_limit_s=10.0, workers=2, seed=0))
    assert (plan.peak, plan.status) == (1048576, "OPTIMAL")
    check_plan(problem.buffers, plan.offsets, problem.alignment, problem.capacity)


def test_reader_rejects_malformed_files(tmp_path):
    good = tmp_path / "x.100.csv"
    good.write_text("id,lower,upper,size\n0,0,4,10\n1,2,6,20\n")
    problem = read_alloc_bench(good)
    assert problem.capacity == 100 and problem.buffers[1] == Buffer("1", 20, 2, 5)
    assert read_alloc_bench(_write(tmp_path, "plain.csv", "id,lower,upper,size\n0,0,1,1\n")).capacity is None
    cases = {"id,lower,upper,size\n0,0,4,10\n1,2,x,20\n": ":3:",
             "id,lower,upper,size\n0,0,4\n": ":2:",
             "id,lower,upper,size\n0,5,5,10\n": ":2:",
             "id,start,end,size\n0,0,4,10\n": ":1:"}
    for n, (text, where) in enumerate(cases.items()):
        with pytest.raises(ValueError, match=where):
            read_alloc_bench(_write(tmp_path, f"bad{n}.csv", text))


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path
