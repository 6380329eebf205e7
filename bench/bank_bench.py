"""Buffers across RAM banks: the CP-SAT assignment against the greedy twin (first fit decreasing
across the banks) and the hill climb, on generated bank layouts. Per case (the shared MLPerf
Tiny models' arenas and MiniMalloc's eleven instances), each seed draws 2-4 banks whose sizes
total 1.0-1.3x the case's max-live bound, each bank a random share of it and a random access
cost (0.5, 1, 1.5, 2 or 4), and per buffer a weight (its bytes times 1-4 reads). Prints, per
case, how many layouts each method fits, and where all three fit, their modeled access costs
and CP-SAT's gap to its bound; then the totals.

    python bench/bank_bench.py [--seeds 10] [--time-limit 10] [--cases kws,A,B]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.pipeline import Options, deployment_problem, plan_deployment  # noqa: E402
from solver.alloc_bench import read_alloc_bench  # noqa: E402
from solver.arena import SolverConfig, lower_bound  # noqa: E402
from solver.banks import Bank, plan_banks  # noqa: E402

MODELS = {"kws": "kws_ref_model.tflite", "vww_96": "vww_96_int8.tflite", "resnet8": "pretrainedResnet_quant.tflite",
          "ad01": "ad01_int8.tflite"}
METHODS = ("first-fit", "hill-climb", "cpsat")


def cases(names: set[str] | None):
    for name, file in MODELS.items():
        if names is None or name in names:
            plan = plan_deployment(ROOT / "tests/model_files/tflite/mlperf_tiny" / file, Options(patch="off"))
            yield name, deployment_problem(plan)
    for path in sorted((ROOT / "tests/model_files/alloc-bench").glob("*.csv")):
        name = path.name.split(".")[0]
        if names is None or name in names:
            yield name, read_alloc_bench(path)


def layout(problem, seed: int):
    rng = random.Random(seed)
    bound = lower_bound(problem)
    n = rng.randrange(2, 5)
    total = bound * rng.uniform(1.0, 1.3)
    largest = max(b.size for b in problem.buffers)
    # the first bank holds at least the largest buffer (else no layout exists); the rest share what is left
    first = max(largest, int(total * rng.uniform(0.3, 0.7)))
    shares = [rng.uniform(0.2, 1.0) for _ in range(n - 1)]
    rest = max(16 * (n - 1), int(total) - first)
    sizes = [first] + [int(rest * s / sum(shares)) for s in shares]
    banks = tuple(Bank(f"b{k}", max(16, -(-size // 16) * 16), rng.choice((0.5, 1, 1.5, 2, 4)))
                  for k, size in enumerate(sizes))
    weights = [b.size * rng.randrange(1, 5) for b in problem.buffers]
    return banks, weights


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--cases", default=None, help="comma-separated: kws, vww_96, resnet8, ad01, A..K")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # a bank's CP-SAT arena keeping its greedy plan: counted below
    config = SolverConfig(time_limit_s=args.time_limit)
    names = set(args.cases.split(",")) if args.cases else None
    print(f"{args.seeds} layouts per case, --time-limit {args.time_limit:g} (deterministic)\n")
    print(f"{'case':<8}{'buffers':>8}{'fits: greedy':>14}{'hill':>6}{'cpsat':>7}   "
          f"{'cost where all fit: greedy':>27}{'hill':>12}{'cpsat':>12}{'cpsat gap':>11}{'cpsat s':>9}")
    totals = dict.fromkeys(METHODS, 0)
    worse = 0
    for name, problem in cases(names):
        fits = dict.fromkeys(METHODS, 0)
        costs = {m: 0.0 for m in METHODS}
        bounds, seconds = 0.0, 0.0
        for seed in range(args.seeds):
            banks, weights = layout(problem, seed)
            plans = {}
            for m in METHODS:
                started = time.perf_counter()
                plans[m] = plan_banks(problem, banks, m, config, weights)
                if m == "cpsat":
                    seconds += time.perf_counter() - started
            for m, p in plans.items():
                fits[m] += p.over == 0
            if all(p.over == 0 for p in plans.values()):
                for m, p in plans.items():
                    costs[m] += p.cost
                bounds += plans["cpsat"].cost_bound
            if plans["cpsat"].over > min(plans[m].over for m in METHODS) or (
                    plans["cpsat"].over == 0 and plans["cpsat"].cost > min(p.cost for p in plans.values() if p.over == 0)):
                worse += 1
        for m in METHODS:
            totals[m] += fits[m]
        gap = f"{(costs['cpsat'] - bounds) / costs['cpsat']:.1%}" if costs["cpsat"] else "-"
        cost = {m: f"{costs[m]:,.0f}" if costs[m] else "-" for m in METHODS}
        print(f"{name:<8}{len(problem.buffers):>8}{fits['first-fit']:>14}{fits['hill-climb']:>6}{fits['cpsat']:>7}   "
              f"{cost['first-fit']:>27}{cost['hill-climb']:>12}{cost['cpsat']:>12}{gap:>11}{seconds:>9.1f}")
    print(f"\nlayouts fitted: greedy {totals['first-fit']}, hill climb {totals['hill-climb']}, cpsat {totals['cpsat']}; "
          f"layouts where CP-SAT fits less or costs more than another: {worse}")
    return 0 if worse == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
