"""The shared ONNX integer networks on the GAP8 target at --l1 32K: tiled through the emulated
cluster (8 threads, memcpy DMA), bit-exact with the networks' own expected outputs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from deployer.pipeline import deploy
from deployer.test_vectors import find_vectors, to_engine_input, to_engine_output
from deployer.verify import run_engine
from tests.host.test_onnx import onnx_options
from tests.models import DEEPLOY_NETS, DORY_NETS, shared_onnx
from tests.target.test_gap8 import CROSS_CC, cross_compile, emulated

NETS = [f"dory/{folder}/{file}" for folder, file, _ in DORY_NETS] + \
       [f"deeploy/{rel}/network.onnx" for rel in DEEPLOY_NETS if rel.startswith("Models/")]
KERNELS = [rel for rel in DEEPLOY_NETS if rel.startswith("Kernels/")]


@pytest.mark.parametrize("rel", NETS)
def test_gap8_l1_32k_bit_exact(rel):
    model = shared_onnx(rel)
    dep = deploy(model, onnx_options(model, target="gap8", l1=32 * 1024, patch="off"))
    assert dep.tilings, "no layer was tiled"
    assert all(t.l1_bytes <= 32 * 1024 for _, t in dep.tilings.values())
    if shutil.which(CROSS_CC) is not None:  # and the same engine is clean for the target's compiler
        cross_compile(dep)
    vec = find_vectors(model, dep.graph)
    outs, _ = run_engine(emulated(dep), [[to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)]])
    for j, (ours, want) in enumerate(zip(outs[0], vec.outputs)):
        want = to_engine_output(dep.graph, j, want)
        assert np.array_equal(ours.astype(np.int64), want.astype(np.int64)), f"{rel} output {j}"


@pytest.mark.parametrize("rel", KERNELS)
def test_gap8_deeploy_kernels_l1_32k_bit_exact(rel):
    """Deeploy's one-op tests at --l1 32K: what tiles runs in L1 tiles, the rest (int32 layers
    among them: tiles hold 8- and 16-bit values) whole from L2."""
    model = shared_onnx(f"deeploy/{rel}/network.onnx")
    dep = deploy(model, onnx_options(model, target="gap8", l1=32 * 1024, patch="off"))
    assert all(t.l1_bytes <= 32 * 1024 for _, t in dep.tilings.values())
    if shutil.which(CROSS_CC) is not None:
        cross_compile(dep)
    vec = find_vectors(model, dep.graph)
    outs, _ = run_engine(emulated(dep), [[to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)]])
    for j, (ours, want) in enumerate(zip(outs[0], vec.outputs)):
        assert np.array_equal(ours.astype(np.int64), to_engine_output(dep.graph, j, want).astype(np.int64)), \
            f"{rel} output {j}"
