"""Each in-place rule and graph rewrite: when it fires, when it must not, and what it saves."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer.pipeline import Options, arena_problem, deploy
from solver.tensor_arena import tensor_rows
from network_parser.inplace import plan_in_place
from network_parser.lifetimes import lifetimes
from network_parser.rewrites import apply_rewrites
from tests.tflite_builder import ModelBuilder
from network_parser.tflite_reader import read_tflite
from solver.arena import lower_bound
from solver.plan_checker import PlanError, check_tensor_plan


def graph_of(tmp_path, mb: ModelBuilder):
    mb.save(tmp_path / "m.tflite")
    return read_tflite(tmp_path / "m.tflite")


def rules(graph):
    return {graph.layers[r.layer].op: r.rule for r in plan_in_place(graph)}


def test_zero_copy_reshape(tmp_path):
    mb = ModelBuilder(0)
    mb.output(mb.fully_connected(mb.reshape(mb.conv2d(mb.input((1, 4, 4, 2)), 3), (1, 48)), 4))
    assert rules(graph_of(tmp_path, mb))["RESHAPE"] == "zero-copy-reshape"


def test_add_writes_onto_the_input_that_dies(tmp_path):
    mb = ModelBuilder(1)
    x = mb.input((1, 6, 6, 4))
    a = mb.conv2d(x, 4, kernel=(1, 1))
    mb.output(mb.add(a, mb.conv2d(x, 4, kernel=(1, 1))))
    g = graph_of(tmp_path, mb)
    (r,) = [r for r in plan_in_place(g) if g.layers[r.layer].op == "ADD"]
    assert r.rule == "elementwise-in-place" and r.input in g.layers[r.layer].inputs


def test_add_keeps_an_input_that_is_read_later(tmp_path):
    """The residual operand is read again after the ADD: the ADD must not overwrite it."""
    mb = ModelBuilder(2)
    x = mb.conv2d(mb.input((1, 6, 6, 4)), 4, kernel=(1, 1))
    s = mb.add(x, x)
    mb.output(mb.mul(s, x))  # x is still needed by the MUL
    g = graph_of(tmp_path, mb)
    add = next(k for k, layer in enumerate(g.layers) if layer.op == "ADD")
    assert all(r.layer != add for r in plan_in_place(g))


def test_broadcast_operand_is_never_overwritten(tmp_path):
    mb = ModelBuilder(3)
    x = mb.input((1, 4, 4, 3))
    mb.output(mb.add(mb.input((1, 1, 1, 3)), x))
    g = graph_of(tmp_path, mb)
    (r,) = plan_in_place(g)
    assert g.tensors[r.input].shape == (1, 4, 4, 3)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_in_place_with_one_channel_scratch(tmp_path, stride):
    mb = ModelBuilder(4)
    x = mb.conv2d(mb.input((1, 8, 8, 3)), 6, kernel=(1, 1))
    mb.output(mb.depthwise_conv2d(x, kernel=(3, 3), stride=(stride, stride)))
    g = graph_of(tmp_path, mb)
    (r,) = [r for r in plan_in_place(g) if r.rule == "depthwise-in-place"]
    out = g.tensors[g.layers[r.layer].outputs[0]]
    assert r.scratch_bytes == out.shape[1] * out.shape[2]


def test_depthwise_with_multiplier_is_not_in_place(tmp_path):
    mb = ModelBuilder(5)
    mb.output(mb.depthwise_conv2d(mb.conv2d(mb.input((1, 8, 8, 3)), 4, kernel=(1, 1)), multiplier=2))
    assert "DEPTHWISE_CONV_2D" not in rules(graph_of(tmp_path, mb))


def test_quantize_and_dequantize_convert_in_place(tmp_path):
    mb = ModelBuilder(6)
    q = mb.quantize(mb.input((1, 8, 8, 3), dtype="float32"))
    mb.output(mb.dequantize(mb.conv2d(q, 4)))
    got = rules(graph_of(tmp_path, mb))
    assert got["QUANTIZE"] == got["DEQUANTIZE"] == "convert-in-place"


def test_in_place_disabled_keeps_only_reshapes(tmp_path):
    mb = ModelBuilder(7)
    x = mb.conv2d(mb.input((1, 6, 6, 4)), 4, kernel=(1, 1))
    mb.output(mb.reshape(mb.relu(mb.add(x, mb.conv2d(x, 4, kernel=(1, 1)))), (1, 144)))
    g = graph_of(tmp_path, mb)
    assert {r.rule for r in plan_in_place(g, enabled=False)} == {"zero-copy-reshape"}
    assert {r.rule for r in plan_in_place(g)} == {"zero-copy-reshape", "elementwise-in-place"}


def test_in_place_lowers_the_bound(tmp_path):
    mb = ModelBuilder(8)
    x = mb.conv2d(mb.input((1, 16, 16, 1)), 8, kernel=(1, 1))
    mb.output(mb.depthwise_conv2d(mb.relu(x), kernel=(3, 3)))
    g = graph_of(tmp_path, mb)
    with_, without = (lower_bound(arena_problem(lifetimes(g, plan_in_place(g, on)), 16)[0]) for on in (True, False))
    assert with_ < without


def test_pad_folds_into_the_convolution(tmp_path):
    mb = ModelBuilder(9)
    x = mb.pad(mb.input((1, 7, 7, 3)), [[0, 0], [1, 2], [2, 1], [0, 0]])
    mb.output(mb.conv2d(x, 4, kernel=(3, 3), stride=(2, 2), padding="VALID"))
    g = graph_of(tmp_path, mb)
    fused, notes = apply_rewrites(g)
    assert [layer.op for layer in fused.layers] == ["CONV_2D"] and len(notes) == 1
    assert fused.layers[0].attrs.pads == (1, 2, 2, 1)
    assert fused.tensors[fused.layers[0].inputs[0]].shape == (1, 7, 7, 3)


def test_pad_read_twice_is_kept(tmp_path):
    mb = ModelBuilder(10)
    p = mb.pad(mb.input((1, 5, 5, 2)), [[0, 0], [1, 1], [1, 1], [0, 0]])
    mb.output(mb.conv2d(p, 2, padding="VALID"), mb.conv2d(p, 2, padding="VALID"))
    fused, notes = apply_rewrites(graph_of(tmp_path, mb))
    assert "PAD" in [layer.op for layer in fused.layers] and not notes


def test_pad_of_channels_is_kept(tmp_path):
    mb = ModelBuilder(11)
    p = mb.pad(mb.input((1, 5, 5, 2)), [[0, 0], [1, 1], [1, 1], [0, 2]])
    mb.output(mb.conv2d(p, 2, padding="VALID"))
    fused, _ = apply_rewrites(graph_of(tmp_path, mb))
    assert "PAD" in [layer.op for layer in fused.layers]


# ---- the tensor-level checker catches planted faults in real plans ----------------------

def _tensor_rows(dep):
    return tensor_rows(dep.lives, dep.offsets)


@pytest.fixture(scope="module")
def example_deployment():
    from pathlib import Path
    return deploy(Path(__file__).resolve().parents[2] / "examples" / "tiny_kws.tflite", Options())


def test_checker_accepts_the_real_plan(example_deployment):
    dep = example_deployment
    check_tensor_plan(_tensor_rows(dep), dep.arena.peak, 16)


def test_checker_catches_every_planted_overlap(example_deployment):
    """Move each tensor onto every other tensor live at the same time, from another group."""
    dep = example_deployment
    rows = _tensor_rows(dep)
    planted = 0
    for i, a in enumerate(rows):
        for b in rows:
            if a[1] != b[1] and a[2] <= b[3] and b[2] <= a[3] and a[5] and b[5]:
                mutated = list(rows)
                mutated[i] = (*a[:4], b[4], a[5])
                with pytest.raises(PlanError):
                    check_tensor_plan(mutated, dep.arena.peak + a[5], 16)
                planted += 1
    assert planted > 5


def test_checker_catches_misalignment_and_overflow(example_deployment):
    dep = example_deployment
    rows = _tensor_rows(dep)
    for fault in ((*rows[0][:4], rows[0][4] + 8, rows[0][5]), (*rows[0][:4], dep.arena.peak, rows[0][5])):
        with pytest.raises(PlanError):
            check_tensor_plan([fault, *rows[1:]], dep.arena.peak, 16)


# ---- in place, tile by tile ----------------------------------------------------------------------

def _simulated_safe(g, tile_h: int, async_dma: bool) -> bool:
    """Run the tile schedule on one channel plane: every tile's load must read bytes no store has
    replaced yet. Loads of tile t + 1 come before the store of tile t; with an asynchronous DMA
    the store of t may land before the load of t + 1 finishes."""
    from layer_analyzer.tiling import axis_windows
    rows = axis_windows(g.out_h, tile_h, g.stride_h, g.pad_t, (g.k_h - 1) * g.dil_h + 1, g.in_h)
    written = set()  # flat pixel indices (input layout) already replaced by an output
    starts = list(range(0, g.out_h, tile_h))
    reads = []
    for r0, (o, i, pad) in zip(starts, rows):
        y0 = max(r0 * g.stride_h - g.pad_t, 0)
        reads.append(set(range(y0 * g.in_w, (y0 + i) * g.in_w)))
    for t, r0 in enumerate(starts):
        if t == 0 and reads[0] & written:
            return False
        h = min(tile_h, g.out_h - r0)
        store = set(range(r0 * g.out_w, (r0 + h) * g.out_w))
        if async_dma and t + 1 < len(starts) and reads[t + 1] & store:
            return False
        written |= store
        if t + 2 < len(starts) and reads[t + 2] & written:
            return False
    return True


@settings(max_examples=300)
@given(st.integers(1, 12), st.integers(1, 9), st.sampled_from([1, 2]), st.sampled_from([1, 3, 5]),
       st.integers(0, 2), st.integers(1, 12), st.booleans())
def test_tiles_write_behind_their_reads_exactly_when_a_simulation_says_so(h, w, stride, k, pad, tile_h, async_dma):
    from layer_analyzer.tiling import TileGeometry, writes_behind_reads
    pad = min(pad, k - 1)
    out_h, out_w = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if out_h < 1 or out_w < 1 or out_h * out_w > h * w:
        return
    g = TileGeometry(0, "depthwise", out_h, out_w, 4, h, w, 4, k, k, stride, stride, pad_t=pad, pad_l=pad)
    tile_h = min(tile_h, out_h)
    assert writes_behind_reads(g, tile_h, out_w, 4, async_dma) == _simulated_safe(g, tile_h, async_dma)
    assert not writes_behind_reads(g, tile_h, max(out_w - 1, 1), 4, async_dma) or out_w == 1
