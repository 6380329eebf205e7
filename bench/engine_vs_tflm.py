"""Benchmark: our generated C engines against TFLite Micro and LiteRT's reference kernels.

For every shared int8 model (shared/models/tflite, all but the two LSTM models) it reports

* deploy wall time: ``deploy()`` alone, median of ``--deploy-repeat`` calls
  (target: under 5 s for every MLPerf Tiny model);
* host latency of our engine built with -O2, measured inside one process by
  bench/harness_timing.c (inputs read once, warm-up, then N inferences each timed
  with clock_gettime(CLOCK_MONOTONIC), median);
* TFLite Micro interpreter latency (``tflite_micro.runtime.Interpreter``) and LiteRT
  reference-kernel latency (``OpResolverType.BUILTIN_REF``, one thread): ``invoke()``
  timed with ``time.perf_counter_ns``, median over the same number of runs, same input
  (LiteRT refuses person_detect: n/a);
* the speed ratios TFLM / ours and LiteRT-ref / ours;
* our SRAM (``memory['sram_bytes']``) against TFLite Micro's minimal arena;
* MACs.

Everything runs on the same seeded random input; the inputs are written again before
every inference (untimed) in all three runtimes, because an arena may reuse an input's
bytes. Our outputs on the timed input must equal LiteRT's (TFLM's where LiteRT refuses the
model) bit for bit, so the benchmark never times a wrong engine; a mismatch is flagged in
the table and makes the script exit with status 1.

Run from the project root:  python bench/engine_vs_tflm.py [--models kws resnet8] [--repeat N]
Machines are shared and noisy: read the medians and ratios, not single numbers.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.golden import NP_DTYPES  # noqa: E402
from deployer.pipeline import Options, deploy
from solver.plan import Plan  # noqa: E402
from deployer.verify import random_inputs  # noqa: E402
from network_parser.errors import DeployError  # noqa: E402

HARNESS = Path(__file__).resolve().parent / "harness_timing.c"
DEFAULT_MODELS_DIR = ROOT / "tests" / "model_files" / "tflite"

# (short name, path under shared/models/tflite). The two LSTM models
# (tflm/trained_lstm_int8.tflite, tflm/micro_speech_lstm.tflite) are left out on purpose.
MODELS = [
    ("kws", "mlperf_tiny/kws_ref_model.tflite"),
    ("vww_96", "mlperf_tiny/vww_96_int8.tflite"),
    ("resnet8", "mlperf_tiny/pretrainedResnet_quant.tflite"),
    ("ad01", "mlperf_tiny/ad01_int8.tflite"),
    ("str_ww", "mlperf_tiny/str_ww_ref_model.tflite"),
    ("hello_world", "tflm/hello_world_int8.tflite"),
    ("micro_speech", "tflm/micro_speech_quantized.tflite"),
    ("person_detect", "tflm/person_detect.tflite"),
    ("simple_add", "tflm/simple_add_model.tflite"),
    ("mobilenet_v2_224", "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"),
    ("mcunet_vww", "mcunet/mcunet_vww.tflite"),
    ("mbv2_035_96", "synthetic/mobilenetv2_035_96_random.tflite"),
]
MLPERF_TINY = {"kws", "vww_96", "resnet8", "ad01", "str_ww"}
DEPLOY_TARGET_S = 5.0

# TFLite Micro's minimal arena in bytes, found by bisection, as measured and recorded in
# /work/shared/models/README.md ("Facts worth knowing"). Other models: n/a.
TFLM_MIN_ARENA = {
    "kws": 24_272,
    "vww_96": 103_672,
    "resnet8": 55_984,
    "ad01": 4_632,
    "person_detect": 85_264,
    "mcunet_vww": 224_976,
    "mobilenet_v2_224": 2_607_160,
}

# Models above this many MACs get a tenth of the repeats (at least 3): mobilenet_v2_224
# takes about half a second per TFLite Micro inference.
LARGE_MACS = 100_000_000


@dataclass
class Row:
    name: str
    note: str = ""
    deploy_s: float | None = None
    macs: int | None = None
    runs: int = 0
    ours_ns: float | None = None
    tflm_ns: float | None = None
    litert_ns: float | None = None
    sram: int | None = None
    check: str = ""
    failed: bool = False  # deploy or build failed (a missing file is only a note)
    ok: bool | None = None
    details: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- our engine


def build_timing_engine(dep: Plan, workdir: Path) -> Path:
    """Compile the generated engine with bench/harness_timing.c at -O2."""
    flags = [f for f in dep.backend.cflags if not f.startswith("-O")] + ["-O2"]
    for name, text in dep.files.items():
        (workdir / name).write_text(text)
    sources = [str(workdir / n) for n in dep.files if n.endswith(".c")]  # as deployer/verify.py links them
    exe = workdir / "engine_timing"
    cmd = [dep.backend.cc, *flags, "-I", str(workdir), *sources, str(HARNESS), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{dep.backend.cc} failed:\n{proc.stderr[-3000:]}")
    return exe


def time_ours(dep: Plan, exe: Path, inputs: list[np.ndarray], warmup: int, runs: int):
    g = dep.graph
    payload = b"".join(np.ascontiguousarray(x, dtype=NP_DTYPES[g.tensors[t].dtype]).tobytes()
                       for t, x in zip(g.inputs, inputs))
    proc = subprocess.run([str(exe), str(warmup), str(runs)], input=payload, capture_output=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"timing harness exited with status {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    median, outs = None, {}
    for line in proc.stdout.decode().splitlines():
        parts = line.split()
        if parts[0] == "median_ns":
            median = float(parts[1])
        elif parts[0] == "output":
            t = g.tensors[g.outputs[int(parts[1])]]
            data = bytes.fromhex(parts[2]) if len(parts) > 2 else b""
            outs[int(parts[1])] = np.frombuffer(data, NP_DTYPES[t.dtype]).reshape(t.shape)
    return median, [outs[i] for i in range(len(g.outputs))]


# ---------------------------------------------------------------- the interpreters


def _median_invoke(set_inputs, invoke, warmup: int, runs: int) -> float:
    """Median ns of ``invoke`` over ``runs`` calls after ``warmup``; inputs are rewritten, untimed,
    before each call (an interpreter may reuse its input buffers)."""
    times = []
    for k in range(warmup + runs):
        set_inputs()
        t0 = time.perf_counter_ns()
        invoke()
        if k >= warmup:
            times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def time_tflm(model: Path, inputs: list[np.ndarray], n_outputs: int, warmup: int, runs: int):
    from tflite_micro import runtime

    # Default arena = 10x the file size, too small for tiny files with big activations.
    arena = max(10 * model.stat().st_size, 4 << 20)
    it = runtime.Interpreter.from_file(str(model), arena_size=arena)
    ready = []
    for i, x in enumerate(inputs):
        d = it.get_input_details(i)
        ready.append(np.ascontiguousarray(np.asarray(x).reshape(d["shape"]).astype(d["dtype"])))
    def set_inputs():
        for i, x in enumerate(ready):
            it.set_input(x, i)
    median = _median_invoke(set_inputs, it.invoke, warmup, runs)
    return median, [np.array(it.get_output(i)) for i in range(n_outputs)]


def time_litert(model: Path, inputs: list[np.ndarray], warmup: int, runs: int):
    """(median ns, outputs), or (None, reason) when LiteRT refuses the model."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        it = Interpreter(model_path=str(model), num_threads=1,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        return None, str(e).strip().splitlines()[-1].split(".")[0][:120]
    ready = [(d["index"], np.ascontiguousarray(np.asarray(x).reshape(d["shape"]).astype(d["dtype"])))
             for d, x in zip(it.get_input_details(), inputs)]
    def set_inputs():
        for index, x in ready:
            it.set_tensor(index, x)
    median = _median_invoke(set_inputs, it.invoke, warmup, runs)
    return median, [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def same(ours: list[np.ndarray], ref: list[np.ndarray]) -> tuple[bool, float]:
    if len(ours) != len(ref):
        return False, float("inf")
    worst, equal = 0.0, True
    for a, b in zip(ours, ref):
        b = np.asarray(b)
        if a.size != b.size:
            return False, float("inf")
        b = b.reshape(a.shape)
        equal &= bool(np.array_equal(a, b)) and a.dtype == b.dtype
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)))
    return equal, worst


# ---------------------------------------------------------------- one model


def bench_model(name: str, path: Path, args, workroot: Path) -> Row:
    row = Row(name)
    if not path.exists():
        row.note = f"skipped: {path} not found"
        return row
    times, dep = [], None
    try:
        for _ in range(args.deploy_repeat):
            t0 = time.perf_counter()
            dep = deploy(path, Options(target="host"))
            times.append(time.perf_counter() - t0)
    except DeployError as e:
        row.note, row.failed = f"skipped: deploy failed: {e}", True
        return row
    row.deploy_s = statistics.median(times)
    row.macs = dep.macs
    row.sram = dep.memory.sram_bytes
    large = row.macs > LARGE_MACS
    runs = max(3, args.repeat // 10) if large else args.repeat
    warmup = 1 if large else max(1, min(5, runs // 10))
    row.runs = runs
    inputs = random_inputs(dep.graph, args.seed)

    workdir = workroot / name
    workdir.mkdir()
    try:
        exe = build_timing_engine(dep, workdir)
    except RuntimeError as e:
        row.note, row.failed = f"skipped: build failed: {e}", True
        return row
    row.ours_ns, ours = time_ours(dep, exe, inputs, warmup, runs)

    n_out = len(dep.graph.outputs)
    tflm_outs = None
    try:
        row.tflm_ns, tflm_outs = time_tflm(path, inputs, n_out, warmup, runs)
    except Exception as e:  # noqa: BLE001 - report and keep benchmarking the others
        row.details.append(f"TFLM failed: {type(e).__name__}: {str(e)[:120]}")
    litert_ns, litert = time_litert(path, inputs, warmup, runs)
    if litert_ns is None:
        row.details.append(f"LiteRT-ref refuses the model ({litert})")
        litert = None
    row.litert_ns = litert_ns

    ref_name, ref = ("LiteRT-ref", litert) if litert is not None else ("TFLM", tflm_outs)
    if ref is None:
        row.ok, row.check = False, "no reference ran"
    else:
        equal, diff = same(ours, ref)
        row.ok = equal
        row.check = f"ours == {ref_name}" if equal else f"ours != {ref_name} (max |diff| {diff:g})"
        if ref_name == "LiteRT-ref" and tflm_outs is not None:
            t_equal, t_diff = same(ours, tflm_outs)
            row.check += ("; TFLM agrees" if t_equal
                          else f"; TFLM itself differs from LiteRT-ref (max |diff| {t_diff:g})")
    return row


# ---------------------------------------------------------------- printing


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    if ns < 10_000:
        return f"{ns / 1e3:.3f} us"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} us"
    return f"{ns / 1e6:.2f} ms"


def fmt_ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or not den else f"{num / den:.2f}x"


def print_table(rows: list[Row]) -> None:
    head = ["model", "deploy s", "MACs", "runs", "ours -O2", "TFLM", "LiteRT-ref", "TFLM/ours",
            "LiteRT/ours", "ours SRAM B", "TFLM arena B", "SRAM/TFLM", "check"]
    body = []
    for r in rows:
        if r.ours_ns is None:
            continue
        arena = TFLM_MIN_ARENA.get(r.name)
        body.append([
            r.name,
            f"{r.deploy_s:.3f}",
            f"{r.macs:,}",
            str(r.runs),
            fmt_ns(r.ours_ns),
            fmt_ns(r.tflm_ns),
            fmt_ns(r.litert_ns),
            fmt_ratio(r.tflm_ns, r.ours_ns),
            fmt_ratio(r.litert_ns, r.ours_ns),
            f"{r.sram:,}",
            f"{arena:,}" if arena else "n/a",
            fmt_ratio(r.sram, arena),
            "ok" if r.ok else "WRONG",
        ])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    left = {0, 12}

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(head))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(line(b))


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        gcc = "gcc ?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"host: {cpu}, {os.cpu_count()} CPUs, load {load}; {gcc}"


def parse_args(argv=None):
    names = [n for n, _ in MODELS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="models: " + ", ".join(names))
    p.add_argument("--models", nargs="+", metavar="NAME",
                   help="subset to run (short names above, file stems or paths under the models folder; "
                        "comma-separated also accepted)")
    p.add_argument("--repeat", type=int, default=100,
                   help=f"timed inferences per runtime and model (default 100; models above "
                        f"{LARGE_MACS:,} MACs get max(3, N/10))")
    p.add_argument("--deploy-repeat", type=int, default=3, help="deploy() calls per model, median (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    p.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS_DIR,
                   help=f"shared int8 .tflite folder (default {DEFAULT_MODELS_DIR})")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.deploy_repeat < 1:
        p.error("--repeat and --deploy-repeat must be at least 1")
    selected = list(MODELS)
    if args.models:
        wanted = [w for item in args.models for w in item.split(",") if w]
        selected = []
        for w in wanted:
            match = [(n, rel) for n, rel in MODELS if w in (n, rel, Path(rel).stem, Path(rel).name)]
            if not match:
                p.error(f"unknown model '{w}' (known: {', '.join(names)})")
            selected += [m for m in match if m not in selected]
    return args, selected


def main(argv=None) -> int:
    args, selected = parse_args(argv)
    start = time.perf_counter()
    print(machine_line())
    print(f"repeat {args.repeat} (models > {LARGE_MACS:,} MACs: {max(3, args.repeat // 10)}), "
          f"deploy median of {args.deploy_repeat}, input seed {args.seed}; latencies are medians "
          f"per inference", flush=True)
    rows = []
    workroot = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    try:
        for name, rel in selected:
            print(f"  ... {name}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            row = bench_model(name, args.models_dir / rel, args, workroot)
            print(f"      {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)

    print()
    print_table(rows)
    print()
    print("output check (our engine's output on the timed input vs the reference interpreter):")
    for r in rows:
        if r.ours_ns is not None:
            print(f"  {r.name}: {r.check}" + ("" if r.ok else "  <-- WRONG ENGINE, its timing is meaningless"))
        for d in r.details:
            print(f"    note: {d}")
    notes = [r for r in rows if r.note]
    if notes:
        print("skipped:")
        for r in notes:
            print(f"  {r.name}: {r.note}")
    mlperf = [r for r in rows if r.name in MLPERF_TINY and r.deploy_s is not None]
    if mlperf:
        slow = max(mlperf, key=lambda r: r.deploy_s)
        verdict = "met" if slow.deploy_s < DEPLOY_TARGET_S else "MISSED"
        print(f"deploy time target (< {DEPLOY_TARGET_S:g} s per MLPerf Tiny model): {verdict}; "
              f"slowest {slow.name} {slow.deploy_s:.3f} s")
    print("ratios: TFLM/ours and LiteRT/ours = how many times faster our engine is; "
          "SRAM/TFLM = our sram_bytes / TFLite Micro's minimal arena (shared/models/README.md).")
    print(f"total {time.perf_counter() - start:.0f} s", flush=True)
    good = all(r.ok for r in rows if r.ours_ns is not None) and not any(r.failed for r in rows)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
