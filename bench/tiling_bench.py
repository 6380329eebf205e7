"""Per-layer L1 tiling of the shared TFLite models: CP-SAT against greedy under a cycle model.

    python bench/tiling_bench.py [--l1 64K[,32K,...]] [--target gap8,cortex-m7] [--objective cycles|l1]
                                 [--time-limit 2] [--workers 2] [--models GLOB]

For every model under tests/model_files/tflite (LSTM models and missing files skipped), every
tileable layer (``layer_analyzer.tiling.geometry``) is tiled by greedy and by CP-SAT at each L1
budget; the table gives the network's total modeled cycles (solver.tiling_cost) for both and
their ratio, the layer CP-SAT gains most on, DMA transfers and the whole network's CP-SAT
tiling time. Layers whose smallest tile does not fit are counted (``infeasible``) and left out
of the totals; layers that fit whole run untiled for both tilers.

The cost dicts are plausible, not measured: "gap8" is an 8-core PULP cluster (about 12 int8
MACs per cycle with PULP-NN, 64-bit L2->L1 DMA, fork/join per tile, 4x2 channel x pixel inner
kernel, rows split over 8 cores); "cortex-m7" a single core with SMLAD (pairs of channels and
pixels) and an MDMA-like 2-D DMA into DTCM.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployer.pipeline import Options, deploy
from layer_analyzer.tiling import geometry
from solver.tiling import TilingConfig, TilingInfeasible, greedy_tiling, plan_tiling
from solver.tiling_cost import schedule

MODELS = str(Path(__file__).resolve().parents[1] / "tests" / "model_files" / "tflite")

TARGETS = {
    "gap8": dict(
        cost=dict(macs_per_cycle=12, dma_bytes_per_cycle=8, dma_setup_cycles=60, tile_setup_cycles=300,
                  leftover_penalty=150, h_multiple=8, w_multiple=2, c_multiple=4, dma_dims=3),
        heuristics={"tile_h_multiple": 8, "tile_w_multiple": 2, "tile_c_multiple": 4}),
    "cortex-m7": dict(
        cost=dict(macs_per_cycle=1.5, dma_bytes_per_cycle=4, dma_setup_cycles=100, tile_setup_cycles=100,
                  leftover_penalty=40, h_multiple=1, w_multiple=2, c_multiple=2, dma_dims=2),
        heuristics={"tile_w_multiple": 2, "tile_c_multiple": 2}),
}


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    return int(float(text.rstrip("KMB") if scale > 1 else text) * scale)


def model_files(pattern: str) -> list[Path]:
    paths = sorted(glob.glob(os.path.join(MODELS, "**", pattern), recursive=True))
    return [Path(p) for p in paths if "lstm" not in Path(p).name.lower() and Path(p).is_file()]


def layers_of(path: Path):
    dep = deploy(path, Options())
    out = []
    for k, kernel in enumerate(dep.kernels):
        g = geometry(kernel, k)
        if g is not None:
            out.append(g)
    return out


def tile_network(geoms, l1: int, config: TilingConfig) -> dict:
    """Greedy and CP-SAT for every layer; totals and the notable layers."""
    row = dict(layers=len(geoms), tiled=0, infeasible=0, greedy=0, cpsat=0, dma_greedy=0, dma_cpsat=0,
               solve_s=0.0, best=None, worst=None, fallbacks=0, slowest=None)
    for g in geoms:
        try:
            gr = greedy_tiling(g, l1, config.cost)
        except TilingInfeasible:
            row["infeasible"] += 1
            continue
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cp = plan_tiling(g, l1, "cpsat", config)
        row["solve_s"] += time.perf_counter() - start
        row["tiled"] += gr.solver != "untiled"
        row["fallbacks"] += cp.status == "FALLBACK"
        row["greedy"] += gr.modeled_cycles
        row["cpsat"] += cp.modeled_cycles
        row["dma_greedy"] += schedule(g, gr.tile_shape, config.cost).transfers
        row["dma_cpsat"] += schedule(g, cp.tile_shape, config.cost).transfers
        gain = gr.modeled_cycles - cp.modeled_cycles
        if row["best"] is None or gain > row["best"][0]:
            row["best"] = (gain, g, gr, cp)
        if row["slowest"] is None or cp.modeled_cycles > row["slowest"][0]:
            row["slowest"] = (cp.modeled_cycles, g, cp)
    return row


def fmt_cycles(c: int) -> str:
    return f"{c / 1e6:.2f}M" if c >= 1e5 else f"{c / 1e3:.1f}k"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--l1", default="64K", help="L1 budget(s), comma-separated (e.g. 64K,32K,16K)")
    ap.add_argument("--target", default="gap8", help=f"cost model(s): {', '.join(TARGETS)}")
    ap.add_argument("--objective", default="cycles", choices=["cycles", "l1"])
    ap.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per layer")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default="*.tflite", help="file name glob under the models folder")
    args = ap.parse_args(argv)

    budgets = [parse_size(s) for s in args.l1.split(",") if s.strip()]
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    networks = []
    for path in model_files(args.models):
        try:
            networks.append((path, layers_of(path)))
        except Exception as e:  # noqa: BLE001 -- a model the front end rejects is reported, not fatal
            print(f"skip {path.name}: {type(e).__name__}: {e}", file=sys.stderr)

    print(f"objective={args.objective} time_limit={args.time_limit}s workers={args.workers} "
          f"(cycles: solver.tiling_cost.modeled_cycles under the target's cost dict)\n")
    header = (f"{'target':<9} {'L1':>5} {'model':<38} {'lay':>3} {'tiled':>5} {'inf':>3} {'greedy':>9} "
              f"{'cpsat':>9} {'ratio':>6} {'DMA xfers g->c':>17} {'solve':>6}  worst layer (share) | best gain: greedy -> cpsat tile")
    print(header)
    print("-" * len(header))
    for target in targets:
        spec = TARGETS[target]
        config = TilingConfig(objective=args.objective, heuristics=spec["heuristics"], cost=spec["cost"],
                              time_limit_s=args.time_limit, workers=args.workers, seed=0)
        for l1 in budgets:
            sum_g = sum_c = 0
            for path, geoms in networks:
                if not geoms:
                    continue
                r = tile_network(geoms, l1, config)
                sum_g, sum_c = sum_g + r["greedy"], sum_c + r["cpsat"]
                ratio = r["cpsat"] / r["greedy"] if r["greedy"] else 1.0
                best = ""
                if r["slowest"]:
                    cyc, g, cp = r["slowest"]
                    best = (f"L{g.layer} {g.kind} {g.out_h}x{g.out_w}x{g.out_c} "
                            f"({100 * cyc / max(1, r['cpsat']):.0f}%)")
                if r["best"] and r["best"][0] > 0:
                    _, g, gr, cp = r["best"]
                    best += (f" | L{g.layer}: {'x'.join(map(str, gr.tile_shape))} -> "
                             f"{'x'.join(map(str, cp.tile_shape))} ({fmt_cycles(gr.modeled_cycles)} -> "
                             f"{fmt_cycles(cp.modeled_cycles)})")
                if r["fallbacks"]:
                    best += f" [{r['fallbacks']} fallback]"
                name = f"{path.parent.name}/{path.stem}"[:38]
                print(f"{target:<9} {l1 // 1024:>4}K {name:<38} {r['layers']:>3} {r['tiled']:>5} {r['infeasible']:>3} "
                      f"{fmt_cycles(r['greedy']):>9} {fmt_cycles(r['cpsat']):>9} {ratio:>6.3f} "
                      f"{r['dma_greedy']:>8}->{r['dma_cpsat']:<8} {r['solve_s']:>5.2f}s  {best}")
            if sum_g:
                print(f"{target:<9} {l1 // 1024:>4}K {'ALL':<38} {'':>3} {'':>5} {'':>3} {fmt_cycles(sum_g):>9} "
                      f"{fmt_cycles(sum_c):>9} {sum_c / sum_g:>6.3f}")
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
