"""Float inputs that are no ordinary numbers (NaN, +-inf, values beyond int32, -0.0, denormals,
exact rounding ties) have one defined int8 at a float input's QUANTIZE: the reference's on
x86-64 (TFLite: LiteRT's reference kernel; ONNX QDQ: onnxruntime). The engine equals it bit
for bit, so does the numpy executor, and the engine runs clean under UBSan with
float-cast-overflow (C leaves ``(int32_t)NaN`` undefined, and targets disagree on it)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployer import golden, qemu
from deployer.pipeline import Options, deploy
from deployer.reference import run_litert, run_onnxruntime
from deployer.test_vectors import to_engine_input, to_engine_output, to_model_input
from deployer.verify import build_engine, run_engine
from tests.tflite_builder import ModelBuilder
from tests.host.test_models import assert_outputs_match
from tests.models import shared_model

UBSAN_FLOAT = ("-fsanitize=float-cast-overflow",)  # not part of gcc's -fsanitize=undefined
# (scale, zero point) of the TFLite QUANTIZE ops: both signs of zero point (the reference's
# results for NaN and overflow depend on it), and a scale small enough that ordinary values
# overflow int32
TFLITE_QUANT = [(1.0, -128), (1.0, -1), (0.5, 0), (0.01, 127), (0.0078125, 1), (0.037, -37), (1e-30, 0), (1e-30, -5)]
# (stored type, zero point) of the ONNX QuantizeLinear nodes
ONNX_QUANT = [(np.int8, -128), (np.int8, 0), (np.int8, 127), (np.uint8, 0), (np.uint8, 128), (np.uint8, 255)]
ONNX_SCALE = 0.1


def _bits(words) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


def hostile_values(scales) -> np.ndarray:
    """NaNs (quiet, signalling, with payloads, negative), infinities, the extremes of float32,
    values beyond int32 once divided by a scale and those just inside, signed zeros, denormals,
    and every tie x / scale = n + 1/2 (with its neighbours) over the int8 range."""
    f32 = np.float32
    vals = [_bits([0x7FC00000, 0xFFC00000, 0x7FC00001, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF]),
            [np.inf, -np.inf, 1e10, -1e10, 3e38, -3e38, np.finfo(f32).max, np.finfo(f32).min, 1e9, -1e9,
             1e6, -1e6, 1e6 + 1, 0.0, -0.0],
            _bits([0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000])]
    for s in scales:
        edges = np.array([2.0 ** 31 * s, -(2.0 ** 31) * s], f32)
        ties = np.array([(n + 0.5) * s for n in range(-300, 300)], f32)
        for x in (edges, ties):
            vals += [x, np.nextafter(x, f32(np.inf)), np.nextafter(x, f32(-np.inf)),
                     np.nextafter(np.nextafter(x, f32(np.inf)), f32(np.inf))]
    return np.concatenate([np.asarray(v, f32).reshape(-1) for v in vals])


def _engines(dep):
    """The engine as the target builds it, and under UBSan (float-cast-overflow included)."""
    return {"plain": build_engine(dep), "ubsan": build_engine(dep, sanitize=True, extra_flags=UBSAN_FLOAT)}


def _golden(dep, sample):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's own undefined casts warn
        return golden.run(dep.graph, sample, dep.kernels)[0]


@pytest.fixture(scope="module")
def tflite_quantizers(tmp_path_factory):
    """One float32 input quantized by one QUANTIZE per (scale, zero point), each an output."""
    values = hostile_values([s for s, _ in TFLITE_QUANT])
    mb = ModelBuilder(0)
    x = mb.input((1, values.size), dtype="float32")
    for scale, zp in TFLITE_QUANT:
        mb.output(mb.quantize(x, scale=scale, zero_point=zp))
    path = tmp_path_factory.mktemp("nonfinite") / "quantizers.tflite"
    mb.save(path)
    return path, values


def test_tflite_quantize_equals_the_reference(tflite_quantizers):
    path, values = tflite_quantizers
    dep = deploy(path, Options())
    sample = [values.reshape(1, -1)]
    want = [o.reshape(1, -1) for o in run_litert(path, sample)[0]]
    gold = _golden(dep, sample)
    for (scale, zp), w, g in zip(TFLITE_QUANT, want, gold):
        assert np.array_equal(g, w), f"executor vs LiteRT, scale {scale} zero point {zp}: {_diff(values, g, w)}"
    for name, engine in _engines(dep).items():
        outs, _ = run_engine(engine, [sample])
        for (scale, zp), w, ours in zip(TFLITE_QUANT, want, outs[0]):
            assert np.array_equal(ours, w), f"{name} engine vs LiteRT, scale {scale} zero point {zp}: {_diff(values, ours, w)}"


def test_the_definition_as_stated(tflite_quantizers):
    """What fixedpoint.h states: NaN, +-inf and |x / scale| >= 2^31 give 127 when the zero point
    is negative, -128 otherwise; values that fit saturate as usual."""
    path, _ = tflite_quantizers
    dep = deploy(path, Options())
    values = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e10, -1e10, 1e9, -1e9], np.float32)
    sample = [np.resize(values, (1, dep.graph.tensors[dep.graph.inputs[0]].shape[1]))]
    outs, _ = run_engine(build_engine(dep), [sample])
    for (scale, zp), out in zip(TFLITE_QUANT, outs[0]):
        edge = 127 if zp < 0 else -128
        fits = np.abs(values.astype(np.float64) / np.float32(scale)) < 2.0 ** 31
        want = np.where(fits, np.where(values > 0, 127, -128), edge)
        assert out.reshape(-1)[:values.size].tolist() == want.tolist(), f"scale {scale} zero point {zp}"


def test_patched_quantize(tmp_path):
    """A float input's QUANTIZE inside a stage run patch by patch: same definition."""
    mb = ModelBuilder(1)
    x = mb.quantize(mb.input((1, 12, 12, 3), dtype="float32"), scale=0.02, zero_point=-3)
    x = mb.conv2d(x, 4, kernel=(3, 3), stride=(2, 2))
    x = mb.conv2d(x, 4, kernel=(3, 3))
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), 5))
    path = tmp_path / "patched.tflite"
    mb.save(path)
    dep = deploy(path, Options(patch="2x2@2"))
    assert len(dep.patches) == 1 and 0 in dep.patches[0].layers
    rng = np.random.default_rng(0)
    samples = []
    for seed in range(3):
        x = rng.uniform(-2.6, 2.6, (1, 12, 12, 3)).astype(np.float32)
        pool = hostile_values([0.02])
        mask = rng.random(x.shape) < 0.5
        x[mask] = rng.choice(pool, int(mask.sum()))
        samples.append([x])
    for name, engine in _engines(dep).items():
        outs, _ = run_engine(engine, samples)
        assert_outputs_match(path, samples, outs, f" ({name})")
        for sample, ours in zip(samples, outs):
            assert np.array_equal(_golden(dep, sample)[0], ours[0]), name


def test_mcunet_with_hostile_pixels():
    """A real model opening with a float QUANTIZE, a third of its pixels hostile."""
    path = shared_model("mcunet/mcunet_vww.tflite")
    dep = deploy(path, Options())
    assert dep.graph.layers[0].op == "QUANTIZE"
    shape = dep.graph.tensors[dep.graph.inputs[0]].shape
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    mask = rng.random(shape) < 0.3
    x[mask] = rng.choice(hostile_values([dep.kernels[0].scale]), int(mask.sum()))
    for name, engine in _engines(dep).items():
        outs, _ = run_engine(engine, [[x]])
        assert_outputs_match(path, [[x]], outs, f" ({name})")


def _qdq_model(path) -> None:
    """QuantizeLinear -> DequantizeLinear of one float input, once per (type, zero point)."""
    nodes, inits, outputs = [], [numpy_helper.from_array(np.array(ONNX_SCALE, np.float32), "s")], []
    size = hostile_values([ONNX_SCALE]).size
    for i, (dtype, zp) in enumerate(ONNX_QUANT):
        inits.append(numpy_helper.from_array(np.array(zp, dtype), f"z{i}"))
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", f"z{i}"], [f"q{i}"]),
                  helper.make_node("DequantizeLinear", [f"q{i}", "s", f"z{i}"], [f"y{i}"])]
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, size]))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tests")
    model.ir_version = 8
    onnx.save(model, path)


def test_onnx_quantize_linear_equals_onnxruntime(tmp_path):
    """onnxruntime saturates instead, and turns NaN into the lowest value: the QDQ path gives that."""
    pytest.importorskip("onnxruntime")
    path = tmp_path / "qdq.onnx"
    _qdq_model(path)
    dep = deploy(path, Options())
    values = hostile_values([ONNX_SCALE])
    sample = [to_engine_input(dep.graph, 0, values.reshape(1, -1))]
    model_in = [to_model_input(dep.graph, 0, sample[0])]
    want = [to_engine_output(dep.graph, j, y) for j, y in enumerate(run_onnxruntime(path, model_in))]
    assert all(np.isfinite(w).all() for w in want)
    gold = _golden(dep, sample)
    for q, w, g in zip(ONNX_QUANT, want, gold):
        assert np.array_equal(g.view(np.int32), w.view(np.int32)), f"executor vs onnxruntime, {q}: {_diff(values, g, w)}"
    for name, engine in _engines(dep).items():
        outs, _ = run_engine(engine, [sample])
        for q, w, ours in zip(ONNX_QUANT, want, outs[0]):
            assert np.array_equal(ours.view(np.int32), w.view(np.int32)), \
                f"{name} engine vs onnxruntime, {q}: {_diff(values, ours, w)}"


@pytest.mark.skipif(bool(qemu.missing_tools()), reason=f"Cortex-M tools missing: {qemu.missing_tools()}")
def test_cortex_m4_gives_the_same_int8(tflite_quantizers):
    """The Arm FPU's conversion saturates and turns NaN into 0; the engine still gives x86's result."""
    from deployer.verify import parse_output, samples_payload
    path, values = tflite_quantizers
    dep = deploy(path, Options(target="cortex-m4"))
    sample = [values.reshape(1, -1)]
    data = qemu.run(qemu.build_elf(dep), samples_payload(dep.graph, [sample])).output
    outs = parse_output(dep.graph, data, 1, False)[0]
    assert_outputs_match(path, [sample], outs, " on cortex-m4")


def _diff(values: np.ndarray, ours: np.ndarray, want: np.ndarray) -> str:
    """The first inputs whose results differ, as (input, ours, wanted)."""
    a, b = ours.reshape(-1), want.reshape(-1)
    bad = np.nonzero(a.view(np.int32) != b.view(np.int32) if a.dtype == np.float32 else a != b)[0][:6]
    return ", ".join(f"{values[i]!r} -> {a[i]} not {b[i]}" for i in bad)
