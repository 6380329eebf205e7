"""What operator order could save on branched graphs: the whole-tensor peak of the file's order
beside the least peak over every topological order (exact: a search over the sets of ops run so
far, whose live bytes depend only on the set).

    python bench/order_bench.py

Models: the builder's audio U-Net and detection FPN, MLPerf Tiny's resnet8 (residual blocks).
Peaks count every tensor whole from the op writing it to its last reader (no in-place rules, no
outputs over inputs): the bound an order sets before the arena's own savings.
"""
from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.pipeline import Options, plan_front  # noqa: E402
from tests import model_zoo  # noqa: E402

MODELS = ROOT.parent / "shared" / "models" / "tflite"


def peaks(graph) -> tuple[int, int, int]:
    """(the file order's peak, the least peak of any order, sets of ops searched)."""
    n = len(graph.layers)
    writer = {t: layer.index for layer in graph.layers for t in layer.outputs}
    readers: dict[int, set] = {}
    for layer in graph.layers:
        for t in set(layer.inputs):
            if t in writer or t in graph.inputs:
                readers.setdefault(t, set()).add(layer.index)
    size = {t: graph.tensors[t].nbytes for t in set(writer) | set(graph.inputs)}
    before = [frozenset(writer[t] for t in layer.inputs if t in writer) for layer in graph.layers]
    kept = set(graph.outputs)

    def live(done: frozenset, k: int) -> int:
        """Bytes live while op k runs after the ops ``done``."""
        return sum(s for t, s in size.items()
                   if (t not in writer or writer[t] in done or writer[t] == k)
                   and (t in kept or not readers.get(t) or not readers[t] <= done))

    @functools.lru_cache(maxsize=None)
    def least(done: frozenset) -> int:
        if len(done) == n:
            return 0
        return min(max(live(done, k), least(done | {k})) for k in range(n) if k not in done and before[k] <= done)

    file_order = max((live(frozenset(range(k)), k) for k in range(n)), default=0)
    best = least(frozenset())
    return file_order, best, least.cache_info().currsize


def main() -> int:
    print(f"{'model':<16} {'ops':>4} {'file order':>11} {'best order':>11} {'ratio':>6} {'sets':>7}")
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name in ("audio_unet", "detection_fpn"):
            paths[name] = Path(folder) / f"{name}.tflite"
            getattr(model_zoo, name)().save(paths[name])
        resnet = MODELS / "mlperf_tiny" / "pretrainedResnet_quant.tflite"
        if resnet.exists():
            paths["resnet8"] = resnet
        for name, path in paths.items():
            graph = plan_front(path, Options()).graph
            a, b, sets = peaks(graph)
            print(f"{name:<16} {len(graph.layers):>4} {a:>11,} {b:>11,} {b / a:>6.3f} {sets:>7,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
