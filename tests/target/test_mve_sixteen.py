"""The Helium 16x8 kernels (int16 activations, int8 weights, int64 sums: VMLALDAVA) on QEMU's
mps3-an547, bit-exact against LiteRT: a regular convolution through its flattened windows
(padding, stride 2; a window not a multiple of 8 values) or, rows of whole vectors, reading the
rows in place inside the input, a pointwise one (a row of 13 inputs:
a predicated last step), channel counts not a multiple of 4, a fully connected layer's double
scale, sums that fit int32 (requantized 4 lanes at once) and sums that may not (64 bits each, the
three forms of the activation clamp); whole and tile by tile in L1 (tiles of fewer output channels
than the layer's); in patch stages the 16-bit layers keep the portable kernels, with the SMLAD
family alone they run SMLALD."""
from __future__ import annotations

from functools import partial

import pytest

from deployer import qemu
from deployer.pipeline import Options, deploy
from layer_analyzer import kernels as K
from tests.target.test_mve_kernels import engine
from tests.target.test_mve_kernels import run as run_on_m55
from tests.tflite_builder import ModelBuilder

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")


def build(folder, batch: int, h: int = 9, w: int = 11):
    """h x w x 5 int16 -> 3x3 SAME stride 2 conv RELU (13 channels, windows of 45 values) -> 1x1 conv
    (13 inputs, 11 channels) -> 3x3 VALID conv RELU6 (6 channels) -> fully connected (-> 7 units),
    and a 1x1 stride 2 conv (5 channels) of the 1x1's output."""
    mb = ModelBuilder(5, activations="int16")
    x = mb.input((batch, h, w, 5))
    x = mb.conv2d(x, 13, (3, 3), (2, 2), activation="RELU")
    x = mb.conv2d(x, 11, (1, 1))
    y = mb.conv2d(x, 5, (1, 1), (2, 2))
    x = mb.conv2d(x, 6, (3, 3), (1, 1), padding="VALID", activation="RELU6")
    oh, ow = (h + 1) // 2 - 2, (w + 1) // 2 - 2
    mb.output(mb.fully_connected(mb.reshape(x, (batch, oh * ow * 6)), 7))
    mb.output(y)
    path = folder / f"m16_{batch}_{h}x{w}.tflite"
    mb.save(path)
    return path


@pytest.fixture(scope="module")
def model16(tmp_path_factory):
    """The model above in batches of 2."""
    return build(tmp_path_factory.mktemp("mve16"), 2)


run = partial(run_on_m55, seeds=3)


def weighted(dep):
    return [lp.variant.name for lp in dep.layers if isinstance(lp.kernel, (K.Conv, K.FullyConnected))]


def test_helium_16x8_conv_and_fc_bit_exact(model16):
    """Sums that provably fit int32: the convolutions requantize 4 lanes at once (VRMULH)."""
    dep = run(model16)
    assert weighted(dep) == ["convolve_s16_mve", "convolve_1x1_s16_mve", "convolve_1x1_s16_mve", "convolve_s16_mve",
                             "fully_connected_s16_mve"]
    text = engine(dep)
    assert "vmlaldava.s16" in text and text.count("vrmulhq_s32(") >= 4 and "fx_rq_double(" in text


MVE3 = ["convolve_s16_mve", "convolve_1x1_s16_mve", "convolve_1x1_s16_mve"]


@pytest.mark.parametrize("l1,names", [(None, MVE3), (6144, MVE3), (4096, ["conv_s16"] * 3)])
def test_helium_16x8_wide_sums_bit_exact(tmp_path, l1, names):
    """Sums that may pass int32 (1152 and 1200 values a row): the 64-bit requantization of each,
    its clamp as SSAT (no activation), USAT (RELU) or both bounds (RELU6); whole and tiled (at 4K
    the rows fit only split, which the Helium tiles do not do: the portable kernels' tiles)."""
    mb = ModelBuilder(7, activations="int16")
    a = mb.conv2d(mb.input((1, 4, 5, 128)), 6, (3, 3), (2, 2), activation="RELU6")
    b = mb.input((1, 2, 2, 1200))
    mb.output(a)
    mb.output(mb.conv2d(b, 5, (1, 1)))
    mb.output(mb.conv2d(b, 3, (1, 1), activation="RELU"))
    path = tmp_path / "wide16.tflite"
    mb.save(path)
    dep = run(path, l1=l1)
    assert weighted(dep) == names
    assert (l1 is None) == (not dep.tilings)
    text = engine(dep)
    if names == MVE3:
        assert "vrmulhq_s32(" not in text and "__ssat(" in text and "__usat(" in text and "fx_clamp(" in text
        assert "xstride" in text  # the 3x3 window's rows (384 values) read in place inside the input


def test_helium_16x8_tiled(tmp_path):
    """Tile by tile in L1: pixel tiles of every layer, then tiles of fewer output channels than
    the layer's (a window's kernel starts the weights, biases and multipliers at its first)."""
    dep = run(build(tmp_path, 1, 19, 21), l1=2048)
    assert all(lp.tiling is not None for lp in dep.layers if isinstance(lp.kernel, (K.Conv, K.FullyConnected)))
    assert weighted(dep) == ["convolve_s16_mve", "convolve_1x1_s16_mve", "convolve_1x1_s16_mve", "convolve_s16_mve",
                             "fully_connected_s16_mve"]
    mb = ModelBuilder(9, activations="int16")
    x = mb.input((1, 3, 4, 24))
    mb.output(mb.conv2d(x, 302, (1, 1)))
    mb.output(mb.conv2d(x, 150, (3, 3), (1, 1), activation="RELU"))
    path = tmp_path / "channels16.tflite"
    mb.save(path)
    dep = run(path, l1=1024)
    split = [k for k, (g, t) in dep.tilings.items() if t.tile_c < dep.kernels[k].out_c]
    assert len(split) == 2 and all(dep.layers[k].variant.name.endswith("_s16_mve") for k in split)


def test_16x8_patch_regions_keep_the_portable_kernels_and_smlad_alone_runs_smlald(model16, tmp_path):
    from tests.host.test_sixteen_bit import audio_front_end_model
    dep = run(audio_front_end_model(tmp_path), patch="3x2@4")
    staged = [lp for lp in dep.layers if lp.in_stage and K.activation_dtype(lp.kernel) == "int16"
              and isinstance(lp.kernel, K.Conv) and not lp.kernel.depthwise]
    assert staged and all(lp.variant.name == "conv_s16" for lp in staged)
    dep = deploy(model16, Options(target="cortex-m55", kernels="smlad"))
    assert set(weighted(dep)) == {"convolve_s16_smlald", "fully_connected_s16_smlald"}


def test_helium_16x8_outputs_over_their_inputs(tmp_path):
    """Growing channels: each layer's output planned over its dying input, walked pixel by pixel
    (the 3x3 convolution's last pixel first: its output starts above its input), and a fully
    connected layer of 6 batch rows row by row."""
    mb = ModelBuilder(4, activations="int16")
    x = mb.input((1, 6, 7, 8))
    x = mb.conv2d(mb.conv2d(x, 12, (1, 1)), 16, (1, 1))
    x = mb.conv2d(x, 24, (3, 3), activation="RELU")
    mb.output(mb.fully_connected(mb.reshape(x, (6, 7 * 24)), 30))
    path = tmp_path / "grow16.tflite"
    mb.save(path)
    dep = run(path)
    assert weighted(dep) == ["convolve_1x1_s16_mve", "convolve_1x1_s16_mve", "convolve_s16_mve", "fully_connected_s16_mve"]
    assert {o.layer for o in dep.overlaps} >= {0, 1, 2, 4} and any(o.reverse for o in dep.overlaps if o.layer == 2)
