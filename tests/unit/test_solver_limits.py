"""Every solver stage keeps --time-limit, and the same model and flags give the same files on
any machine: the fused-stage search (exact, by counts), CP-SAT on
deterministic time with the wall clock only as a watchdog, and the plan checker as a sweep
(against a brute-force reference, and at a scale a pairwise or per-op checker never finishes)."""
from __future__ import annotations

import re
import subprocess
import sys
import time
import types
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import progress
from solver.fusion import candidates, cheapest, estimated_peak, plan_fusion
from solver.patch_split import plan_stages
from deployer.pipeline import Options, deploy
from solver.l3_placement import data_inputs
from layer_analyzer.receptive_field import Stages, axis_extents, axis_plan
from network_parser.lifetimes import Lifetime, live_bytes_per_op
from tests.tflite_builder import ModelBuilder
from solver import arena_cpsat, cpsat
from solver.arena import ArenaProblem, Buffer, SolverConfig, align, lower_bound, plan_arena
from solver.plan_checker import PlanError, check_plan, check_tensor_plan

ROOT = Path(__file__).resolve().parents[2]


# ---- the patch split on a long chain -------------------------------------------------------

def pool_chain(path: Path, n: int) -> Path:
    """n 1x1 MAX_POOL_2D ops in a row: every op can end a patch stage."""
    mb = ModelBuilder(1)
    x = mb.input((1, 16, 16, 8))
    for _ in range(n):
        x = mb.max_pool(x, filter=(1, 1), stride=(1, 1))
    mb.output(x)
    mb.save(path)
    return path


def shrinking_chain(path: Path, n: int) -> Path:
    """Convolutions whose outputs shrink op by op: the live bytes fall after every op, so every
    stage end has a floor below the unsplit peak and the split search must weigh them all."""
    mb = ModelBuilder(2)
    x = mb.conv2d(mb.input((1, 12, 12, 1)), 24, kernel=(1, 1))
    for k in range(n):
        x = mb.conv2d(x, max(1, 24 - k * 23 // n), kernel=(3, 3) if k % 5 == 0 else (1, 1))
    mb.output(x)
    mb.save(path)
    return path


def stem_model(path: Path) -> Path:
    """A first stage that dominates memory, with a residual ADD (a tensor two ops read)."""
    mb = ModelBuilder(5)
    x = mb.conv2d(mb.input((1, 32, 32, 3)), 8, activation="RELU")
    x = mb.add(x, mb.depthwise_conv2d(x, activation="RELU"))
    x = mb.conv2d(x, 16, stride=(2, 2), activation="RELU")
    x = mb.depthwise_conv2d(x, stride=(2, 2))
    x = mb.avg_pool(x, filter=(8, 8), stride=(8, 8))
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), 4))
    mb.save(path)
    return path


def run_deploy(model: Path, out: Path) -> subprocess.CompletedProcess:
    """``deploy MODEL -o OUT --time-limit 1``; a regression fails the test (timeout), never hangs it."""
    return subprocess.run([sys.executable, "-m", "deployer.cli", str(model), "-o", str(out), "--time-limit", "1",
                           "-q"], cwd=ROOT, capture_output=True, text=True, timeout=120)


def folder(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_thousand_op_chain_deploys_and_twice_gives_the_same_files(tmp_path):
    model = pool_chain(tmp_path / "chain.tflite", 1000)
    first, second = run_deploy(model, tmp_path / "a"), run_deploy(model, tmp_path / "b")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    a, b = folder(tmp_path / "a"), folder(tmp_path / "b")
    assert "manifest.json" in a and a == b


@pytest.fixture(scope="module")
def shrinking(tmp_path_factory):
    path = shrinking_chain(tmp_path_factory.mktemp("limits") / "shrinking.tflite", 60)
    return deploy(path, Options(planner="first-fit", patch="off"))


def test_the_stage_search_is_exact_and_deterministic(shrinking):
    """The stages are chosen by counts, never the clock: the same choice every time."""
    dep = shrinking
    profile = fusion_profile(dep)
    first = plan_stages(dep.graph, dep.kernels, dep.lives, profile, 16, 0.2, None)[0]
    again = plan_stages(dep.graph, dep.kernels, dep.lives, profile, 16, 0.2, None)[0]
    assert replace(first, wall_s=0) == replace(again, wall_s=0) and first.peak <= max(profile)


def test_the_stage_search_reports_its_progress(shrinking):
    dep = shrinking
    seen: list[progress.Step] = []

    class Record(progress.Silent):
        def finish(self, step):
            seen.append(step)

    with progress.reporting(Record()):
        plan_stages(dep.graph, dep.kernels, dep.lives, fusion_profile(dep), 16, 0.2, None)
    step = {s.name: s for s in seen}["fused stages: candidates"]
    assert step.total == len(dep.graph.layers) and step.done == step.total


@pytest.fixture(scope="module")
def stem(tmp_path_factory):
    path = stem_model(tmp_path_factory.mktemp("limits") / "stem.tflite")
    return deploy(path, Options(planner="first-fit", patch="off"))


def fusion_profile(dep) -> list[int]:
    return live_bytes_per_op(dep.lives, len(dep.graph.layers))


def every_plan(profile, stages):
    """Every set of disjoint stage options (each stage on each of its grids): (MACs, count, peak)."""
    options = sorted((o for c in stages for o in c.options), key=lambda o: (o.start, o.end, o.grid))

    def grow(i, last_end, path):
        yield path
        for j in range(i, len(options)):
            if options[j].start > last_end:
                yield from grow(j + 1, options[j].end, (*path, options[j]))
    for path in grow(0, -1, ()):
        yield sum(o.macs_extra for o in path), len(path), estimated_peak(profile, path)


def test_the_dynamic_program_finds_what_every_stage_set_gives(stem):
    """The least recomputed MACs within each byte target, and the least peak within each MAC
    budget, are those of an exhaustive walk over every set of disjoint stages on every grid."""
    dep = stem
    profile = fusion_profile(dep)
    stages = candidates(dep.graph, dep.kernels, dep.lives, data_inputs, 16, max_parts=4)
    assert len(stages) > 3
    plans = list(every_plan(profile, stages))
    for target in sorted({p for _, _, p in plans}):
        found = cheapest(profile, stages, target)
        best = min(((m, n) for m, n, p in plans if p <= target), default=None)
        assert (found and (found[0], len(found[1]))) == (best and best), target
        assert found is None or estimated_peak(profile, found[1]) <= target
    macs = max(dep.macs, 1)
    for overhead in (0.0, 0.02, 0.2, 1.0):
        choice = plan_fusion(profile, stages, macs, overhead, None)
        least = min(p for m, _, p in plans if m <= int(overhead * macs))
        assert choice.peak == least and choice.macs_extra <= int(overhead * macs), overhead


def test_stage_tables_are_the_receptive_fields_patch_by_patch(stem):
    """One backward walk for every patch count gives what ``axis_plan`` gives count by count."""
    dep = stem
    found = Stages(dep.graph, dep.kernels, data_inputs)
    for end in found.ends:
        stage = found.stage(end.end)
        for axis, extent in (("rows", stage.out_h), ("cols", stage.out_w)):
            want = {}
            for parts in range(1, min(8, extent) + 1):
                plan = axis_plan(stage, parts, axis)
                want.setdefault(plan.parts, ({t: plan.largest(t) for t in stage.patch_tensors},
                                             {t: plan.total(t) for t in stage.patch_tensors}, plan.size))
            assert axis_extents(stage, axis, 8) == want


# ---- CP-SAT: deterministic time, the wall clock as a watchdog -------------------------------

def test_cpsat_stops_on_deterministic_time_in_one_worker():
    s = cpsat.new_solver(2.0).parameters
    assert s.max_deterministic_time == pytest.approx(cpsat.dtime(2.0)) and s.num_workers == 1
    assert not s.interleave_search and s.max_time_in_seconds == pytest.approx(cpsat.watchdog_s(2.0))
    assert cpsat.watchdog_s(2.0) > 2.0
    assert cpsat.new_solver(2.0, workers=2).parameters.interleave_search  # parallel, but deterministic


def _packing(n: int = 300) -> ArenaProblem:
    """Buffers of varied sizes and lifetimes: no solver proves their best packing in a second."""
    import random
    rng = random.Random(7)
    buffers = []
    for i in range(n):
        first = rng.randrange(200)
        buffers.append(Buffer(f"b{i}", rng.randrange(1, 64) * 16, first, first + rng.randrange(1, 40)))
    return ArenaProblem(tuple(buffers), 16)


def test_a_search_the_wall_clock_stops_warns():
    problem = _packing()
    items = arena_cpsat._items(problem, arena_cpsat._unit(problem))
    v = arena_cpsat.build_arena_model(items, upper=sum(it.size for it in items))
    solver = cpsat.new_solver(3600.0)
    with pytest.warns(RuntimeWarning, match="stopped by the wall-clock watchdog; the plan may differ run to run"):
        cpsat.solve(solver, v.model, deadline_s=0.3, what="arena planner")


HARD = ArenaProblem((Buffer("t0", 48, 5, 5), Buffer("t1", 64, 5, 5), Buffer("t2", 48, 3, 5),
                     Buffer("t3", 32, 2, 3), Buffer("t4", 80, 0, 4), Buffer("t5", 64, 1, 3),
                     Buffer("t6", 80, 4, 6)), alignment=16)  # greedy 256 bytes, optimum 240


def test_a_racing_clock_does_not_change_the_arena_plan(monkeypatch):
    """The planner shares its limit by deterministic time: a clock that runs a hundred seconds per
    reading (a machine that crawls) leaves the plan as it is, and nothing warns."""
    config = SolverConfig(time_limit_s=2.0, workers=2, seed=0)
    calm = plan_arena(HARD, "cpsat", config)
    ticks = iter(range(0, 10**9, 100))
    monkeypatch.setattr(arena_cpsat, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks)),
                                                                   monotonic=time.monotonic))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        racing = plan_arena(HARD, "cpsat", config)
    assert (calm.peak, calm.status) == (240, "OPTIMAL")
    assert (racing.offsets, racing.peak, racing.status) == (calm.offsets, calm.peak, calm.status)


# ---- the plan checker: a sweep, against brute force ----------------------------------------

def _rows_collide(a, b) -> bool:
    return (a[1] != b[1] and a[5] > 0 and b[5] > 0 and a[2] <= b[3] and b[2] <= a[3]
            and a[4] < b[4] + b[5] and b[4] < a[4] + a[5])


@st.composite
def tensor_plans(draw):
    rows = []
    for i in range(draw(st.integers(0, 9))):
        first = draw(st.integers(0, 6))
        rows.append((f"t{i}", draw(st.integers(0, 3)), first, first + draw(st.integers(0, 4)),
                     16 * draw(st.integers(0, 6)), 16 * draw(st.integers(0, 3))))
    return rows


@settings(max_examples=400, deadline=None)
@given(rows=tensor_plans())
def test_tensor_checker_agrees_with_every_pair(rows):
    pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if _rows_collide(a, b)]
    if not pairs:
        check_tensor_plan(rows, 256, 16)
        return
    with pytest.raises(PlanError) as e:
        check_tensor_plan(rows, 256, 16)
    m = re.fullmatch(r"tensors (\S+) and (\S+) share bytes from (\d+) while both are live at op (\d+)", str(e.value))
    assert m, str(e.value)
    first_op = min(max(a[2], b[2]) for a, b in pairs)  # the earliest op where two collide
    by_name = {r[0]: r for r in rows}
    a, b, op = by_name[m[1]], by_name[m[2]], int(m[4])
    assert op == first_op and _rows_collide(a, b) and a[2] <= op <= a[3] and b[2] <= op <= b[3]
    assert int(m[3]) == b[4]


@st.composite
def buffer_plans(draw):
    buffers, offsets = [], []
    for i in range(draw(st.integers(0, 8))):
        first = draw(st.integers(0, 6))
        last = first + draw(st.integers(0, 4))
        steps = ()
        if last > first and draw(st.booleans()):
            cut = draw(st.integers(first, last - 1))
            steps = ((first, cut, 16 * draw(st.integers(0, 2))), (cut + 1, last, 16 * draw(st.integers(1, 3))))
        size = max(s[2] for s in steps) if steps else 16 * draw(st.integers(0, 3))
        buffers.append(Buffer(f"b{i}", size, first, last, steps))
        offsets.append(16 * draw(st.integers(0, 6)))
    return buffers, offsets


@settings(max_examples=400, deadline=None)
@given(plan=buffer_plans())
def test_buffer_checker_agrees_with_every_pair(plan):
    buffers, offsets = plan
    pieces = [(b.name, first, last, o, o + size) for b, o in zip(buffers, offsets) for first, last, size in b.segments()
              if size > 0]
    pairs = [(p, q) for i, p in enumerate(pieces) for q in pieces[i + 1:]
             if p[1] <= q[2] and q[1] <= p[2] and p[3] < q[4] and q[3] < p[4]]
    if not pairs:
        assert check_plan(buffers, offsets, 16) == max((o + b.size for b, o in zip(buffers, offsets)), default=0)
        return
    with pytest.raises(PlanError) as e:
        check_plan(buffers, offsets, 16)
    m = re.fullmatch(r"buffers (\S+) \[(\d+), (\d+)\) and (\S+) \[(\d+), (\d+)\) overlap "
                     r"while both are live at op (\d+)", str(e.value))
    assert m, str(e.value)
    op = int(m[7])
    assert op == min(max(p[1], q[1]) for p, q in pairs)
    live = {(p[0], p[3], p[4]) for p in pieces if p[1] <= op <= p[2]}
    a, b = (m[1], int(m[2]), int(m[3])), (m[4], int(m[5]), int(m[6]))
    assert a in live and b in live and a[1] <= b[1] < a[2]


@settings(max_examples=300, deadline=None)
@given(plan=buffer_plans(), alignment=st.sampled_from([1, 16, 48]))
def test_lower_bound_is_the_most_bytes_live_at_one_op(plan, alignment):
    buffers, _ = plan
    pieces = [seg for b in buffers for seg in b.segments()]
    want = max((sum(align(s, alignment) for f, last, s in pieces if f <= k <= last) for k in range(12)), default=0)
    assert lower_bound(ArenaProblem(tuple(buffers), alignment)) == want


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_live_bytes_per_op_is_the_largest_of_each_owner_alive(data):
    n_ops = data.draw(st.integers(1, 10))
    lives: list[Lifetime] = []
    for t in range(data.draw(st.integers(0, 9))):
        first = data.draw(st.integers(0, n_ops - 1))
        last = data.draw(st.integers(first, n_ops - 1))
        owners = [lt.tensor for lt in lives if lt.alias_of is None]
        alias = data.draw(st.sampled_from([None, *owners]))
        lives.append(Lifetime(t, f"t{t}", data.draw(st.integers(0, 50)), first, last, alias))
    want = [sum(max((m.size for m in lives if m.owner == owner and m.first_op <= k <= m.last_op), default=0)
                for owner in {lt.owner for lt in lives}) for k in range(n_ops)]
    assert live_bytes_per_op(lives, n_ops) == want


def concat_of_branches(n: int) -> list[tuple]:
    """The tensor rows of ``n`` branches read by one CONCATENATION: every branch output lives
    from its op to the concat, each in bytes of its own, so n tensors are live at once."""
    rows = [("input", -1, 0, n, 0, 64)]
    offset = 64
    for i in range(n):
        rows.append((f"branch{i}", i, i + 1, n + 1, offset, 32))
        offset += 32
    rows.append(("concat", n, n + 1, n + 2, offset, 32 * n))
    return rows


def test_two_thousand_branches_into_one_concat_are_checked():
    """A per-op checker over all pairs is cubic here (and would hang CI); the sweep is n log n."""
    rows = concat_of_branches(2000)
    arena = rows[-1][4] + rows[-1][5]
    check_tensor_plan(rows, arena, 16)
    planted = list(rows)
    planted[1500] = (*rows[1500][:4], rows[700][4], rows[1500][5])  # onto another live branch
    with pytest.raises(PlanError, match=r"tensors branch699 and branch1499 share bytes from \d+ while both are "
                                        r"live at op 1500"):
        check_tensor_plan(planted, arena, 16)
    buffers = [Buffer(name, size, first, last) for name, _, first, last, _, size in rows]
    offsets = [r[4] for r in rows]
    assert check_plan(buffers, offsets, 16) == arena
    with pytest.raises(PlanError, match="overlap while both are live at op 1500"):
        check_plan(buffers, [r[4] for r in planted], 16)
    most = 2 * 32 * 2000  # at the concat: every branch and its output
    assert lower_bound(ArenaProblem(tuple(buffers), 16)) == most
    lives = [Lifetime(k, name, size, first, last, None) for k, (name, _, first, last, _, size) in enumerate(rows)]
    assert max(live_bytes_per_op(lives, 2003)) == most


# ---- the greedy planners at scale --------------------------------------------------------------

def _reference_greedy(problem, best: bool) -> list[int]:
    """The greedy planners written plainly: every placed buffer compared in Python, the gaps walked."""
    from solver.arena_types import align
    offsets: dict[int, int] = {}
    order = sorted(range(len(problem.buffers)), key=lambda i: (-problem.buffers[i].size,
                                                              -(problem.buffers[i].last - problem.buffers[i].first), i))
    for i in order:
        b = problem.buffers[i]
        busy = sorted((offsets[j], offsets[j] + problem.buffers[j].size) for j in offsets
                      if b.first <= problem.buffers[j].last and problem.buffers[j].first <= b.last)
        gaps, cursor = [], 0
        for start, end in busy:
            if start > cursor:
                gaps.append((cursor, start - cursor))
            cursor = max(cursor, align(end, problem.alignment))
        fitting = [(length, start) for start, length in gaps if length >= b.size]
        offsets[i] = (min(fitting)[1] if fitting else cursor) if best else \
            min([start for _, start in fitting] + [cursor])
    return [offsets[i] for i in range(len(problem.buffers))]


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 12), st.integers(0, 6)), min_size=1, max_size=40),
       st.sampled_from([1, 4, 16]))
def test_greedy_planners_equal_their_plain_reference(raw, alignment):
    from solver.arena_types import ArenaProblem, Buffer
    from solver.greedy_arena import best_fit, first_fit
    problem = ArenaProblem(tuple(Buffer(f"b{i}", size, first, first + span) for i, (size, first, span)
                                 in enumerate(raw)), alignment)
    assert first_fit(problem) == _reference_greedy(problem, best=False)
    assert best_fit(problem) == _reference_greedy(problem, best=True)


def test_two_thousand_branches_into_one_concat_deploy(tmp_path):
    """Every pass of a deploy stays near n log n: the whole command finishes (no timing assertion:
    the subprocess's timeout only keeps a quadratic regression from hanging the suite)."""
    mb = ModelBuilder(0)
    x = mb.input((1, 1, 1, 4))
    mb.output(mb.concat([mb.relu(x) for _ in range(2000)], axis=3))
    model = tmp_path / "branches.tflite"
    mb.save(model)
    proc = subprocess.run([sys.executable, "-m", "deployer.cli", str(model), "-o", str(tmp_path / "out"),
                           "--time-limit", "1", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
