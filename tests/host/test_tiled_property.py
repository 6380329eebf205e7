"""Property: random layers (convolutions, pooling, fully connected, elementwise, resizes,
transposed convolutions) under random L1 budgets; the CP-SAT tile fits and the generated
tile loop (host copy-loop DMA, and the GAP8 cluster code under emulation) is bit-exact. And
random chains squeezed into the smallest reported flash and SRAM with an L3: their slabs
stream weights and activations from L3 and stay bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from tests.tflite_builder import ModelBuilder
from layer_analyzer.tiling import tile_windows
from solver.tiling import minimum_l1
from tests.host.test_l3 import reported_need
from tests.host.test_models import assert_bit_exact
from tests.target.test_gap8 import emulated


@st.composite
def layers(draw):
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    h, w, c = draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.integers(1, 12))
    x = mb.input((1, h, w, c))
    kind = draw(st.sampled_from(["conv", "dw", "avg", "max", "fc", "add", "mul", "resize"]))
    k = (draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w))))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    if kind == "conv":
        y = mb.conv2d(x, draw(st.integers(1, 16)), kernel=k, stride=stride, padding=padding,
                      dilation=(draw(st.integers(1, 2)), 1) if padding == "SAME" else (1, 1))
    elif kind == "dw":
        y = mb.depthwise_conv2d(x, kernel=k, stride=stride, padding=padding)
    elif kind in ("avg", "max"):
        y = (mb.avg_pool if kind == "avg" else mb.max_pool)(x, filter=k, stride=stride, padding=padding)
    elif kind in ("add", "mul"):
        y = (mb.add if kind == "add" else mb.mul)(x, mb.input((1, h, w, c)))
    elif kind == "resize":  # up, down or fractional, every coordinate mode LiteRT has
        corners = draw(st.booleans())
        y = mb.resize_nearest(x, (draw(st.integers(1, 24)), draw(st.integers(1, 24))), align_corners=corners,
                              half_pixel_centers=not corners and draw(st.booleans()))
    else:
        y = mb.fully_connected(mb.reshape(x, (1, h * w * c)), draw(st.integers(1, 40)))
    mb.output(y)
    return mb, draw(st.floats(0.0, 1.0)), draw(st.sampled_from(["host", "gap8"]))


def l1_between(path, target: str, fraction: float) -> int:
    """An L1 budget ``fraction`` of the way from the model's smallest tile to its largest whole layer."""
    whole = deploy(path, Options(patch="off", target=target, l1=1 << 30))
    tiled = [g for g, _ in whole.tilings.values()]
    low = max(minimum_l1(g) for g in tiled)
    high = max(g.l1_bytes(g.out_h, g.out_w, g.out_c) for g in tiled)
    return int(low + fraction * max(high - low, 0))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=layers())
def test_random_layer_random_l1_bit_exact(tmp_path, case):
    mb, fraction, target = case
    path = tmp_path / "layer.tflite"
    mb.save(path)
    budget = l1_between(path, target, fraction)
    dep = deploy(path, Options(patch="off", target=target, l1=budget, tiler="cpsat"))
    for g, t in dep.tilings.values():
        assert g.l1_bytes(*t.tile_shape, t.tile_ci) == t.l1_bytes <= budget
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


@st.composite
def gathering_layers(draw):
    """A nearest or bilinear resize (up, down, fractional; every coordinate mode), a transposed convolution
    (any kernel, stride and padding) or a PRELU (alpha per channel, one, or per element) between
    two convolutions."""
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    h, w, c = draw(st.integers(1, 10)), draw(st.integers(1, 10)), draw(st.integers(1, 12))
    x = mb.conv2d(mb.input((1, h, w, c)), draw(st.integers(1, 12)), kernel=(1, 1))
    kind = draw(st.sampled_from(["resize", "bilinear", "transpose_conv", "prelu"]))
    if kind == "prelu":  # alpha per channel, one for all, or per element
        shape = mb.shape(x)[1:]
        alpha_shape = draw(st.sampled_from([(1, 1, shape[2]), (1,), shape]))
        x = mb.prelu(x, np.random.default_rng(draw(st.integers(0, 99))).uniform(-1, 1, alpha_shape))
    elif kind in ("resize", "bilinear"):
        corners = draw(st.booleans())
        x = (mb.resize_nearest if kind == "resize" else mb.resize_bilinear)(
            x, (draw(st.integers(1, 24)), draw(st.integers(1, 24))), align_corners=corners,
            half_pixel_centers=not corners and draw(st.booleans()))
    else:
        x = mb.transpose_conv(x, draw(st.integers(1, 10)), kernel=(draw(st.integers(1, 4)), draw(st.integers(1, 4))),
                              stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                              padding=draw(st.sampled_from(["SAME", "VALID"])))
    mb.output(mb.conv2d(x, draw(st.integers(1, 8)), kernel=(1, 1)))
    return mb, kind, draw(st.floats(0.0, 1.0)), draw(st.sampled_from(["host", "gap8"]))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=gathering_layers())
def test_random_gathering_layer_random_l1_bit_exact(tmp_path, case):
    """Resizes and transposed convolutions run tile by tile (each tile reads the input between
    its first output's first source and its last output's last), PRELU too (its alpha read where it
    is), on the host and on GAP8's eight cores under emulation."""
    mb, kind, fraction, target = case
    path = tmp_path / f"{kind}.tflite"
    mb.save(path)
    budget = l1_between(path, target, fraction)
    dep = deploy(path, Options(patch="off", target=target, l1=budget, tiler="cpsat"))
    assert any(g.kind == ("eltwise" if kind == "prelu" else kind) for g, _ in dep.tilings.values())
    for g, t in dep.tilings.values():
        assert g.l1_bytes(*t.tile_shape, t.tile_ci) == t.l1_bytes <= budget
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_transpose_conv_tiles_no_input_reaches(tmp_path, target):
    """A transposed convolution whose kernel is smaller than its stride leaves outputs no input
    reaches: their tiles load nothing (no zero-length DMA) and give the bias alone."""
    mb = ModelBuilder(seed=7)
    x = mb.conv2d(mb.input((1, 3, 4, 2)), 16, kernel=(1, 1))
    mb.output(mb.conv2d(mb.transpose_conv(x, 16, kernel=(1, 1), stride=(3, 3), padding="SAME"), 3, kernel=(1, 1)))
    path = tmp_path / "sparse.tflite"
    mb.save(path)
    dep = deploy(path, Options(patch="off", target=target, l1=200, tiler="greedy"))
    (g, t), = [v for v in dep.tilings.values() if v[0].kind == "transpose_conv"]
    assert any(inputs == 0 for _, inputs, _ in tile_windows(g, t.tile_h, t.tile_w, t.tile_c)["rows"])
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


@pytest.mark.parametrize("mode", ["asymmetric", "align_corners", "half_pixel"])
@pytest.mark.parametrize("target", ["host", "gap8"])
def test_bilinear_tiles_blend_inside_their_window(tmp_path, mode, target):
    """RESIZE_BILINEAR up by fractional factors in tiles of a few rows and columns: each tile reads
    from its first output's lower sources to its last output's upper ones."""
    mb = ModelBuilder(seed=5)
    x = mb.conv2d(mb.input((1, 5, 7, 3)), 4, kernel=(1, 1))
    y = mb.resize_bilinear(x, (11, 16), align_corners=mode == "align_corners", half_pixel_centers=mode == "half_pixel")
    mb.output(mb.conv2d(y, 3, kernel=(1, 1)))
    path = tmp_path / "bilinear.tflite"
    mb.save(path)
    dep = deploy(path, Options(patch="off", target=target, l1=400, tiler="greedy"))
    (g, t), = [v for v in dep.tilings.values() if v[0].kind == "bilinear"]
    assert t.tiles > 4
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


@pytest.mark.parametrize("alpha_shape", [(1, 1, 6), (1,), (5, 7, 6)], ids=["per-channel", "one", "per-element"])
@pytest.mark.parametrize("target", ["host", "gap8"])
def test_prelu_tiles_read_alpha_by_channel(tmp_path, alpha_shape, target):
    """PRELU in tiles of a few channels: a constant alpha per channel or one is read where it is
    (by the tile's channels), one per element streams in with the tile."""
    mb = ModelBuilder(seed=3)
    x = mb.conv2d(mb.input((1, 5, 7, 4)), 6, kernel=(1, 1))
    mb.output(mb.conv2d(mb.prelu(x, np.random.default_rng(1).uniform(-1, 1, alpha_shape)), 3, kernel=(1, 1)))
    path = tmp_path / "prelu.tflite"
    mb.save(path)
    dep = deploy(path, Options(patch="off", target=target, l1=160, tiler="greedy"))
    (g, t), = [dep.tilings[k] for k, lp in enumerate(dep.layers) if type(lp.kernel).__name__ == "Prelu"]
    assert g.second == {(1, 1, 6): "channel", (1,): "scalar"}.get(alpha_shape, "tile") and t.tile_c < g.out_c
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


@st.composite
def chains(draw):
    """Two to four tileable layers in a row (their inner tensors may move to L3)."""
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    h, w, c = draw(st.integers(2, 14)), draw(st.integers(2, 14)), draw(st.integers(1, 12))
    x = mb.input((1, h, w, c))
    for _ in range(draw(st.integers(2, 4))):
        shape = mb.shape(x)
        kind = draw(st.sampled_from(["conv", "dw", "pool", "add"]))
        k = (draw(st.integers(1, min(3, shape[1]))), draw(st.integers(1, min(3, shape[2]))))
        stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        padding = draw(st.sampled_from(["SAME", "VALID"]))
        if kind == "conv":
            x = mb.conv2d(x, draw(st.integers(1, 16)), kernel=k, stride=stride, padding=padding)
        elif kind == "dw":
            x = mb.depthwise_conv2d(x, kernel=k, stride=stride, padding=padding)
        elif kind == "pool":
            x = mb.max_pool(x, filter=k, stride=stride, padding=padding)
        else:
            x = mb.add(x, x)
    mb.output(x)
    return mb, draw(st.floats(0.0, 1.0)), draw(st.sampled_from(["host", "gap8"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=chains())
def test_random_chain_streamed_from_l3_bit_exact(tmp_path, case):
    mb, fraction, target = case
    path = tmp_path / "chain.tflite"
    mb.save(path)
    l1 = l1_between(path, target, fraction)
    base = dict(target=target, l1=l1, l3=1 << 24, time_limit_s=1.0, patch="off")
    flash = reported_need(path, Options(**base, flash=1)) if target == "host" else None
    sram = reported_need(path, Options(**base, flash=flash, sram=1))
    dep = deploy(path, Options(**base, flash=flash, sram=sram))
    assert sram is None or dep.memory.sram_bytes <= sram
    engine = build_engine(dep) if target == "host" else emulated(dep, folder=tmp_path)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])
