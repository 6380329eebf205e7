"""Patch-based inference: peak SRAM with and without splitting the first stage, the chosen
stage and grid, the MACs recomputed, and CP-SAT against its exhaustive twin.

    python bench/patch_bench.py [--max-overhead 0.2] [--models GLOB] [--sram 256K]

For every shared int8 TFLite model (LSTM models skipped): the planned arena unsplit
(--patch off) and split (with --sram: --patch auto, which splits only when that budget needs
it; without: the split CP-SAT finds with the least peak, forced as --patch RxC@LAYER), the
stage (ops), grid, recomputed MACs as a share of the network's, the split solvers' wall
times and whether they agree. The arena is planned by CP-SAT (first-fit for the 224x224
model, whose unsplit problem is large).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.patch_split import plan_split
from deployer.pipeline import Options, deploy
from network_parser.errors import DeployError

MODELS = "/work/shared/models/tflite"


def size(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip().upper()
    return int(t[:-1]) * 1024 if t.endswith("K") else int(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-overhead", type=float, default=0.2)
    ap.add_argument("--sram", default=None, help="budget the split must fit (e.g. 256K)")
    ap.add_argument("--models", default="*.tflite")
    args = ap.parse_args(argv)
    sram = size(args.sram)
    paths = sorted(Path(p) for p in glob.glob(os.path.join(MODELS, "**", args.models), recursive=True)
                   if "lstm" not in Path(p).name.lower())
    print(f"patch split, max overhead {args.max_overhead:.0%}" + (f", --sram {sram:,}" if sram else ""))
    print(f"{'model':<40} {'unsplit':>10} {'patched':>10} {'ratio':>6} {'stage':>7} {'grid':>5} {'MACs +':>7} "
          f"{'cpsat':>6} {'exhaust':>7} {'agree':>5}")
    for path in paths:
        planner = "first-fit" if "224" in path.name else "cpsat"
        try:
            off = deploy(path, Options(patch="off", planner=planner, time_limit_s=5))
            start = time.perf_counter()
            cp = plan_split(off.graph, off.kernels, off.lives, "cpsat", args.max_overhead, sram)
            t_cp = time.perf_counter() - start
            start = time.perf_counter()
            ex = plan_split(off.graph, off.kernels, off.lives, "exhaustive", args.max_overhead, sram)
            t_ex = time.perf_counter() - start
            forced = f"{cp.grid[0]}x{cp.grid[1]}@{cp.end}" if cp.end is not None else "off"
            on = deploy(path, Options(patch="auto" if sram else forced, sram=sram, planner=planner, time_limit_s=5,
                                      max_overhead=args.max_overhead))
        except DeployError as e:
            print(f"{path.name[:40]:<40} {type(e).__name__}: {e}")
            continue
        agree = (cp.peak, cp.macs_extra) == (ex.peak, ex.macs_extra)
        p = on.patch
        stage = f"{p.stage.start}..{p.stage.end}" if p else "-"
        grid = f"{p.choice.grid[0]}x{p.choice.grid[1]}" if p else "-"
        extra = f"{100 * p.choice.overhead:.1f}%" if p else "-"
        a, b = off.memory.sram_bytes, on.memory.sram_bytes
        print(f"{path.name[:40]:<40} {a:>10,} {b:>10,} {b / a:>6.2f} {stage:>7} {grid:>5} {extra:>7} "
              f"{t_cp:>5.2f}s {t_ex:>6.2f}s {'yes' if agree else 'NO':>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
