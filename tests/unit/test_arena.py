"""solver.arena (planner, lower bound, independent checker) and network_parser.lifetimes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer.pipeline import arena_problem
from network_parser.lifetimes import lifetimes
from tests.tflite_builder import ModelBuilder
from network_parser.tflite_reader import read_tflite
from solver.arena import (GREEDY, ArenaProblem, Buffer, PlanError, align, lower_bound, overlaps_in_time,
                          plan_arena)
from solver.arena import check_plan as _check_plan


def problem(*specs, alignment=16) -> ArenaProblem:
    """specs: (size, first, last) triples."""
    return ArenaProblem(tuple(Buffer(f"b{i}", s, f, l) for i, (s, f, l) in enumerate(specs)), alignment)


def check_plan(p: ArenaProblem, offsets, arena_bytes=None) -> int:
    """The independent checker on a whole problem: bytes spanned by the plan."""
    return _check_plan(p.buffers, list(offsets), p.alignment, arena_bytes)


# ---- check_plan --------------------------------------------------------------------------

def test_check_plan_rejects_overlap_in_bytes_and_time():
    p = problem((32, 0, 2), (32, 1, 3))
    with pytest.raises(PlanError, match=r"b0 \[0, 32\) and b1 \[16, 48\).*live at op 1"):
        check_plan(p, [0, 16])


def test_check_plan_allows_same_bytes_at_different_times():
    p = problem((32, 0, 1), (32, 2, 3))
    assert check_plan(p, [0, 0]) == 32


def test_check_plan_allows_adjacent_bytes():
    p = problem((20, 0, 3), (16, 0, 3))
    assert check_plan(p, [0, 32]) == 48  # [0, 20) and [32, 48)


@pytest.mark.parametrize("offsets", [[0, 8], [0, -16], [4, 64]])
def test_check_plan_rejects_misaligned_or_negative_offsets(offsets):
    with pytest.raises(PlanError, match="aligned"):
        check_plan(problem((16, 0, 0), (16, 0, 0)), offsets)


def test_check_plan_rejects_wrong_count():
    with pytest.raises(PlanError, match="offsets"):
        check_plan(problem((16, 0, 0), (16, 0, 0)), [0])


def test_check_plan_rejects_plan_beyond_arena():
    p = problem((32, 0, 0), (32, 0, 0))
    assert check_plan(p, [0, 32], arena_bytes=64) == 64
    with pytest.raises(PlanError, match="beyond"):
        check_plan(p, [0, 48], arena_bytes=64)


def test_peak_is_aligned():
    assert check_plan(problem((10, 0, 0)), [0]) == 10
    assert plan_arena(problem((10, 0, 0), alignment=16)).peak == 16
    assert plan_arena(problem((10, 0, 0), alignment=4)).peak == 12


# ---- known small examples ----------------------------------------------------------------

def test_chain_exact_peak():
    """a(0..1) -> b(1..2) -> c(2..3): two live at a time; first-fit reuses a's slot for c."""
    p = problem((100, 0, 1), (60, 1, 2), (100, 2, 3))
    plan = plan_arena(p, "first-fit")
    assert plan.offsets == (0, 112, 0)
    assert plan.peak == 176 == plan.lower_bound and plan.status == "OPTIMAL" and plan.method == "first-fit"


def test_first_fit_reuses_dead_slot():
    """A buffer born after another died takes its bytes."""
    p = problem((64, 0, 3), (32, 0, 0), (64, 0, 3), (16, 1, 2))
    plan = plan_arena(p, "first-fit")
    assert plan.offsets == (0, 128, 64, 128)
    assert plan.peak == 160 and lower_bound(p) == 160


def test_bound_is_tight_on_known_instance():
    """A hand plan reaches the bound (96); the planner's plan is valid and never below it."""
    p = problem((48, 0, 1), (32, 1, 2), (32, 2, 3), (48, 3, 4), (16, 0, 4))
    assert lower_bound(p) == 96 == check_plan(p, [16, 64, 16, 48, 0])
    for method in GREEDY:
        plan = plan_arena(p, method)
        assert plan.lower_bound == 96 and plan.peak == align(check_plan(p, plan.offsets), 16) >= 96
        assert plan.status == ("OPTIMAL" if plan.peak == 96 else "FEASIBLE")


def test_empty_problem():
    plan = plan_arena(ArenaProblem(()), "first-fit")
    assert plan.offsets == () and plan.peak == 0 == plan.lower_bound


def test_align():
    assert [align(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 16, 16, 32, 32]


# ---- random problems -----------------------------------------------------------------------

@st.composite
def problems(draw):
    n_ops = draw(st.integers(1, 12))
    specs = []
    for _ in range(draw(st.integers(0, 14))):
        first = draw(st.integers(0, n_ops - 1))
        specs.append((draw(st.integers(1, 600)), first, draw(st.integers(first, n_ops - 1))))
    return problem(*specs, alignment=draw(st.sampled_from([1, 4, 16])))


@settings(max_examples=100, deadline=None)
@given(p=problems(), method=st.sampled_from(sorted(GREEDY)))
def test_greedy_plans_are_valid_and_bounded(p, method):
    """first-fit (and the other greedy planners): valid, aligned peak, never below the bound."""
    plan = plan_arena(p, method)
    assert plan.method == method
    assert align(check_plan(p, plan.offsets), p.alignment) == plan.peak
    assert plan.lower_bound == lower_bound(p) <= plan.peak
    assert plan.peak <= sum(align(b.size, p.alignment) for b in p.buffers)
    assert plan.status == ("OPTIMAL" if plan.peak == plan.lower_bound else "FEASIBLE")
    # independent re-check of the checker's invariant
    for i, (a, oa) in enumerate(zip(p.buffers, plan.offsets)):
        for b, ob in zip(p.buffers[:i], plan.offsets):
            if overlaps_in_time(a, b):
                assert oa + a.size <= ob or ob + b.size <= oa


@settings(max_examples=50, deadline=None)
@given(p=problems())
def test_disjoint_lifetimes_bound_is_largest_buffer(p):
    """Sequential buffers (no two live together): bound and first-fit peak are the largest one."""
    seq = ArenaProblem(tuple(Buffer(b.name, b.size, i, i) for i, b in enumerate(p.buffers)), p.alignment)
    top = max((align(b.size, p.alignment) for b in seq.buffers), default=0)
    assert lower_bound(seq) == top == plan_arena(seq, "first-fit").peak


# ---- lifetimes on a builder graph -----------------------------------------------------------
# Graphs of CONV_2D / FULLY_CONNECTED around the reshapes, so that zero-copy RESHAPE/SQUEEZE are
# the only ops whose output may reuse an input's bytes.

@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """x -> conv (op 0) -> reshape (op 1) -> FC (op 2, output); x -> 1x1 conv (op 3, output)."""
    mb = ModelBuilder(5)
    x = mb.input((1, 6, 6, 2))
    f = mb.fully_connected(mb.reshape(mb.conv2d(x, 4, stride=2), (1, -1)), 5)
    mb.output(f, mb.conv2d(x, 3, kernel=1))
    path = tmp_path_factory.mktemp("lifetimes") / "m.tflite"
    mb.save(path)
    return read_tflite(path)


def test_lifetimes(graph):
    lives = {lt.name: lt for lt in lifetimes(graph)}
    assert [layer.op for layer in graph.layers] == ["CONV_2D", "RESHAPE", "FULLY_CONNECTED", "CONV_2D"]
    assert set(lives) == {graph.tensors[t].name for t in graph.activations()}
    x = lives["input_0"]
    assert (x.first_op, x.last_op) == (0, 3)  # inputs start at op 0; read last by op 3
    for t in graph.outputs:  # outputs live to the last op
        assert lives[graph.tensors[t].name].last_op == 3
    assert (lives["fully_connected_0/out"].first_op, lives["conv2d_1/out"].first_op) == (2, 3)
    for lt in lives.values():
        assert lt.size == graph.tensors[lt.tensor].nbytes and not graph.tensors[lt.tensor].is_const


def owner_span(lives, owner: int) -> tuple[int, int]:
    """[first, last] op of the arena buffer that holds `owner`'s bytes (and its aliases')."""
    p, owners = arena_problem(lives, 16)
    b = p.buffers[owners.index(owner)]
    return b.first, b.last


def test_reshape_aliases_and_owner_covers_alias(graph):
    lives = {lt.name: lt for lt in lifetimes(graph)}
    conv, reshape = lives["conv2d_0/out"], lives["reshape_0/out"]
    assert reshape.alias_of == conv.tensor and conv.alias_of is None
    assert [name for name, lt in lives.items() if lt.alias_of is not None] == ["reshape_0/out"]
    assert (reshape.first_op, reshape.last_op) in ((1, 2), (0, 2))  # own span, or the owner's
    # the reshape output is read by FC at op 2, so the owner's bytes must live until then
    assert owner_span(list(lives.values()), conv.tensor) == (0, 2)


def test_arena_problem_skips_aliases(graph):
    lives = lifetimes(graph)
    p, owners = arena_problem(lives, 16)
    reshape = next(lt.tensor for lt in lives if lt.name == "reshape_0/out")
    assert len(p.buffers) == len(owners) == len(lives) - 1 and reshape not in owners
    plan = plan_arena(p, "first-fit")
    assert align(check_plan(p, plan.offsets), 16) == plan.peak >= plan.lower_bound


def test_alias_chain_resolves_to_root(tmp_path):
    """A squeeze of a reshape aliases the conv output that owns the bytes, not the reshape."""
    mb = ModelBuilder(1)
    c = mb.conv2d(mb.input((1, 2, 2, 4)), 4, kernel=1)
    mb.output(mb.fully_connected(mb.squeeze(mb.reshape(c, (1, 1, 16)), (1,)), 3))
    mb.save(tmp_path / "m.tflite")
    g = read_tflite(tmp_path / "m.tflite")
    lives = {lt.name: lt for lt in lifetimes(g)}
    owner = g.layers[0].outputs[0]
    assert lives["reshape_0/out"].alias_of == owner == lives["squeeze_0/out"].alias_of
    assert owner_span(list(lives.values()), owner) == (0, 3)  # FC (op 3) reads the squeeze output
