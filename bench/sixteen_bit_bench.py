"""16x8 layers on QEMU's Cortex-M7 (or M55): instructions per MAC of each weighted layer of a
model in 16 bits beside the same model in 8 bits (portable and the target's DSP kernels) and of
the whole model (total: every layer's instructions), every engine checked bit-exact against
LiteRT, and the arena beside TFLite Micro's for the same model.

    python bench/sixteen_bit_bench.py [--target cortex-m7|cortex-m55] [--kernels auto|smlad]

Models: the project's builder makes each twice from one seed, once with int16 activations
("16x8": int8 weights, int64 biases) and once in int8, each with the portable kernels and with
the target's DSP kernels (16x8 convolutions and fully connected layers: SMLALD into 64 bits;
the 16-bit depthwise layer stays portable; on the M55 the Helium kernels: VMLALDAVA, 8 MACs
into 64 bits, and the depthwise layer 4 channels per int32 vector). TFLite Micro + CMSIS-NN cannot be built
for the QEMU board here (no CMSIS-NN sources offline); its arena is its Python interpreter's."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recurrent_bench import tflm_arena  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.qemu import instructions_per_layer, verify_on_qemu  # noqa: E402
from deployer.verify import random_inputs  # noqa: E402
from layer_analyzer import kernels as K  # noqa: E402
from tests.tflite_builder import ModelBuilder  # noqa: E402


def _audio(b):
    """A spectrogram (49 frames x 40 bins) through three convolutions, pooling and a classifier."""
    x = b.conv2d(b.input((1, 49, 40, 1)), 16, (5, 5), (2, 2), activation="RELU")
    x = b.depthwise_conv2d(x, 1, (3, 3), activation="RELU")
    x = b.conv2d(x, 32, (1, 1), activation="RELU")
    x = b.conv2d(x, 32, (3, 3), (2, 2), activation="RELU")
    x = b.avg_pool(x, (13, 10), (1, 1))
    return b.fully_connected(b.reshape(x, (1, 32)), 12)


MODELS = {"audio conv net 49x40 (conv 5x5, depthwise, 1x1, 3x3, pool, FC)": _audio}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cortex-m7")
    ap.add_argument("--kernels", default="auto", help="the DSP columns' kernels (auto: the target's families; "
                    "smlad on the M55: the SMLAD family alone)")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per MAC on {args.target} (QEMU), every engine bit-exact against LiteRT")
        print(f"{'model':<66} {'layer':<20} {'MACs':>9} {'16x8':>6} {'16x8 DSP':>9} {'int8':>6} {'int8 DSP':>9}")
        memory = []
        for name, make in MODELS.items():
            per, deps = {}, {}
            for bits, activations in ((16, "int16"), (8, "int8")):
                b = ModelBuilder(3, activations=activations)
                b.output(make(b))
                path = Path(tmp) / f"m{bits}.tflite"
                b.save(path)
                for kernels in ("plain", "auto"):
                    dep = deploy(path, Options(target=args.target, kernels=args.kernels if kernels == "auto" else kernels))
                    samples = [random_inputs(dep.graph, s) for s in range(2)]
                    bad += any(o["max_abs_diff"] for o in verify_on_qemu(dep, path, samples)["outputs"])
                    per[bits, kernels] = instructions_per_layer(dep, samples[0])
                    deps[bits] = dep
                memory.append((f"{name} {'16x8' if bits == 16 else 'int8'}", deps[bits].memory.arena_bytes,
                               tflm_arena(path)))
            keys = ((16, "plain"), (16, "auto"), (8, "plain"), (8, "auto"))
            for k, layer in enumerate(deps[16].graph.layers):
                macs = K.macs(deps[16].kernels[k])
                if macs:
                    i16, d16, i8, d8 = (per[key][k] / macs for key in keys)
                    print(f"{name:<66} {layer.op + ' ' + str(k):<20} {macs:>9,} {i16:>6.2f} {d16:>9.2f} {i8:>6.2f} {d8:>9.2f}",
                          flush=True)
            macs = sum(K.macs(kern) for kern in deps[16].kernels)  # every layer's instructions over the model's MACs
            i16, d16, i8, d8 = (sum(per[key]) / macs for key in keys)
            print(f"{name:<66} {'total':<20} {macs:>9,} {i16:>6.2f} {d16:>9.2f} {i8:>6.2f} {d8:>9.2f}", flush=True)
        print()
        print(f"{'model':<72} {'arena':>8} {'TFLM arena':>11} {'ours/TFLM':>10}")
        for name, arena, tflm in memory:
            t = f"{tflm[0]:>11,} {arena / tflm[0]:>10.2f}" if isinstance(tflm, tuple) else f"{tflm:>11} {'-':>10}"
            print(f"{name:<72} {arena:>8,} {t}")
    if bad:
        print(f"{bad} engines were not bit-exact")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
