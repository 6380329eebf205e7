"""Patch splits: receptive-field windows against brute force, the CP-SAT split against its
exhaustive twin, the estimate against the planned arena, and the CLI's --patch errors."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solver.patch_split import plan_split, split_tables
from deployer.pipeline import Options, deploy
from layer_analyzer.receptive_field import Window
from network_parser.errors import InfeasibleBudget, UsageError
from solver.arena import lower_bound
from tests.models import shared_model

K = 1024


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 7), stride=st.integers(1, 3), dil=st.integers(1, 3), pad=st.integers(0, 4),
       in_size=st.integers(1, 40), data=st.data())
def test_window_is_the_span_of_every_input_a_region_reads(k, stride, dil, pad, in_size, data):
    span = (k - 1) * dil + 1
    assume(in_size + 2 * pad >= span and pad < span)
    out_size = (in_size + 2 * pad - span) // stride + 1
    lo = data.draw(st.integers(0, out_size - 1))
    hi = data.draw(st.integers(lo + 1, out_size))
    touched = [o * stride - pad + i * dil for o in range(lo, hi) for i in range(k)]
    touched = [t for t in touched if 0 <= t < in_size]
    a, b = Window(k, stride, dil, pad, in_size).need(lo, hi)
    assert 0 <= a and b <= in_size
    if touched:  # (with dilation, a region can read only padding)
        assert a <= min(touched) and max(touched) + 1 <= b
    if dil == 1:  # contiguous taps: exactly the span (with dilation, a clipped gap may remain)
        assert (a, b) == (min(touched), max(touched) + 1)


MODELS = ["mlperf_tiny/vww_96_int8.tflite", "tflm/person_detect.tflite",
          "synthetic/mobilenetv2_035_96_random.tflite", "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"]


@pytest.mark.parametrize("rel", MODELS)
def test_cpsat_split_matches_the_exhaustive_twin(rel):
    dep = deploy(shared_model(rel), Options(planner="first-fit", patch="off"))
    for sram, overhead in ((None, 0.2), (None, 0.05), (dep.memory.sram_bytes // 2, 0.2), (1, 0.2)):
        ex = plan_split(dep.graph, dep.kernels, dep.lives, "exhaustive", overhead, sram)
        cp = plan_split(dep.graph, dep.kernels, dep.lives, "cpsat", overhead, sram)
        assert (cp.peak, cp.macs_extra) == (ex.peak, ex.macs_extra), (sram, overhead, ex, cp)
        if sram is None:
            assert ex.overhead <= overhead and ex.peak <= ex.unsplit_peak


@pytest.mark.parametrize("rel", MODELS[:3])
def test_estimated_peak_is_the_planned_arenas_lower_bound(rel):
    """The split's estimate is the live bytes of the lifetimes the pipeline plans (up to the
    arena's 16-byte alignment), so the solver optimises what the arena will hold."""
    from deployer.pipeline import arena_problem
    whole = deploy(shared_model(rel), Options(patch="off"))
    budget = whole.memory.sram_bytes * 3 // 4  # a budget the model needs the split for
    dep = deploy(shared_model(rel), Options(patch="auto", max_overhead=0.25, sram=budget))
    assert dep.patch is not None
    bound = lower_bound(arena_problem(dep.lives, 16)[0])
    assert dep.patch.choice.peak <= bound <= dep.patch.choice.peak + 16 * len(dep.lives)
    assert dep.memory.arena_bytes < dep.patch.choice.unsplit_peak


def test_patch_option_errors():
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    with pytest.raises(UsageError, match="expected auto, off or RxC@LAYER"):
        deploy(model, Options(patch="4by4"))
    with pytest.raises(UsageError, match=r"op 99 cannot end a patch stage \(possible ends: 0, 1, 2"):
        deploy(model, Options(patch="2x2@99"))
    with pytest.raises(UsageError, match="1x1 grid is no split"):
        deploy(model, Options(patch="1x1@3"))


def test_tables_cover_every_stage_end_quickly():
    dep = deploy(shared_model(MODELS[3]), Options(planner="first-fit", patch="off"))
    tables, unsplit = split_tables(dep.graph, dep.kernels, dep.lives)
    assert len(tables) > 10 and unsplit == dep.memory.arena_bytes
    assert all(1 in t.rows and 1 in t.cols for t in tables)


def test_a_split_is_sought_when_the_first_plan_without_one_is_over():
    """On GAP8 with L3, live bytes under --sram do not promise an arena under it: the first plan
    takes no split, its arena (with weights in L2) is over, and the split that fits must still be
    found. The smallest --sram reported is the same whatever budget below it was asked."""
    path = shared_model("synthetic/mobilenetv2_035_96_random.tflite")
    fits = deploy(path, Options(target="gap8", sram=160 * K, l1=16 * K))
    assert fits.patch is not None and fits.memory.sram_bytes <= 160 * K
    needs = set()
    for sram in (96 * K, 128 * K):
        with pytest.raises(InfeasibleBudget) as e:
            deploy(path, Options(target="gap8", sram=sram, l1=16 * K))
        needs.add(e.value.needs["--sram"])
    assert len(needs) == 1
    need = needs.pop()
    assert deploy(path, Options(target="gap8", sram=need, l1=16 * K)).memory.sram_bytes <= need


def test_auto_split_only_when_a_budget_needs_it():
    """--patch auto recomputes MACs only to fit --sram: none without a budget, none when the
    unsplit plan fits it."""
    path = shared_model("mlperf_tiny/vww_96_int8.tflite")
    assert deploy(path, Options(patch="auto")).patch is None
    whole = deploy(path, Options(patch="off"))
    assert deploy(path, Options(patch="auto", sram=whole.memory.sram_bytes)).patch is None
    split = deploy(path, Options(patch="auto", sram=whole.memory.sram_bytes - 8 * K))
    assert split.patch is not None and split.memory.sram_bytes <= whole.memory.sram_bytes - 8 * K


def test_a_cortex_m_patch_stage_with_a_residual_add():
    """On Cortex-M the stage's convolutions run the SMLAD region kernels and its ADD the portable
    one: planning (the code estimate counts region kernels) and emitting such a stage works."""
    path = shared_model("synthetic/mobilenetv2_035_96_random.tflite")
    dep = deploy(path, Options(target="cortex-m7", patch="2x2@10"))
    stage_ops = {dep.graph.layers[k].op for k in dep.patch.layers}
    assert "ADD" in stage_ops and "CONV_2D" in stage_ops
    convs = [dep.layers[k] for k in dep.patch.layers if dep.graph.layers[k].op == "CONV_2D"]
    assert all(lp.variant.dsp for lp in convs)
    assert "_window[" in dep.files[next(n for n in dep.files if n.endswith("_engine.c"))]
