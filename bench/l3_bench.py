"""How far L3 streaming shrinks on-chip memory, and what it costs in L3 traffic.

    python bench/l3_bench.py [--l1 16K] [--target host|gap8] [--models GLOB]

For every shared int8 TFLite model (LSTM models skipped): the L2 the network needs with
everything on chip; the smallest L2 the deployer reports once weights (GAP8, whose weights
live in L2) and activations may live in L3, the ratio of the two, the L3 footprint and the
bytes moved between L3 and L2 per inference (against the model's weights + activations, the
traffic of a DORY-style "everything in L3" schedule that reads every weight and activation
once); on the host, also the smallest flash (every tiled layer's weights streamed) and the L2
that costs (staging); and the deployment time.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployer.pipeline import Options, deploy
from network_parser.errors import InfeasibleBudget

MODELS = str(Path(__file__).resolve().parents[1] / "tests" / "model_files" / "tflite")
K = 1024


def need(model: Path, options: Options) -> int | None:
    try:
        deploy(model, options)
    except InfeasibleBudget as e:
        return e.minimum_bytes
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--l1", default="16K")
    ap.add_argument("--target", default="host", choices=["host", "gap8"])
    ap.add_argument("--models", default="*.tflite")
    args = ap.parse_args(argv)
    l1 = int(args.l1.rstrip("Kk")) * K if args.l1[-1] in "Kk" else int(args.l1)
    paths = sorted(Path(p) for p in glob.glob(os.path.join(MODELS, "**", args.models), recursive=True)
                   if "lstm" not in Path(p).name.lower())
    print(f"L3 streaming, target {args.target}, --l1 {l1 // K}K")
    print(f"{'model':<40} {'L2 only':>10} {'with L3':>10} {'ratio':>6} {'L3':>10} {'moved/inf':>10} "
          f"{'vs all-L3':>9} {'slabs':>6} {'flash':>10} {'min flash':>10} {'its L2':>8} {'time':>6}")
    for path in paths:
        start = time.perf_counter()
        base = Options(patch="off", target=args.target, l1=l1, time_limit_s=2.0)
        try:
            alone = deploy(path, base)
        except Exception as e:  # noqa: BLE001 -- reported, not fatal
            print(f"{path.name:<40} skipped: {type(e).__name__}: {e}")
            continue
        streamed = Options(**{**base.__dict__, "l3": 1 << 28})
        sram = need(path, Options(**{**streamed.__dict__, "sram": 1}))
        dep = deploy(path, Options(**{**streamed.__dict__, "sram": sram}))
        flash_row = ""
        if args.target == "host":
            flash = need(path, Options(**{**streamed.__dict__, "flash": 1}))
            light = deploy(path, Options(**{**streamed.__dict__, "flash": flash}))
            flash_row = (f" {alone.memory.flash_bytes:>10,} {light.memory.flash_bytes:>10,} "
                         f"{light.memory.sram_bytes:>8,}")
        elapsed = time.perf_counter() - start
        m = dep.memory
        slabs = dep.l3.placement.slabs if dep.l3 else {}
        moved = sum(s.l3_traffic for s in slabs.values())
        everything = alone.memory.weights_bytes + sum(
            dep.graph.tensors[t].nbytes for t in dep.graph.activations())
        print(f"{path.name[:40]:<40} {alone.memory.sram_bytes:>10,} {m.sram_bytes:>10,} "
              f"{m.sram_bytes / alone.memory.sram_bytes:>6.2f} {m.l3_bytes:>10,} {moved:>10,} "
              f"{moved / everything:>9.2f} {sum(s.slabs for s in slabs.values()):>6}{flash_row} {elapsed:>5.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
