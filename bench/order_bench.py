"""What operator order saves on branched graphs: the file's order beside the least-peak order
(solver.op_order), as modelled (whole tensors; then with in-place rules and outputs over inputs
counted as the arena places them) and as planned by deploy (--order file against --order auto,
and with fused stages at --max-overhead 0.35).

    python bench/order_bench.py

Models: the builder's Inception-style cells (listed breadth first), detection FPN and audio
U-Net, MLPerf Tiny's resnet8 (residual blocks).
"""
from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer import pipeline as P  # noqa: E402
from deployer.pipeline import Options, plan_deployment, plan_front  # noqa: E402
from solver.op_order import least_peak_order  # noqa: E402
from tests import model_zoo  # noqa: E402

MODELS = ROOT / "tests" / "model_files" / "tflite"


def modelled(path: Path) -> tuple[int, int, int, int, float]:
    """(file order, least order) whole-tensor peaks, then with the arena's savings; seconds."""
    front = P.choose_variants(P.note_target(plan_front(path, Options())))
    whole = least_peak_order(front.graph)
    start = time.perf_counter()
    saved = least_peak_order(front.graph, P.outside_arena(front), P._order_savings(front))
    return whole.file_peak, whole.peak, saved.file_peak, saved.peak, time.perf_counter() - start


def main() -> int:
    print(f"{'model':<16} {'ops':>4} | {'whole tensors':^17} | {'with overlaps':^17} | {'planned SRAM':^17} | "
          f"{'stages <=35% MACs':^17}")
    print(f"{'':<16} {'':>4} | {'file':>8} {'least':>8} | {'file':>8} {'least':>8} | {'file':>8} {'auto':>8} | "
          f"{'file':>8} {'auto':>8}")
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name in ("inception_cells", "detection_fpn", "audio_unet"):
            paths[name] = Path(folder) / f"{name}.tflite"
            getattr(model_zoo, name)().save(paths[name])
        resnet = MODELS / "mlperf_tiny" / "pretrainedResnet_quant.tflite"
        if resnet.exists():
            paths["resnet8"] = resnet
        for name, path in paths.items():
            a, b, c, d, _ = modelled(path)
            base = Options()
            planned = [plan_deployment(path, replace(base, order=o)).memory.sram_bytes for o in ("file", "auto")]
            staged = [plan_deployment(path, replace(base, order=o, max_overhead=0.35)).memory.sram_bytes
                      for o in ("file", "auto")]
            n = len(plan_front(path, base).graph.layers)
            print(f"{name:<16} {n:>4} | {a:>8,} {b:>8,} | {c:>8,} {d:>8,} | {planned[0]:>8,} {planned[1]:>8,} | "
                  f"{staged[0]:>8,} {staged[1]:>8,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
