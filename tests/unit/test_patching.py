"""Patch stages: receptive-field windows against brute force, the stage search against trying
every set of stages, the single stage (its twin) against it, the estimate against the planned
arena, and the CLI's --patch errors."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, deploy, deployment_problem, unsplit_profile
from solver import fusion
from solver.l3_placement import data_inputs
from solver.patch_split import plan_stages, single_stage
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


def _brute_force(profile, stages, target):
    """The least recomputed MACs of any set of disjoint stage options within ``target``, every
    combination tried (small networks only)."""
    options = [o for c in stages for o in c.options if o.peak <= target]
    best = None

    def walk(at, chosen, cost):
        nonlocal best
        covered = {k for o in chosen for k in range(o.start, o.end + 1)}
        if all(p <= target for k, p in enumerate(profile) if k not in covered):
            best = cost if best is None else min(best, cost)
        for n in range(at, len(options)):
            o = options[n]
            if all(o.end < c.start or o.start > c.end for c in chosen):
                walk(n + 1, chosen + [o], cost + o.macs_extra)
    walk(0, [], 0)
    return best


@settings(max_examples=25, deadline=None)
@given(chain=st.lists(st.sampled_from(["conv", "dw", "pw", "pool"]), min_size=2, max_size=5),
       size=st.sampled_from([12, 16, 20]), seed=st.integers(0, 1000), data=st.data())
def test_the_stage_search_is_the_least_recompute_within_a_target(chain, size, seed, data, tmp_path_factory):
    """The dynamic program over op boundaries gives what trying every set of disjoint stages gives."""
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(seed)
    x = mb.input((1, size, size, 4))
    for op in chain:
        x = {"conv": lambda t: mb.conv2d(t, 8, kernel=(3, 3)), "dw": lambda t: mb.depthwise_conv2d(t),
             "pw": lambda t: mb.conv2d(t, 12, kernel=(1, 1)),
             "pool": lambda t: mb.max_pool(t, (2, 2), (2, 2)) if mb.shape(t)[1] >= 4 else mb.relu(t)}[op](x)
    mb.output(x)
    path = tmp_path_factory.mktemp("chain") / "chain.tflite"
    mb.save(path)
    dep = deploy(path, Options(patch="off", overlap=False))
    lives, profile = unsplit_profile(dep)
    stages = fusion.candidates(dep.graph, dep.kernels, lives, data_inputs, 16, max_parts=4)
    peaks = sorted({*profile, *(o.peak for c in stages for o in c.options)})
    target = data.draw(st.sampled_from(peaks))
    found = fusion.cheapest(profile, stages, target)
    want = _brute_force(profile, stages, target)
    assert (found is None) == (want is None)
    if found is not None:
        cost, path_ = found
        assert cost == want and fusion.estimated_peak(profile, path_) <= target
        assert all(a.end < b.start for a, b in zip(path_, path_[1:]))


@pytest.mark.parametrize("rel", MODELS[:3])
def test_estimated_peak_is_the_planned_arenas_lower_bound(rel):
    """The stages' estimate is the arena's lower bound with the lifetimes and overlaps the pipeline
    plans (up to alignment), so the search optimises what the arena will hold."""
    whole = deploy(shared_model(rel), Options(patch="off"))
    budget = whole.memory.sram_bytes * 3 // 4  # a budget the model needs stages for
    dep = deploy(shared_model(rel), Options(patch="auto", max_overhead=0.25, sram=budget))
    assert dep.patches and dep.fusion.method == "dp"
    bound = lower_bound(deployment_problem(dep))
    assert dep.fusion.peak <= bound + 16 * len(dep.lives) and bound <= dep.memory.arena_bytes <= budget
    assert dep.memory.arena_bytes < dep.fusion.unsplit_peak


@pytest.mark.parametrize("rel", MODELS[:3])
def test_the_single_stage_twin_is_never_better(rel):
    """One stage at the head is one of the plans the search weighs: it never needs less."""
    dep = deploy(shared_model(rel), Options(patch="off"))
    lives, profile = unsplit_profile(dep)
    cache: dict = {}
    for share in (0.05, 0.2, 1.0):
        choice, _ = plan_stages(dep.graph, dep.kernels, lives, profile, 16, share, None, cache)
        twin = single_stage(dep.graph, dep.kernels, lives, profile, 16, share, None, cache)
        assert choice.peak <= twin.peak and choice.overhead <= share and twin.overhead <= share


def test_patch_option_errors():
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    with pytest.raises(UsageError, match="expected auto, off or RxC@LAYER"):
        deploy(model, Options(patch="4by4"))
    with pytest.raises(UsageError, match=r"op 99 cannot end a patch stage \(possible ends: 0, 1, 2"):
        deploy(model, Options(patch="2x2@99"))
    with pytest.raises(UsageError, match="1x1 grid is no split"):
        deploy(model, Options(patch="1x1@3"))


def test_stages_start_anywhere_quickly():
    """Every op that can start a stage gives stages; MobileNetV2-224's ~1,000 stages and their
    grids are tabled in seconds."""
    dep = deploy(shared_model(MODELS[3]), Options(planner="first-fit", patch="off"))
    lives, _ = unsplit_profile(dep)
    stages = fusion.candidates(dep.graph, dep.kernels, lives, data_inputs, 16)
    starts = {c.stage.start for c in stages}
    assert len(stages) > 200 and len(starts) > 20
    assert all(c.options and all(o.peak < p.peak or o.macs_extra < p.macs_extra
                                 for p, o in zip(c.options, c.options[1:])) for c in stages)


def test_a_split_is_sought_when_the_first_plan_without_one_is_over():
    """On GAP8 with L3, live bytes under --sram do not promise an arena under it: the first plan
    takes no split, its arena (with weights in L2) is over, and the stages that fit must still be
    found. The smallest --sram reported for a budget below it is one a rerun meets."""
    path = shared_model("synthetic/mobilenetv2_035_96_random.tflite")
    fits = deploy(path, Options(target="gap8", sram=160 * K, l1=16 * K))
    assert fits.patches and fits.memory.sram_bytes <= 160 * K
    for sram in (96 * K, 128 * K):
        with pytest.raises(InfeasibleBudget) as e:
            deploy(path, Options(target="gap8", sram=sram, l1=16 * K))
        need = e.value.needs["--sram"]
        assert need > sram and deploy(path, Options(target="gap8", sram=need, l1=16 * K)).memory.sram_bytes <= need


def test_auto_split_only_when_a_budget_needs_it():
    """--patch auto recomputes MACs only to fit --sram: none without a budget, none when the
    unsplit plan fits it."""
    path = shared_model("mlperf_tiny/vww_96_int8.tflite")
    assert not deploy(path, Options(patch="auto")).patches
    whole = deploy(path, Options(patch="off"))
    assert not deploy(path, Options(patch="auto", sram=whole.memory.sram_bytes)).patches
    split = deploy(path, Options(patch="auto", sram=whole.memory.sram_bytes - 8 * K))
    assert split.patches and split.memory.sram_bytes <= whole.memory.sram_bytes - 8 * K
    assert split.fusion.overhead <= 0.2


def test_a_cortex_m_patch_stage_with_a_residual_add():
    """On Cortex-M the stage's convolutions run the SMLAD region kernels and its ADD the portable
    one: planning (the code estimate counts region kernels) and emitting such a stage works."""
    path = shared_model("synthetic/mobilenetv2_035_96_random.tflite")
    dep = deploy(path, Options(target="cortex-m7", patch="2x2@10"))
    (patch,) = dep.patches
    stage_ops = {dep.graph.layers[k].op for k in patch.layers}
    assert "ADD" in stage_ops and "CONV_2D" in stage_ops
    convs = [dep.layers[k] for k in patch.layers if dep.graph.layers[k].op == "CONV_2D"]
    assert all(lp.variant.dsp for lp in convs)
    assert "_window[" in dep.files[next(n for n in dep.files if n.endswith("_engine.c"))]
