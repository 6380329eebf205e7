"""Recurrent layers on QEMU's Cortex-M7: the instructions per MAC of each LSTM and SVDF layer,
the target's SMLAD variant beside the portable C kernel (per-layer counts of the same engines,
each checked bit-exact against LiteRT over a stream of inferences with a reset), and the memory
(arena + state kept across inferences) beside TFLite Micro's arena for the same model.

    python bench/recurrent_bench.py [--target cortex-m7]

Models: the two shared LSTM models, and models the project's builder makes (an SVDF keyword
spotter, a larger LSTM, a larger SVDF). TFLite Micro + CMSIS-NN cannot be built for the QEMU
board here (no CMSIS-NN sources offline), so its instruction counts are not in the table; its
arena is TFLite Micro's own interpreter's (the Python tflite_micro package, reference kernels);
"refused": its LSTM kernel takes the full set of gate tensors only (no CIFG, peepholes or
projection)."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.qemu import instructions_per_layer, verify_on_qemu  # noqa: E402
from deployer.verify import random_inputs  # noqa: E402
from layer_analyzer import kernels as K  # noqa: E402
from tests.tflite_builder import ModelBuilder  # noqa: E402

SHARED = Path(__file__).resolve().parents[1] / "tests" / "model_files" / "tflite" / "tflm"
RECURRENT = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "SVDF")


def built(folder: Path) -> list[tuple[str, Path]]:
    def save(name, make):
        b = ModelBuilder(7)
        b.output(make(b))
        path = folder / f"{name}.tflite"
        b.save(path)
        return name, path
    return [
        save("svdf keyword spotter (40 -> SVDF 32 x10 -> SVDF 16 r2 x6 -> FC 4)",
             lambda b: b.softmax(b.fully_connected(b.svdf(b.svdf(b.input((1, 40)), 32, memory=10), 16, rank=2,
                                                            memory=6), 4))),
        save("LSTM 40 -> 64 cells, 25 steps", lambda b: b.lstm(b.input((1, 25, 40)), 64)),
        save("LSTM 40 -> 64 cells projected to 32, 25 steps", lambda b: b.lstm(b.input((1, 25, 40)), 64, projection=32)),
        save("CIFG LSTM with peepholes 40 -> 64 cells, 25 steps",
             lambda b: b.lstm(b.input((1, 25, 40)), 64, cifg=True, peephole=True)),
        save("layer-normalized LSTM 40 -> 64 cells, 25 steps", lambda b: b.lstm(b.input((1, 25, 40)), 64, layer_norm=True)),
        save("SVDF 64 -> 128 filters, memory 16", lambda b: b.svdf(b.input((1, 64)), 128, memory=16)),
    ]


def tflm_arena(model: Path) -> tuple[int, int] | str:
    """(arena total, of which tensors) of TFLite Micro's interpreter for ``model``, from its own
    allocation report (printed by its C++ code, so read from a child process's output); else
    "refused" (its kernels would not prepare the model) or "failed"."""
    code = (f"import numpy as np; from tflite_micro import runtime; "
            f"it = runtime.Interpreter.from_file({str(model)!r}, arena_size=1 << 22); "
            f"d = it.get_input_details(0); it.set_input(np.zeros(d['shape'], d['dtype']), 0); it.invoke(); "
            f"it.print_allocations()")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr  # its logging goes to either, depending on where it writes
        if proc.returncode and "failed to prepare" in out:
            return "refused"
    except (OSError, subprocess.TimeoutExpired):
        return "failed"
    total = re.search(r"Arena allocation total (\d+) bytes", out)
    head = re.search(r"Arena allocation head (\d+) bytes", out)
    return (int(total.group(1)), int(head.group(1))) if total and head else "failed"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cortex-m7")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        models = [(f"{p.stem} (shared)", p) for p in (SHARED / "trained_lstm_int8.tflite", SHARED / "micro_speech_lstm.tflite")
                  if p.exists()] + built(Path(tmp))
        print(f"instructions per MAC of the recurrent layers on {args.target} (QEMU), bit-exact over a stream")
        print(f"{'model':<64} {'layer':<30} {'MACs':>10} {'portable':>9} {'SMLAD':>7} {'ratio':>6}")
        memory_rows = []
        for name, path in models:
            per = {}
            for kernels in ("plain", "auto"):
                dep = deploy(path, Options(target=args.target, kernels=kernels))
                samples = [random_inputs(dep.graph, s) for s in range(3)]
                result = verify_on_qemu(dep, path, samples)
                bad += any(o["max_abs_diff"] for o in result["outputs"])
                per[kernels] = instructions_per_layer(dep, samples[0])
            for k, layer in enumerate(dep.graph.layers):
                if layer.op in RECURRENT:
                    macs = K.macs(dep.kernels[k])
                    plain, dsp = per["plain"][k] / macs, per["auto"][k] / macs
                    print(f"{name:<64} {layer.op + ' ' + str(k):<30} {macs:>10,} {plain:>9.2f} {dsp:>7.2f} "
                          f"{plain / dsp:>5.1f}x", flush=True)
            m = dep.memory
            tflm = tflm_arena(path)
            memory_rows.append((name, m.arena_bytes, m.state_bytes, tflm))
        print()
        print(f"{'model':<64} {'arena':>8} {'state':>7} {'ours':>8} {'TFLM arena':>11} {'(tensors)':>10} {'ours/TFLM':>10}")
        for name, arena, state, tflm in memory_rows:
            ours = arena + state
            t = f"{tflm[0]:>11,} {tflm[1]:>10,} {ours / tflm[0]:>10.2f}" if isinstance(tflm, tuple) else \
                f"{tflm:>11} {'-':>10} {'-':>10}"
            print(f"{name:<64} {arena:>8,} {state:>7,} {ours:>8,} {t}")
    if bad:
        print(f"{bad} engines were not bit-exact")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
