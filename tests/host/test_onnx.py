"""The shared ONNX networks (DORY's NEMO/Quantlab integer graphs, Deeploy's RequantShift graphs):
every DORY layer's output equals its out_layerN.txt dump through the numpy executor, and every
network's generated C engine reproduces the network's own expected output, element by element."""
from __future__ import annotations

import numpy as np
import pytest

from deployer import golden
from deployer.cli import _input_type
from deployer.pipeline import Options, deploy
from deployer.reference import run_onnxruntime
from deployer.test_vectors import find_vectors, to_engine_input, to_engine_output
from deployer.verify import build_engine, run_engine
from tests.models import DEEPLOY_NETS, DORY_NETS, shared_onnx

# Layers that only move bytes at the graph's edges or between layouts: DORY has no layer for them.
EDGE_OPS = ("QUANTIZE", "TRANSPOSE", "RESHAPE", "PAD")


def onnx_options(model, **kw) -> Options:
    return Options(input_type=_input_type(model, None), **kw)


def engine_matches_vectors(model, options: Options):
    """Deploy, build and run the engine on the model's own input; compare with its expected output."""
    dep = deploy(model, options)
    vec = find_vectors(model, dep.graph)
    sample = [to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)]
    outs, _ = run_engine(build_engine(dep), [sample])
    for j, (ours, want) in enumerate(zip(outs[0], vec.outputs)):
        want = to_engine_output(dep.graph, j, want)
        bad = ours.astype(np.int64) != want.astype(np.int64)
        assert not bad.any(), f"{model}: output {j}: {int(bad.sum())} of {bad.size} elements differ"
    return dep


@pytest.mark.parametrize("folder,file,layout", DORY_NETS, ids=[n[0] for n in DORY_NETS])
def test_dory_every_layer_matches_its_dump(folder, file, layout):
    model = shared_onnx(f"dory/{folder}/{file}")
    dep = deploy(model, onnx_options(model))
    g = dep.graph
    vec = find_vectors(model, g)
    _, trace = golden.run(g, [to_engine_input(g, 0, vec.inputs[0])], dep.kernels)
    ours = [(layer, y) for layer, y in zip(g.layers, trace) if layer.op not in EDGE_OPS]
    assert len(ours) == len(vec.layers), [layer.op for layer, _ in ours]
    for n, ((layer, y), dump) in enumerate(zip(ours, vec.layers)):
        t = g.tensors[layer.outputs[0]]
        value = y.astype(np.int64) - (t.quant.zero_point[0] if t.dtype == "int8" else 0)  # stored -> true
        if layout == "chw" and value.ndim == 4:
            value = np.transpose(value, (0, 3, 1, 2))
        value = value.reshape(-1)
        assert value.size == dump.size, f"{folder} layer {n} ({layer.op} '{layer.name}'): {value.size} values, dump {dump.size}"
        bad = value != dump
        assert not bad.any(), f"{folder} out_layer{n} ({layer.op} '{layer.name}'): {int(bad.sum())} of {bad.size} differ"


@pytest.mark.parametrize("folder,file,layout", DORY_NETS, ids=[n[0] for n in DORY_NETS])
def test_dory_engine_matches_last_dump(folder, file, layout):
    model = shared_onnx(f"dory/{folder}/{file}")
    engine_matches_vectors(model, onnx_options(model))


@pytest.mark.parametrize("rel", DEEPLOY_NETS)
def test_deeploy_executor_and_engine_match_outputs(rel):
    model = shared_onnx(f"deeploy/{rel}/network.onnx")
    dep = engine_matches_vectors(model, onnx_options(model))
    vec = find_vectors(model, dep.graph)
    outs, _ = golden.run(dep.graph, [to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)],
                         dep.kernels)
    for j, (ours, want) in enumerate(zip(outs, vec.outputs)):
        assert np.array_equal(ours.astype(np.int64), to_engine_output(dep.graph, j, want).astype(np.int64))


@pytest.mark.parametrize("rel", ["deeploy/Models/MLPerf/ImageClassification/network.onnx",
                                 "dory/TCN_T/TCN.onnx"])
def test_channels_last_edges(rel):
    """--input-layout/--output-layout nhwc: no transposes at the edges, same results."""
    model = shared_onnx(rel)
    dep = engine_matches_vectors(model, onnx_options(model, input_layout="nhwc", output_layout="nhwc"))
    assert "TRANSPOSE" not in [layer.op for layer in dep.graph.layers]


@pytest.mark.parametrize("folder,file,layout", DORY_NETS, ids=[n[0] for n in DORY_NETS])
def test_nemo_graphs_match_onnxruntime_on_random_inputs(folder, file, layout):
    """onnxruntime runs NEMO's integer graphs as written (float and int64 ops): on inputs the
    dumps never saw, the executor equals it too (the engine's output: the input of a float
    op it leaves to the application, which onnxruntime is asked for)."""
    model = shared_onnx(f"dory/{folder}/{file}")
    dep = deploy(model, onnx_options(model))
    g = dep.graph
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.integers(0, 256, g.source.input_shapes[0])
        ours, _ = golden.run(g, [to_engine_input(g, 0, x)], dep.kernels)
        ref = run_onnxruntime(model, [x.astype(np.float32)], [g.tensors[o].name for o in g.outputs])
        assert np.array_equal(ours[0].astype(np.int64), to_engine_output(g, 0, ref[0]).astype(np.int64))


@pytest.mark.parametrize("which", ["test_nemo_classifier_split_by_gather_and_unsqueeze", "test_matmul_over_a_sequence"])
def test_gather_and_sequence_matmul_engines(tmp_path, which):
    """The engines of the integer graphs the reader tests build (a classifier split by Gather and
    Unsqueeze, a MatMul over a sequence), against onnxruntime."""
    from tests.unit import test_onnx_reader
    getattr(test_onnx_reader, which)(tmp_path)  # builds the model (and checks the executor)
    path = next(p for p in sorted(tmp_path.glob("*.onnx")) if p.stem in ("cls", "seq"))
    dep = deploy(path, Options(input_type="uint8"))
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, dep.graph.source.input_shapes[0])
    outs, _ = run_engine(build_engine(dep), [[to_engine_input(dep.graph, 0, x)]])
    refs = run_onnxruntime(path, [x.astype(np.float32)], [dep.graph.tensors[o].name for o in dep.graph.outputs])
    for j, (a, r) in enumerate(zip(outs[0], refs)):
        assert np.array_equal(a.astype(np.int64), to_engine_output(dep.graph, j, r).astype(np.int64).reshape(a.shape))


def test_data_movement_glue_engine(tmp_path):
    """The C engine of the integer graph of Transpose, Slice (negative steps), Split, Concat and
    GlobalMaxPool, against onnxruntime."""
    from tests.unit.test_onnx_reader import glue_model
    path, _ = glue_model(tmp_path, 5, (0, 3, 1, 2), [(1, 5, -9, -2), (-1, 1, 4, 1)])
    dep = deploy(path, Options(input_type="uint8"))
    x = np.random.default_rng(5).integers(0, 256, dep.graph.source.input_shapes[0])
    outs, _ = run_engine(build_engine(dep), [[to_engine_input(dep.graph, 0, x)]])
    refs = run_onnxruntime(path, [x.astype(np.float32)], [dep.graph.tensors[o].name for o in dep.graph.outputs])
    assert len(refs) == 3
    for j, (a, r) in enumerate(zip(outs[0], refs)):
        assert np.array_equal(a.astype(np.int64), to_engine_output(dep.graph, j, r).astype(np.int64).reshape(a.shape))
