"""Every shared ONNX network (DORY's NEMO/Quantlab graphs, Deeploy's RequantShift graphs): what
the reader made of it and how its engines compare with the network's own expected outputs.

    python bench/onnx_bench.py [--qemu] [--l1 32K]

Per network: ONNX nodes, IR layers (and the layers DORY dumps: every layer but the edges'
transposes, reshapes and uint8 conversions), MACs, the arena and flash of a host deployment, the
largest difference from the expected output of the host engine, of the GAP8 engine tiled at
--l1 in the cluster emulation, and (with --qemu) of the Cortex-M7 engine on QEMU with its
instructions per MAC (SMLAD kernels, integer requantization per lane).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.cli import _input_type, parse_size  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.test_vectors import find_vectors, to_engine_input, to_engine_output  # noqa: E402
from deployer.verify import build_engine, run_engine  # noqa: E402
from network_parser.errors import DeployError  # noqa: E402
from network_parser.onnx_common import load_onnx  # noqa: E402
from tests.host.test_onnx import EDGE_OPS  # noqa: E402
from tests.models import DEEPLOY_NETS, DORY_NETS, ONNX  # noqa: E402
from tests.target.test_gap8 import emulated  # noqa: E402


def networks() -> list[tuple[str, Path]]:
    """DORY's networks, every one of Deeploy's integer kernel tests on disk (those the deployer
    refuses too: their rows say why), and Deeploy's whole networks."""
    nets = [(f"dory/{folder}", ONNX / "dory" / folder / file) for folder, file, _ in DORY_NETS]
    kernels = sorted((ONNX / "deeploy" / "Kernels" / "Integer").rglob("network.onnx"))
    nets += [(f"deeploy/{p.parent.relative_to(ONNX / 'deeploy')}", p) for p in kernels]
    nets += [(f"deeploy/{rel}", ONNX / "deeploy" / rel / "network.onnx") for rel in DEEPLOY_NETS
             if not rel.startswith("Kernels/")]
    return [(name, path) for name, path in nets if path.exists()]


def worst_diff(dep, vec, outs) -> int:
    return max(int(np.abs(o.astype(np.int64) - to_engine_output(dep.graph, j, y).astype(np.int64)).max())
               for j, (o, y) in enumerate(zip(outs, vec.outputs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qemu", action="store_true", help="also run the Cortex-M7 engines on QEMU")
    ap.add_argument("--l1", default="32K", help="GAP8 L1 budget (default 32K)")
    args = ap.parse_args()
    l1 = parse_size(args.l1)
    rows = []
    for name, path in networks():
        kind = _input_type(path, None)
        try:
            dep = deploy(path, Options(input_type=kind))
        except DeployError as e:  # refused: the reason, in the row
            rows.append((name, len(load_onnx(path).graph.node), *["-"] * 11,
                         f"refused: {str(e).split(': ', 2)[-1][:90]}"))
            continue
        vec = find_vectors(path, dep.graph)
        sample = [to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)]
        host = worst_diff(dep, vec, run_engine(build_engine(dep), [sample])[0][0])
        g8 = deploy(path, Options(input_type=kind, target="gap8", l1=l1, patch="off"))
        gap8 = worst_diff(g8, vec, run_engine(emulated(g8), [sample])[0][0])
        tiles = sum(t.tiles for _, t in g8.tilings.values())
        m7 = ipm = "-"
        if args.qemu:
            from deployer.qemu import instructions_per_inference, build_elf, parse_output, run, samples_payload
            d7 = deploy(path, Options(input_type=kind, target="cortex-m7", patch="off"))
            elf = build_elf(d7)
            outs, _ = parse_output(d7.graph, run(elf, samples_payload(d7.graph, [sample])).output, 1, False)
            m7 = worst_diff(d7, vec, outs[0])
            n, _ = instructions_per_inference(elf, samples_payload(d7.graph, [sample]))
            ipm = f"{n / d7.macs:.2f}" if d7.macs else "-"
        layers = [layer for layer in dep.graph.layers if layer.op not in EDGE_OPS]
        rows.append((name, len(load_onnx(path).graph.node), len(dep.graph.layers), len(layers), dep.macs,
                     dep.memory.arena_bytes, dep.memory.flash_bytes, vec.source, host, gap8, tiles, m7, ipm, ""))
    head = ("network", "nodes", "IR layers", "compute layers", "MACs", "arena B", "flash B", "vectors",
            "host |diff|", f"gap8 {args.l1} |diff|", "gap8 tiles", "M7 |diff|", "M7 instr/MAC", "")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
