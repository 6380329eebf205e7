"""Solver faults: an exception inside CP-SAT, a time limit hit, a search that would overrun,
an infeasible budget. The plan falls back to the greedy (or exhaustive) twin with a warning,
or fails naming the smallest budget; never a hang."""
from __future__ import annotations

import warnings

import pytest
from click.testing import CliRunner
from ortools.sat.python import cp_model

from deployer.cli import main
from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs, run_engine
from network_parser.errors import InfeasibleBudget
from solver import cpsat
from solver.alloc_bench import read_alloc_bench
from solver.arena import SolverConfig, plan_arena
from tests.cli_output import messages
from tests.fuzz.harness import ROOT
from tests.models import ALLOC_BENCH

EXAMPLE = ROOT / "examples" / "tiny_kws.tflite"


@pytest.fixture(scope="module")
def example():
    if not EXAMPLE.exists():
        from examples.make_example import build
        build().save(EXAMPLE)
    return EXAMPLE


def _explode(self, *args, **kwargs):
    raise RuntimeError("injected solver fault")


def test_every_solver_raising_still_deploys_the_greedy_plans(example, monkeypatch):
    """Arena and tiling both fail inside CP-SAT: each warns and keeps its twin's plan, and the
    engine is the one the greedy options give, bit for bit (the fused stages are chosen by an
    exact dynamic program, no solver)."""
    monkeypatch.setattr(cp_model.CpSolver, "solve", _explode)
    monkeypatch.setattr(cp_model.CpSolver, "Solve", _explode, raising=False)
    options = Options(l1=8 * 1024, sram=64 * 1024)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dep = deploy(example, options)
    said = " | ".join(str(w.message) for w in caught)
    assert "CP-SAT tiling fell back to greedy" in said
    if dep.arena.status == "FALLBACK":  # the arena's CP-SAT runs only when greedy is not provably optimal
        assert "arena planner" in said
    solved = [t for _, t in dep.tilings.values() if t.solver != "untiled"]  # layers that fit L1 whole need no search
    assert solved and all((t.solver, t.status) == ("greedy", "FALLBACK") for t in solved)
    monkeypatch.undo()
    greedy = deploy(example, Options(l1=8 * 1024, sram=64 * 1024, tiler="greedy", planner="best-fit"))
    samples = [random_inputs(dep.graph, 0)]
    assert (run_engine(build_engine(dep), samples)[0][0][0] == run_engine(build_engine(greedy), samples)[0][0][0]).all()


def test_arena_solver_raising_is_one_warning_line_on_the_cli(example, monkeypatch, tmp_path):
    monkeypatch.setattr(cp_model.CpSolver, "solve", _explode)
    monkeypatch.setattr(cp_model.CpSolver, "Solve", _explode, raising=False)
    from solver import arena_cpsat
    monkeypatch.setattr(arena_cpsat, "_plan_sections", lambda *a, **k: _explode(None))
    import solver.arena as arena
    real = arena._cpsat_plan

    def always_search(problem, method, config):  # make the CP-SAT step run even where greedy is optimal
        from solver.arena_cpsat import plan_cpsat
        greedy = {m: arena._greedy_plan(problem, m, config) for m in arena.GREEDY}
        worse = {m: p.__class__(p.offsets, p.peak + 16, 0, p.method, "FEASIBLE", 0.0) for m, p in greedy.items()}
        return plan_cpsat(problem, config, worse) if not any(b.steps for b in problem.buffers) else real(problem, method, config)
    monkeypatch.setattr(arena, "METHODS", {**arena.METHODS, "cpsat": always_search})
    result = CliRunner().invoke(main, [str(example), "-o", str(tmp_path / "out"), "-q", "--patch", "off"])
    assert result.exit_code == 0, result.output
    lines = messages(result.stderr)
    assert lines and all(ln.startswith("warning: ") for ln in lines), result.stderr
    assert any("arena planner: CP-SAT failed (RuntimeError: injected solver fault)" in ln for ln in lines)
    assert (tmp_path / "out" / "manifest.json").exists()


def test_a_tiny_time_limit_still_gives_a_sound_plan(example):
    dep = deploy(example, Options(l1=4 * 1024, time_limit_s=0.01))
    assert dep.arena.peak >= dep.arena.lower_bound
    assert all(t.l1_bytes <= 4 * 1024 for _, t in dep.tilings.values())


def test_the_watchdog_stops_a_search_that_would_overrun():
    """CP-SAT told it has an hour; the watchdog stops it at its deadline."""
    instances = sorted(ALLOC_BENCH.rglob("*")) if ALLOC_BENCH.is_dir() else []
    problem = None
    for path in instances:
        try:
            p = read_alloc_bench(path)
        except Exception:  # noqa: BLE001 - not an instance file
            continue
        if len(p.buffers) >= 200:
            problem = p
            break
    if problem is None:
        pytest.skip(f"no alloc-bench instance of 200+ buffers under {ALLOC_BENCH}")
    from solver.arena_cpsat import build_arena_model, _items, _unit
    items = _items(problem, _unit(problem))
    v = build_arena_model(items, upper=sum(it.size for it in items))
    solver = cpsat.new_solver(3600.0)
    status = cpsat.solve(solver, v.model, deadline_s=0.5, warn=False)
    assert status in (cp_model.FEASIBLE, cp_model.UNKNOWN)  # stopped, not finished


def test_the_arena_planner_keeps_its_time_limit(monkeypatch):
    instances = sorted(p for p in ALLOC_BENCH.rglob("*") if p.is_file()) if ALLOC_BENCH.is_dir() else []
    problems = []
    for path in instances:
        try:
            problems.append(read_alloc_bench(path))
        except Exception:  # noqa: BLE001
            continue
    problems = sorted((p for p in problems if len(p.buffers) >= 100), key=lambda p: -len(p.buffers))[:2]
    if not problems:
        pytest.skip(f"no alloc-bench instance of 100+ buffers under {ALLOC_BENCH}")
    made = []
    real = cpsat.new_solver

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]
    from solver import arena_cpsat
    monkeypatch.setattr(arena_cpsat, "new_solver", recording)
    for problem in problems:
        plan = plan_arena(problem, "cpsat", SolverConfig(time_limit_s=1.0))
        assert plan.peak >= plan.lower_bound
    # every search is bounded by deterministic time (the plan) and by a wall-clock watchdog (the run):
    # no timing assertion here, which a busy machine could fail
    assert made and all(0 < s.parameters.max_deterministic_time <= 1.0 for s in made)
    assert all(0 <= s.parameters.max_time_in_seconds <= 2 * 1.0 + cpsat.WATCHDOG_MARGIN_S for s in made)


def test_an_infeasible_budget_names_the_smallest_that_works(example):
    with pytest.raises(InfeasibleBudget) as e:
        deploy(example, Options(sram=1024, patch="off"))
    need = e.value.needs["--sram"]
    assert f"the smallest --sram that works is {need}" in str(e.value)
    assert deploy(example, Options(sram=need, patch="off")).memory.sram_bytes == need
