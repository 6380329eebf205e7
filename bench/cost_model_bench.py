"""The Cortex-M tiling cost model against QEMU: per-layer instructions beside modeled cycles, and
the tilers' choices judged by measured instructions.

    python bench/cost_model_bench.py [--target stm32h743] [--l1 64K,32K,16K] [--models NAME,...] [--fit]

For kws_ref_model, vww_96_int8 and pretrainedResnet_quant (``--models``: other file names under
shared/models/tflite), at each L1 budget, deploy with three tilers (greedy; CP-SAT maximising L1
use; CP-SAT minimising the cost model's cycles, the Cortex-M targets' default), count each layer's instructions on
QEMU (``deploy verify --qemu --per-layer``: marks between layers) and print

* per run: the measured instructions of one inference, the cost model's rank correlation with
  the measurement over the modeled layers, and measured/modeled per layer kind;
* per model and budget: instructions per MAC of each tiler beside the untiled engine's, and each
  CP-SAT tiler's instructions over greedy's (below 1: CP-SAT's tiles run faster on the core,
  not only on the model);
* per tiled layer (tiled by either tiler): each tiler's measured instructions and tile shape, and
  each CP-SAT tiler's over greedy's, with the worst layer of each.

``--fit`` refits the model's coefficients (instructions per MAC and per output per kind, per
tile, per copied byte and per copy) by least squares over every layer measured, the numbers
``backends/cortexm.py`` holds. Counts are exact and repeatable (QEMU executes, it does not time).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployer.cli import parse_size  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.profile import layer_times, model_fit  # noqa: E402
from deployer.qemu import instructions_per_layer  # noqa: E402
from deployer.verify import random_inputs  # noqa: E402
from layer_analyzer.tiling import geometry  # noqa: E402
from solver.tiling_cost import schedule  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "tests" / "model_files" / "tflite"
DEFAULT = ("kws_ref_model.tflite", "vww_96_int8.tflite", "pretrainedResnet_quant.tflite")
TILERS = (("greedy", "l1"), ("cpsat", "l1"), ("cpsat", "cycles"))


def features(dep, counts):
    """Per modeled layer: (kind, MACs, outputs, tiles, copied bytes, copies, instructions)."""
    rows = []
    for lp, n in zip(dep.layers, counts):
        g = lp.tiling[0] if lp.tiling else geometry(lp.kernel, lp.index)
        if g is None:
            continue
        outputs = g.out_h * g.out_w * g.out_c
        if lp.tiling is None:
            rows.append((g.kind, outputs * g.macs_per_output(), outputs, 1, 0, 0, n))  # one call: one "tile"
            continue
        t = lp.tiling[1]
        s = schedule(g, (t.tile_h, t.tile_w, t.tile_c), dict(dma_dims=1, double_buffer=False,
                                                              dma_bytes_per_cycle=1, dma_setup_cycles=0))
        rows.append((g.kind, outputs * g.macs_per_output(), outputs, s.tiles, s.dma_bytes, s.transfers, n))
    return rows


def fit(rows) -> None:
    kinds = sorted({r[0] for r in rows})
    names = [f"{what} {k}" for k in kinds for what in ("per MAC", "per output")] + ["per tile", "per byte", "per copy"]
    x = np.array([[v for k in kinds for v in ((r[1], r[2]) if r[0] == k else (0, 0))] + list(r[3:6]) for r in rows], float)
    y = np.array([r[6] for r in rows], float)
    scale = x.max(axis=0) + 1e-9
    coef = np.linalg.lstsq(x / scale, y, rcond=None)[0] / scale
    err = np.abs(x @ coef - y) / np.maximum(y, 1)
    print(f"\nleast squares over {len(rows)} layers (median error {100 * np.median(err):.1f}%):")
    for name, c in zip(names, coef):
        print(f"  instructions {name:<22} {c:9.3f}")


def _tile(lp) -> str:
    if lp.tiling is None:
        return "whole"
    t = lp.tiling[1]
    return f"{t.tile_h}x{t.tile_w}x{t.tile_c}"


def layer_table(layers) -> None:
    """Each tiled layer's measured instructions under every tiler, CP-SAT's over greedy's."""
    print("\nper tiled layer (measured instructions; tile h x w x c)")
    print(f"{'model':<24} {'L1':>4} {'op':>3} {'kind':<10} {'greedy':>10} {'tile':>10} {'cpsat/l1':>10} {'tile':>10} "
          f"{'ratio':>6} {'cpsat/cyc':>10} {'tile':>10} {'ratio':>6}")
    worst = {t: (0.0, None) for t in TILERS[1:]}
    for name, l1, per_layer, deps in layers:
        g = TILERS[0]
        for k, lp in enumerate(deps[g].layers):
            if all(deps[t].layers[k].tiling is None for t in TILERS):
                continue
            base = per_layer[g][k]
            line = f"{name[:24]:<24} {l1:>4} {k:>3} {type(lp.kernel).__name__[:10]:<10} {base:>10,} {_tile(lp):>10}"
            for t in TILERS[1:]:
                n = per_layer[t][k]
                r = n / base if base else 1.0
                if r > worst[t][0]:
                    worst[t] = (r, f"{name} --l1 {l1} op {k}")
                line += f" {n:>10,} {_tile(deps[t].layers[k]):>10} {r:>6.3f}"
            print(line)
    for t, (r, where) in worst.items():
        if where is not None:
            print(f"worst layer, {t[0]}/{t[1]} over greedy: {r:.3f} ({where})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="stm32h743")
    ap.add_argument("--l1", default="64K,32K,16K")
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    rows = []
    print(f"{'model':<28} {'L1':>5} {'tiler':<14} {'instructions':>13} {'rho':>5}  measured/modeled per kind")
    summary, layers = [], []
    for name in args.models.split(","):
        path = next(MODELS.rglob(name), None)
        if path is None:
            print(f"{name}: not under {MODELS}, skipped")
            continue
        whole = deploy(path, Options(target=args.target, patch="off", part_budgets=False))
        untiled = sum(instructions_per_layer(whole, random_inputs(whole.graph, 0)))
        for l1 in args.l1.split(","):
            totals, per_layer, deps = {}, {}, {}
            for tiler, objective in TILERS:
                dep = deploy(path, Options(target=args.target, l1=parse_size(l1), tiler=tiler,
                                           tile_objective=objective, patch="off", part_budgets=False))
                counts = instructions_per_layer(dep, random_inputs(dep.graph, 0))
                f = model_fit(layer_times(dep, counts))
                totals[(tiler, objective)] = sum(counts)
                per_layer[(tiler, objective)], deps[(tiler, objective)] = counts, dep
                rows += features(dep, counts)
                kinds = ", ".join(f"{k} {v['ratio']:.2f}" for k, v in f["measured_over_modeled"].items())
                rho = f["rank_correlation"]
                print(f"{name[:28]:<28} {l1:>5} {tiler + '/' + objective:<14} {sum(counts):>13,} "
                      f"{'-' if rho is None else f'{rho:.2f}':>5}  {kinds}", flush=True)
            greedy = totals[("greedy", "l1")]
            per_mac = [totals[t] / whole.macs for t in TILERS]
            summary.append((name, l1, untiled / whole.macs, per_mac, totals[("cpsat", "l1")] / greedy,
                            totals[("cpsat", "cycles")] / greedy))
            layers.append((name, l1, per_layer, deps))
    print(f"\n{'model':<28} {'L1':>5} {'/MAC untiled':>12} {'greedy':>7} {'cpsat/l1':>9} {'cpsat/cyc':>9} "
          f"{'worst vs untiled':>17} {'cpsat/l1 vs greedy':>19} {'cpsat/cycles vs greedy':>23}")
    for name, l1, base, per_mac, a, b in summary:
        print(f"{name[:28]:<28} {l1:>5} {base:>12.3f} {per_mac[0]:>7.3f} {per_mac[1]:>9.3f} {per_mac[2]:>9.3f} "
              f"{max(per_mac) / base:>17.3f} {a:>19.4f} {b:>23.4f}")
    layer_table(layers)
    if args.fit:
        fit(rows)


if __name__ == "__main__":
    main()
