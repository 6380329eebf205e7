"""Below the whole-tensor bound, run: outputs over consumed inputs (no MAC recomputed) on the
shared models, tile loops walking backwards over their inputs (host and the GAP8 cluster),
fused stages with the input kept by the application, each engine bit-exact."""
from __future__ import annotations

import numpy as np
import pytest

from network_parser.cut import CutSpec
from deployer.pipeline import Options, deploy, shares_bytes
from deployer.verify import build_engine, random_inputs, run_engine, verification_samples
from tests.host.test_models import assert_bit_exact
from tests.models import shared_model

K = 1024

# the whole-tensor bound (the arena with every tensor apart, in-place rules on) of each
NO_RECOMPUTE = [("mlperf_tiny/kws_ref_model.tflite", 16_000), ("mlperf_tiny/vww_96_int8.tflite", 55_296),
                ("tflm/person_detect.tflite", 55_296), ("mlperf_tiny/pretrainedResnet_quant.tflite", 49_152)]


@pytest.mark.parametrize("rel, bound", NO_RECOMPUTE)
def test_outputs_over_inputs_go_below_the_whole_tensor_bound(rel, bound):
    """With no MAC recomputed, at most 0.8 of the bound; the arena's checker and the byte replay
    of every layer sharing bytes passed while planning; the engine is bit-exact."""
    model = shared_model(rel)
    apart = deploy(model, Options(patch="off", overlap=False))
    assert apart.arena.peak == bound and not apart.overlaps
    dep = deploy(model, Options(patch="off"))
    shared = [o for o in dep.overlaps if shares_bytes(dep, o)]
    assert shared and dep.arena.peak <= 0.8 * bound
    assert_bit_exact(model, dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_tile_loops_walk_backwards_over_their_inputs(target):
    """kws with --l1 16K: the pointwise layers' channel tiles read the whole input, so their
    outputs sit above it and the tile loop runs last tile first (weights moving in with the first
    tile of each channel group it visits)."""
    from tests.target.test_gap8 import emulated
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    dep = deploy(model, Options(target=target, l1=16 * K, patch="off"))
    backwards = [lp.index for lp in dep.layers if lp.overlap and lp.overlap.order == "tiles" and lp.overlap.reverse
                 and shares_bytes(dep, lp.overlap)]
    assert backwards and all(dep.layers[k].tiling[1].tile_c < dep.layers[k].tiling[0].out_c for k in backwards)
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(model, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


def test_overlap_off_keeps_every_tensor_apart():
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    for options in (Options(overlap=False), Options(in_place=False)):
        dep = deploy(model, options)
        assert not any(shares_bytes(dep, o) for o in dep.overlaps) and dep.arena.peak >= 16_000


def test_mcunet_stages_with_the_input_kept_by_the_application():
    """msf-CNN's 17,904 B point of mcunet_vww (input left out, 34.5 % MACs recomputed): several
    stages, the input read where the application keeps it (inference_set_input), bit-exact."""
    model = shared_model("mcunet/mcunet_vww.tflite")
    dep = deploy(model, Options(cut=CutSpec(io="int8"), input_memory="external", sram=17_904, max_overhead=0.345))
    assert dep.memory.sram_bytes <= 17_904 and len(dep.patches) >= 2 and dep.fusion.overhead <= 0.345
    assert dep.graph.inputs[0] not in dep.offsets  # not in the arena
    assert "INFERENCE_INPUT_EXTERNAL" in dep.files["inference_api.h"]
    samples, expected = verification_samples(dep, model, 2)
    outs, _ = run_engine(build_engine(dep), samples)
    for got, want in zip(outs, expected.outputs):
        for a, b in zip(got, want):
            assert np.array_equal(a, b.reshape(a.shape))


@pytest.mark.parametrize("target", ["host", "gap8"])
def test_tiles_read_the_application_input_where_it_is_kept(target):
    """A tiled first layer's slab takes the input pointer the application set for this run."""
    from tests.target.test_gap8 import emulated
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    dep = deploy(model, Options(target=target, l1=16 * K, input_memory="external"))
    assert 0 in dep.tilings and dep.graph.inputs[0] not in dep.offsets
    engine = build_engine(dep) if target == "host" else emulated(dep)
    assert_bit_exact(model, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])
