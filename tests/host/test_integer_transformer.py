"""Integer transformer blocks as Deeploy's flow exports them, built by tests.integer_transformer
(attention, an encoder layer, a LLaMA-style decoder block with the integer RMSNorm): deployed whole
and with --l1 32K (host and the GAP8 cluster's emulation), each engine equal to the golden executor,
whose operators are checked against Deeploy's own kernel tests (tests/host/test_onnx.py)."""
from __future__ import annotations

import numpy as np
import pytest

from deployer import golden
from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs, run_engine
from tests import integer_transformer

K = 1024


@pytest.mark.parametrize("options", [dict(), dict(l1=32 * K), dict(l1=32 * K, target="gap8")],
                         ids=["whole", "l1-32K", "gap8-l1-32K"])
@pytest.mark.parametrize("block", ["attention_block", "encoder_layer", "llama_block"])
def test_integer_transformer_blocks_equal_the_executor(tmp_path, block, options):
    from tests.target.test_gap8 import emulated
    model = getattr(integer_transformer, block)(tmp_path / f"{block}.onnx")
    dep = deploy(model, Options(input_type="int8", **options))
    ops = {layer.op for layer in dep.graph.layers}
    assert {"BATCH_MATMUL", "INTEGER_SOFTMAX"} <= ops and ("INTEGER_RMS_NORM" in ops) == (block == "llama_block"), ops
    samples = [random_inputs(dep.graph, s) for s in range(2)]
    outs, _ = run_engine(emulated(dep) if options.get("target") == "gap8" else build_engine(dep), samples)
    for sample, ours in zip(samples, outs):
        want, _ = golden.run(dep.graph, sample, dep.kernels)
        assert np.array_equal(ours[0], want[0]) and len(np.unique(want[0])) > 10
