"""Property tests: random synthetic int8 models, compiled to C and run, equal LiteRT's reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy
from deployer.reference import run_litert
from deployer.verify import build_engine, random_inputs, run_engine
from tests.tflite_builder import ModelBuilder

ACTS = st.sampled_from(["NONE", "RELU", "RELU6", "RELU_N1_TO_1"])
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _window(draw, h, w):
    k = draw(st.integers(1, 3))
    return dict(kernel=(k, draw(st.integers(1, 3))), stride=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=draw(st.sampled_from(["SAME", "VALID"])) if min(h, w) >= 3 else "SAME")


# the unary ops: the step's name -> the builder's method
UNARY = {"relu": "relu", "relu6": "relu6", "hswish": "hard_swish", "abs": "abs", "relu1": "relu_n1_to_1",
         "relu01": "relu_0_to_1", "logistic": "logistic", "tanh": "tanh", "exp": "exp"}


@st.composite
def layer_step(draw, mb: ModelBuilder, x: int) -> int:
    """Apply one random op to tensor x (NHWC) and return its output."""
    _, h, w, c = mb.shape(x)
    op = draw(st.sampled_from(["conv", "dw", "dil", "add", "sub", "mul", "avg", "max", "relu", "relu6", "hswish",
                               "leaky", "resize", "relu1", "relu01", "abs", "maxmin", "logistic", "pad", "concat", "requant",
                               "slice", "tconv", "tanh", "exp"]))
    if op == "conv":
        return mb.conv2d(x, draw(st.integers(1, 12)), activation=draw(ACTS),
                         per_channel=draw(st.booleans()), **_window(draw, h, w))
    if op == "dw":
        return mb.depthwise_conv2d(x, multiplier=draw(st.integers(1, 2)), activation=draw(ACTS),
                                   **{k: v for k, v in _window(draw, h, w).items()})
    if op == "dil":
        return mb.depthwise_conv2d(x, kernel=(3, 3), dilation=(2, draw(st.integers(1, 2))), padding="SAME")
    if op in ("add", "sub", "mul"):
        other = mb.conv2d(x, c, kernel=(1, 1))
        if draw(st.booleans()):
            other = mb.avg_pool(other, filter=(h, w), stride=(1, 1))  # broadcast (1,1,1,c)
        return {"add": mb.add, "sub": mb.sub, "mul": mb.mul}[op](x, other, activation=draw(ACTS))
    if op in ("avg", "max"):
        win = _window(draw, h, w)
        pool = mb.avg_pool if op == "avg" else mb.max_pool
        return pool(x, filter=win["kernel"], stride=win["stride"], padding="SAME", activation=draw(ACTS))
    if op in UNARY:
        return getattr(mb, UNARY[op])(x)
    if op == "maxmin":
        other = mb.conv2d(x, c, kernel=(1, 1))
        return (mb.maximum if draw(st.booleans()) else mb.minimum)(x, other)
    if op == "resize":
        return mb.resize_nearest(x, (draw(st.integers(1, 2 * h)), draw(st.integers(1, 2 * w))),
                                 align_corners=draw(st.booleans()), half_pixel_centers=draw(st.booleans()))
    if op == "tconv":
        return mb.transpose_conv(x, draw(st.integers(1, 8)), kernel=(draw(st.integers(1, 4)), draw(st.integers(1, 4))),
                                 stride=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                                 padding=draw(st.sampled_from(["SAME", "VALID"])), activation=draw(ACTS),
                                 per_channel=draw(st.booleans()), bias=draw(st.booleans()))
    if op == "slice":  # a window of rows, columns and channels, walked either way
        begin, end, strides = [0], [1], [1]
        for d in (h, w, c):
            first, stride = draw(st.integers(0, d - 1)), draw(st.sampled_from([1, 2, -1]))
            begin.append(first)
            end.append(draw(st.integers(first + 1, d)) if stride > 0 else draw(st.integers(-d - 1, first - d - 1)))
            strides.append(stride)
        return mb.strided_slice(x, begin, end, strides)
    if op == "leaky":
        return mb.leaky_relu(x, alpha=draw(st.sampled_from([0.1, 0.2, 1.5])))
    if op == "pad":
        return mb.pad(x, [[0, 0], [draw(st.integers(0, 2)), draw(st.integers(0, 2))],
                          [draw(st.integers(0, 2)), draw(st.integers(0, 2))], [0, 0]])
    if op == "concat":
        return mb.concat([x, mb.conv2d(x, draw(st.integers(1, 4)), kernel=(1, 1))], axis=3)
    return mb.quantize(x)


@st.composite
def models(draw):
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        x = mb.quantize(mb.input((1, draw(st.integers(2, 9)), draw(st.integers(2, 9)), draw(st.integers(1, 6))),
                                 dtype="float32"))
        float_out = True
    else:
        x = mb.input((1, draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 6))))
        float_out = False
    for _ in range(draw(st.integers(1, 4))):
        x = draw(layer_step(mb, x))
    head = draw(st.sampled_from(["none", "fc", "mean", "softmax", "log_softmax", "transpose"]))
    _, h, w, c = mb.shape(x)
    if head == "fc":
        x = mb.fully_connected(mb.reshape(x, (1, h * w * c)), draw(st.integers(1, 16)), activation=draw(ACTS))
    elif head == "mean":
        x = mb.mean(x, axes=draw(st.sampled_from([(1, 2), (1,), (2,), (3,)])), keep_dims=draw(st.booleans()))
    elif head == "softmax":
        x = mb.softmax(x, beta=draw(st.sampled_from([1.0, 0.5, 2.0])))
    elif head == "log_softmax":
        x = mb.log_softmax(x)
    elif head == "transpose":
        x = mb.transpose(x, draw(st.permutations([0, 1, 2, 3])))
    mb.output(mb.dequantize(x) if float_out else x)
    return mb


def check(tmp_path, mb: ModelBuilder):
    path = tmp_path / "model.tflite"
    mb.save(path)
    dep = deploy(path, Options())
    samples = [random_inputs(dep.graph, s) for s in range(2)]
    for sanitize in (False, True):
        outs, _ = run_engine(build_engine(dep, sanitize=sanitize), samples)
        for sample, ours in zip(samples, outs):
            ref, _ = run_litert(path, sample)
            for a, b in zip(ours, ref):
                assert np.array_equal(a, b.reshape(a.shape)), \
                    f"{int((a != b.reshape(a.shape)).sum())} of {a.size} elements differ (sanitize={sanitize})"


@SETTINGS
@given(mb=models())
def test_random_models_bit_exact(tmp_path, mb):
    check(tmp_path, mb)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), shape=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 8)))
def test_two_input_add_and_broadcast_mul(tmp_path, seed, shape):
    mb = ModelBuilder(seed)
    a, b = mb.input((1, *shape)), mb.input((1, 1, 1, shape[2]))
    mb.output(mb.mul(mb.add(a, mb.input((1, *shape))), b))
    check(tmp_path, mb)


@pytest.mark.parametrize("scale", [0.002, 0.05, 0.4, 3.0])
def test_log_softmax_engine(tmp_path, scale):
    """The engine's fixed-point logarithm over rows of 1 to 37 values, from fine input scales (every
    value counts) to coarse ones (most values fall under the floor and give -128)."""
    mb = ModelBuilder(7)
    mb.output(mb.log_softmax(mb.input((2, 3, 37), scale=scale)), mb.log_softmax(mb.input((5, 1), scale=scale)))
    check(tmp_path, mb)


def test_slices_engine(tmp_path):
    """STRIDED_SLICE backwards, with masks and a shrunk axis, and SLICE to the end, in one engine."""
    mb = ModelBuilder(3)
    x = mb.input((2, 5, 6, 7))
    mb.output(mb.strided_slice(x, [1, -1, 0, 6], [2, 0, 6, -8], [1, -2, 2, -3], begin_mask=0b0100, end_mask=0b1000,
                               shrink_axis_mask=0b0001),
              mb.slice(x, [0, 1, 2, 3], [-1, 3, -1, 2]))
    check(tmp_path, mb)


def test_transpose_conv_engine(tmp_path):
    """A decoder step as U-Nets have it: TRANSPOSE_CONV up by two (SAME, a 3x3 and a 2x2 kernel),
    one VALID with a kernel wider than its stride, and odd output sizes."""
    mb = ModelBuilder(5)
    x = mb.input((1, 5, 6, 8))
    up = mb.transpose_conv(x, 6, kernel=(3, 3), stride=(2, 2), activation="RELU")
    up2 = mb.transpose_conv(x, 4, kernel=(2, 2), stride=(2, 2), bias=False, per_channel=False)
    valid = mb.transpose_conv(x, 3, kernel=(4, 3), stride=(2, 1), padding="VALID", out_size=(13, 8))
    odd = mb.transpose_conv(x, 5, kernel=(3, 3), stride=(2, 2), out_size=(9, 11))
    mb.output(up, up2, valid, odd)
    check(tmp_path, mb)


def test_data_movement_and_reductions_engine(tmp_path):
    """SPLIT, SPLIT_V, UNPACK, PACK, GATHER, EXPAND_DIMS, PADV2, REDUCE_MAX/MIN and ARG_MAX/MIN
    (int32 and int64 indices) in one engine."""
    mb = ModelBuilder(9)
    x = mb.input((1, 6, 5, 8), scale=0.25, zero_point=3)
    a, b = mb.split(x, 2, axis=3)
    parts = mb.split_v(x, [2, -1, 1], axis=1)
    rows = mb.unpack(mb.reshape(a, (6, 5, 4)), axis=0)
    stacked = mb.pack([rows[0], rows[5], rows[2]], axis=1)
    picked = mb.gather(b, [[3, 0], [1, 1]], axis=3)
    wide = mb.expand_dims(parts[2], 0)
    mb.output(stacked, picked, mb.relu(wide), mb.padv2(parts[0], [[0, 0], [1, 0], [2, 1], [0, 0]], 1.5),
              mb.reduce("max", x, (1, 2)), mb.reduce("min", x, (3,), keep_dims=True),
              mb.arg("max", x, 3), mb.arg("min", x, 1, output_type="int64"))
    check(tmp_path, mb)


def test_mean_over_axes_apart_engine(tmp_path):
    """MEAN over axes that are not next to each other: the kept axes walked outside, the reduced inside."""
    mb = ModelBuilder(4)
    x = mb.input((2, 5, 3, 6))
    mb.output(mb.mean(x, axes=(1, 3), keep_dims=True), mb.mean(x, axes=(0, 2), keep_dims=False),
              mb.mean(x, axes=(3, 0, 1)))
    check(tmp_path, mb)


def test_maximum_in_tiles_and_patches(tmp_path):
    """MAXIMUM of two branches runs tile by tile and inside a patch stage (both branches' regions)."""
    mb = ModelBuilder(3)
    x = mb.input((1, 40, 40, 3))
    m = mb.maximum(mb.conv2d(x, 8, stride=(2, 2), activation="RELU"), mb.conv2d(x, 8, stride=(2, 2)))
    mb.output(mb.mean(mb.conv2d(m, 16, stride=(2, 2), activation="RELU"), axes=(1, 2), keep_dims=False))
    path = tmp_path / "model.tflite"
    mb.save(path)
    for options in (Options(patch="2x2@3"), Options(l1=4096, patch="off")):
        dep = deploy(path, options)
        assert dep.layers[3].in_stage if options.l1 is None else dep.layers[3].tiling is not None  # the MAXIMUM
        samples = [random_inputs(dep.graph, s) for s in range(2)]
        outs, _ = run_engine(build_engine(dep), samples)
        for sample, ours in zip(samples, outs):
            ref, _ = run_litert(path, sample)
            assert all(np.array_equal(a, b.reshape(a.shape)) for a, b in zip(ours, ref))
