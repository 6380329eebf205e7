"""The Helium kernels' paths on small synthetic models, each bit-exact against LiteRT on QEMU's
mps3-an547: the 16-lane depthwise kernel (a last group of fewer channels, strides, a 5x5 window,
in place, tiled) and its fallbacks (a -128 weight: one tap at a time; a left shift: the 4-lane
kernel), the 4-channel x 2-pixel passes of pointwise, im2col and fully connected layers (an odd
pixel count, channels not a multiple of 4, a row not a multiple of 16) with their
requantizations (right shifts only, a left shift, a fully connected layer's estimate of its double
scale with exact halves, and a scale it cannot estimate)."""
from __future__ import annotations

import numpy as np
import pytest

from backends import mve
from deployer import qemu
from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs
from tests.tflite_builder import ModelBuilder

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")
DW16 = "depthwise_conv_s8_16ch_mve"


def run(model, samples=None, **options):
    dep = deploy(model, Options(target="cortex-m55", **options))
    samples = samples or [random_inputs(dep.graph, 0), random_inputs(dep.graph, 1)]
    result = qemu.verify_on_qemu(dep, model, samples)
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
    return dep


def names(dep) -> list[str]:
    return [lp.variant.name for lp in dep.layers]


def engine(dep) -> str:
    return next(text for name, text in dep.files.items() if name.endswith("_engine.c"))


def scaled_output(mb: ModelBuilder, factor: float):
    """The next op's output scale times ``factor`` (its requantization multiplier over it)."""
    plain = mb._range_quant

    def once(y):
        mb._range_quant = plain
        s, z = plain(y)
        return float(np.float32(s * factor)), z
    mb._range_quant = once


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """pointwise (99 pixels) -> depthwise 3x3 RELU6 over its dying input (24 channels: a group of 8)
    -> depthwise 3x2 stride 2 -> 3x3 conv of 10 channels (im2col, 30 pixels) -> depthwise 5x5 (more
    rows than the 16-lane kernel's registers hold: the 4-lane kernel)."""
    mb = ModelBuilder(3)
    x = mb.input((1, 11, 9, 20))
    c = mb.conv2d(x, 24, (1, 1))
    d = mb.depthwise_conv2d(c, kernel=(3, 3), activation="RELU6")
    e = mb.depthwise_conv2d(d, kernel=(3, 2), stride=(2, 2))
    mb.output(mb.depthwise_conv2d(mb.conv2d(e, 12, (3, 3)), kernel=(5, 5)))
    path = tmp_path_factory.mktemp("mve") / "mixed.tflite"
    mb.save(path)
    return path


def test_depthwise16_pointwise_im2col_whole_and_in_place(mixed):
    dep = run(mixed)
    assert names(dep) == ["conv_1x1_s8_mve", DW16, DW16, "conv_s8_mve_im2col", "depthwise_conv_s8_mve"]
    assert any(r.rule == "depthwise-in-place" and r.layer == 1 for r in dep.reuses)
    assert "in place" in engine(dep)


def test_depthwise16_tiled(mixed):
    dep = run(mixed, l1=4 * 1024)
    assert any(dep.layers[k].variant.name == DW16 for k in dep.tilings), dep.tilings


def test_depthwise16_weights_of_minus_128_run_one_tap_at_a_time(tmp_path):
    """Two taps' products of -128 x -128 overflow int16: the kernel must not pair them. Weights of
    -128 at the first two taps of one channel and at every tap of another, inputs of -128."""
    mb = ModelBuilder(5)
    x = mb.input((1, 6, 7, 16), zero_point=3)
    plain = mb._weights

    def weights(shape, n, fan_in):
        mb._weights = plain
        wq, ws = plain(shape, n, fan_in)
        wq[0, 0, :2, 0] = -128
        wq[0, :, :, 5] = -128
        return wq, ws
    mb._weights = weights
    mb.output(mb.depthwise_conv2d(x))
    path = tmp_path / "minus128.tflite"
    mb.save(path)
    graph = deploy(path, Options(target="cortex-m55")).graph
    low = [np.full(graph.tensors[t].shape, -128, np.int8) for t in graph.inputs]
    dep = run(path, [low, random_inputs(graph, 0)])
    assert names(dep) == [DW16]
    assert "a weight is -128: one tap at a time" in engine(dep)


def test_left_shifts_take_the_general_requantization(tmp_path):
    """Output scales 1/512 of the calibrated ones: multipliers of 0.5 and more (a shift >= 0) on some
    channels. The depthwise layer runs the 4-lane kernel, the pointwise one the general vector
    requantization (both read the input)."""
    mb = ModelBuilder(6)
    x = mb.input((1, 5, 6, 16))
    scaled_output(mb, 1 / 512)
    d = mb.depthwise_conv2d(x)
    scaled_output(mb, 1 / 512)
    mb.output(d, mb.conv2d(x, 12, (1, 1)))
    path = tmp_path / "left.tflite"
    mb.save(path)
    dep = run(path)
    assert all(max(kern.shift) >= 0 for kern in dep.kernels)
    assert sorted(names(dep)) == ["conv_1x1_s8_mve", "depthwise_conv_s8_mve"]
    assert "mve_mbqm(mve_lanes2(" in engine(dep)


def test_fully_connected_exact_halves_and_double_scales(tmp_path):
    """acc x 0.25 (input scale 2^-6, weights 2^-7, output 2^-11): a quarter of the sums end in an
    exact half, which only the double product rounds as the reference does (away from zero); a
    scale of about 0.75 has no 32.32 estimate and runs in double. 3 batch rows (a pair and one),
    10 and 6 units (a pass of 2), 20 features (a last step of 4)."""
    mb = ModelBuilder(8)
    x = mb.input((3, 20), scale=2 ** -6, zero_point=5)
    plain = mb._weights

    def small(shape, n, fan_in):
        return mb.rng.integers(-3, 4, shape).astype(np.int8), np.array([2 ** -7], np.float32)
    mb._weights = small
    plain_q = mb._range_quant
    mb._range_quant = lambda y: (2.0 ** -11, int(np.clip(np.round(-y.mean() / 2 ** -11), -20, 20)))
    quarter = mb.fully_connected(x, 10)
    mb._range_quant = lambda y: (float(np.float32(2 ** -13 / 0.75)), 0)
    three_quarters = mb.fully_connected(x, 6)
    mb._weights, mb._range_quant = plain, plain_q
    mb.output(quarter, three_quarters)
    path = tmp_path / "fc.tflite"
    mb.save(path)
    dep = run(path)
    assert names(dep) == ["fully_connected_s8_mve"] * 2
    assert (0.25,) in [tuple(k.scale) for k in dep.kernels]
    text = engine(dep)
    assert "mve_rq_fc(" in text and "requantized in double" in text
