"""The Helium 16x8 depthwise kernel (int16 inputs and int8 weights widened to int32 lanes on load,
4 channels a pass) on QEMU's mps3-an547, bit-exact against LiteRT: 3x3 SAME stride 1 and 2, VALID,
channel counts 4, 6 and 13 (a predicated last pass), sums that fit int32 with their bias
(requantized 4 lanes by VRMULH) and sums that may not (64 bits lane by lane), in place (a plane of
4 channels, or of 1 where 4 do not divide them) and not; tiles keep the portable kernel."""
from __future__ import annotations

from functools import partial

import pytest

from deployer import qemu
from layer_analyzer import kernels as K
from tests.target.test_mve_kernels import engine
from tests.target.test_mve_kernels import run as run_on_m55
from tests.tflite_builder import ModelBuilder

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")


run = partial(run_on_m55, seeds=3)


def depthwise(dep):
    return [lp for lp in dep.layers if isinstance(lp.kernel, K.Conv) and lp.kernel.depthwise]


def build(path, c: int, seed: int, h: int = 9, w: int = 11):
    """h x w x c int16 -> depthwise 3x3 SAME stride 1 (RELU), each an output: depthwise 3x3 SAME
    stride 2, depthwise 3x3 VALID (RELU6), depthwise 5x3 VALID stride (2, 1)."""
    mb = ModelBuilder(seed, activations="int16")
    x = mb.depthwise_conv2d(mb.input((1, h, w, c)), 1, (3, 3), activation="RELU")
    mb.output(mb.depthwise_conv2d(x, 1, (3, 3), (2, 2)))
    mb.output(mb.depthwise_conv2d(x, 1, (3, 3), padding="VALID", activation="RELU6"))
    mb.output(mb.depthwise_conv2d(x, 1, (5, 3), (2, 1), padding="VALID"))
    mb.save(path)
    return path


@pytest.mark.parametrize("c", [4, 6, 13])
def test_helium_16x8_depthwise_bit_exact(tmp_path, c):
    dep = run(build(tmp_path / f"dw16_{c}.tflite", c, 10 + c))
    layers = depthwise(dep)
    assert len(layers) == 4 and all(lp.variant.name == "depthwise_conv_s16_mve" for lp in layers)
    text = engine(dep)
    assert "vldrhq_s32(" in text and ("vldrhq_z_s32(" in text) == (c % 4 != 0)


@pytest.mark.parametrize("c", [8, 6])
def test_helium_16x8_depthwise_in_place(tmp_path, c):
    """A depthwise layer over its dying input: through a plane of 4 channels (8), or of 1 (6)."""
    mb = ModelBuilder(20 + c, activations="int16")
    x = mb.conv2d(mb.input((1, 7, 8, 3)), c, (1, 1))
    x = mb.depthwise_conv2d(x, 1, (3, 3), activation="RELU")
    mb.output(mb.conv2d(x, 5, (1, 1)))
    path = tmp_path / f"dwip{c}.tflite"
    mb.save(path)
    dep = run(path)
    (lp,) = depthwise(dep)
    assert lp.variant.name == "depthwise_conv_s16_mve"
    assert "in place" in engine(dep) and lp.reuse is not None and lp.reuse.rule == "depthwise-in-place"
    assert lp.reuse.scratch_bytes == 7 * 8 * 2 * (4 if c % 4 == 0 else 1)


def test_helium_16x8_depthwise_wide_sums_and_tiles_portable(tmp_path, monkeypatch):
    """Sums whose bias may take them past int32 (here every layer's, forced): 64 bits lane by lane,
    a last pass of 1 lane of 13 channels; tile by tile in L1 the portable kernel."""
    from backends import mve
    with monkeypatch.context() as m:
        m.setattr(mve, "narrow16", lambda *args: False)
        dep = run(build(tmp_path / "dw16w.tflite", 13, 4))
    assert all(lp.variant.name == "depthwise_conv_s16_mve" for lp in depthwise(dep))
    assert "lane by lane" in engine(dep) and "vrmulhq_s32(" not in engine(dep)
    dep = run(build(tmp_path / "dw16t.tflite", 8, 3, 19, 21), l1=2048)
    tiled = [lp for lp in depthwise(dep) if lp.tiling is not None]
    assert tiled and all(lp.variant.name == "depthwise_conv_s16" for lp in tiled)


def test_helium_16x8_depthwise_of_the_bench_model(tmp_path):
    """bench/sixteen_bit_bench.py's audio model in 16x8: its depthwise layer (16 channels, 3x3
    SAME over 23 x 18) on the Helium kernel."""
    from bench.sixteen_bit_bench import _audio
    mb = ModelBuilder(3, activations="int16")
    mb.output(_audio(mb))
    path = tmp_path / "audio16.tflite"
    mb.save(path)
    (lp,) = depthwise(run(path))
    assert lp.variant.name == "depthwise_conv_s16_mve"
