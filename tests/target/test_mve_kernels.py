"""The Helium kernels' paths on small synthetic models, each bit-exact against LiteRT on QEMU's
mps3-an547: the 16-lane depthwise kernel (a last group of fewer channels, strides, a 5x5 window,
in place, tiled) and its fallbacks (a -128 weight: one tap at a time; a left shift: the 4-lane
kernel), the 4-channel x 2-pixel passes of pointwise, im2col and fully connected layers (an odd
pixel count, channels not a multiple of 4, a row not a multiple of 16) with their
requantizations (right shifts only, a left shift, a fully connected layer's estimate of its double
scale with exact halves, and a scale it cannot estimate); elementwise ADD, SUB and MUL (rescaled
operands, left shifts, counts not a multiple of the vector, tiles) and average and max pooling
(SAME padding's smaller border windows, strides, a last pass of fewer channels, tiles), with the
layers they leave (a broadcast operand, a squared difference) to the next family's kernels."""
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


def run(model, samples=None, seeds: int = 2, **options):
    """The model deployed for the M55 and compared on QEMU (``samples``, else ``seeds`` random ones)."""
    dep = deploy(model, Options(target="cortex-m55", **options))
    samples = samples or [random_inputs(dep.graph, s) for s in range(seeds)]
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


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """Depthwise layers of fewer than 16 channels: 8 channels 3x3 RELU6 over 13 columns (6 passes of
    2 pixels and a last one of 1), 4 channels 3x2 VALID (4 pixels a pass; its input an output too,
    so not in place), 8 channels 2x3 stride 2 down (2 pixels a pass), 8 channels stride 2 across (a
    pixel a pass) and 2 channels (8 pixels a pass)."""
    mb = ModelBuilder(31)
    x = mb.input((1, 9, 13, 8))
    b = mb.conv2d(mb.depthwise_conv2d(x, kernel=(3, 3), activation="RELU6"), 4, (1, 1))
    c = mb.depthwise_conv2d(b, kernel=(3, 2), padding="VALID")
    e = mb.depthwise_conv2d(mb.conv2d(c, 8, (1, 1)), kernel=(2, 3), stride=(2, 1))
    f = mb.depthwise_conv2d(e, kernel=(3, 3), stride=(2, 2))
    mb.output(f, mb.depthwise_conv2d(mb.conv2d(x, 2, (1, 1)), kernel=(3, 3)), b)
    path = tmp_path_factory.mktemp("mve") / "narrow.tflite"
    mb.save(path)
    return path


def dw16_pixels(dep) -> list[int]:
    return [lp.variant.layout.pixels for lp in dep.layers if lp.variant.name == DW16]


def test_depthwise16_passes_of_several_pixels_whole(narrow):
    dep = run(narrow)
    assert sorted(dw16_pixels(dep)) == [1, 2, 2, 4, 8]
    in_place = {r.layer for r in dep.reuses if r.rule == "depthwise-in-place"}
    packed = [k for k, lp in enumerate(dep.layers) if lp.variant.name == DW16 and lp.variant.layout.pixels > 1]
    assert set(packed) - in_place and set(packed) & in_place  # written over the input and not
    text = engine(dep)
    assert "2 pixels of 8 channels a pass" in text and "8 pixels of 2 channels a pass" in text


def test_depthwise16_passes_of_several_pixels_tiled_and_in_a_patch_stage(narrow, tmp_path):
    dep = run(narrow, l1=1024)
    assert {dep.layers[k].variant.layout.pixels for k in dep.tilings if dep.layers[k].variant.name == DW16} >= {2, 4}
    mb = ModelBuilder(32)  # 8 then 4 channels in 2 x 3 patches (regions of 5 and 6 columns)
    d = mb.depthwise_conv2d(mb.conv2d(mb.input((1, 12, 17, 3)), 8, (3, 3)))
    mb.output(mb.conv2d(mb.depthwise_conv2d(mb.conv2d(d, 4, (1, 1)), kernel=(3, 3)), 8, (3, 3)))
    path = tmp_path / "stage.tflite"
    mb.save(path)
    dep = run(path, patch="2x3@3")
    assert [dep.layers[k].variant.layout.pixels for k in dep.patches[0].layers
            if dep.layers[k].variant.name == DW16] == [2, 4]


def test_depthwise16_in_place_takes_no_scratch_plane(tmp_path):
    """The 16-lane kernel writes over its input row by row itself: the arena holds the input alone."""
    mb = ModelBuilder(33)
    mb.output(mb.depthwise_conv2d(mb.input((1, 16, 16, 32)), kernel=(3, 3)))
    path = tmp_path / "in_place.tflite"
    mb.save(path)
    dep = run(path)
    assert names(dep) == [DW16]
    assert [(r.rule, r.scratch_bytes) for r in dep.reuses] == [("depthwise-in-place", 0)]
    assert dep.arena.peak == 16 * 16 * 32  # a plane of 256 B beside it before


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


ELTWISE_POOL = ["elementwise_add_s8_mve", "elementwise_sub_s8_mve", "elementwise_mul_s8_mve", "elementwise_mul_s8_mve",
                "avgpool_s8_mve", "max_pool_s8_mve", "avgpool_s8_mve"]


@pytest.fixture(scope="module")
def eltwise_pool(tmp_path_factory):
    """ADD of operands of different scales and zero points, SUB, MUL, a MUL whose rescaling shifts
    left (its output scale 1/512 of the calibrated one), then 3x3 stride-2 SAME average and max
    pools (windows of 4, 6 and 9 taps) and a 2x2 stride-2 VALID one: 7x9x27 = 1701 elements (106
    vectors of 16, one of 4 and a last one of 1), 27 channels (passes of 16 and of 11)."""
    mb = ModelBuilder(11)
    x = mb.input((1, 7, 9, 27), scale=0.03, zero_point=5)
    y = mb.input((1, 7, 9, 27), scale=0.07, zero_point=-9)
    s = mb.add(x, y)
    d = mb.sub(s, y, activation="RELU6")
    m = mb.mul(d, x)
    scaled_output(mb, 1 / 512)
    left = mb.mul(x, y)
    mb.output(left, mb.avg_pool(m, (3, 3), (2, 2), "SAME"), mb.max_pool(m, (3, 3), (2, 2), "SAME"),
              mb.avg_pool(s, (2, 2), (2, 2), "VALID"))
    path = tmp_path_factory.mktemp("mve") / "eltwise_pool.tflite"
    mb.save(path)
    return path


def test_eltwise_and_pools_whole(eltwise_pool):
    dep = run(eltwise_pool)
    assert sorted(names(dep)) == sorted(ELTWISE_POOL)
    adds = [k for k in dep.kernels if type(k).__name__ == "Add"]
    assert adds[0].a_multiplier != adds[0].b_multiplier  # each operand rescaled
    assert any(k.out_shift > 0 for k in dep.kernels if type(k).__name__ == "Mul")  # a left shift
    assert "vctp32q(1)" in engine(dep) and "vctp16q(3)" in engine(dep)


def test_eltwise_and_pools_tiled(eltwise_pool):
    dep = run(eltwise_pool, l1=1024)
    tiled = {dep.layers[k].variant.name for k in dep.tilings if dep.tilings[k][1].tiles > 1}
    assert {"elementwise_add_s8_mve", "elementwise_mul_s8_mve", "avgpool_s8_mve", "max_pool_s8_mve"} <= tiled, tiled


def test_eltwise_exact_halves(tmp_path):
    """Operands of scale 2^-6: ADD to an output of 2^-5 (each operand x 2^19 exactly, the sum / 2^20,
    an exact half whenever it is odd), SUB likewise, MUL to 2^-10 (the product / 4, halves and
    quarters): only TFLite's rounding of halves away from zero is bit-exact here."""
    mb = ModelBuilder(14)
    x = mb.input((1, 3, 5, 7), scale=2 ** -6, zero_point=3)
    y = mb.input((1, 3, 5, 7), scale=2 ** -6, zero_point=-4)
    plain = mb._range_quant
    mb._range_quant = lambda v: (2.0 ** -5, 0)
    s, d = mb.add(x, y), mb.sub(x, y)
    mb._range_quant = lambda v: (2.0 ** -10, 1)
    m = mb.mul(x, y)
    mb._range_quant = plain
    mb.output(s, d, m)
    path = tmp_path / "halves.tflite"
    mb.save(path)
    dep = run(path)
    assert sorted(names(dep)) == ["elementwise_add_s8_mve", "elementwise_mul_s8_mve", "elementwise_sub_s8_mve"]
    assert {(k.out_multiplier, k.out_shift) for k in dep.kernels} == {(2 ** 30, -19), (2 ** 30, -1)}


def test_pools_of_few_channels_and_a_global_average(tmp_path):
    """5 channels (one predicated pass of 5), a 5x3 stride-1 SAME max pool over a RELU's output and
    a global 6x7 average (42 taps, one window)."""
    mb = ModelBuilder(12)
    x = mb.input((1, 6, 7, 5))
    mb.output(mb.max_pool(x, (5, 3), (1, 1), "SAME", activation="RELU"), mb.avg_pool(x, (6, 7), (1, 1), "VALID"))
    path = tmp_path / "pools.tflite"
    mb.save(path)
    dep = run(path)
    assert sorted(names(dep)) == ["avgpool_s8_mve", "max_pool_s8_mve"]


@pytest.mark.parametrize("pool", ["avg_pool", "max_pool"])
def test_pools_write_over_their_dying_input(tmp_path, pool):
    """A 3x3 SAME pool between two pointwise layers: its output starts inside its input (the pixel
    walk the portable kernel has, which the Helium kernel keeps)."""
    from deployer.pipeline import shares_bytes
    mb = ModelBuilder(20)
    x = mb.input((1, 12, 12, 8))
    p = getattr(mb, pool)(mb.conv2d(x, 16, (1, 1)), (3, 3), (1, 1), "SAME")
    mb.output(mb.conv2d(p, 8, (1, 1)))
    path = tmp_path / f"{pool}.tflite"
    mb.save(path)
    dep = run(path)
    assert names(dep)[1] == ("avgpool_s8_mve" if pool == "avg_pool" else "max_pool_s8_mve")
    assert any(o.layer == 1 and shares_bytes(dep, o) for o in dep.overlaps)


def test_eltwise_and_pools_region_by_region_in_a_patch_stage(tmp_path):
    """A patch stage (2 x 3 patches) holding a residual ADD (one operand a wider patch buffer: it
    also feeds the 3x3 depthwise, which reads a halo), a MUL, a 3x3 stride-2 SAME average pool, a
    SUB of one operand with itself and a 2x2 SAME max pool: each runs its Helium kernel region by
    region, the operands read row by row at their buffers' strides."""
    mb = ModelBuilder(21)
    x = mb.input((1, 20, 22, 8))
    c = mb.conv2d(x, 24, (3, 3))
    s = mb.add(c, mb.conv2d(mb.depthwise_conv2d(c), 24, (1, 1)))
    a = mb.avg_pool(mb.mul(s, c), (3, 3), (2, 2), "SAME")
    q = mb.max_pool(mb.sub(a, a), (2, 2), (1, 1), "SAME")
    mb.output(mb.conv2d(q, 8, (3, 3)))
    path = tmp_path / "stage.tflite"
    mb.save(path)
    dep = run(path, patch="2x3@7")
    assert [(p.stage.start, p.stage.end, p.grid) for p in dep.patches] == [(0, 7, (2, 3))]
    assert names(dep)[3:8] == ["elementwise_add_s8_mve", "elementwise_mul_s8_mve", "avgpool_s8_mve",
                               "elementwise_sub_s8_mve", "max_pool_s8_mve"]
    text = engine(dep)
    assert "op3_add_window2" in text and "13 rows of 264 elements" in text  # the wider operand's rows
    for f in ("op3_add", "op4_mul", "op5_average_pool_2d", "op6_sub", "op7_max_pool_2d"):
        assert f"{f}_kernels[r][c](" in text, f  # each region through its window's kernel


def test_broadcast_and_squared_difference_take_the_portable_kernels(tmp_path):
    """A per-channel operand (a broadcast: neither family's kernels take it), a squared difference
    and a same-shape ADD beside them (Helium's)."""
    mb = ModelBuilder(13)
    x = mb.input((1, 5, 6, 8))
    c = mb.input((1, 1, 1, 8))
    y = mb.input((1, 5, 6, 8))
    mb.output(mb.add(x, c), mb.squared_difference(x, y), mb.add(x, y))
    path = tmp_path / "broadcast.tflite"
    mb.save(path)
    dep = run(path)
    assert sorted(names(dep)) == ["elementwise_add_s8", "elementwise_add_s8_mve", "squared_difference_s8"]


def test_pool_reciprocal_divides_as_the_reference():
    """(n + bump) * m >> 32 is (n + count / 2) / count for every sum the pool kernel can see."""
    for count in range(1, mve.POOL_AREA + 1):
        m, bump = mve.pool_reciprocal(count)
        n = np.arange(0, 128 * count + 1, dtype=np.uint64)
        assert m < 2 ** 32
        assert ((((n + np.uint64(bump)) * np.uint64(m)) >> np.uint64(32)) == (n + count // 2) // count).all(), count


def test_a_planeless_in_place_depthwise_sent_back_to_portable_gets_its_plane(tmp_path):
    """The 16-lane depthwise writes over its input with no scratch plane; when --flash sends it
    back to the portable kernel (which needs one), the memory is planned again with the plane."""
    mb = ModelBuilder(33)
    x = mb.input((1, 16, 16, 32))
    mb.output(mb.conv2d(mb.depthwise_conv2d(x, kernel=(3, 3)), 32, (1, 1)))
    path = tmp_path / "dw.tflite"
    mb.save(path)
    whole = deploy(path, Options(target="cortex-m55"))
    assert names(whole)[0] == DW16 and [(r.layer, r.scratch_bytes) for r in whole.reuses] == [(0, 0)]
    dep = run(path, flash=whole.memory.flash_bytes - 1)
    assert names(dep)[0] == "depthwise_conv_s8" and dep.memory.flash_bytes < whole.memory.flash_bytes
    assert [(r.layer, r.scratch_bytes) for r in dep.reuses] == [(0, 16 * 16)]
    assert "plane = (int8_t *)0" not in engine(dep)
