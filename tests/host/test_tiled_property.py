"""Property: random layers under random L1 budgets; the CP-SAT tile fits and the generated
tile loop (host copy-loop DMA, and the GAP8 cluster code under emulation) is bit-exact."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from network_parser.tflite_builder import ModelBuilder
from solver.tiling import minimum_l1
from tests.host.test_models import assert_bit_exact
from tests.target.test_gap8 import emulated


@st.composite
def layers(draw):
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    h, w, c = draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.integers(1, 12))
    x = mb.input((1, h, w, c))
    kind = draw(st.sampled_from(["conv", "dw", "avg", "max", "fc", "add", "mul"]))
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
    else:
        y = mb.fully_connected(mb.reshape(x, (1, h * w * c)), draw(st.integers(1, 40)))
    mb.output(y)
    return mb, draw(st.floats(0.0, 1.0)), draw(st.sampled_from(["host", "gap8"]))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=layers())
def test_random_layer_random_l1_bit_exact(tmp_path, case):
    mb, fraction, target = case
    path = tmp_path / "layer.tflite"
    mb.save(path)
    whole = deploy(path, Options(target=target, l1=1 << 30))
    tiled = [g for g, _ in whole.tilings.values()]
    low = max(minimum_l1(g) for g in tiled)
    high = max(g.l1_bytes(g.out_h, g.out_w, g.out_c) for g in tiled)
    budget = int(low + fraction * max(high - low, 0))
    dep = deploy(path, Options(target=target, l1=budget, tiler="cpsat"))
    for g, t in dep.tilings.values():
        assert g.l1_bytes(*t.tile_shape) == t.l1_bytes <= budget
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(path, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])
