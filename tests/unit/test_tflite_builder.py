"""Tests for the synthetic int8 TFLite model builder, checked against LiteRT's reference kernels."""

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from tflite.BuiltinOperator import BuiltinOperator
from tflite.Model import Model
from tflite.TensorType import TensorType

from tests.tflite_builder import FLOAT_INPUT_RANGE, ModelBuilder


def random_inputs(mb, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, mb.shape(t)).astype(np.int8) if mb.dtype(t) == "int8"
            else rng.uniform(*FLOAT_INPUT_RANGE, mb.shape(t)).astype(np.float32) for t in mb.inputs]


def run_litert(model: bytes, inputs):
    interp = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         num_threads=1)
    interp.allocate_tensors()
    for d, x in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def check_model(mb, seed=0, varied=True, tol_lsb=2):
    """Run with LiteRT: outputs have the declared shape/dtype, are not constant, and agree
    with the builder's float oracle to a few quantization steps."""
    inputs = random_inputs(mb, seed)
    outs = run_litert(mb.to_bytes(), inputs)
    for o, t, ref in zip(outs, mb.outputs, mb.simulate(*inputs), strict=True):
        assert o.shape == mb.shape(t)
        assert o.dtype == np.dtype(mb.dtype(t))
        if varied:
            assert len(np.unique(o)) > 1, "output is a single value"
        # int8 outputs compare in quantized steps; float outputs in steps of range / 255
        lsb = 1.0 if mb.dtype(t) == "int8" else float(np.ptp(ref)) / 255 + 1e-6
        diff = np.abs(o.astype(np.float64) - ref.astype(np.float64)).max()
        assert diff <= tol_lsb * lsb, f"LiteRT vs oracle differ by {diff}"
    return outs


def x4(mb, c=4, hw=8):
    return mb.input((1, hw, hw, c))


OPS = {
    "conv2d": lambda mb: mb.conv2d(x4(mb), 6),
    "conv2d_strided_dilated_relu": lambda mb: mb.conv2d(x4(mb), 5, kernel=(3, 2), stride=(2, 1),
                                                        dilation=(2, 1), activation="RELU"),
    "conv2d_per_tensor_nobias_valid": lambda mb: mb.conv2d(x4(mb), 6, padding="VALID", per_channel=False,
                                                           bias=False),
    "conv2d_1x1_relu6": lambda mb: mb.conv2d(x4(mb), 8, kernel=1, activation="RELU6"),
    "depthwise": lambda mb: mb.depthwise_conv2d(x4(mb)),
    "depthwise_mult2_stride2_relu6": lambda mb: mb.depthwise_conv2d(x4(mb), multiplier=2, stride=2,
                                                                    activation="RELU6"),
    "depthwise_dilated_valid": lambda mb: mb.depthwise_conv2d(x4(mb), dilation=2, padding="VALID"),
    "fully_connected": lambda mb: mb.fully_connected(mb.input((2, 16)), 5),
    "fully_connected_keep_dims_relu": lambda mb: mb.fully_connected(mb.input((1, 3, 16)), 5, keep_num_dims=True,
                                                                    activation="RELU"),
    "fully_connected_nobias": lambda mb: mb.fully_connected(mb.input((1, 3, 16)), 5, bias=False),
    "add": lambda mb: mb.add(x4(mb), x4(mb)),
    "add_broadcast_relu": lambda mb: mb.add(x4(mb), mb.input((1, 1, 1, 4)), activation="RELU"),
    "mul": lambda mb: mb.mul(x4(mb), x4(mb)),
    "mul_broadcast_n1to1": lambda mb: mb.mul(x4(mb), mb.input((4,)), activation="RELU_N1_TO_1"),
    "avg_pool": lambda mb: mb.avg_pool(x4(mb)),
    "avg_pool_same_3x3": lambda mb: mb.avg_pool(x4(mb), filter=3, stride=2, padding="SAME"),
    "max_pool": lambda mb: mb.max_pool(x4(mb)),
    "max_pool_same_relu": lambda mb: mb.max_pool(x4(mb), filter=3, stride=1, padding="SAME", activation="RELU"),
    "mean": lambda mb: mb.mean(x4(mb)),
    "mean_no_keep": lambda mb: mb.mean(x4(mb), axes=(1, 2), keep_dims=False),
    "reshape": lambda mb: mb.reshape(x4(mb), (1, -1)),
    "squeeze": lambda mb: mb.squeeze(mb.input((1, 1, 1, 8))),
    "squeeze_dims": lambda mb: mb.squeeze(mb.input((1, 1, 1, 8)), dims=[1, 2]),
    "softmax": lambda mb: mb.softmax(mb.input((1, 10))),
    "softmax_beta": lambda mb: mb.softmax(mb.input((2, 12)), beta=0.5),
    "logistic": lambda mb: mb.logistic(x4(mb)),
    "hard_swish": lambda mb: mb.hard_swish(x4(mb)),
    "relu": lambda mb: mb.relu(x4(mb)),
    "relu6": lambda mb: mb.relu6(x4(mb)),
    "pad": lambda mb: mb.pad(x4(mb), [[0, 0], [1, 2], [0, 1], [0, 0]]),
    "concat": lambda mb: mb.concat([x4(mb), x4(mb, c=3)]),
    "concat_axis1_relu": lambda mb: mb.concat([x4(mb), x4(mb)], axis=1, activation="RELU"),
    "quantize_requant": lambda mb: mb.quantize(x4(mb)),
    "quantize_float": lambda mb: mb.quantize(mb.input((1, 16), dtype="float32")),
    "dequantize": lambda mb: mb.dequantize(x4(mb)),
    "transpose": lambda mb: mb.transpose(x4(mb), (0, 3, 1, 2)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_single_op(name):
    mb = ModelBuilder(seed=7)
    mb.output(OPS[name](mb))
    check_model(mb)


@pytest.mark.parametrize("seed", range(12))
def test_random_geometries(seed):
    """Property-style sweep over conv/depthwise/pool geometry against LiteRT."""
    rng = np.random.default_rng(100 + seed)
    mb = ModelBuilder(seed)
    h, w, c = (int(v) for v in rng.integers(7, 13, 3))  # >= 7: fits a 3x3 kernel at dilation 3
    x = mb.input((1, h, w, c))
    k, s, d = (tuple(int(v) for v in rng.integers(1, 4, 2)) for _ in range(3))
    pad = str(rng.choice(["SAME", "VALID"]))
    act = str(rng.choice(["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]))
    y = [mb.conv2d(x, int(rng.integers(1, 9)), kernel=k, stride=s, dilation=d, padding=pad, activation=act),
         mb.depthwise_conv2d(x, int(rng.integers(1, 3)), kernel=k, stride=s, dilation=d, padding=pad,
                             activation=act),
         mb.avg_pool(x, filter=k, stride=s, padding=pad),
         mb.max_pool(x, filter=k, stride=s, padding=pad)]
    mb.output(*y)
    check_model(mb, seed, varied=False)


def test_same_seed_same_bytes():
    def build(seed):
        mb = ModelBuilder(seed)
        x = x4(mb)
        mb.output(mb.softmax(mb.fully_connected(mb.reshape(mb.conv2d(x, 4), (1, -1)), 10)))
        return mb

    a = build(3)
    assert a.to_bytes() == a.to_bytes() == build(3).to_bytes()
    assert a.to_bytes() != build(4).to_bytes()


def test_save(tmp_path):
    mb = ModelBuilder(1)
    mb.output(mb.relu(x4(mb)))
    path = tmp_path / "m.tflite"
    mb.save(path)
    assert path.read_bytes() == mb.to_bytes()


def build_multilayer(seed=11):
    mb = ModelBuilder(seed)
    x = x4(mb, c=3, hw=12)
    a = mb.conv2d(x, 8, stride=2, activation="RELU")
    b = mb.depthwise_conv2d(a, activation="RELU6")
    c = mb.add(a, b)
    d = mb.avg_pool(c)
    e = mb.reshape(d, (1, -1))
    f = mb.fully_connected(e, 10)
    mb.output(mb.softmax(f))
    return mb


def test_multilayer():
    mb = build_multilayer()
    for seed in range(3):
        (out,) = check_model(mb, seed, tol_lsb=4)
        assert out.shape == (1, 10) and out.dtype == np.int8


def test_float_io():
    mb = ModelBuilder(5)
    x = mb.input((1, 8, 8, 3), dtype="float32")
    y = mb.dequantize(mb.conv2d(mb.quantize(x), 6, activation="RELU"))
    mb.output(y)
    (out,) = check_model(mb, tol_lsb=4)
    assert out.dtype == np.float32 and (out >= 0).all()


def test_model_structure():
    mb = build_multilayer()
    buf = mb.to_bytes()
    assert buf[4:8] == b"TFL3"
    m = Model.GetRootAs(buf, 0)
    assert m.Version() == 3 and m.Description()
    assert m.Buffers(0).DataLength() == 0
    sg = m.Subgraphs(0)
    names = [sg.Tensors(i).Name().decode() for i in range(sg.TensorsLength())]
    assert all(names) and len(set(names)) == len(names)
    assert "conv2d_0/out" in names and "conv2d_0/weights" in names

    versions = {}
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        assert oc.DeprecatedBuiltinCode() == min(oc.BuiltinCode(), 127)
        versions[oc.BuiltinCode()] = oc.Version()
    assert versions == {BuiltinOperator.CONV_2D: 3, BuiltinOperator.DEPTHWISE_CONV_2D: 3,
                        BuiltinOperator.ADD: 2, BuiltinOperator.AVERAGE_POOL_2D: 2,
                        BuiltinOperator.RESHAPE: 1, BuiltinOperator.FULLY_CONNECTED: 4,
                        BuiltinOperator.SOFTMAX: 2}

    by_name = {sg.Tensors(i).Name().decode(): sg.Tensors(i) for i in range(sg.TensorsLength())}
    conv_w, conv_b = by_name["conv2d_0/weights"], by_name["conv2d_0/bias"]
    assert conv_w.ShapeAsNumpy().tolist() == [8, 3, 3, 3] and conv_w.Type() == TensorType.INT8
    q = conv_w.Quantization()
    assert q.QuantizedDimension() == 0 and q.ScaleLength() == 8 and not q.ZeroPointAsNumpy().any()
    w = m.Buffers(conv_w.Buffer()).DataAsNumpy().view(np.int8)
    assert w.size == 8 * 27 and w.min() >= -127
    in_scale = by_name["input_0"].Quantization().Scale(0)
    assert conv_b.Type() == TensorType.INT32
    np.testing.assert_allclose(conv_b.Quantization().ScaleAsNumpy(), in_scale * q.ScaleAsNumpy(), rtol=1e-6)
    dw_w = by_name["depthwise_conv2d_0/weights"]
    assert dw_w.ShapeAsNumpy().tolist() == [1, 3, 3, 8] and dw_w.Quantization().QuantizedDimension() == 3
    fc_w = by_name["fully_connected_0/weights"]
    assert fc_w.ShapeAsNumpy().tolist() == [10, 3 * 3 * 8] and fc_w.Quantization().ScaleLength() == 1
    sm = by_name["softmax_0/out"].Quantization()
    assert sm.Scale(0) == pytest.approx(1 / 256) and sm.ZeroPoint(0) == -128


def test_quantization_rules():
    mb = ModelBuilder(2)
    x = x4(mb)
    assert mb.quantization(mb.avg_pool(x)) == mb.quantization(x)
    assert mb.quantization(mb.transpose(x, (0, 2, 1, 3))) == mb.quantization(x)
    assert mb.quantization(mb.logistic(x)) == (1 / 256, -128)
    assert mb.quantization(mb.relu(x))[1] == -128  # ReLU output range starts at exactly 0


def test_concat_requantizes_mismatched_inputs():
    mb = ModelBuilder(4)
    a, b = x4(mb), x4(mb, c=2)
    n_ops = len(mb._ops)
    y = mb.concat([a, b])
    codes = [op.code for op in mb._ops[n_ops:]]
    assert codes.count(BuiltinOperator.QUANTIZE) >= 1 and codes[-1] == BuiltinOperator.CONCATENATION
    n_ops = len(mb._ops)
    same = mb.concat([a, a])  # matching inputs: no requantization
    assert len(mb._ops) == n_ops + 1 and mb.quantization(same) == mb.quantization(a)
    mb.output(y, same)
    check_model(mb)


def test_invalid_arguments():
    mb = ModelBuilder()
    x = x4(mb)
    with pytest.raises(ValueError):
        mb.conv2d(x, 4, activation="TANH")
    with pytest.raises(ValueError):
        mb.conv2d(x, 4, kernel=9, padding="VALID")
    with pytest.raises(ValueError):
        mb.conv2d(mb.input((1, 4, 4, 2), dtype="float32"), 4)
    with pytest.raises(ValueError):
        mb.avg_pool(x, padding="FULL")
    with pytest.raises(ValueError):
        mb.reshape(x, (3, -1, 5))
    with pytest.raises(ValueError):
        mb.to_bytes()  # no outputs marked
