"""The SMLAD kernels alone on random shapes: small models of one kernel variant each (pointwise,
im2col, rows, depthwise whole and in place, fully connected), built for the Cortex-M4 or M7,
run on QEMU, equal to the numpy executor element by element."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from deployer import golden, qemu
from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs
from tests.tflite_builder import ModelBuilder
from tests.target.test_cortexm import run_on_qemu

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")
# Every example builds and runs an engine: no shrinking (a failure reports its example as drawn).
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ACTS = st.sampled_from(["NONE", "RELU", "RELU6"])


def variants(dep) -> set[str]:
    """The DSP kernels the plan runs: their layouts ("pointwise", "depthwise", ...) and "add"."""
    return {lp.variant.layout.variant if lp.variant.layout is not None else lp.variant.macro
            for lp in dep.layers if lp.variant.dsp}


def check(tmp_path, mb: ModelBuilder, target: str, variant: str, in_place: bool = False) -> None:
    path = tmp_path / "model.tflite"
    mb.save(path)
    dep = deploy(path, Options(target=target, patch="off"))
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert in_place == ("per tap, in place" in engine), "in place" if in_place else "not in place"
    assert variant in variants(dep), f"the model exercises {variants(dep)}, not {variant}"
    samples = [random_inputs(dep.graph, seed) for seed in range(2)]
    for sample, ours in zip(samples, run_on_qemu(dep, samples)):
        ref, _ = golden.run(dep.graph, sample, dep.kernels)
        for a, b in zip(ours, ref):
            assert np.array_equal(a, b.reshape(a.shape)), \
                f"{variant} on {target}: {int((a != b.reshape(a.shape)).sum())} of {a.size} elements differ"


@SETTINGS
@given(seed=st.integers(0, 2 ** 16), hw=st.integers(1, 9), in_c=st.sampled_from([4, 8, 12, 20, 64]),
       out_c=st.integers(1, 13), stride=st.integers(1, 2), act=ACTS, per_channel=st.booleans())
def test_pointwise(tmp_path, seed, hw, in_c, out_c, stride, act, per_channel):
    mb = ModelBuilder(seed)
    mb.output(mb.conv2d(mb.input((1, hw, hw, in_c)), out_c, kernel=(1, 1), stride=(stride, stride),
                        padding="VALID", activation=act, per_channel=per_channel))
    check(tmp_path, mb, "cortex-m4", "pointwise")


@SETTINGS
@given(seed=st.integers(0, 2 ** 16), h=st.integers(2, 10), w=st.integers(2, 10), in_c=st.integers(1, 9),
       out_c=st.integers(1, 10), k=st.tuples(st.integers(1, 4), st.integers(2, 5)), stride=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), act=ACTS)
def test_im2col(tmp_path, seed, h, w, in_c, out_c, k, stride, padding, act):
    if padding == "VALID" and (k[0] > h or k[1] > w):
        padding = "SAME"
    mb = ModelBuilder(seed)
    mb.output(mb.conv2d(mb.input((1, h, w, in_c)), out_c, kernel=k, stride=(stride, stride), padding=padding,
                        activation=act))
    check(tmp_path, mb, "cortex-m7", "im2col")


@settings(SETTINGS, max_examples=3)
@given(seed=st.integers(0, 2 ** 16), hw=st.integers(3, 7), out_c=st.integers(1, 6), stride=st.integers(1, 2))
def test_rows_for_windows_too_large_for_the_stack(tmp_path, seed, hw, out_c, stride):
    mb = ModelBuilder(seed)
    mb.output(mb.conv2d(mb.input((1, hw, hw, 64)), out_c, kernel=(5, 5), stride=(stride, stride), padding="SAME"))
    check(tmp_path, mb, "cortex-m4", "rows")


@SETTINGS
@given(seed=st.integers(0, 2 ** 16), h=st.integers(1, 9), w=st.integers(1, 9), groups=st.integers(1, 4),
       k=st.tuples(st.integers(1, 5), st.integers(1, 5)), stride=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), act=ACTS, in_place=st.booleans())
def test_depthwise(tmp_path, seed, h, w, groups, k, stride, padding, act, in_place):
    if padding == "VALID" and (k[0] > h or k[1] > w):
        padding = "SAME"
    mb = ModelBuilder(seed)
    x = mb.conv2d(mb.input((1, h, w, 4 * groups)), 4 * groups, kernel=(1, 1))
    mb.output(mb.depthwise_conv2d(x, kernel=k, stride=(stride, stride), padding=padding, activation=act))
    if not in_place:  # its input is also an output, so it outlives the layer: no overwriting
        mb.output(x)
    check(tmp_path, mb, "cortex-m7" if in_place else "cortex-m4", "depthwise", in_place)


@SETTINGS
@given(seed=st.integers(0, 2 ** 16), features=st.sampled_from([4, 8, 36, 100, 256]), units=st.integers(1, 17),
       batch=st.integers(1, 3), act=ACTS)
def test_fully_connected(tmp_path, seed, features, units, batch, act):
    mb = ModelBuilder(seed)
    mb.output(mb.fully_connected(mb.input((batch, features)), units, activation=act))
    check(tmp_path, mb, "cortex-m4", "pointwise")


@SETTINGS
@given(seed=st.integers(0, 2 ** 16), shape=st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 9)),
       act=ACTS)
def test_add(tmp_path, seed, shape, act):
    mb = ModelBuilder(seed)
    mb.output(mb.add(mb.input((1, *shape)), mb.input((1, *shape)), activation=act))
    check(tmp_path, mb, "cortex-m7", "add")


# The depthwise kernel's paths, each a case: three or two pixels a step with an odd last one, the
# zero-point padded stack plane (small layers; in place written straight over the copied input),
# that plane in strips of output rows (in place through the scratch plane), or the whole windows
# and cut borders (wider rows, strides of 2; in place through the scratch plane), a 5x5 window, a
# window too wide for LDR's literal offsets (the C pairs), and tiles of an L1 scratchpad.
DW_CASES = {  # name: (h, w, groups, kernel, stride, padding, act, in_place, l1)
    "plane-odd-relu6-in-place": (5, 7, 3, 3, 1, "SAME", "RELU6", True, None),
    "plane-stride2": (6, 9, 2, 3, 2, "SAME", "NONE", False, None),
    "plane-5x5": (6, 6, 1, 5, 1, "SAME", "RELU", False, None),
    "strips-odd-in-place": (20, 23, 2, 3, 1, "SAME", "NONE", True, None),
    "strips-relu6": (17, 31, 1, 3, 1, "SAME", "RELU6", False, None),
    "borders-in-place": (6, 70, 1, 3, 1, "SAME", "NONE", True, None),
    "borders-stride2": (19, 25, 1, 3, 2, "SAME", "RELU", False, None),
    "wide-rows-valid": (3, 40, 16, 3, 1, "VALID", "NONE", False, None),
    "tiles": (24, 24, 4, 3, 1, "SAME", "RELU6", False, 8 * 1024),
}


@pytest.mark.parametrize("doubled", [True, False], ids=["doubled", "fx_rq"])
@pytest.mark.parametrize("case", list(DW_CASES))
def test_depthwise_paths(tmp_path, monkeypatch, case, doubled):
    from backends import smlad
    if not doubled:  # the accumulators as summed (fx_rq), as when a layer's bound forbids doubling
        monkeypatch.setattr(smlad, "doubles", lambda *a: False)
    h, w, groups, k, stride, padding, act, in_place, l1 = DW_CASES[case]
    mb = ModelBuilder(sum(map(ord, case)))
    x = mb.conv2d(mb.input((1, h, w, 4 * groups)), 4 * groups, kernel=(1, 1))
    mb.output(mb.depthwise_conv2d(x, kernel=(k, k), stride=(stride, stride), padding=padding, activation=act))
    if not in_place:
        mb.output(x)
    path = tmp_path / "model.tflite"
    mb.save(path)
    dep = deploy(path, Options(target="cortex-m4", patch="off", l1=l1))
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert in_place == ("per tap, in place" in engine)
    assert ("padded by the zero point" in engine) == (case.startswith(("plane", "strips")) or l1 is not None)
    assert ("output rows at a time" in engine) == case.startswith("strips")
    assert ("= dsp_rq2(" in engine) == doubled
    dw = [lp for lp in dep.layers if lp.variant.layout is not None and lp.variant.layout.variant == "depthwise"]
    assert dw and (l1 is None) == all(lp.tiling is None for lp in dw)
    if in_place:  # over a plane holding the whole input the kernel writes over its input itself
        assert [lp.reuse.scratch_bytes == 0 for lp in dw] == [case.startswith("plane")]
    samples = [random_inputs(dep.graph, seed) for seed in range(2)]
    for sample, ours in zip(samples, run_on_qemu(dep, samples)):
        ref, _ = golden.run(dep.graph, sample, dep.kernels)
        for a, b in zip(ours, ref):
            assert np.array_equal(a, b.reshape(a.shape)), f"{case}: {int((a != b.reshape(a.shape)).sum())} elements differ"


@pytest.mark.parametrize("doubled", [True, False], ids=["doubled", "fx_rq"])
@pytest.mark.parametrize("variant", ["pointwise", "im2col"])
def test_stream_requantizations(tmp_path, monkeypatch, variant, doubled):
    """The pointwise and im2col kernels with doubled accumulators (dsp_rq2) and as summed (fx_rq),
    with 4, 8 and 12 steps per pass (fours, a pair, a last step)."""
    from backends import smlad
    if not doubled:
        monkeypatch.setattr(smlad, "doubles", lambda *a: False)
    mb = ModelBuilder(7 if doubled else 8)
    x = mb.input((1, 5, 6, 52 if variant == "pointwise" else 3))
    kernel = (1, 1) if variant == "pointwise" else (3, 3)
    mb.output(mb.conv2d(x, 10, kernel=kernel, padding="SAME", activation="RELU"))
    path = tmp_path / "model.tflite"
    mb.save(path)
    dep = deploy(path, Options(target="cortex-m4", patch="off"))
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert ("= dsp_rq2(" in engine) == doubled and variant in variants(dep)
    samples = [random_inputs(dep.graph, seed) for seed in range(2)]
    for sample, ours in zip(samples, run_on_qemu(dep, samples)):
        ref, _ = golden.run(dep.graph, sample, dep.kernels)
        for a, b in zip(ours, ref):
            assert np.array_equal(a, b.reshape(a.shape))
