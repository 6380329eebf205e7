"""network_parser.tflite_reader: the shared models read into the IR, and every broken file
gives the documented DeployError with a message that names the place."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
import tflite
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy
from network_parser.errors import DeployError, ModelFormatError, UnsupportedOperator
from network_parser.ir import Graph
from tests.tflite_builder import ModelBuilder, _opts
from network_parser.tflite_reader import read_tflite
from tests.models import LSTM_MODELS
from tests.models import shared_model as shared


# op counts per model, as listed in shared/models/README.md
EXPECTED_OPS = {
    "mlperf_tiny/kws_ref_model.tflite": dict(CONV_2D=5, DEPTHWISE_CONV_2D=4, AVERAGE_POOL_2D=1, RESHAPE=1,
                                             FULLY_CONNECTED=1, SOFTMAX=1),
    "mlperf_tiny/vww_96_int8.tflite": dict(CONV_2D=14, DEPTHWISE_CONV_2D=13, AVERAGE_POOL_2D=1, RESHAPE=1,
                                           FULLY_CONNECTED=1, SOFTMAX=1),
    "mlperf_tiny/pretrainedResnet_quant.tflite": dict(CONV_2D=9, ADD=3, AVERAGE_POOL_2D=1, RESHAPE=1,
                                                      FULLY_CONNECTED=1, SOFTMAX=1),
    "mlperf_tiny/ad01_int8.tflite": dict(FULLY_CONNECTED=10),
    "mlperf_tiny/str_ww_ref_model.tflite": dict(DEPTHWISE_CONV_2D=4, CONV_2D=4, RESHAPE=1, FULLY_CONNECTED=1,
                                                SOFTMAX=1),
    "tflm/hello_world_int8.tflite": dict(FULLY_CONNECTED=3),
    "tflm/micro_speech_quantized.tflite": dict(RESHAPE=1, DEPTHWISE_CONV_2D=1, FULLY_CONNECTED=1, SOFTMAX=1),
    "tflm/person_detect.tflite": dict(DEPTHWISE_CONV_2D=14, CONV_2D=14, AVERAGE_POOL_2D=1, RESHAPE=1, SOFTMAX=1),
    "tflm/simple_add_model.tflite": dict(ADD=1),
    "tflm/mobilenet_v2_quantized_1x3x224x224.tflite": dict(CONV_2D=35, PAD=18, DEPTHWISE_CONV_2D=17, ADD=10,
                                                           TRANSPOSE=1, MEAN=1, RESHAPE=1, FULLY_CONNECTED=1),
    "mcunet/mcunet_vww.tflite": dict(CONV_2D=30, DEPTHWISE_CONV_2D=15, ADD=8, PAD=4, MEAN=2, QUANTIZE=1,
                                     DEQUANTIZE=1, TRANSPOSE=1, FULLY_CONNECTED=1),
    "synthetic/mobilenetv2_035_96_random.tflite": dict(CONV_2D=35, DEPTHWISE_CONV_2D=17, ADD=10, MEAN=1,
                                                       FULLY_CONNECTED=1, SOFTMAX=1),
}
IO_SHAPES = {
    "mlperf_tiny/kws_ref_model.tflite": ([(1, 49, 10, 1)], [(1, 12)]),
    "mlperf_tiny/ad01_int8.tflite": ([(1, 640)], [(1, 640)]),
    "tflm/person_detect.tflite": ([(1, 96, 96, 1)], [(1, 2)]),
    "tflm/simple_add_model.tflite": ([(1, 128, 128, 1)] * 2, [(1, 128, 128, 1)]),
    "mcunet/mcunet_vww.tflite": ([(1, 80, 80, 3)], [(1, 2)]),
}


def small_model(seed: int = 0) -> ModelBuilder:
    """input -> CONV_2D -> RESHAPE -> SOFTMAX."""
    mb = ModelBuilder(seed)
    x = mb.input((1, 4, 4, 2))
    mb.output(mb.softmax(mb.reshape(mb.conv2d(x, 3), (1, -1))))
    return mb


def tensor_id(mb: ModelBuilder, name: str) -> int:
    return next(i for i, t in enumerate(mb._tensors) if t.name == name)


def save(mb_or_bytes, path: Path) -> Path:
    path.write_bytes(mb_or_bytes if isinstance(mb_or_bytes, bytes) else mb_or_bytes.to_bytes())
    return path


# ---- the shared models ------------------------------------------------------------------

@pytest.mark.parametrize("rel", sorted(EXPECTED_OPS))
def test_shared_model_reads(rel):
    graph = read_tflite(shared(rel))
    assert isinstance(graph, Graph) and graph.name == Path(rel).stem
    assert dict(collections.Counter(layer.op for layer in graph.layers)) == EXPECTED_OPS[rel]
    assert [layer.index for layer in graph.layers] == list(range(len(graph.layers)))
    if rel in IO_SHAPES:
        ins, outs = IO_SHAPES[rel]
        assert [graph.tensors[t].shape for t in graph.inputs] == ins
        assert [graph.tensors[t].shape for t in graph.outputs] == outs
    for layer in graph.layers:  # every data operand is an activation or a folded constant
        assert all(-1 <= i < len(graph.tensors) for i in (*layer.inputs, *layer.outputs))
    for t in graph.tensors:
        if t.is_const:
            assert t.data.shape == t.shape and not t.data.flags.writeable


def test_person_detect_quantized_dimension_on_1d_tensors():
    """person_detect stores quantized_dimension 3 on 1-D per-channel biases: read as axis 0."""
    path = shared("tflm/person_detect.tflite")
    model = tflite.Model.GetRootAs(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    raw = {sg.Tensors(i).Name().decode(): sg.Tensors(i).Quantization().QuantizedDimension()
           for i in range(sg.TensorsLength())
           if sg.Tensors(i).ShapeLength() == 1 and sg.Tensors(i).Quantization() is not None
           and sg.Tensors(i).Quantization().ScaleLength() > 1}
    assert 3 in raw.values(), "the file no longer has the quirk this test is about"
    graph = read_tflite(path)
    for t in graph.tensors:
        if t.name in raw:
            assert t.quant.axis == 0 and len(t.quant.scale) == t.shape[0]


@pytest.mark.parametrize("rel", LSTM_MODELS)
def test_lstm_models_read_with_their_state(rel):
    """The integer LSTM keeps TFLite's input positions; its hidden (int8) and cell (int16) state
    are variable tensors, outside the arena's activations."""
    graph = read_tflite(shared(rel))
    lstm = graph.layers[0]
    assert lstm.op == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(lstm.inputs) == 20
    state = graph.state()
    assert state == [lstm.inputs[18], lstm.inputs[19]]
    assert [graph.tensors[t].dtype for t in state] == ["int8", "int16"]
    assert all(graph.tensors[t].variable for t in state) and not set(state) & set(graph.activations())


def test_small_builder_model_roundtrip(tmp_path):
    mb = small_model()
    graph = read_tflite(save(mb, tmp_path / "m.tflite"))
    assert [layer.op for layer in graph.layers] == ["CONV_2D", "RESHAPE", "SOFTMAX"]
    assert list(graph.inputs) == mb.inputs and list(graph.outputs) == mb.outputs
    w = graph.tensors[tensor_id(mb, "conv2d_0/weights")]
    assert w.quant.per_channel and w.quant.axis == 0 and w.data.dtype == np.int8
    assert graph.layers[1].inputs == (graph.layers[0].outputs[0],)  # shape constant folded away


# ---- broken files -------------------------------------------------------------------

def expect(exc, path: Path, *parts: str):
    """Reading `path` raises exactly `exc`, whose message names the file and `parts`."""
    with pytest.raises(DeployError) as err:
        read_tflite(path)
    assert type(err.value) is exc, repr(err.value)
    msg = str(err.value)
    assert msg.startswith(f"{exc.kind}: ") and "\n" not in msg
    assert path.name in msg
    for part in parts:
        assert part in msg, (part, msg)
    return msg


def test_truncated_file(tmp_path):
    buf = small_model().to_bytes()
    expect(ModelFormatError, save(buf[: len(buf) // 2], tmp_path / "half.tflite"), "corrupt")


def test_random_bytes(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8).tobytes()
    expect(ModelFormatError, save(data, tmp_path / "random.tflite"))


def test_wrong_file_identifier(tmp_path):
    buf = bytearray(small_model().to_bytes())
    buf[4:8] = b"ONNX"
    expect(ModelFormatError, save(bytes(buf), tmp_path / "ident.tflite"), "TFL3")


def test_empty_file(tmp_path):
    expect(ModelFormatError, save(b"", tmp_path / "empty.tflite"))


def test_missing_file(tmp_path):
    expect(ModelFormatError, tmp_path / "absent.tflite", "cannot read")


def test_unsupported_builtin(tmp_path):
    """An op the reader does not know (RESHAPE relabelled GELU) names type, index and output."""
    mb = small_model()
    mb._ops[1].code = tflite.BuiltinOperator.GELU
    expect(UnsupportedOperator, save(mb, tmp_path / "gelu.tflite"), "GELU", "op 1", "'reshape_0/out'")


def test_standalone_relu_n1_to_1_after_concat(tmp_path):
    """The builder's concat(activation='RELU_N1_TO_1') adds a RELU_N1_TO_1 op: read and run as LiteRT does."""
    from tests.unit.test_kernels_golden import assert_golden_matches_litert
    mb = ModelBuilder(0)
    x = mb.input((1, 4))
    mb.output(mb.concat([x, x], activation="RELU_N1_TO_1"))
    assert [layer.op for layer in read_tflite(save(mb, tmp_path / "n1.tflite")).layers] == ["CONCATENATION",
                                                                                              "RELU_N1_TO_1"]
    assert_golden_matches_litert(mb, 0)


def float_only(mb: ModelBuilder) -> ModelBuilder:
    """Turn every quantized tensor of a builder model into plain float32 (float weights too)."""
    np_types = {"int8": np.int8, "int32": np.int32}
    for t in mb._tensors:
        if t.scale is None:
            continue
        if t.buffer:
            data = np.frombuffer(mb._buffers[t.buffer], np_types[t.dtype])
            mb._buffers[t.buffer] = (data.astype(np.float32) * np.float32(0.01)).tobytes()
        t.dtype, t.scale, t.zero_point = "float32", None, None
    return mb


def test_float_only_model(tmp_path):
    msg = expect(UnsupportedOperator, save(float_only(small_model()), tmp_path / "float.tflite"),
                 "float32", "op 0", "CONV_2D")
    assert "float-only" in msg


def test_int8_tensor_without_quantization(tmp_path):
    mb = small_model()
    t = mb._tensors[tensor_id(mb, "conv2d_0/out")]
    t.scale = t.zero_point = None
    expect(ModelFormatError, save(mb, tmp_path / "noquant.tflite"), "conv2d_0/out", "no quantization")


def test_dangling_operator_input(tmp_path):
    mb = small_model()
    mb._ops[0].inputs[0] = 999
    expect(ModelFormatError, save(mb, tmp_path / "dangling.tflite"), "op 0", "999")


def test_dangling_graph_output(tmp_path):
    mb = small_model()
    mb._outputs[0] = 999
    expect(ModelFormatError, save(mb, tmp_path / "dangling_out.tflite"), "graph output", "999")


def test_tensor_read_before_written(tmp_path):
    """Ops out of order: RESHAPE reads the conv output before CONV_2D runs."""
    mb = small_model()
    mb._ops[0], mb._ops[1] = mb._ops[1], mb._ops[0]
    expect(ModelFormatError, save(mb, tmp_path / "order.tflite"), "op 0", "conv2d_0/out", "before any op writes")


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf")])
def test_bad_scale(tmp_path, bad):
    mb = small_model()
    w = tensor_id(mb, "conv2d_0/weights")
    mb._tensors[w].scale = mb._tensors[w].scale.copy()
    mb._tensors[w].scale[1] = bad
    expect(ModelFormatError, save(mb, tmp_path / "scale.tflite"), f"tensor {w}", "conv2d_0/weights", "scale")


def test_activation_zero_scale(tmp_path):
    mb = small_model()
    x = mb.inputs[0]
    mb._tensors[x].scale = np.array([0.0], np.float32)
    expect(ModelFormatError, save(mb, tmp_path / "scale0.tflite"), "input_0", "scale")


@pytest.mark.parametrize("n_scales, n_zps", [(4, 4), (2, 2), (3, 2)])
def test_scale_count_mismatch(tmp_path, n_scales, n_zps):
    """conv weights have 3 output channels: 4 or 2 scales, or 3 scales with 2 zero points."""
    mb = small_model()
    t = mb._tensors[tensor_id(mb, "conv2d_0/weights")]
    t.scale = np.full(n_scales, 0.01, np.float32)
    t.zero_point = np.zeros(n_zps, np.int64)
    expect(ModelFormatError, save(mb, tmp_path / "count.tflite"), "conv2d_0/weights", f"{n_scales} scales")


def test_constant_size_mismatch(tmp_path):
    mb = small_model()
    t = mb._tensors[tensor_id(mb, "conv2d_0/weights")]
    mb._buffers[t.buffer] = mb._buffers[t.buffer][:-1]
    expect(ModelFormatError, save(mb, tmp_path / "short.tflite"), "conv2d_0/weights", "bytes")


def test_unknown_builtin_code(tmp_path):
    mb = small_model()
    mb._ops[2].code = 10_000  # a code no schema knows
    expect(UnsupportedOperator, save(mb, tmp_path / "opcode.tflite"), "op 2", "builtin 10000")


# ---- byte mutations never escape as anything but a DeployError ---------------------------

_BASE = small_model(3).to_bytes()


@settings(max_examples=200, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.integers(0, len(_BASE))))
def test_mutated_bytes_read_or_deploy_error(tmp_path_factory, edits, cut):
    buf = bytearray(_BASE)
    for pos, value in edits:
        buf[pos] = value
    path = tmp_path_factory.getbasetemp() / "mutated.tflite"
    path.write_bytes(bytes(buf[:cut]))
    try:
        graph = read_tflite(path)
    except DeployError as e:
        assert str(e).startswith(f"{e.kind}: ")
    else:
        assert isinstance(graph, Graph)


# ---- decodable but malformed models reach the compiler: must still be DeployErrors -------
# These go through pipeline.deploy (read -> lower -> plan): each must end in a DeployError.

def _deploy(mb: ModelBuilder, path: Path):
    deploy(save(mb, path), Options())


def test_zero_stride_is_model_format_error(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.conv2d(mb.input((1, 4, 4, 2)), 3))
    mb._ops[0].options = _opts("Conv2DOptions", Padding=tflite.Padding.SAME, StrideW=1, StrideH=0,
                               FusedActivationFunction=0, DilationWFactor=1, DilationHFactor=1)
    with pytest.raises(ModelFormatError, match="stride"):
        _deploy(mb, tmp_path / "stride0.tflite")


@pytest.mark.parametrize("op", ["conv2d", "add"])
def test_missing_operands_is_model_format_error(tmp_path, op):
    mb = ModelBuilder(0)
    x = mb.input((1, 4, 4, 2))
    mb.output(mb.conv2d(x, 3) if op == "conv2d" else mb.add(x, x))
    mb._ops[0].inputs = [x]
    with pytest.raises(ModelFormatError, match="op 0"):
        _deploy(mb, tmp_path / "operands.tflite")


@pytest.mark.parametrize("case", ["add_tiny_output_scale", "softmax_tiny_beta"])
def test_out_of_range_multiplier_is_unsupported(tmp_path, case):
    mb = ModelBuilder(0)
    a = mb.input((1, 4), scale=0.05)
    if case == "add_tiny_output_scale":
        y = mb.add(a, mb.input((1, 4)))
        mb._tensors[y].scale = np.array([1e-9], np.float32)  # out multiplier ~ 1e2, must be < 1
    else:
        y = mb.softmax(a, beta=1e-8)  # beta * scale * 2^26 < 1, must be > 1
    mb.output(y)
    with pytest.raises(DeployError, match="op 0"):
        _deploy(mb, tmp_path / f"{case}.tflite")


# ---- malformed parameters of the newer operators ---------------------------------------------------

def _plan_error(mb: ModelBuilder, path: Path, exc, *parts: str, **options):
    """deploy's plan of the model raises exactly ``exc``, one line naming the file and ``parts``."""
    from deployer.pipeline import Options, plan_deployment
    from network_parser.cut import CutSpec
    save(mb, path)
    with pytest.raises(DeployError) as err:
        plan_deployment(path, Options(cut=CutSpec(**options)))
    assert type(err.value) is exc, repr(err.value)
    assert "\n" not in str(err.value) and all(p in str(err.value) for p in parts), str(err.value)


def test_a_shrunk_axis_must_index_the_input(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.strided_slice(mb.input((1, 4, 4, 8)), [0, 0, 0, 3], [1, 4, 4, 4], [1, 1, 1, 1], shrink_axis_mask=8))
    begin = next(t for t in mb._tensors if t.name.endswith("/begin"))
    mb._buffers[begin.buffer] = np.array([0, 0, 0, 9], np.int32).tobytes()
    _plan_error(mb, tmp_path / "shrink.tflite", UnsupportedOperator, "shrinking axis 3 of 8 at index 9")


def test_an_omitted_input_of_pack_is_refused(tmp_path):
    mb = ModelBuilder(0)
    x = mb.input((1, 6), scale=0.1, zero_point=0)
    mb.output(mb.pack([x, mb.input((1, 6), scale=0.1, zero_point=0)]))
    mb._ops[-1].inputs[1] = -1
    _plan_error(mb, tmp_path / "pack.tflite", ModelFormatError, "PACK needs a tensor")


def test_per_channel_weights_on_the_wrong_axis(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.transpose_conv(mb.input((1, 3, 3, 2)), 8, kernel=(2, 2)))
    w = next(t for t in mb._tensors if t.name.endswith("/weights"))
    w.scale, w.zero_point, w.qdim = w.scale[:2].copy(), w.zero_point[:2].copy(), 3
    _plan_error(mb, tmp_path / "axis.tflite", UnsupportedOperator, "2 scales (axis 3) for 8 output channels")


def test_a_padv2_value_of_another_type_or_quantization(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.padv2(mb.input((1, 3, 3, 2)), [[0, 0], [1, 1], [1, 1], [0, 0]], 0.5))
    value = next(t for t in mb._tensors if t.name.endswith("/value"))
    value.zero_point = value.zero_point + 3
    _plan_error(mb, tmp_path / "padv2.tflite", UnsupportedOperator, "must share the input's type and quantization")


def test_float_to_uint8_quantize_is_refused(tmp_path):
    mb = ModelBuilder(0)
    q = mb.quantize(mb.input((1, 4), dtype="float32"))
    mb.output(q)
    out = mb._tensors[q]
    out.dtype = "uint8"
    out.zero_point = out.zero_point + 128
    _plan_error(mb, tmp_path / "u8.tflite", UnsupportedOperator, "QUANTIZE from float32 to uint8")


def test_io_int8_with_a_dequantize_that_has_no_input(tmp_path):
    """The cut looks at edges before the reader checks each op: a malformed DEQUANTIZE is the reader's error."""
    mb = ModelBuilder(0)
    mb.output(mb.dequantize(mb.relu(mb.input((1, 4)))))
    mb._ops[-1].inputs = []
    _plan_error(mb, tmp_path / "deq.tflite", ModelFormatError, "DEQUANTIZE", io="int8")


def test_an_l2_normalization_too_deep_for_its_int32_sum(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.l2_normalization(mb.input((1, 33026))))
    _plan_error(mb, tmp_path / "l2.tflite", UnsupportedOperator, "at most 33,025")


def test_space_to_batch_keeps_its_quantization(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.space_to_batch_nd(mb.input((1, 4, 4, 2)), (2, 2), [[0, 0], [0, 0]]))
    mb._tensors[mb.outputs[0]].zero_point = mb._tensors[mb.outputs[0]].zero_point + 1
    _plan_error(mb, tmp_path / "s2b.tflite", UnsupportedOperator, "share a type and quantization")


def test_a_transpose_conv_output_shape_computed_from_the_input_is_the_files(tmp_path):
    """Converters compute a transposed convolution's output shape (SHAPE, then int32 MUL and ADD);
    the output tensor states it, so those ops are not run, and the engine equals LiteRT."""
    from deployer.pipeline import Options, deploy
    from deployer.verify import random_inputs, verify
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(2)
    mb.output(mb.relu(mb.transpose_conv(mb.input((1, 6, 6, 4)), 5, computed_shape=True)))
    path = tmp_path / "tconv.tflite"
    mb.save(path)
    dep = deploy(path, Options())
    assert [layer.op for layer in dep.graph.layers] == ["TRANSPOSE_CONV", "RELU"]
    assert any("output shapes" in n and "SHAPE" in n for n in dep.notes)
    result = verify(dep, path, [random_inputs(dep.graph, s) for s in range(2)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"])
