"""L3 -> L2 slabs: the exhaustive slab search is the optimum over every legal slab shape, its
staging is what the generated C lays out, and the placement only takes moves that help."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy
from layer_analyzer.tiling import TileGeometry
from network_parser.errors import InfeasibleBudget, UsageError
from solver.l3_tiling import PARTS, evaluate, plan_slabs
from solver.tiling import LayerTiling
from tests.models import shared_model
from tests.unit.test_tiling import geometries


@st.composite
def slab_problems(draw):
    g = draw(geometries())
    tile = (draw(st.integers(1, g.out_h)), draw(st.integers(1, g.out_w)), draw(st.integers(1, g.out_c)))
    t = LayerTiling(0, *tile, g.l1_bytes(*tile), g.tiles(*tile), "greedy", "FEASIBLE")
    parts = [p for p in PARTS if p != "in2" and draw(st.booleans())]
    if not g.weight_bytes_per_channel and "w" in parts:
        parts.remove("w")
    parts = parts or ["out"]
    limit = draw(st.one_of(st.none(), st.integers(0, 40_000)))
    return g, t, tuple(parts), limit


def all_slabs(g, t, parts):
    """Every slab shape a whole number of L1 tiles, not only one per distinct slab count."""
    rows = sorted({min(m * t.tile_h, g.out_h) for m in range(1, -(-g.out_h // t.tile_h) + 1)})
    chans = sorted({min(m * t.tile_c, g.out_c) for m in range(1, -(-g.out_c // t.tile_c) + 1)})
    return [evaluate(g, r, c, parts) for r in rows for c in chans]


@settings(max_examples=150, deadline=None)
@given(problem=slab_problems())
def test_slab_search_is_the_optimum_over_every_slab_shape(problem):
    g, t, parts, limit = problem
    plan = plan_slabs(g, t, parts, limit)
    everything = all_slabs(g, t, parts)
    fitting = [p for p in everything if limit is None or p.l2_bytes <= limit]
    assert plan.rows % t.tile_h == 0 or plan.rows == g.out_h
    assert plan.chans % t.tile_c == 0 or plan.chans == g.out_c
    if fitting:
        assert plan.fits and (limit is None or plan.l2_bytes <= limit)
        assert plan.l3_traffic == min(p.l3_traffic for p in fitting)
    else:
        assert not plan.fits and plan.l2_bytes == min(p.l2_bytes for p in everything)


def test_slab_staging_counts_double_buffers():
    g = TileGeometry(0, "conv", 8, 8, 16, 10, 10, 4, 3, 3)
    t = LayerTiling(0, 2, 8, 4, 0, 0, "greedy", "FEASIBLE")
    one = evaluate(g, 8, 16, ("in", "w", "out"))
    assert one.slabs == 1 and one.l2_bytes == 10 * 10 * 4 + 16 * 36 + 8 * 8 * 16
    many = evaluate(g, 2, 4, ("in", "w", "out"))
    assert many.slabs == 16 and many.slots("w") == 2 and many.slots("in") == 2
    # a regular convolution reads its input window once per channel slab
    assert many.l3_traffic == 4 * 4 * (4 * 10 * 4) + 16 * 36 + 8 * 8 * 16
    assert plan_slabs(g, t, ("w",), None).chans == 16  # nothing limits it: all weights at once


KWS = "mlperf_tiny/kws_ref_model.tflite"


def test_flash_budget_moves_the_largest_weights_first():
    model = shared_model(KWS)
    base = deploy(model, Options(patch="off", l1=16 * 1024))
    sizes = {k: base.graph.tensors[base.kernels[k].weights].nbytes for k, (g, _) in base.tilings.items()
             if g.weight_bytes_per_channel}
    largest = max(sizes.values())
    dep = deploy(model, Options(patch="off", l1=16 * 1024, l3=1 << 20, flash=base.memory.flash_bytes - 1))
    assert [sizes[k] for k in dep.l3.placement.weights] == [largest]
    assert dep.memory.flash_bytes == base.memory.flash_bytes - largest
    assert dep.memory.l3_weights_bytes >= largest and not dep.l3.placement.tensors


def test_reported_smallest_sram_works_and_beats_l2_only():
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    l2_only = deploy(model, Options(patch="off", l1=16 * 1024)).memory.sram_bytes
    with pytest.raises(InfeasibleBudget) as e:
        deploy(model, Options(patch="off", l1=16 * 1024, l3=1 << 22, sram=1024))
    need = e.value.minimum_bytes
    dep = deploy(model, Options(patch="off", l1=16 * 1024, l3=1 << 22, sram=need))
    assert dep.memory.sram_bytes <= need < l2_only
    assert dep.l3.placement.tensors and not set(dep.l3.placement.tensors) & {*dep.graph.inputs, *dep.graph.outputs}


def test_l3_budget_and_usage_errors():
    model = shared_model(KWS)
    with pytest.raises(InfeasibleBudget, match=r"bytes of L3 but --l3 is 100; the smallest --l3 that works"):
        deploy(model, Options(patch="off", l1=16 * 1024, l3=100, flash=20_000))
    with pytest.raises(UsageError, match="--l3 needs an L1"):
        deploy(model, Options(patch="off", l3=1 << 20))


def test_without_pressure_nothing_moves():
    dep = deploy(shared_model(KWS), Options(patch="off", l1=16 * 1024, l3=1 << 20))
    assert dep.l3 is None and dep.memory.l3_bytes == 0
