"""The memory search, declared (deployer.relaxations): what the plan took is recorded in its
order, suggest measures every relaxation, and replanning a read model equals planning it anew
without reading the file again."""
from __future__ import annotations

from dataclasses import replace

import pytest

from deployer import pipeline
from deployer.manifest import build_manifest
from deployer.pipeline import Options, plan_deployment, plan_front, replan
from deployer.relaxations import BY_NAME, RELAXATIONS
from deployer.suggest import KNOBS
from tests.models import shared_model

K = 1024
VWW = "mlperf_tiny/vww_96_int8.tflite"


def test_suggest_measures_every_relaxation_in_the_search_order():
    assert [name for names, _ in KNOBS for name in names] == [r.name for r in RELAXATIONS]


def test_every_relaxation_taken_was_allowed():
    path = shared_model(VWW)
    for options in (Options(sram=48 * K), Options(target="gap8", l1=16 * K, sram=96 * K, patch="off")):
        plan = plan_deployment(path, options)
        assert plan.relaxed and all(BY_NAME[name].allowed(plan.options) for name in plan.relaxed)


def test_the_plan_records_what_the_search_took():
    path = shared_model(VWW)
    whole = plan_deployment(path, Options(patch="off"))
    assert whole.relaxed == ("in-place ops", "outputs over inputs")
    split = plan_deployment(path, Options(sram=whole.memory.sram_bytes - 8 * K))
    assert split.relaxed == ("in-place ops", "outputs over inputs", "patch inference")
    assert plan_deployment(path, Options(in_place=False, patch="off")).relaxed == ()
    assert plan_deployment(path, Options(overlap=False, patch="off")).relaxed == ("in-place ops",)
    streamed = plan_deployment(path, Options(target="gap8", l1=16 * K, sram=96 * K, patch="off"))
    assert "L3 streaming" in streamed.relaxed
    person = shared_model("tflm/person_detect.tflite")
    tight = plan_deployment(person, Options(target="cortex-m4", flash=320 * K))
    assert tight.relaxed[-1] == "plain kernels"


def test_the_manifest_lists_the_relaxations_taken():
    plan = pipeline.deploy(shared_model(VWW), Options(sram=32 * K))
    names = [r["name"] for r in build_manifest(plan)["relaxations"]]
    assert names == ["in-place ops", "outputs over inputs", "patch inference"]


@pytest.mark.parametrize("changes", [dict(patch="off"), dict(in_place=False), dict(sram=48 * K),
                                     dict(l1=16 * K, tiler="greedy"), dict(kernels="plain", target="cortex-m7")])
def test_replan_equals_a_fresh_plan_and_reads_nothing(changes, monkeypatch):
    path = shared_model(VWW)
    target = changes.get("target", "host")
    front = plan_front(path, Options(target=target))
    fresh = plan_deployment(path, Options(**changes))
    for front_pass in ("start", "read", "rewrite", "lower"):
        monkeypatch.setattr(pipeline, front_pass, lambda *a, **k: pytest.fail("replan ran a front pass again"))
    again = replan(front, replace(Options(target=target), **changes))
    assert again.memory == fresh.memory and again.relaxed == fresh.relaxed
    assert [lp.variant.name for lp in again.layers] == [lp.variant.name for lp in fresh.layers]
    assert dict(again.offsets) == dict(fresh.offsets)


def test_replan_refuses_flags_the_front_read():
    front = plan_front(shared_model(VWW), Options())
    with pytest.raises(ValueError, match="target"):
        replan(front, Options(target="cortex-m7"))


def test_replanning_a_plans_own_options_gives_the_same_plan():
    """Resolved options stay resolved: an --l3 0 on GAP8 (no L3) does not come back as the part's
    8 MiB when suggest replans an alternative."""
    path = shared_model(VWW)
    options = Options(target="gap8", l1=16 * K, l3=0, sram=400 * K)
    front = plan_front(path, options)
    plan = replan(front, options)
    assert plan.l3 is None and plan.options.l3 is None
    again = replan(front, plan.options)
    assert again.options == plan.options and again.memory == plan.memory and again.l3 is None


def test_every_kernel_type_has_a_portable_name():
    """The manifest, reports and per-layer tables name every layer's kernel."""
    import typing
    from backends.variants import PORTABLE_NAMES, portable_name
    from layer_analyzer import kernels as K
    types = set(typing.get_args(K.Kernel)) or set(K.Kernel.__args__)
    assert types and types - {K.Conv, K.Pool, K.Lookup, K.MinMax, K.Reduce, K.Strided, K.AxisGather, K.Sigmoid16} <= set(PORTABLE_NAMES)  # by fields
    for path, target in ((VWW, "cortex-m7"), ("mlperf_tiny/pretrainedResnet_quant.tflite", "host")):
        plan = plan_deployment(shared_model(path), Options(target=target))
        assert all(isinstance(lp.variant.name, str) and lp.variant.name for lp in plan.layers)
    assert portable_name  # the function the table backs
