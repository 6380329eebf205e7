"""The operator conformance sweep: every TFLite operator, many seeded cases each (shapes,
strides, broadcasting, activations, quantization at its edges), deployed and compared element by
element with LiteRT's reference kernels on the host and on QEMU's Cortex-M boards.

    python bench/conformance.py [--seeds 20] [--targets host,cortex-m4,cortex-m7] [--ops CONV_2D,ADD]
                                [--l1 4K]

Prints one row per operator: exact cases out of those run per target (and the first failure's
seed and error). CI runs a sample of the same cases (tests/host/test_conformance.py,
tests/target/test_conformance_qemu.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conformance import CASES, check, exact  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--targets", default="host,cortex-m4,cortex-m7")
    ap.add_argument("--ops", default=None, help="comma-separated operators (default: all)")
    ap.add_argument("--l1", default=None, help="also tile: an L1 budget such as 4K (applies to every target)")
    args = ap.parse_args(argv)
    targets = args.targets.split(",")
    ops = args.ops.split(",") if args.ops else sorted(CASES)
    l1 = int(args.l1[:-1]) * 1024 if args.l1 and args.l1.upper().endswith("K") else (int(args.l1) if args.l1 else None)
    print(f"{'operator':<24} " + " ".join(f"{t:>12}" for t in targets) + "  first failure")
    failures = 0
    for op in ops:
        cells, first = [], ""
        for target in targets:
            good = 0
            for seed in range(args.seeds):
                try:
                    ok = exact(check(op, seed, target, l1))
                    error = "" if ok else "outputs differ"
                except Exception as e:  # noqa: BLE001 - a sweep reports every failure and goes on
                    ok, error = False, f"{type(e).__name__}: {str(e)[:120]}"
                good += ok
                if not ok and not first:
                    first = f"{target} seed {seed}: {error}"
            failures += args.seeds - good
            cells.append(f"{good}/{args.seeds}")
        print(f"{op:<24} " + " ".join(f"{c:>12}" for c in cells) + (f"  {first}" if first else ""), flush=True)
    print(f"\n{len(ops)} operators x {args.seeds} cases x {len(targets)} targets: {failures} not exact")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
