"""Arena planners side by side: greedy baselines against CP-SAT.

    python bench/arena_bench.py [--instances A,B,...] [--time-limit 10]

Section "alloc-bench": MiniMalloc's eleven challenging instances (/work/shared/alloc-bench),
planned in minimise mode (the capacity in each file name is ignored, so the peak is
compared with the max-live lower bound).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.alloc_bench import read_alloc_bench
from solver.arena import GREEDY, SolverConfig, lower_bound, plan_arena

ALLOC_BENCH_DIR = Path("/work/shared/alloc-bench")


def _row(cells, widths) -> str:
    return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def alloc_bench_section(instances: list[str] | None, config: SolverConfig) -> None:
    """One line per alloc-bench instance: bound, each greedy peak, CP-SAT peak, status, gap, time."""
    files = sorted(ALLOC_BENCH_DIR.glob("*.csv"))
    if instances:
        wanted = set(instances)
        files = [f for f in files if f.name.split(".")[0] in wanted]
    if not files:
        print(f"alloc-bench: no instances found in {ALLOC_BENCH_DIR}")
        return
    header = ["inst", "bufs", "lower", *GREEDY, "cpsat", "status", "gap%", "wall_s"]
    widths = [4, 4, 9, 13, 9, 13, 9, 8, 6, 6]
    print(f"alloc-bench (minimise peak, {config.time_limit_s:g} s, {config.workers} workers, seed {config.seed})")
    print(_row(header, widths))
    solved = 0
    for path in files:
        problem = replace(read_alloc_bench(path), capacity=None)
        greedy = [plan_arena(problem, m, config).peak for m in GREEDY]
        plan = plan_arena(problem, "cpsat", config)
        solved += plan.status == "OPTIMAL"
        gap = 100.0 * (plan.peak - lower_bound(problem)) / plan.peak
        print(_row([path.name.split(".")[0], len(problem.buffers), lower_bound(problem), *greedy, plan.peak,
                    plan.status, f"{gap:.1f}", f"{plan.wall_s:.1f}"], widths), flush=True)
    print(f"optimal: {solved}/{len(files)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", help="comma-separated alloc-bench instance names (default: all)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT seconds per instance")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = SolverConfig(time_limit_s=args.time_limit, workers=args.workers, seed=args.seed)
    instances = [s.strip() for s in args.instances.split(",")] if args.instances else None
    alloc_bench_section(instances, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
