"""16x8 models (int16 activations, int8 weights, int64 biases): an audio front end in 16 bits
before an int8 body, and a model in 16 bits throughout, against LiteRT's reference kernels; the
16-bit layers beside tiling, in-place rules and the DSP variants; what is refused and why."""
from __future__ import annotations

import numpy as np
import pytest

from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs, verify
from network_parser.errors import UnsupportedOperator
from network_parser.tflite_reader import read_tflite
from layer_analyzer import kernels as K
from tests.tflite_builder import ModelBuilder


def audio_front_end_model(folder, seed: int = 0):
    """A keyword spotter whose front end keeps 16 bits: float32 features (25 frames x 20 bins)
    quantized to int16, two 16x8 convolutions and a depthwise one with a residual ADD, then
    QUANTIZE to int8 and an int8 body (convolution, pooling, fully connected, softmax)."""
    mb = ModelBuilder(seed)
    x = mb.quantize(mb.input((1, 25, 20, 1), dtype="float32"), dtype="int16")
    x = mb.conv2d(x, 8, (3, 3), (2, 2), activation="RELU")
    y = mb.depthwise_conv2d(x, 1, (3, 3), activation="RELU6")
    x = mb.add(x, mb.conv2d(y, 8, (1, 1)))
    x = mb.quantize(x, dtype="int8")
    x = mb.conv2d(x, 16, (3, 3), (2, 2), activation="RELU")
    x = mb.avg_pool(x, (7, 5), (1, 1))
    mb.output(mb.softmax(mb.fully_connected(mb.reshape(x, (1, 16)), 4)))
    path = folder / "audio16.tflite"
    mb.save(path)
    return path


def all_16_bit_model(folder, seed: int = 0):
    """int16 in, int16 out: convolution, depthwise, MUL, pooling, padding, slicing,
    concatenation and a fully connected layer, all 16x8."""
    mb = ModelBuilder(seed, activations="int16")
    x = mb.input((1, 12, 10, 3))
    x = mb.conv2d(x, 6, (3, 3), activation="RELU")
    a = mb.depthwise_conv2d(x, 2, (3, 3), (2, 2))
    b = mb.max_pool(mb.pad(x, [[0, 0], [0, 0], [0, 0], [0, 6]]), (2, 2), (2, 2))
    x = mb.concat([mb.mul(a, b), mb.strided_slice(a, [0, 0, 0, 0], [1, 6, 5, 12], [1, 1, 1, 2])], axis=-1)
    x = mb.avg_pool(x, (2, 2), (1, 1), "SAME")
    mb.output(mb.fully_connected(mb.reshape(x, (1, 6 * 5 * 18)), 10, activation="RELU6"))
    path = folder / "all16.tflite"
    mb.save(path)
    return path


def _exact(dep, path, count=3):
    result = verify(dep, path, [random_inputs(dep.graph, s) for s in range(count)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]


@pytest.mark.parametrize("make", [audio_front_end_model, all_16_bit_model])
@pytest.mark.parametrize("target,l1", [("host", None), ("host", 4096), ("gap8", None)])
def test_16x8_models_bit_exact(tmp_path, make, target, l1):
    path = make(tmp_path)
    dep = deploy(path, Options(target=target, l1=l1))
    _exact(dep, path)


def test_16_bit_layers_tile_on_the_portable_kernels_beside_dsp_int8_layers(tmp_path):
    """On a Cortex-M with an L1 budget both widths tile; the int8 body runs the DSP kernels, the
    16-bit layers the portable 16-bit kernels (2-byte elements in the arena, in L1 and in their
    transfers; int64 accumulators)."""
    path = audio_front_end_model(tmp_path)
    dep = deploy(path, Options(target="cortex-m7", l1=4096))
    sixteen = [lp for lp in dep.layers if K.activation_dtype(lp.kernel) == "int16" and isinstance(lp.kernel, (K.Conv, K.Add))]
    assert len(sixteen) == 4
    assert all(not lp.variant.dsp and lp.variant.name.endswith("_s16") for lp in sixteen)
    assert all(lp.tiling is not None and lp.tiling[0].elem == 2 for lp in sixteen)
    assert any(lp.variant.dsp and lp.tiling is not None and K.activation_dtype(lp.kernel) == "int8" for lp in dep.layers)
    g = dep.graph
    x16 = next(t for t in g.activations() if g.tensors[t].dtype == "int16")
    assert g.tensors[x16].nbytes == 2 * g.tensors[x16].elements
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert "int64_t acc" in engine and "fx_mbqm64(" in engine  # the 16x8 convolutions' accumulator and requantization


@pytest.mark.parametrize("target", ["host", "gap8"])
@pytest.mark.parametrize("layer", ["conv", "fc"])
def test_16x8_tiles_split_input_channels_into_int64_partial_sums(tmp_path, target, layer):
    """An L1 too small for all input channels: the tiles sum slices of them into int64 partial
    sums in L1 (8 bytes each), the last slice requantizes; bit-exact."""
    mb = ModelBuilder(4, activations="int16")
    x = mb.input((1, 5, 5, 64))
    mb.output(mb.conv2d(x, 8, (3, 3), activation="RELU") if layer == "conv" else
              mb.fully_connected(mb.reshape(x, (1, 1600)), 24))
    path = tmp_path / "split.tflite"
    mb.save(path)
    dep = deploy(path, Options(target=target, l1=1024))
    g, t = dep.layers[-1].tiling
    assert 0 < t.tile_ci < g.in_c and g.acc_bytes == 8
    assert g.footprint(t.tile_h, t.tile_w, t.tile_c, t.tile_ci).accumulator == 8 * t.tile_h * t.tile_w * t.tile_c
    _exact(dep, path, 2)


def test_whole_16x8_convolutions_run_the_smlald_kernel_on_cortex_m(tmp_path):
    """Without an L1 budget the 16x8 convolutions (not the depthwise one) run the SMLALD variant."""
    path = audio_front_end_model(tmp_path)
    dep = deploy(path, Options(target="cortex-m7"))
    names = [lp.variant.name for lp in dep.layers if isinstance(lp.kernel, K.Conv) and lp.kernel.dtype == "int16"]
    assert names == ["convolve_s16_smlald", "depthwise_conv_s16", "convolve_s16_smlald"]


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_a_16_bit_front_end_runs_patch_by_patch(tmp_path, target):
    """The 16-bit front end (QUANTIZE to int16, the 16x8 convolutions, the ADD) as a patch stage:
    its patch buffers hold 2-byte elements; bit-exact."""
    path = audio_front_end_model(tmp_path)
    dep = deploy(path, Options(target=target, patch="3x2@4"))
    assert [lp.index for lp in dep.layers if lp.in_stage] == [0, 1, 2, 3, 4]
    g, (patch,) = dep.graph, dep.patches
    for t, size in patch.buffers.items():
        rows, cols = patch.rows.largest(t), patch.cols.largest(t)
        assert size == rows * cols * g.tensors[t].shape[-1] * 2 and g.tensors[t].dtype == "int16"
    _exact(dep, path)


def test_the_16_bit_elementwise_add_writes_over_its_dying_input(tmp_path):
    path = audio_front_end_model(tmp_path)
    dep = deploy(path, Options(target="host"))
    add = next(k for k, layer in enumerate(dep.graph.layers) if layer.op == "ADD")
    assert any(r.layer == add and r.rule == "elementwise-in-place" for r in dep.reuses)
    _exact(dep, path, 2)


def _refused(tmp_path, build, *words):
    mb = ModelBuilder(0, activations="int16")
    mb.output(build(mb, mb.input((1, 6, 6, 4))))
    path = tmp_path / "m.tflite"
    mb.save(path)
    with pytest.raises(UnsupportedOperator) as e:
        deploy(path, Options(target="host"))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_16_bit_operators_outside_the_list_are_refused_by_name(tmp_path):
    _refused(tmp_path, lambda mb, x: mb.max_pool(mb.hard_swish(x)), "op 0 HARD_SWISH", "input 'input_0' is int16",
             "HARD_SWISH supports int8", "LiteRT has no 16-bit HARD_SWISH kernel")
    _refused(tmp_path, lambda mb, x: mb.transpose(x, [0, 2, 1, 3]), "op 0 TRANSPOSE", "input 'input_0' is int16",
             "deploy ops")


def test_asymmetric_int16_activations_are_refused(tmp_path):
    def build(mb, x):
        y = mb.conv2d(x, 4)
        mb._tensors[y].zero_point[0] = 3
        return y
    _refused(tmp_path, build, "zero point 3", "symmetric")


def test_power_of_two_int16_add_is_refused(tmp_path):
    def build(mb, x):
        a = mb.quantize(x, scale=2.0 ** -10, dtype="int16")
        b = mb.quantize(x, scale=2.0 ** -9, dtype="int16")
        y = mb.add(a, b, pot_scale_int16=True)
        mb._tensors[y].scale[0] = 2.0 ** -8
        return y
    _refused(tmp_path, build, "power-of-two", "pot_scale_int16")


def test_power_of_two_scales_take_the_general_add_when_the_flag_is_off(tmp_path):
    mb = ModelBuilder(0, activations="int16")
    x = mb.input((1, 6, 6, 4), scale=2.0 ** -12)
    y = mb.add(x, mb.quantize(x, scale=2.0 ** -11, dtype="int16"))
    mb._tensors[y].scale[0] = 2.0 ** -10
    mb.output(y)
    path = tmp_path / "m.tflite"
    mb.save(path)
    _exact(deploy(path, Options(target="host")), path)


@pytest.mark.parametrize("layer", ["conv", "fc"])
def test_int32_biases_of_16x8_layers_sum_in_32_bits_when_the_options_say_so(tmp_path, layer):
    """quantized_bias_type INT32: an int32 bias and accumulator and the 8-bit requantization;
    without it LiteRT reads an int32 bias as int64, which the deployer refuses."""
    from tests.tflite_builder import _opts
    mb = ModelBuilder(2, activations="int16")
    x = mb.input((1, 6, 6, 8))
    y = mb.conv2d(x, 6, bias32=True) if layer == "conv" else mb.fully_connected(mb.reshape(x, (1, 288)), 9, bias32=True)
    mb.output(y)
    path = tmp_path / "m.tflite"
    mb.save(path)
    dep = deploy(path, Options(target="host"))
    assert not dep.layers[-1].kernel.acc64 and dep.layers[-1].kernel.dtype == "int16"
    _exact(dep, path)
    op = mb._ops[-1]
    op.options = _opts("Conv2DOptions", Padding=0, StrideW=1, StrideH=1) if layer == "conv" else \
        _opts("FullyConnectedOptions", KeepNumDims=False)
    mb.save(path)
    with pytest.raises(UnsupportedOperator, match="quantized_bias_type is INT32"):
        deploy(path, Options(target="host"))


def test_an_op_mixing_int8_and_int16_is_refused(tmp_path):
    def build(mb, x):
        y = mb.conv2d(x, 4)
        mb._tensors[y].dtype = "int8"
        mb._tensors[y].zero_point[0] = 0
        return y
    _refused(tmp_path, build, "mixes int16 and int8", "QUANTIZE")


def test_an_int8_layer_with_an_int64_bias_is_refused(tmp_path):
    mb = ModelBuilder(0)
    x = mb.input((1, 4, 4, 2))
    y = mb.conv2d(x, 3)
    mb.output(y)
    bias = next(t for t in mb._tensors if t.name.endswith("/bias"))
    bias.dtype = "int64"
    mb._buffers[bias.buffer] = np.frombuffer(mb._buffers[bias.buffer], np.int32).astype(np.int64).tobytes()
    path = tmp_path / "m.tflite"
    mb.save(path)
    with pytest.raises(UnsupportedOperator, match="is int64; a layer with int8 input takes int32 biases"):
        deploy(path, Options(target="host"))


def test_int16_graph_inputs_are_read():
    """The reader takes int16 graph inputs and reads the model's ADD options (pot_scale_int16: the
    builder writes it off, as 16x8 converters do; the schema's default is on)."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        mb = ModelBuilder(1, activations="int16")
        x = mb.input((1, 4, 4, 2))
        mb.output(mb.add(x, mb.conv2d(x, 2)))
        path = Path(tmp) / "m.tflite"
        mb.save(path)
        g = read_tflite(path)
    assert g.tensors[g.inputs[0]].dtype == "int16"
    assert not next(layer for layer in g.layers if layer.op == "ADD").attrs.pot_scale_int16


@pytest.mark.parametrize("op", ["logistic", "tanh"])
@pytest.mark.parametrize("scale", [2.0 ** -12, 2.0 ** -11, 4.2e-4, 1.1e-3, 3e-5])
def test_16_bit_logistic_and_tanh_on_every_input(tmp_path, op, scale):
    """Every int16 input through LOGISTIC / TANH (power-of-two input scales take the exact x3
    rescale), the engine against LiteRT."""
    mb = ModelBuilder(0, activations="int16")
    x = mb.input((65536,), scale=scale)
    mb.output(getattr(mb, op)(x))
    path = tmp_path / f"{op}.tflite"
    mb.save(path)
    dep = deploy(path, Options(target="host"))
    every = np.arange(-32768, 32768, dtype=np.int16)
    result = verify(dep, path, [[every]])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]


def test_the_sigmoid_table_is_generated_not_stored():
    """The 16-bit table comes from its rule (sigmoid(i/24) raised by half the midpoint gap): it
    starts at one half, rises, and its interpolation stays within one step of the sigmoid."""
    from layer_analyzer.requant import sigmoid_table16
    t = np.array(sigmoid_table16(), np.float64)
    assert t[0] == 32768 and t[-1] == 65535 and (np.diff(t) >= 0).all()
    xs = np.linspace(0, 254 / 24, 5000)
    interp = np.interp(xs * 24, np.arange(256), t) / 65536
    assert np.abs(interp - 1 / (1 + np.exp(-xs))).max() < 2 / 65536


def test_onnx_16_bit_qdq_is_refused_with_the_reason(tmp_path):
    """onnxruntime runs 16-bit QDQ groups in float32: the reader says so instead of guessing."""
    import onnx
    from onnx import TensorProto, helper
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.001])
    zp = helper.make_tensor("z", TensorProto.INT16, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [scale, zp])
    path = tmp_path / "q16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    with pytest.raises(UnsupportedOperator, match="int16 quantization.*16-bit QDQ groups in float32.*TFLite's 16x8"):
        deploy(path, Options(target="host"))


def _model(tmp_path, build, name="m.tflite", seed=0):
    mb = ModelBuilder(seed, activations="int16")
    mb.output(build(mb))
    path = tmp_path / name
    mb.save(path)
    return mb, path


@pytest.mark.parametrize("layer", ["conv", "depthwise", "fc"])
def test_int64_biases_beyond_int32_are_summed_in_64_bits(tmp_path, layer):
    """Biases far beyond int32 (the reason 16x8 biases are int64), bit-exact."""
    def build(mb):
        x = mb.input((1, 6, 6, 4), scale=1e-3)
        return {"conv": lambda: mb.conv2d(x, 5), "depthwise": lambda: mb.depthwise_conv2d(x, 2),
                "fc": lambda: mb.fully_connected(mb.reshape(x, (1, 144)), 7)}[layer]()
    mb, path = _model(tmp_path, build)
    bias = next(t for t in mb._tensors if t.name.endswith("/bias"))
    values = np.frombuffer(mb._buffers[bias.buffer], np.int64)
    values = values * ((1 << 40) // int(np.abs(values).max()))  # the largest near 2^40, inside the reference's 2^47
    mb._buffers[bias.buffer] = values.tobytes()
    mb.save(path)
    assert np.abs(values).max() > 2 ** 39
    _exact(deploy(path, Options(target="host")), path)


def test_a_fully_connected_result_beyond_int32_follows_the_reference(tmp_path):
    """(int32_t)round(acc * scale) beyond int32 is INT32_MIN on x86-64, as LiteRT computes it:
    the engine and the golden executor give the same saturated value, not the clamped sign."""
    mb, path = _model(tmp_path, lambda mb: mb.fully_connected(mb.reshape(mb.input((1, 8, 8, 4), scale=1e-3), (1, 256)), 6))
    out = mb._tensors[mb.outputs[0]]
    weights = next(t for t in mb._tensors if t.name.endswith("/weights"))
    out.scale = np.array([1e-3 * float(weights.scale[0]) / 4000.0], np.float32)  # a rescale of 4000
    mb.save(path)
    dep = deploy(path, Options(target="host"))
    kern = dep.kernels[-1]
    g = dep.graph
    w, b = g.tensors[kern.weights].data.astype(np.int64), g.tensors[kern.bias].data.astype(np.int64)
    reached = max(float(np.abs((x[0].reshape(1, -1).astype(np.int64) @ w.T + b) * kern.scale[0]).max())
                  for x in (random_inputs(g, s) for s in range(3)))
    assert reached > 2.0 ** 31  # the samples do leave int32
    _exact(dep, path)


def test_16x8_rescales_beyond_the_reference_range_are_refused(tmp_path):
    mb, path = _model(tmp_path, lambda mb: mb.conv2d(mb.input((1, 4, 4, 2), scale=1e-3), 3))
    mb._tensors[mb.outputs[0]].scale = np.array([1e-12], np.float32)
    mb.save(path)
    with pytest.raises(UnsupportedOperator, match="beyond the reference's 64-bit requantization"):
        deploy(path, Options(target="host"))


@pytest.mark.parametrize("op", ["logistic", "tanh"])
def test_16_bit_logistic_input_scales_the_reference_cannot_rescale_are_refused(tmp_path, op):
    _, path = _model(tmp_path, lambda mb: getattr(mb, op)(mb.input((1, 8), scale=8.0)))
    with pytest.raises(UnsupportedOperator, match="too large for the reference's rescale"):
        deploy(path, Options(target="host"))


def test_a_16_bit_mean_of_many_values_wraps_as_the_reference(tmp_path):
    """The int32 sum of more than 65537 int16 values wraps (LiteRT's int32 addition), the engine too."""
    _, path = _model(tmp_path, lambda mb: mb.mean(mb.input((1, 70000, 1), scale=1e-4), axes=(1,)))
    dep = deploy(path, Options(target="host"))
    full = [np.full((1, 70000, 1), 32767, np.int16)]
    result = verify(dep, path, [full, random_inputs(dep.graph, 1)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]


def test_per_channel_quantization_on_an_activation_is_refused(tmp_path):
    mb, path = _model(tmp_path, lambda mb: mb.conv2d(mb.input((1, 4, 4, 2)), 3))
    out = mb._tensors[mb.outputs[0]]
    out.scale, out.zero_point, out.qdim = np.array([1e-3, 2e-3, 3e-3], np.float32), np.zeros(3, np.int64), 3
    mb.save(path)
    with pytest.raises(UnsupportedOperator, match="has 3 scales; TFLite's kernels read one scale per activation"):
        deploy(path, Options(target="host"))


def test_add_without_options_takes_the_general_int16_kernel(tmp_path):
    """No options table: LiteRT's parameters are zero, pot_scale_int16 off (power-of-two scales too)."""
    def build(mb):
        x = mb.input((1, 4, 4, 2), scale=2.0 ** -12)
        y = mb.add(x, mb.quantize(x, scale=2.0 ** -11, dtype="int16"))
        mb._tensors[y].scale = np.array([2.0 ** -10], np.float32)
        mb._ops[-1].options = None
        return y
    _, path = _model(tmp_path, build)
    assert not next(layer for layer in read_tflite(path).layers if layer.op == "ADD").attrs.pot_scale_int16
    _exact(deploy(path, Options(target="host")), path)


def test_options_without_quantized_bias_type_read_as_the_default():
    """Older tflite schemas have no quantized_bias_type: the reader takes the default, not a traceback."""
    from network_parser.tflite_reader import _bias32

    class Old:  # an options table of a schema before the field
        pass
    assert _bias32(Old()) is False


def test_16_bit_layers_stream_from_l3_at_the_smallest_budgets(tmp_path):
    """With L3 and the smallest flash and SRAM the deployer reports, 16-bit layers stream their
    weights and their activations through L2 slabs (2-byte elements in every transfer); bit-exact."""
    from tests.host.test_l3 import L3, reported_need
    mb = ModelBuilder(5, activations="int16")
    x = mb.conv2d(mb.input((1, 24, 24, 8)), 16, (3, 3), activation="RELU")
    x = mb.depthwise_conv2d(x, 1, (3, 3))
    x = mb.max_pool(mb.add(x, mb.conv2d(x, 16, (1, 1))))
    mb.output(mb.fully_connected(mb.reshape(x, (1, 12 * 12 * 16)), 10))
    path = tmp_path / "l3.tflite"
    mb.save(path)
    base = Options(patch="off", target="host", l1=4096, l3=L3, time_limit_s=2.0)
    flash = reported_need(path, Options(**{**base.__dict__, "flash": 1}))
    sram = reported_need(path, Options(**{**base.__dict__, "flash": flash, "sram": 1}))
    dep = deploy(path, Options(**{**base.__dict__, "flash": flash, "sram": sram}))
    slabs = dep.l3.placement.slabs
    moved = {part for k, s in slabs.items() if dep.kernels[k].dtype == "int16" for part in s.streamed}
    assert {"w", "in", "out"} <= moved
    _exact(dep, path, 2)


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_softmax_from_int8_to_int16_probabilities(tmp_path, target):
    """int8 scores into int16 probabilities (scale 1/65536, zero point -32768: the one 16-bit
    activation TFLite's kernels take with a zero point), as TFLite Micro and LiteRT run it."""
    mb = ModelBuilder(3)
    x = mb.fully_connected(mb.reshape(mb.input((1, 3, 20)), (3, 20)), 12)
    mb.output(mb.softmax(x, beta=0.7, out_dtype="int16"))
    path = tmp_path / "softmax16.tflite"
    mb.save(path)
    dep = deploy(path, Options(target=target))
    out = dep.graph.tensors[dep.graph.outputs[0]]
    assert out.dtype == "int16" and out.quant.zero_point == (-32768,)
    _exact(dep, path)
