"""Patch-based inference, run: stages computed patch by patch are bit-exact with the reference on
random CNN stacks (a forced stage with random grids and ends, and the stages the search picks
at the least SRAM), on the shared MobileNet-style models, and mobilenet_v2 at 224x224 fits
176 KiB."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployer.cli import main
from layer_analyzer.receptive_field import Stages, axis_plan
from solver.l3_placement import data_inputs
from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from tests.tflite_builder import ModelBuilder
from tests.host.test_models import assert_bit_exact
from tests.models import shared_model

K = 1024


@st.composite
def stacks(draw):
    """A small CNN: convolutions, depthwise convolutions, pooling and residual ADDs."""
    mb = ModelBuilder(seed=draw(st.integers(0, 2**16)))
    h, w = draw(st.integers(6, 20)), draw(st.integers(6, 20))
    x = mb.input((1, h, w, draw(st.integers(1, 4))))
    for _ in range(draw(st.integers(2, 6))):
        shape = mb.shape(x)
        kind = draw(st.sampled_from(["conv", "dw", "pool", "residual"]))
        k = draw(st.integers(1, min(3, shape[1], shape[2])))
        stride = draw(st.integers(1, 2)) if min(shape[1], shape[2]) > 3 else 1
        padding = draw(st.sampled_from(["SAME", "VALID"]))
        dil = draw(st.integers(1, 2)) if padding == "SAME" and stride == 1 else 1
        if kind == "conv":
            x = mb.conv2d(x, draw(st.integers(1, 8)), kernel=(k, k), stride=(stride, stride), padding=padding,
                          dilation=(dil, dil))
        elif kind == "dw":
            x = mb.depthwise_conv2d(x, kernel=(k, k), stride=(stride, stride), padding=padding)
        elif kind == "pool":
            x = (mb.max_pool if draw(st.booleans()) else mb.avg_pool)(x, filter=(k, k), stride=(stride, stride),
                                                                       padding=padding)
        else:
            y = mb.depthwise_conv2d(x, kernel=(3, 3) if min(shape[1], shape[2]) >= 3 else (1, 1), padding="SAME")
            x = mb.add(x, y)
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), 3))
    return mb, draw(st.integers(0, 10**6)), draw(st.integers(1, 5)), draw(st.integers(1, 5))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=stacks())
def test_random_stack_random_split_bit_exact(tmp_path, case):
    mb, pick, r, c = case
    path = tmp_path / "stack.tflite"
    mb.save(path)
    whole = deploy(path, Options(patch="off"))
    found = Stages(whole.graph, whole.kernels, data_inputs)
    if not found.ends:
        return
    end = found.ends[pick % len(found.ends)].end
    stage = found.stage(end)
    r, c = axis_plan(stage, r, "rows").parts, axis_plan(stage, c, "cols").parts
    if r * c == 1:  # a 1x1 grid is no split: cut whichever axis can be
        if stage.out_h > 1:
            r = 2
        elif stage.out_w > 1:
            c = 2
        else:
            return
    dep = deploy(path, Options(patch=f"{r}x{c}@{end}"))
    assert len(dep.patches) == 1 and dep.patches[0].stage.end == end
    assert_bit_exact(path, dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])
    least = deploy(path, Options(max_overhead=1.0))  # the least SRAM within 100 % recomputed: any stages
    assert least.memory.sram_bytes <= whole.memory.sram_bytes or not least.patches
    if least.patches:
        assert_bit_exact(path, least, build_engine(least), [random_inputs(least.graph, 5)])


FORCED = [("mlperf_tiny/vww_96_int8.tflite", "3x3@6"), ("tflm/person_detect.tflite", "4x2@9"),
          ("synthetic/mobilenetv2_035_96_random.tflite", "2x5@12"), ("mcunet/mcunet_vww.tflite", "4x4@6"),
          ("mlperf_tiny/pretrainedResnet_quant.tflite", "3x2@3")]


@pytest.mark.parametrize("rel, patch", FORCED)
def test_shared_models_with_patching_forced_bit_exact(rel, patch):
    dep = deploy(shared_model(rel), Options(patch=patch))
    assert len(dep.patches) == 1 and dep.fusion.method == "forced"
    assert_bit_exact(shared_model(rel), dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])


def test_mobilenet_v2_224_fits_176k_bit_exact(tmp_path):
    """1.2 MB of activations unsplit; MCUNetV2's 172 kB with the input included: the engine takes
    the frame channels last (from the model's own NCHW->NHWC transpose on), and its stages with
    their outputs over the inputs they consume fit 176 KiB with the least recompute."""
    from deployer.verify import verification_samples, verify
    from network_parser.cut import CutSpec
    model = shared_model("tflm/mobilenet_v2_quantized_1x3x224x224.tflite")
    result = CliRunner().invoke(main, [str(model), "--inputs", "input.9_te_transform", "--sram", "176K",
                                       "--planner", "first-fit", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["memory"]["sram_bytes"] <= 176 * K and manifest["fusion"]["overhead"] < 0.162
    dep = deploy(model, Options(cut=CutSpec(inputs=("input.9_te_transform",)), sram=176 * K, planner="first-fit"))
    assert dep.memory.sram_bytes <= 176 * K and dep.graph.inputs[0] in dep.offsets  # the input in the arena
    samples, expected = verification_samples(dep, model, 1)
    assert all(o["max_abs_diff"] == 0 for o in verify(dep, model, samples, expected=expected)["outputs"])


def test_patched_engine_is_deterministic_and_clean_under_sanitizers():
    from deployer.verify import verify
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    first, second = (deploy(model, Options(patch="auto")).files for _ in range(2))
    assert first == second
    dep = deploy(model, Options(patch="auto"))
    result = verify(dep, model, [random_inputs(dep.graph, 3)], sanitize=True)
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"])


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_patch_stage_with_the_rest_tiled_bit_exact(target):
    """With an L1, the patch stage runs region by region from L2 and every later layer is tiled."""
    from tests.target.test_gap8 import emulated
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    whole = deploy(model, Options(target=target, l1=16 * K, l3=0, patch="off"))
    dep = deploy(model, Options(target=target, l1=16 * K, l3=0, patch="auto", sram=whole.memory.sram_bytes - 4 * K))
    assert dep.patches and dep.tilings
    assert not set(dep.tilings) & {k for p in dep.patches for k in p.layers}
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(model, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


def test_compare_shows_the_split_and_draws_the_curve_before(tmp_path):
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    report = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["compare", str(model), "--sram", "32K", "--planner", "first-fit",
                                       "--report", str(report)])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("Patch stages"))
    assert "arena without them" in line and "MACs (" in line
    # the plan deploy makes with the same flags: its arena is compare's row for deploy's planner
    dep = deploy(model, Options(sram=32 * K, planner="first-fit"))
    row = next(x for x in result.output.splitlines() if x.startswith("first-fit ") and "of SRAM" in x)
    assert f"{dep.memory.sram_bytes:,} B of SRAM  fits" in row
    html = report.read_text()
    assert html.count('class="before"') == html.count('class="live"') >= 1
