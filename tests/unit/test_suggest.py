"""deploy suggest and --auto-optimize: the signature, the estimate (what deploy then produces),
priorities that follow the measured savings, and the steps --auto-optimize takes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deployer.pipeline import Options, deploy
from deployer.suggest import PRIORITIES, auto_optimize, suggest, suggestion_json, suggestion_text
from network_parser.errors import InfeasibleBudget
from tests.tflite_builder import ModelBuilder
from tests.models import INT8_MODELS, LSTM_MODELS, shared_model
from tests.unit.test_cli import builder_model, run_subprocess, unsupported_model

K = 1024


def stem_model(path: Path) -> Path:
    """A CNN whose first stage dominates memory (48x48x16 activations), so a patch split pays."""
    mb = ModelBuilder(3)
    x = mb.input((1, 48, 48, 3))
    x = mb.conv2d(x, 16, activation="RELU")
    x = mb.depthwise_conv2d(x, activation="RELU")
    x = mb.conv2d(x, 16, stride=(2, 2), activation="RELU")
    x = mb.depthwise_conv2d(x, stride=(2, 2))
    x = mb.avg_pool(x, filter=(12, 12), stride=(12, 12))
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), 4))
    mb.save(path)
    return path


def residual_model(path: Path) -> Path:
    """Elementwise layers over inputs that die: in-place rules lower the peak."""
    mb = ModelBuilder(4)
    x = mb.input((1, 16, 16, 16))
    a = mb.add(x, x, activation="RELU")
    b = mb.mul(a, a)
    c = mb.add(b, b)
    mb.output(mb.fully_connected(mb.reshape(c, (1, -1)), 4))
    mb.save(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("suggest")
    return dict(builder=builder_model(d / "builder.tflite"), stem=stem_model(d / "stem.tflite"),
                residual=residual_model(d / "residual.tflite"), unsupported=unsupported_model(d / "sqrt.tflite"))


def rec(s, name):
    return next(r for r in s.recommendations if r.name == name)


def sram_of(model, **options) -> int:
    return deploy(model, Options(**options)).memory.sram_bytes


# ---- the signature and the estimate --------------------------------------------------------

def test_signature_counts_the_models_operators_and_parameters(models):
    s = suggest(models["builder"], Options())
    inv, dep = s.signature.inventory, s.deployment
    assert dict(inv.ops) == {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "ADD": 1, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                             "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    consts = [t for t in dep.graph.tensors if t.is_const]
    assert inv.parameter_bytes >= sum(t.nbytes for t in consts if t.dtype == "int8")
    assert set(s.signature.conv_kinds) == {"regular", "depthwise", "fully connected"}
    assert sum(macs for _, macs in s.signature.conv_kinds.values()) == s.signature.macs == dep.macs
    assert [(p.shape, p.dtype) for p in inv.inputs] == [((1, 16, 16, 8), "int8")]


def test_estimate_is_what_deploy_produces(models):
    for name in ("builder", "stem", "residual"):
        options = Options(sram=256 * K, flash=1024 * K)
        j = suggestion_json(suggest(models[name], options))
        dep = deploy(models[name], options)
        assert (j["estimated_sram_bytes"], j["estimated_flash_bytes"]) == \
            (dep.memory.sram_bytes, dep.memory.flash_bytes)
        assert j["status"]["sram"] == j["status"]["flash"] == "OK" and j["fits"]


def test_estimate_over_budget_is_the_smallest_budget_deploy_reports(models):
    options = Options(sram=1 * K, flash=2 * K)
    j = suggestion_json(suggest(models["stem"], options))
    with pytest.raises(InfeasibleBudget) as e:
        deploy(models["stem"], options)
    assert e.value.needs == {"--sram": j["estimated_sram_bytes"], "--flash": j["estimated_flash_bytes"]}
    assert j["status"]["sram"] == j["status"]["flash"] == "OVER" and not j["fits"]


def test_an_l1_below_the_smallest_tile_is_reported_with_the_smallest_that_works(models):
    with pytest.raises(InfeasibleBudget) as e:
        deploy(models["builder"], Options(l1=64))
    s = suggest(models["builder"], Options(l1=64))
    assert s.l1_need == e.value.needs["--l1"]
    assert s.over()[0][:3] == ("--l1", "L1", e.value.needs["--l1"])
    assert f"the smallest --l1 that works is {e.value.needs['--l1']:,}" in rec(s, "tiling").detail


# ---- priorities follow what was measured -----------------------------------------------------

def test_in_place_ops_needed_to_fit_are_high_and_auto_optimize_turns_them_on(models):
    m = models["residual"]
    with_, without = sram_of(m), sram_of(m, in_place=False)
    assert with_ < without
    budget = (with_ + without) // 2
    on = rec(suggest(m, Options(sram=budget)), "in-place ops")
    assert (on.on, on.priority, on.saving) == (True, "HIGH", without - with_)
    off = rec(suggest(m, Options(sram=budget, in_place=False)), "in-place ops")
    assert (off.on, off.priority, off.saving, off.changes) == (False, "HIGH", without - with_, (("in_place", True),))
    options, steps, planned = auto_optimize(m, Options(sram=budget, in_place=False))
    assert options.in_place and [st.recommendation.name for st in steps] == ["in-place ops"]
    assert planned.options.in_place and planned.memory == deploy(m, options).memory
    assert steps[0].before.sram_bytes == without and steps[0].after.sram_bytes == with_
    assert deploy(m, options).memory.sram_bytes <= budget


def test_a_saving_not_needed_is_low_and_no_saving_is_skip(models):
    m = models["residual"]
    s = suggest(m, Options(sram=1024 * K, in_place=False))
    assert rec(s, "in-place ops").priority == "LOW"  # it would save, but SRAM fits without it
    assert rec(s, "tiling").priority == "SKIP"  # the host has no L1
    assert [r.priority for r in s.recommendations] == sorted((r.priority for r in s.recommendations),
                                                             key=PRIORITIES.index)


def test_patch_split_that_alone_fits_is_high_and_auto_optimize_applies_it(models):
    m = models["stem"]
    whole = deploy(m, Options(patch="off"))
    split = deploy(m, Options(sram=whole.memory.sram_bytes - 16))  # a budget only the split meets
    assert split.patches and split.memory.sram_bytes < whole.memory.sram_bytes
    budget = split.memory.sram_bytes + 16
    off = rec(suggest(m, Options(sram=budget, patch="off")), "patch inference")
    assert off.priority == "HIGH" and off.flags[0].startswith("--patch ") and off.saving > 0
    options, steps, planned = auto_optimize(m, Options(sram=budget, patch="off"))
    assert planned.patches
    assert [st.recommendation.name for st in steps] == ["patch inference"]
    dep = deploy(m, options)
    assert dep.patches and dep.memory.sram_bytes <= budget
    on = rec(suggest(m, Options(sram=budget)), "patch inference")
    planned_on = deploy(m, Options(sram=budget))
    assert on.on and on.priority == "HIGH" and on.saving == whole.memory.sram_bytes - planned_on.memory.sram_bytes


def test_cpsat_arena_is_measured_against_the_best_greedy_plan(models):
    s = suggest(models["builder"], Options())
    r = rec(s, "CP-SAT arena")
    assert r.on and r.saving >= 0 and "best greedy" in r.detail
    greedy = rec(suggest(models["builder"], Options(planner="first-fit")), "CP-SAT arena")
    assert not greedy.on and greedy.flags == ("--planner cpsat",)


def test_flash_nothing_on_the_part_can_fix_says_what_is_still_over(models):
    m = models["stem"]
    s = suggest(m, Options(flash=2 * K))
    r = rec(s, "weight placement")
    assert r.needs_hardware and r.priority == "MED" and "--l3" in " ".join(r.flags) and r.saving > 0
    need = s.memory.flash_bytes
    with pytest.raises(InfeasibleBudget) as e:
        auto_optimize(m, Options(flash=2 * K))
    assert e.value.needs == {"--flash": need}
    assert f"FLASH needs {need:,} B, {need - 2 * K:,} B over --flash {2 * K:,}" in str(e.value)


def test_dsp_targets_measure_the_packed_weights(models):
    m = models["stem"]
    packed = deploy(m, Options(target="cortex-m4")).memory.flash_bytes
    plain = deploy(m, Options(target="cortex-m4", kernels="plain")).memory.flash_bytes
    assert plain < packed
    # at a flash budget just above the plain kernels' need, deploy itself keeps the layers whose
    # packing costs most plain; --kernels plain saves what is left, and SRAM-like fits need no more
    base = deploy(m, Options(target="cortex-m4", flash=plain + 8)).memory.flash_bytes
    r = rec(suggest(m, Options(target="cortex-m4", flash=plain + 8)), "weight placement")
    assert r.flags == ("--kernels plain",) and r.saving == base - plain
    assert r.priority == ("LOW" if base > plain else "SKIP")
    r = rec(suggest(m, Options(target="cortex-m4")), "weight placement")
    assert r.saving == packed - plain and r.priority == "LOW"  # no --flash: nothing is over


def test_unsupported_model_prints_its_signature_and_why_deploy_stops(models):
    s = suggest(models["unsupported"], Options())
    assert s.deployment is None and "GELU" in s.signature.unsupported
    assert dict(s.signature.inventory.ops) == {"RELU": 1, "GELU": 1}
    text = suggestion_text(s)
    assert "deploy stops on this model: UnsupportedOperator" in text
    j = suggestion_json(s)
    assert j["estimated_sram_bytes"] is None and j["recommendations"] == []


def test_suggestion_is_deterministic(models):
    a = suggestion_json(suggest(models["stem"], Options(sram=32 * K)))
    b = suggestion_json(suggest(models["stem"], Options(sram=32 * K)))
    assert a == b


# ---- the command -------------------------------------------------------------------------------

def test_cli_text_and_json(models):
    code, out, err = run_subprocess("suggest", models["stem"], "--sram", "32K", "--flash", "64K")
    assert code == 0, err
    assert re.search(r"^  SRAM .* (OK|OVER)$", out, re.M) and re.search(r"^  flash .* (OK|OVER)$", out, re.M)
    assert re.search(r"^  (HIGH|MED|LOW|SKIP) +patch inference", out, re.M)
    code, out, _ = run_subprocess("suggest", models["stem"], "--sram", "32K", "--flash", "64K", "--json", "-q")
    j = json.loads(out)
    assert {"estimated_sram_bytes", "estimated_flash_bytes", "signature", "recommendations", "status"} <= set(j)
    code, _, err = run_subprocess("suggest", models["unsupported"])
    assert code == 1 and "Traceback" not in err


def test_cli_auto_optimize_prints_its_steps(models, tmp_path):
    m = models["stem"]
    budget = deploy(m, Options(patch="off")).memory.sram_bytes - 16  # only a split fits
    code, out, err = run_subprocess(m, "--sram", str(budget), "--patch", "off", "--auto-optimize", "-o", tmp_path / "o")
    assert code == 0, err
    assert re.search(r"^auto-optimize: --patch auto \(patch inference\): SRAM [\d,]+ -> [\d,]+ B", out, re.M)
    code, _, err = run_subprocess(m, "--flash", "2K", "--auto-optimize", "-o", tmp_path / "p")
    assert code == 1 and err.startswith("error: InfeasibleBudget: --auto-optimize applied") and "still over" in err
    assert not (tmp_path / "p").exists()


# ---- every shared TFLite model: the estimate against what deploy produces ---------------------

@pytest.mark.parametrize("rel", INT8_MODELS + LSTM_MODELS)
def test_shared_model_estimates_match_deploy_within_5_percent(rel, tmp_path):
    path = shared_model(rel)
    code, out, err = run_subprocess("suggest", path, "--sram", "128K", "--flash", "512K", "--json", "-q")
    j = json.loads(out)
    dcode, dout, derr = run_subprocess(path, "--sram", "128K", "--flash", "512K", "--json", "-q", "-o", tmp_path / "o")
    if j["unsupported"]:
        assert code == 1 and dcode == 1 and j["unsupported"] in derr
        return
    assert code == 0, err
    if dcode == 0:
        produced = json.loads(dout)["memory"]
        need = {"sram": produced["sram_bytes"], "flash": produced["flash_bytes"]}
        assert j["fits"]
    else:
        needs = dict(re.findall(r"the smallest --(sram|flash) that works is (\d+)", derr))
        assert needs, derr
        manifest_free = {k: int(v) for k, v in needs.items()}
        need = {"sram": manifest_free.get("sram", j["estimated_sram_bytes"]),
                "flash": manifest_free.get("flash", j["estimated_flash_bytes"])}
        assert not j["fits"] and {k for k, v in j["status"].items() if v == "OVER"} == set(manifest_free)
    for memory in ("sram", "flash"):
        estimate = j[f"estimated_{memory}_bytes"]
        assert abs(estimate - need[memory]) <= 0.05 * need[memory], (memory, estimate, need[memory])


def test_in_place_ops_that_cost_sram_are_recommended_off(models, monkeypatch):
    """When the plan without in-place ops measures smaller (no shared model shows it now; a plan
    that moves buffers to L3 or splits a stage can), suggest recommends --no-in-place."""
    import deployer.suggest as S

    m = models["residual"]
    s = suggest(m, Options(sram=1024), recommend=False)
    smaller = replace_memory(s.deployment, s.memory.sram_bytes - 100)
    monkeypatch.setattr(S, "_measure", lambda model, options: smaller if not options.in_place else s.deployment)
    r = S._in_place(m, s)
    assert (r.name, r.on, r.saving, r.flags, r.changes) == ("no in-place ops", False, 100, ("--no-in-place",),
                                                            (("in_place", False),))
    assert S._prioritize(r, s).priority == "MED"  # SRAM is over; it helps without fitting


def replace_memory(dep, sram: int):
    from dataclasses import replace
    return replace(dep, memory=replace(dep.memory, sram_bytes=sram))


def test_the_front_lists_the_least_sram_each_mac_budget_buys(models):
    """Every point is the plan deploy makes with that --max-overhead; fewer bytes, more MACs."""
    m = models["stem"]
    s = suggest(m, Options(), with_front=True)
    points = s.sram_front
    assert len(points) >= 2 and points[0].overhead == 0 and points[0].stages == "runs whole"
    assert all(a.sram_bytes > b.sram_bytes and a.macs_recomputed <= b.macs_recomputed for a, b in zip(points, points[1:]))
    for p in points[1:]:
        assert p.overhead <= p.max_overhead
        assert deploy(m, Options(max_overhead=p.max_overhead)).memory.sram_bytes == p.sram_bytes
    j = suggestion_json(s)
    assert [x["sram_bytes"] for x in j["front"]] == [p.sram_bytes for p in points]
    assert "SRAM x MAC-overhead front" in suggestion_text(s)
    assert suggestion_json(suggest(m, Options()))["front"] == []
