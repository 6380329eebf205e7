"""Buffers across RAM banks (solver.banks): each buffer in one bank, overlap pairs together,
every bank's plan checked; CP-SAT against the greedy twin and the hill climb; the memory map's
format and its errors."""
from __future__ import annotations

import json
import random

import pytest

from deployer.memory_map import read_memory_map, with_memory_map
from deployer.pipeline import Options
from network_parser.errors import UsageError
from solver.arena import ArenaProblem, Buffer, Overlap, SolverConfig
from solver.banks import Bank, BankPlan, check_banks, plan_banks
from solver.plan_checker import PlanError

CONFIG = SolverConfig(time_limit_s=2.0)


def chain(sizes):
    """A chain of layers: buffer i lives over ops i..i+1 (each layer reads one, writes the next)."""
    return ArenaProblem(tuple(Buffer(f"t{i}", s, i, i + 1) for i, s in enumerate(sizes)), 16)


def test_a_chain_alternates_between_two_banks():
    # two neighbours never fit one bank: 600 + 600 > 1000, so the layers alternate
    problem = chain([600] * 6)
    plan = plan_banks(problem, (Bank("A", 1000, 1.0), Bank("B", 640, 2.0)), "cpsat", CONFIG)
    assert plan.status in ("OPTIMAL", "FEASIBLE") and plan.over == 0
    assert all(plan.assign[i] != plan.assign[i + 1] for i in range(5))
    check_banks(problem, plan)


def test_the_cheaper_bank_takes_the_most_moved_bytes():
    problem = ArenaProblem((Buffer("big", 512, 0, 1), Buffer("hot", 256, 0, 1)), 16)
    banks = (Bank("SLOW", 1024, 3.0), Bank("FAST", 512, 1.0))
    plan = plan_banks(problem, banks, "cpsat", CONFIG, weights=[512, 256 * 8])  # "hot" is read 8 times
    assert plan.assign == (0, 1) and plan.status == "OPTIMAL" and plan.cost == plan.cost_bound == 512 * 3 + 2048


def test_an_overlap_pair_shares_bytes_inside_one_bank_or_none_across_two():
    buffers = (Buffer("in", 800, 0, 1), Buffer("out", 800, 1, 2), Buffer("other", 300, 0, 2))
    problem = ArenaProblem(buffers, 16, pairs=(Overlap(0, 1, 64),))
    # 1,700 B live at op 1 but 864 B for the pair: both in A, the other in B
    plan = plan_banks(problem, (Bank("A", 900, 1.0), Bank("B", 400, 1.0)), "cpsat", CONFIG)
    assert plan.over == 0 and plan.assign[0] == plan.assign[1] == 0 and plan.assign[2] == 1
    assert plan.offsets[1] - plan.offsets[0] <= 64  # within the pair's window
    check_banks(problem, plan)
    # banks that cannot hold the pair together: in two, sharing nothing
    plan = plan_banks(problem, (Bank("A", 820, 1.0), Bank("B", 820, 1.0), Bank("C", 320, 1.0)), "cpsat", CONFIG)
    assert plan.over == 0 and plan.assign[0] != plan.assign[1]
    check_banks(problem, plan)


def test_the_checker_refuses_a_collision_and_a_straddle():
    banks = (Bank("A", 200), Bank("B", 200))
    clash = ArenaProblem((Buffer("a", 100, 0, 1), Buffer("b", 100, 1, 2)), 16)
    with pytest.raises(PlanError):
        check_banks(clash, BankPlan(banks, (0, 0), (0, 32), (132, 0), 0, 0, "x", "FEASIBLE", ()))
    with pytest.raises(PlanError, match="beyond"):  # past what its bank's plan spans: into the next bank
        check_banks(clash, BankPlan(banks, (0, 0), (0, 112), (200, 0), 0, 0, "x", "FEASIBLE", ()))


def test_an_impossible_layout_says_so():
    plan = plan_banks(chain([600, 600]), (Bank("A", 500), Bank("B", 500)), "cpsat", CONFIG)
    assert plan.status == "INFEASIBLE" and plan.over > 0


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_fits_whatever_the_baselines_fit_and_costs_no_more(seed):
    rng = random.Random(seed)
    n = 14
    buffers = []
    for i in range(n):
        first = rng.randrange(0, 10)
        buffers.append(Buffer(f"b{i}", 16 * rng.randrange(4, 40), first, first + rng.randrange(0, 4)))
    problem = ArenaProblem(tuple(buffers), 16)
    live = max(sum(b.size for b in buffers if b.first <= t <= b.last) for t in range(14))
    shares = [rng.uniform(0.3, 1.0) for _ in range(rng.randrange(2, 5))]
    total = live * rng.uniform(1.0, 1.3)
    banks = tuple(Bank(f"k{j}", 16 * max(1, int(total * s / sum(shares) / 16)), rng.choice((0.5, 1.0, 2.0)))
                  for j, s in enumerate(shares))
    weights = [b.size * rng.randrange(1, 4) for b in buffers]
    best = plan_banks(problem, banks, "cpsat", CONFIG, weights)
    greedy = plan_banks(problem, banks, "first-fit", CONFIG, weights)
    check_banks(problem, best)
    assert (best.over, best.cost) <= (greedy.over, greedy.cost)
    assert best.cost_bound <= best.cost + 1e-6


def write_map(tmp_path, banks, **extra):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"banks": banks, **extra}))
    return path


def test_a_memory_map_becomes_the_options(tmp_path):
    path = write_map(tmp_path, [
        {"name": "SRAM1", "size": "64K", "section": ".sram1", "cost": 1, "address": "0x20000000"},
        {"name": "SRAM2", "size": 32768, "cost": 2.5, "zeroed": False},
        {"name": "TCM", "size": "16K", "kind": "tcm", "use": "l1", "masters": ["cpu"]},
        {"name": "PSRAM", "size": "8M", "kind": "external", "use": "l3", "cost": 20}], part="an M33")
    banks = read_memory_map(path)
    assert [b.name for b in banks] == ["SRAM1", "SRAM2", "TCM", "PSRAM"]
    assert banks[0].address == 0x20000000 and banks[1].section == ".sram2" and not banks[1].zeroed
    options = with_memory_map(Options(target="cortex-m7"), banks)
    assert [b.name for b in options.banks] == ["SRAM1", "SRAM2"]
    assert (options.sram, options.l1, options.l3) == (96 * 1024, 16 * 1024, 8 * 1024 * 1024)
    jsonschema = pytest.importorskip("jsonschema")
    from deployer.memory_map import SCHEMA
    jsonschema.validate(json.loads(path.read_text()), json.loads(SCHEMA.read_text()))


@pytest.mark.parametrize("banks,words", [
    ([{"name": "1st", "size": "4K"}], "C identifier"),
    ([{"name": "A", "size": "0"}], "above 0"),
    ([{"name": "A", "size": "4K", "section": "sram"}], "linker section"),
    ([{"name": "A", "size": "4K", "cost": -1}], "cost"),
    ([{"name": "A", "size": "4K"}, {"name": "A", "size": "8K"}], "two banks have the name A"),
    ([{"name": "A", "size": "4K", "use": "l1"}], "no bank holds the activations"),
    ([{"name": "A", "size": "4K", "colour": "red"}], "unknown field 'colour'"),
    ([{"name": "A", "size": "4K", "address": "0xFFFFF800"}], "32-bit space"),
    ([{"name": "A", "size": "4K", "masters": ["dma"]}], "masters lack cpu"),
    ([], "list of banks"),
])
def test_memory_map_errors_name_the_bank(tmp_path, banks, words):
    with pytest.raises(UsageError, match=words):
        read_memory_map(write_map(tmp_path, banks))
