"""QUANTIZE to and from int32, as TFLite Micro's kernel runs it (LiteRT refuses int32): int8 and
int16 values widened to int32 and narrowed back, an int32 model input and output, beside tiles
and the GAP8 cluster; the pairs the kernel has no case for are refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs, verify
from network_parser.errors import UnsupportedOperator
from tests.tflite_builder import ModelBuilder


def int32_model(folder):
    """int32 input -> int8; a convolution's output widened to int32 and narrowed to int16 and
    back to int8; the int32 value is also a model output."""
    mb = ModelBuilder(5)
    x = mb.quantize(mb.input((1, 10, 9, 3), dtype="int32", scale=2.0 ** -18), dtype="int8")
    c = mb.conv2d(x, 8, (3, 3), activation="RELU")
    wide = mb.quantize(c, scale=1e-4, dtype="int32")
    half = mb.quantize(wide, scale=3e-4, dtype="int16")
    y = mb.conv2d(mb.quantize(mb.quantize(half, scale=2e-5, dtype="int32"), dtype="int8"), 4, (3, 3), (2, 2))
    mb.output(y)
    mb.output(wide)
    path = folder / "int32.tflite"
    mb.save(path)
    return path


@pytest.mark.parametrize("target,l1", [("host", None), ("host", 2048), ("gap8", 4096)])
def test_int32_quantize_bit_exact_against_tflite_micro(tmp_path, target, l1):
    path = int32_model(tmp_path)
    dep = deploy(path, Options(target=target, l1=l1))
    assert [dep.graph.tensors[o].dtype for o in dep.graph.outputs] == ["int8", "int32"]
    samples = [random_inputs(dep.graph, s) for s in range(3)]
    x = samples[0][0]  # int32 values across the int8 range the QUANTIZE maps them to, some far beyond it
    assert x.dtype == np.int32 and np.abs(x.astype(np.int64)).max() > 1 << 24
    g = dep.graph
    q = next(l for l in g.layers if l.inputs[0] == g.inputs[0])
    levels = np.round(x * (g.tensors[g.inputs[0]].scale / g.tensors[q.outputs[0]].scale))
    assert len(np.unique(np.clip(levels, -128, 127))) > 100
    result = verify(dep, path, samples)
    assert result["reference"] == "tflite-micro"
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]


def _refused(tmp_path, build, *words):
    mb = ModelBuilder(0)
    mb.output(build(mb, mb.input((1, 6, 6, 4))))
    path = tmp_path / "m.tflite"
    mb.save(path)
    with pytest.raises(UnsupportedOperator) as e:
        deploy(path, Options(target="host"))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_int32_pairs_without_a_kernel_are_refused(tmp_path):
    _refused(tmp_path, lambda mb, x: mb.quantize(mb.quantize(x, scale=1e-3, dtype="int32"), scale=2e-3, dtype="int32"),
             "op 1 QUANTIZE", "from int32 to int32", "int8 and int16 only")

    def float_to_int32(mb, x):
        return mb.quantize(mb.dequantize(x), scale=1e-3, dtype="int32")
    _refused(tmp_path, float_to_int32, "QUANTIZE from float32 to int32")

    def offset(mb, x):
        y = mb.quantize(x, scale=1e-3, dtype="int32")
        mb._tensors[y].zero_point[0] = 7
        return y
    _refused(tmp_path, offset, "zero point 7", "zero point 0")
