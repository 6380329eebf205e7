"""Instructions per MAC (per element for elementwise ops) of each operator that has MACs, on
QEMU's Cortex-M boards: the target's DSP variant against the portable C kernel, same layer,
same run (instruction counts, not times: QEMU's counts do not depend on the machine).

    python bench/operator_bench.py [--target cortex-m7]

Every engine is checked bit-exact against LiteRT before its count is printed."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.qemu import verify_on_qemu  # noqa: E402
from deployer.verify import random_inputs  # noqa: E402
from tests.tflite_builder import ModelBuilder  # noqa: E402


def layers():
    """(name, builder function, work unit) for one layer each."""
    def model(make):
        def build():
            mb = ModelBuilder(1)
            mb.output(make(mb))
            return mb
        return build
    return [
        ("CONV_2D 3x3 32->32, 32x32", model(lambda mb: mb.conv2d(mb.input((1, 32, 32, 32)), 32)), "MAC"),
        ("CONV_2D 1x1 64->64, 16x16", model(lambda mb: mb.conv2d(mb.input((1, 16, 16, 64)), 64, kernel=(1, 1))), "MAC"),
        ("DEPTHWISE_CONV_2D 3x3 64, 32x32", model(lambda mb: mb.depthwise_conv2d(mb.input((1, 32, 32, 64)))), "MAC"),
        ("FULLY_CONNECTED 512->128", model(lambda mb: mb.fully_connected(mb.input((1, 512)), 128)), "MAC"),
        ("TRANSPOSE_CONV 3x3 s2 32->32, 16x16", model(lambda mb: mb.transpose_conv(mb.input((1, 16, 16, 32)), 32)), "MAC"),
        ("TRANSPOSE_CONV 2x2 s2 16->8, 16x16",
         model(lambda mb: mb.transpose_conv(mb.input((1, 16, 16, 16)), 8, kernel=(2, 2))), "MAC"),
        ("BATCH_MATMUL 32x64 by 64x64",
         model(lambda mb: mb.batch_matmul(mb.input((1, 32, 64)), mb.input((1, 64, 64)))), "MAC"),
        ("BATCH_MATMUL 32x64 by (64x64)^T",
         model(lambda mb: mb.batch_matmul(mb.input((1, 32, 64)), mb.input((1, 64, 64)), adj_y=True)), "MAC"),
        ("ADD 32x32x32", model(lambda mb: mb.add(mb.input((1, 32, 32, 32)), mb.input((1, 32, 32, 32)))), "element"),
        ("SUB 32x32x32", model(lambda mb: mb.sub(mb.input((1, 32, 32, 32)), mb.input((1, 32, 32, 32)))), "element"),
        ("MUL 32x32x32", model(lambda mb: mb.mul(mb.input((1, 32, 32, 32)), mb.input((1, 32, 32, 32)))), "element"),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cortex-m7")
    args = ap.parse_args(argv)
    print(f"{'layer':<38} {'unit':>8} {'portable':>10} {args.target + ' variant':>22} {'ratio':>7}  variant")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, build, unit in layers():
            path = Path(tmp) / "layer.tflite"
            build().save(path)
            counts, variant = [], "-"
            for kernels in ("plain", "auto"):
                dep = deploy(path, Options(target=args.target, kernels=kernels))
                result = verify_on_qemu(dep, path, [random_inputs(dep.graph, 0)])
                bad += any(o["max_abs_diff"] for o in result["outputs"])
                work = dep.macs if unit == "MAC" else dep.graph.tensors[dep.graph.outputs[0]].elements
                counts.append(result["instructions"] / work)
                if kernels == "auto":
                    variant = dep.layers[-1].variant.name
            print(f"{name:<38} {unit:>8} {counts[0]:>10.2f} {counts[1]:>22.2f} {counts[0] / counts[1]:>6.1f}x  {variant}",
                  flush=True)
    if bad:
        print(f"{bad} engines were not bit-exact")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
