"""Build a generated engine with the host compiler, run it, compare with the references."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from network_parser.errors import DeployError, UsageError
from network_parser.ir import Graph

from . import build_cache, golden
from .golden import NP_DTYPES
from solver.plan import Plan
from .reference import run_litert_stream, run_reference

HARNESS = Path(__file__).resolve().parent / "harness" / "verify_main.c"
# float-cast-overflow is not part of gcc's "undefined" group: a float reaching an integer it does not fit
SANITIZE_FLAGS = ("-fsanitize=address,undefined,float-cast-overflow", "-fno-sanitize-recover=all", "-g", "-O1")


class BuildError(DeployError):
    kind = "BuildError"


@dataclass(frozen=True)
class Engine:
    exe: Path
    graph: Graph
    trace: bool
    env: tuple[tuple[str, str], ...] = ()  # what its start-up reads (an emulated target's L3)


def as_bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


DOCUMENTS = frozenset({"manifest.json", "report.html"})  # written for people and tools, never compiled


def files_digest(files: dict):
    """A sha256 over an engine's sources (names and contents), to key build caches."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name not in DOCUMENTS:
            digest.update(name.encode() + b"\0" + as_bytes(files[name]) + b"\0")
    return digest


def write_files(files: dict, folder: Path) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(as_bytes(data))


def build_engine(dep: Plan, sanitize: bool = False, trace: bool = False,
                 extra_flags: tuple[str, ...] = (), cc: str | None = None, cflags: tuple[str, ...] | None = None,
                 extra_sources: tuple[Path, ...] = ()) -> Engine:
    """Compile engine + harness; identical sources and flags reuse the cached binary.

    ``cc`` / ``cflags`` replace the backend's compiler and flags (e.g. the host gcc for a
    target's engine built against an emulation of its runtime); ``extra_sources`` are compiled
    and linked in."""
    flags = [*(dep.backend.cflags if cflags is None else cflags), *extra_flags]
    if sanitize:
        flags = [f for f in flags if not f.startswith("-O")] + list(SANITIZE_FLAGS)
    if trace:
        flags.append("-DINFERENCE_TRACE")
    exe = compile_files(dep.files, cc or dep.backend.cc, tuple(flags), HARNESS, tuple(extra_sources))
    return Engine(exe, dep.graph, trace)


def emulated_engine(dep: Plan, folder: Path | None = None, cflags: tuple[str, ...] | None = None,
                    trace: bool = False) -> Engine:
    """The engine of a target that has an emulation of its runtime (``Backend.emulation``), built
    with the host gcc against it (``cflags`` replace the emulation's). An engine using L3 gets the
    start-up that fills the emulated L3; with a ``folder``, the weight image it loads is written
    there and named in the engine's environment."""
    emu = dep.backend.emulation
    flags = (*(emu.cflags if cflags is None else cflags), f"-I{emu.folder}")
    sources = tuple(emu.folder / name for name in emu.sources)
    if dep.l3 is None:
        return build_engine(dep, trace=trace, cc="gcc", cflags=flags, extra_sources=sources)
    engine = build_engine(dep, trace=trace, cc="gcc", cflags=(*flags, f"-DVERIFY_SETUP={emu.l3_setup}"),
                          extra_sources=(*sources, *(emu.folder / name for name in emu.l3_sources)))
    if folder is None:
        return engine
    image = folder / "l3_weights.bin"
    image.write_bytes(dep.l3.image(dep.graph, dep.kernels))
    return replace(engine, env=(("L3_BYTES", str(dep.l3.bytes)), ("L3_IMAGE", str(image))))


def host_engine(dep: Plan, folder: Path, sanitize: bool = False, trace: bool = False) -> Engine:
    """The engine built to run on this machine: with the host gcc, or against the target's
    emulation (``folder`` keeps what its start-up reads)."""
    emu = dep.backend.emulation
    if dep.backend.runs_on_host or emu is None:
        return build_engine(dep, sanitize=sanitize, trace=trace)
    flags = emu.cflags
    if sanitize:
        flags = (*(f for f in flags if not f.startswith("-O")), *SANITIZE_FLAGS)
    return emulated_engine(dep, folder, flags, trace)


def compile_files(files: dict, cc: str, flags: tuple[str, ...], harness: Path,
                  extra_sources: tuple[Path, ...] = ()) -> Path:
    """An executable of the files' top-level .c sources, ``harness`` and ``extra_sources``,
    cached: the key covers the compiler, every flag, every source and the files of every
    ``-I`` directory named in the flags."""
    digest = files_digest(files)
    digest.update(harness.read_bytes() + " ".join([cc, *flags]).encode())
    includes = [f[2:] or nxt for f, nxt in zip(flags, [*flags[1:], ""]) if f.startswith("-I")]
    for path in [*map(Path, extra_sources), *(f for d in includes for f in sorted(Path(d).glob("*")) if f.is_file())]:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")

    def build(folder: Path) -> None:
        write_files(files, folder)
        sources = [str(folder / n) for n in files if n.endswith(".c") and "/" not in n] + [str(harness), *map(str, extra_sources)]
        proc = build_run([cc, *flags, "-I", str(folder), *sources, "-o", str(folder / "engine")], cc)
        if proc.returncode != 0:
            raise BuildError(f"{cc} failed on the generated engine:\n{proc.stderr[-4000:]}")

    return build_cache.cached(digest.hexdigest()[:24], "engine", build)


BUILD_TIMEOUT_S = 1800  # a compiler that runs longer is stuck (an #include of a device, say)


def build_run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """A compiler or make run: its output decoded whatever bytes it holds, bounded in time."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} did not finish within {BUILD_TIMEOUT_S} s") from None
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]} ({e.strerror or e})") from None


def samples_payload(graph: Graph, samples: list[list[np.ndarray]], resets: frozenset[int] = frozenset()) -> bytes:
    """The engine's stdin (or input.bin): every sample's inputs, raw, one after the other. A
    graph with state takes one byte before each sample: 1 resets the state first (the samples
    whose index is in ``resets``), 0 continues the stream."""
    stateful = bool(graph.state())
    return b"".join((bytes([n in resets]) if stateful else b"")
                    + b"".join(np.ascontiguousarray(x, dtype=NP_DTYPES[graph.tensors[t].dtype]).tobytes()
                               for t, x in zip(graph.inputs, sample))
                    for n, sample in enumerate(samples))


def run_engine(engine: Engine, samples: list[list[np.ndarray]], resets: frozenset[int] = frozenset()):
    """Run every sample through the engine, in order (an engine with state carries it from one
    to the next; ``resets``: the samples it is reset before); returns (outputs per sample,
    traces per sample)."""
    env = dict(os.environ, **dict(engine.env)) if engine.env else None
    proc = subprocess.run([str(engine.exe)], input=samples_payload(engine.graph, samples, resets), capture_output=True,
                          timeout=600, env=env)
    if proc.returncode != 0:
        raise BuildError(f"engine exited with status {proc.returncode}: {proc.stderr.decode(errors='replace')[-4000:]}")
    return parse_output(engine.graph, proc.stdout, len(samples), engine.trace)


def parse_output(g: Graph, data: bytes, count: int, traced: bool):
    """What a harness wrote for ``count`` samples: (outputs per sample, traces per sample); when
    ``traced``, each sample's outputs come after one record per layer (int32 index, int32 bytes, bytes)."""
    pos = 0
    outs, traces = [], []
    for _ in range(count):
        trace = []
        if traced:
            for layer in g.layers:
                idx, n = np.frombuffer(data[pos:pos + 8], np.int32)
                pos += 8
                t = g.tensors[layer.outputs[0]]
                trace.append(np.frombuffer(data[pos:pos + n], NP_DTYPES[t.dtype]).reshape(t.shape) if n else None)
                pos += int(n)
        sample_out = []
        for o in g.outputs:
            t = g.tensors[o]
            sample_out.append(np.frombuffer(data[pos:pos + t.nbytes], NP_DTYPES[t.dtype]).reshape(t.shape))
            pos += t.nbytes
        outs.append(sample_out)
        traces.append(trace)
    if pos != len(data):
        raise BuildError(f"engine wrote {len(data)} bytes, expected {pos}")
    return outs, traces


def random_inputs(graph: Graph, seed: int) -> list[np.ndarray]:
    """Seeded inputs covering the whole int8 (int16) range (float and int32 inputs: values that
    quantize across the range of the type they are quantized to; int32 ones also far beyond it)."""
    rng = np.random.default_rng(seed)
    result = []
    for t in graph.inputs:
        tt = graph.tensors[t]
        if tt.dtype in ("int8", "uint8", "int16"):
            lo, span = {"int8": (-128, 256), "uint8": (0, 256), "int16": (-32768, 65536)}[tt.dtype]
            result.append(rng.integers(lo, lo + span, tt.shape).astype(NP_DTYPES[tt.dtype]))
            continue
        q_out = next((graph.tensors[l.outputs[0]] for l in graph.layers if l.op == "QUANTIZE" and t in l.inputs), None)
        if tt.dtype == "int32":  # read by QUANTIZEs: values across their outputs' range, some far beyond it
            half = 32768 if q_out.dtype == "int16" else 128
            reach = max(1, int(1.5 * half * q_out.scale / tt.scale))
            near = rng.integers(-reach, reach + 1, tt.shape, dtype=np.int64)
            far = rng.integers(-(1 << 31), 1 << 31, tt.shape, dtype=np.int64)
            result.append(np.where(rng.random(tt.shape) < 0.9, near, far).astype(np.int32))
            continue
        q = q_out.quant if q_out is not None else None
        scale, zp = (q.scale[0], q.zero_point[0]) if q else (1.0 / 64, 0)
        half = 32768 if q_out is not None and q_out.dtype == "int16" else 128
        levels = rng.integers(-half, half, tt.shape)
        result.append(((levels - zp) * scale + rng.uniform(-0.45, 0.45, tt.shape) * scale).astype(np.float32))
    return result


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b| over the elements. Non-finite values are compared, not subtracted: a NaN
    equals only a NaN at the same element (an integer output never holds one, so a NaN expected
    there is always a difference), an infinity only the same infinity; any other element holding
    a NaN or an infinity is an infinite difference (np.max would carry a NaN on, which max()
    over the samples then drops)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: a NaN that the equality below replaces
        diff = np.abs(a - b)
    diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.where(np.isnan(diff), np.inf, diff))
    return float(np.max(diff, initial=0.0))


def verify(dep: Plan, model: Path, samples: list[list[np.ndarray]], sanitize: bool = False,
           expected: Expected | None = None) -> dict:
    """Compare the compiled engine with the reference interpreter (or ``expected``) on every sample."""
    samples, resets, expected = stream(dep, model, samples, expected)
    with tempfile.TemporaryDirectory(prefix="deploy-verify-") as folder:
        outs, _ = run_engine(host_engine(dep, Path(folder), sanitize=sanitize), samples, resets)
    return compare(dep, model, samples, outs, expected)


def stream(dep: Plan, model: Path, samples: list[list[np.ndarray]], expected: Expected | None = None):
    """(samples, resets, expected) as one engine instance runs them. A graph with state runs its
    samples as one stream, then is reset and runs the first again (the first output must come
    back); its reference runs the same stream in one interpreter. Other graphs: as given."""
    if not dep.graph.state():
        return samples, frozenset(), expected
    if expected is not None:
        if expected.resets:  # already a stream (a cut graph's, read off the whole file's)
            return samples, expected.resets, expected
        raise UsageError("a model with state is checked on a stream of samples against its reference; --expected "
                         "files are not a stream (pass --input without them)")
    samples, resets = stream_order(samples)
    runs = run_litert_stream(model, samples, resets)
    return samples, resets, Expected(stream_reference(runs, resets), [outputs for outputs, _ in runs], None, resets)


def stream_order(samples: list) -> tuple[list, frozenset[int]]:
    """A model with state runs its samples as one stream, then is reset and runs the first again
    (its output must come back); one sample runs twice first, so that a carried state is used."""
    samples = samples * 2 if len(samples) == 1 else list(samples)
    return [*samples, samples[0]], frozenset({len(samples)})


def stream_reference(runs, resets: frozenset[int]) -> str:
    return f"{runs.interpreter} ({min(resets)} consecutive inferences, then a reset and the first again)"


@dataclass(frozen=True)
class Expected:
    """Known outputs of the samples (engine layout), and where they come from; for a graph cut
    from its file, the reference's value of every tensor per sample too (``tensors``)."""
    reference: str
    outputs: list[list[np.ndarray]]
    tensors: list[dict] | None = None
    resets: frozenset[int] = frozenset()  # a stream's (a model with state): the samples it is reset before


def cut_samples(dep: Plan, model: Path, file_samples: list[list[np.ndarray]]) -> tuple[list, Expected]:
    """A cut graph's samples and expected outputs: the reference runs the whole file on its own
    inputs (``file_samples``), and the engine's inputs and outputs are the values it computed at
    the cut's tensors."""
    graph, samples, outputs, tensors, reference = dep.graph, [], [], [], None
    resets = frozenset()
    if graph.state():  # one stream through the whole file (a TFLite model: LiteRT keeps every tensor)
        file_samples, resets = stream_order(file_samples)
        stream_runs = run_litert_stream(model, file_samples, resets, preserve=True)
        runs, reference = iter(stream_runs), stream_reference(stream_runs, resets)
    for sample in file_samples:
        if resets:
            values = next(runs)[1]
        else:
            reference, _, values = run_reference(model, sample, preserve=True, graph=graph)
        if values is None:
            raise DeployError(f"{model}: {reference} keeps no intermediate tensors, so a cut graph cannot be "
                              f"checked against it")
        for t, src, delta in graph.file_edges.derived:  # --io uint8: the int8 values, offset
            values[t] = (values[src].astype(np.int64) + delta).astype(NP_DTYPES[graph.tensors[t].dtype])
        samples.append([values[t].reshape(graph.tensors[t].shape) for t in graph.inputs])
        outputs.append([values[t] for t in graph.outputs])
        tensors.append(values)
    return samples, Expected(f"{reference} (the whole model, read at the cut)", outputs, tensors, resets)


def verification_samples(dep: Plan, model: Path, seeds: int) -> tuple[list, Expected | None]:
    """Seeded random samples for ``verify``: the engine's inputs, with the expected outputs when
    the graph is cut from its file (None: the reference runs on the engine's inputs)."""
    if dep.graph.file_edges is None:
        return [random_inputs(dep.graph, s) for s in range(seeds)], None
    return cut_samples(dep, model, [random_inputs(dep.graph.file_view(), s) for s in range(seeds)])


def compare(dep: Plan, model: Path, samples: list[list[np.ndarray]], outs: list[list[np.ndarray]],
            expected: Expected | None = None) -> dict:
    """The largest difference per output between the engine's ``outs`` and the reference's."""
    diffs = [0.0] * len(dep.graph.outputs)
    reference = None
    if expected is None and dep.graph.file_edges is not None:
        raise ValueError("a cut graph's samples come from its model's own inputs: verification_samples or cut_samples")
    for n, (sample, ours) in enumerate(zip(samples, outs)):
        if expected is not None:
            reference, ref = expected.reference, expected.outputs[n]
        else:
            reference, ref, _ = run_reference(model, sample, graph=dep.graph)
        for i, (a, b) in enumerate(zip(ours, ref)):
            diffs[i] = max(diffs[i], max_abs_diff(a, b.reshape(a.shape)))
    return {
        "model": dep.graph.name,
        "target": dep.backend.name,
        "outputs": [dict(index=i, max_abs_diff=d, elements=dep.graph.tensors[o].elements)
                    for i, (o, d) in enumerate(zip(dep.graph.outputs, diffs))],
        "reference": reference,
        "samples": len(samples),
        "sram_bytes": dep.memory.sram_bytes,
        "flash_bytes": dep.memory.flash_bytes,
        "macs": dep.macs,
    }


def first_divergence(dep: Plan, model: Path, sample: list[np.ndarray], trace: list | None = None,
                     tensors: dict | None = None) -> dict:
    """Per-layer comparison of the C engine, the golden executor and (where it keeps them) the reference.
    ``trace``: the engine's per-layer outputs when it ran elsewhere (QEMU); default: built and run here.
    ``tensors``: the reference's tensors of this sample when they are known (a cut graph's). A model
    with state run here is compared over its stream (``sample`` twice, a reset, once more): the
    first inference (counted from 1) and layer that differ (``inference``)."""
    if dep.graph.state() and trace is None and tensors is None and Path(model).suffix.lower() != ".onnx":
        return _stream_divergence(dep, model, sample)
    if trace is None:
        with tempfile.TemporaryDirectory(prefix="deploy-verify-") as folder:
            traces = run_engine(host_engine(dep, Path(folder), trace=True), [sample])[1]
    else:
        traces = [trace]
    _, gold = golden.run(dep.graph, sample, dep.kernels)
    if tensors is not None:
        reference = "the reference's tensors"
    elif Path(model).suffix.lower() == ".onnx":  # no per-tensor reference: the C against the golden executor
        reference, tensors = "numpy executor", None
    else:
        reference, _, tensors = run_reference(model, sample, preserve=True)
    return _layer_divergence(dep, traces[0], gold, tensors, reference) or dict(layer=None, reference=reference)


def _stream_divergence(dep: Plan, model: Path, sample: list[np.ndarray]) -> dict:
    """first_divergence over a model with state's stream: engine, golden executor (its state
    carried) and LiteRT (one interpreter), inference by inference."""
    samples, resets = stream_order([sample])
    with tempfile.TemporaryDirectory(prefix="deploy-verify-") as folder:
        traces = run_engine(host_engine(dep, Path(folder), trace=True), samples, resets)[1]
    runs = run_litert_stream(model, samples, resets, preserve=True)
    reference = stream_reference(runs, resets)
    if runs.interpreter != "litert-builtin-ref":
        reference += ", which keeps no per-tensor values: the C engine against the golden executor"
    state: dict = {}
    for n, (x, trace, (_, tensors)) in enumerate(zip(samples, traces, runs)):
        if n in resets:
            state = {}
        _, gold = golden.run(dep.graph, x, dep.kernels, state)
        found = _layer_divergence(dep, trace, gold, tensors, reference)
        if found:
            return dict(found, inference=n + 1)  # counted from 1
    return dict(layer=None, reference=reference)


def _layer_divergence(dep: Plan, trace: list, gold: list, tensors: dict | None, reference: str) -> dict | None:
    for k, (layer, c_out, g_out) in enumerate(zip(dep.graph.layers, trace, gold)):
        if c_out is None:  # the engine never holds this output whole (L3, patch buffers)
            continue
        ref = None if tensors is None else tensors.get(layer.outputs[0])
        ref = None if ref is None else ref.reshape(c_out.shape)
        vs_gold = max_abs_diff(c_out, g_out)
        vs_ref = None if ref is None else max_abs_diff(c_out, ref)
        gold_vs_ref = None if ref is None else max_abs_diff(g_out, ref)
        if vs_gold or vs_ref or gold_vs_ref:
            return dict(layer=k, op=layer.op, name=layer.name, c_vs_golden=vs_gold,
                        c_vs_reference=vs_ref, golden_vs_reference=gold_vs_ref,
                        elements=int(c_out.size), reference=reference)
    return None
