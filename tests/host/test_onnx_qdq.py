"""Quantized ONNX models (float models built with onnx's helper API, quantized by onnxruntime's
quantize_static, in the QDQ and QOperator formats) against onnxruntime itself: the numpy
executor and the generated C engine equal onnxruntime's outputs on every element.

onnxruntime runs these graphs with integer kernels (QLinearConv, QGemm, QLinearAveragePool, ...)
whose requantization is float32 arithmetic rounding half to even; the reader marks those layers
(``float_requant``) and the engine repeats that arithmetic, step for step. The tolerance is zero.
(Its QLinearAdd has per-CPU kernels; the engine's ADD is TFLite's integer one, equal to them on
these models.)"""
from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer import golden
from deployer.pipeline import Options, deploy
from deployer.reference import run_onnxruntime
from deployer.test_vectors import to_engine_input, to_engine_output, to_model_input
from deployer.verify import build_engine, run_engine

pytest.importorskip("onnxruntime")
from tests.onnx_builder import quantized_model  # noqa: E402

MODELS = [(kind, pc, act, "qdq") for kind in ("cnn", "mlp", "pool") for pc in (False, True) for act in ("int8", "uint8")]
MODELS += [(kind, False, act, "qdq") for kind in ("glue", "branches", "gather", "sequence", "channel_add") for act in ("int8", "uint8")]  # data movement
# onnxruntime's own arithmetic: float32 linear Resize, QLinearSoftmax's table, QLinearLeakyRelu's table
MODELS += [(kind, pc, act, "qdq") for kind, pc in (("upsample", False), ("heads", True)) for act in ("int8", "uint8")]
MODELS += [("heads", pc, "uint8", "qoperator") for pc in (False, True)]
MODELS += [(kind, True, "uint8", "qoperator") for kind in ("cnn", "mlp", "pool")]
# QOperator graphs' glue: QLinearConcat (inputs requantized by its lookup), data movement on the
# quantized values, QLinearMatMul over a rank-3 input (per-column scales), QLinearAdd of a constant
MODELS += [(kind, pc, "uint8", "qoperator") for kind in ("glue", "branches", "gather", "sequence", "channel_add")
           for pc in (False, True)]
FOLDER = Path(tempfile.gettempdir()) / "deploy-qdq-models" / str(os.getpid())  # one per test process


@functools.lru_cache(maxsize=None)
def model(kind: str, per_channel: bool, activations: str, fmt: str = "qdq") -> Path:
    return quantized_model(FOLDER, kind, per_channel, activations, fmt=fmt)


def samples(dep, count: int, seed: int):
    rng = np.random.default_rng(seed)
    shape = dep.graph.source.input_shapes[0]
    return [[to_engine_input(dep.graph, 0, rng.normal(0, 1.2, shape).astype(np.float32))] for _ in range(count)]


def reference(path: Path, dep, sample):
    return to_engine_output(dep.graph, 0, run_onnxruntime(path, [to_model_input(dep.graph, 0, sample[0])])[0])


@pytest.mark.parametrize("kind,per_channel,activations,fmt", MODELS,
                         ids=[f"{k}-{'pc' if p else 'pt'}-{a}-{f}" for k, p, a, f in MODELS])
def test_quantized_engine_equals_onnxruntime(kind, per_channel, activations, fmt):
    path = model(kind, per_channel, activations, fmt)
    dep = deploy(path, Options())
    assert dep.graph.source.format == "onnx-qdq"
    batch = samples(dep, 6, seed=3)
    outs, _ = run_engine(build_engine(dep), batch)
    for sample, ours in zip(batch, outs):
        want = reference(path, dep, sample)
        gold, _ = golden.run(dep.graph, sample, dep.kernels)
        assert np.array_equal(gold[0], want), f"executor vs onnxruntime: max {np.abs(gold[0] - want).max()}"
        assert np.array_equal(ours[0], want), f"engine vs onnxruntime: max {np.abs(ours[0] - want).max()}"


def test_qdq_tiled_and_channels_last():
    """The same arithmetic in L1 tiles, with channels-last edges."""
    path = model("cnn", True, "int8")
    dep = deploy(path, Options(l1=2048, input_layout="nhwc", output_layout="nhwc", patch="off"))
    assert dep.tilings
    batch = samples(dep, 3, seed=4)
    outs, _ = run_engine(build_engine(dep), batch)
    for sample, ours in zip(batch, outs):
        assert np.array_equal(ours[0], reference(path, dep, sample))


def _resize_graph(folder: Path, in_hw, out_hw, coord: str, channels: int, activations: str, seed: int) -> Path:
    """input -> QuantizeLinear -> DequantizeLinear -> Resize (linear) -> QuantizeLinear -> DequantizeLinear,
    the quantization of each side its own."""
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(seed)
    zt, zdt = (TensorProto.INT8, np.int8) if activations == "int8" else (TensorProto.UINT8, np.uint8)
    lo, hi = np.iinfo(zdt).min, np.iinfo(zdt).max
    inits = [helper.make_tensor("s0", TensorProto.FLOAT, [], [float(rng.uniform(0.005, 0.1))]),
             helper.make_tensor("z0", zt, [], [int(rng.integers(lo, hi + 1))]),
             helper.make_tensor("s1", TensorProto.FLOAT, [], [float(rng.uniform(0.005, 0.1))]),
             helper.make_tensor("z1", zt, [], [int(rng.integers(lo, hi + 1))]),
             helper.make_tensor("sizes", TensorProto.INT64, [4], [1, channels, *out_hw])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"]),
             helper.make_node("Resize", ["d0", "", "", "sizes"], ["r"], mode="linear",
                              coordinate_transformation_mode=coord),
             helper.make_node("QuantizeLinear", ["r", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["y"])]
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *in_hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, *out_hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"resize_{seed}.onnx"
    onnx.save(model, path)
    return path


@settings(max_examples=30, deadline=None)
@given(in_hw=st.tuples(st.integers(1, 9), st.integers(1, 9)), out_hw=st.tuples(st.integers(1, 13), st.integers(1, 13)),
       coord=st.sampled_from(["half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn", "align_corners"]),
       activations=st.sampled_from(["int8", "uint8"]), seed=st.integers(0, 2 ** 16))
def test_linear_resize_equals_onnxruntime(in_hw, out_hw, coord, activations, seed):
    """Any size up or down, every coordinate transformation: onnxruntime's float32 blend, element
    for element (the executor; the engine's C is the model test's)."""
    path = _resize_graph(FOLDER / "resize", in_hw, out_hw, coord, 3, activations, seed)
    dep = deploy(path, Options())
    assert [l.op for l in dep.graph.layers].count("RESIZE_BILINEAR") == 1
    for sample in samples(dep, 2, seed):
        gold, _ = golden.run(dep.graph, sample, dep.kernels)
        assert np.array_equal(gold[0], reference(path, dep, sample))


CUTS = [("heads", True, "int8", "qdq", dict(io="int8")),
        ("heads", False, "uint8", "qoperator", dict(io="int8")),
        ("heads", False, "uint8", "qoperator", dict(io="uint8")),
        ("sequence", False, "int8", "qdq", dict(inputs=("relu5_QuantizeLinear_Output",))),  # rank-3 (1, S, D) edges
        ("heads", True, "int8", "qdq", dict(inputs=("conv7_DequantizeLinear_Output",),
                                            outputs=("flatten14_QuantizeLinear_Output",))),
        ("upsample", False, "uint8", "qdq", dict(outputs=("resize9_QuantizeLinear_Output",)))]


@pytest.mark.parametrize("kind,pc,activations,fmt,cut", CUTS,
                         ids=["io-qdq", "io-qoperator", "io-uint8", "sequence", "middle", "head"])
def test_cut_graphs_equal_onnxruntime_read_at_the_cut(kind, pc, activations, fmt, cut):
    """--io int8 and --inputs / --outputs on quantized ONNX graphs: the engine runs the part between
    the named values (channels last), against onnxruntime's values there inside the whole graph
    (read without undoing its fusions: a fused op's output stays unfused when it is a graph output)."""
    from deployer.verify import verification_samples
    from network_parser.cut import CutSpec
    path = model(kind, pc, activations, fmt)
    dep = deploy(path, Options(cut=CutSpec(**cut)))
    whole = deploy(path, Options())
    assert dep.graph.file_edges is not None and len(dep.graph.layers) < len(whole.graph.layers)
    assert all(dep.graph.tensors[t].dtype == cut.get("io", "int8") for t in (*dep.graph.inputs, *dep.graph.outputs)
               if t not in dep.graph.file_edges.inputs + dep.graph.file_edges.outputs)
    if not cut.get("inputs") and not cut.get("io"):  # the file's input kept as the reader laid it out
        src, whole_src = dep.graph.source, whole.graph.source
        assert (src.input_layout, src.input_perms, src.input_shapes) == \
            (whole_src.input_layout, whole_src.input_perms, whole_src.input_shapes)
    batch, expected = verification_samples(dep, path, 3)
    outs, _ = run_engine(build_engine(dep), batch)
    for ours, want in zip(outs, expected.outputs):
        assert all(np.array_equal(a, b.reshape(a.shape)) for a, b in zip(ours, want))


@pytest.mark.parametrize("cut,message", [
    (dict(outputs=("flatten14",)), "not an activation the engine stores"),
    (dict(inputs=("conv7_Quantize",)), "names like it: 'conv7_QuantizeLinear_Output'"),
    (dict(inputs=("conv7_QuantizeLinear_Output", "conv7_DequantizeLinear_Output")), "the same value as"),
    (dict(inputs=("conv7_QuantizeLinear_Output",), outputs=("conv7_QuantizeLinear_Output",)),
     "is both an input and an output of the cut"),
    (dict(inputs=("input_QuantizeLinear_Outpt",)), "names like it: 'input_QuantizeLinear_Output'"),
    (dict(inputs=("softmax19_QuantizeLinear_Output",), outputs=("conv7_QuantizeLinear_Output",)),
     "the cut's outputs depend on 'input', a model input not among --inputs")])
def test_onnx_cut_errors_name_the_value(cut, message):
    from network_parser.cut import CutSpec
    from network_parser.errors import UsageError
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        deploy(model("heads", True, "int8"), Options(cut=CutSpec(**cut)))


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_linear_resize_tiles(target):
    """onnxruntime's float32 linear Resize tile by tile in L1 (each tile blends inside its input
    window with the whole layer's tables), on the host and GAP8's emulated cluster."""
    from deployer.verify import emulated_engine
    path = model("upsample", False, "uint8")
    dep = deploy(path, Options(l1=1024, target=target, patch="off"))
    tiled = [type(dep.kernels[k]).__name__ for k in dep.tilings]
    assert tiled.count("ResizeLinear") == 3
    batch = samples(dep, 3, seed=7)
    outs, _ = run_engine(emulated_engine(dep) if target == "gap8" else build_engine(dep), batch)
    for sample, ours in zip(batch, outs):
        assert np.array_equal(ours[0], reference(path, dep, sample))
