"""Deeploy's integer softmax and norms (iSoftmax, iRMSNorm, iNoNorm): its four kernel tests run
bit-exact through the host engine; the numpy executor equals a plain-integer statement of the
kernels' arithmetic (their C widths: 32-bit wraps, truncating division) on edge values and
layouts; the C engine equals both on a graph of all three ops; parameters those widths cannot
hold are refused."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployer import golden
from deployer.pipeline import Options, deploy
from deployer.test_vectors import to_engine_input
from deployer.verify import build_engine, run_engine
from layer_analyzer import kernels as K
from network_parser.errors import UnsupportedOperator
from network_parser.onnx_reader import read_onnx
from tests.host.test_onnx import engine_matches_vectors, onnx_options
from tests.models import DEEPLOY_NORM_NETS, shared_onnx

DEEPLOY_SOFTMAX = dict(coeffA=1, coeffB=345, coeffC=62395, log2=255, n_levels=256)  # the kernel tests'


@pytest.mark.parametrize("rel", DEEPLOY_NORM_NETS)
def test_kernel_tests_match_their_outputs(rel):
    model = shared_onnx(f"deeploy/{rel}/network.onnx")
    dep = engine_matches_vectors(model, onnx_options(model))
    assert {"INTEGER_SOFTMAX", "INTEGER_RMS_NORM", "INTEGER_NO_NORM"} & {layer.op for layer in dep.graph.layers}


# ---- the arithmetic, one value at a time in Python integers ---------------------------------

def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def softmax_row(row, coeffA, coeffB, coeffC, log2, n_levels) -> list[int]:
    """The unsigned outputs' low bytes."""
    top = max(row)
    ys = []
    for v in row:
        d = v - top
        z = min(_trunc_div(-d, log2), 31)
        p = d + z * log2
        ys.append(((coeffA * (p + coeffB) ** 2 + coeffC) % 2 ** 64 >> z) % 2 ** 32)
    total = sum(ys) % 2 ** 32
    return [((y * (n_levels - 1)) % 2 ** 32 // total if total else 0) % 256 for y in ys]


def rms_norm_row(row, weights, log2_d) -> list[int]:
    root = math.isqrt(sum(v * v for v in row) // len(row) + 1)
    return [min(127, max(-128, _trunc_div(v * w, root) >> log2_d)) for v, w in zip(row, weights)]


def no_norm_value(x: int, w: int, b: int, mul: int, log2_d: int) -> int:
    r = ((x * w + b) * mul >> log2_d) & 0xFF
    return r - 256 if r > 127 else r


def _rows(x: np.ndarray, outer: int, depth: int, inner: int):
    v = x.reshape(outer, depth, inner)
    return [(o, i, [int(t) for t in v[o, :, i]]) for o in range(outer) for i in range(inner)]


EDGE_ROWS = [[-128] * 7, [127] * 7, [-128, 127, -128, 127, 0, 1, -1], [127, -128, -128, -128, -128, -128, -128],
             [0, -1, -2, -3, -96, -97, -100],
             [0, 0, 0, -2, -1, -1, -1]]  # the last softmax's exponentials 1, 1, 1, 2^32 - 3, 0, 0, 0: a zero sum
SOFTMAX_PARAMS = [
    DEEPLOY_SOFTMAX,
    dict(coeffA=3, coeffB=-20, coeffC=-5000, log2=3, n_levels=16),  # z clamped at 31; negative terms wrap
    dict(coeffA=1, coeffB=0, coeffC=2 ** 40 + 7, log2=2, n_levels=2),  # exponentials past 32 bits
    dict(coeffA=-1, coeffB=0, coeffC=1, log2=7, n_levels=256),  # a zero sum
]


def _edge_inputs(inner: int, seed: int) -> np.ndarray:
    """The edge rows (depth 7) at every position of the inner axis, then random rows."""
    rng = np.random.default_rng(seed)
    rows = [np.array(r) for r in EDGE_ROWS] + [rng.integers(-128, 128, 7) for _ in range(3)]
    return np.stack([np.stack([rows[(j + i) % len(rows)] for i in range(inner)], axis=1) for j in range(len(rows))])


@pytest.mark.parametrize("params", SOFTMAX_PARAMS, ids=["deeploy", "clamped", "wide", "zero_sum"])
@pytest.mark.parametrize("inner", [1, 3])
def test_softmax_executor_on_edges(params, inner):
    x = _edge_inputs(inner, 1).astype(np.int8)
    k = K.IntSoftmax(x.shape[0], 7, inner, *(params[n] for n in ("coeffA", "coeffB", "coeffC", "log2", "n_levels")))
    y = golden._int_softmax(k, x).astype(np.int64) + 128
    for o, i, row in _rows(x, x.shape[0], 7, inner):
        assert list(y[o, :, i]) == softmax_row(row, **params), (o, i, row)


@pytest.mark.parametrize("log2_d, scale", [(16, 3_957_066), (12, 1 << 20), (0, -3)])
@pytest.mark.parametrize("inner", [1, 3])
def test_rms_norm_executor_on_edges(log2_d, scale, inner):
    x = _edge_inputs(inner, 2).astype(np.int8)
    w = (np.arange(7) - 3) * scale
    y = golden._int_rms_norm(K.IntRmsNorm(x.shape[0], 7, inner, log2_d), x, w.astype(np.int32))
    for o, i, row in _rows(x, x.shape[0], 7, inner):
        assert list(y[o, :, i]) == rms_norm_row(row, w.tolist(), log2_d), (o, i, row)


def test_no_norm_executor_wraps_and_broadcasts():
    rng = np.random.default_rng(3)
    x = np.concatenate([np.full((1, 2, 3, 4), -128), np.full((1, 2, 3, 4), 127),
                        rng.integers(-128, 128, (1, 2, 3, 4))], axis=1).astype(np.int8)  # (1, 6, 3, 4)
    w = rng.integers(-128, 128, (1, 1, 3, 4)).astype(np.int8)
    b = rng.integers(-70000, 70000, (1, 6, 1, 1)).astype(np.int32)
    out = np.empty(x.shape, x.dtype)
    k = K.IntNoNorm(K._broadcast(*(K.Tensor("", a.shape, "int8") for a in (x, w, out)), ""),
                    K._broadcast(*(K.Tensor("", a.shape, "int8") for a in (x, b, out)), "").b_strides, 4000, 10)
    y = golden._int_no_norm(k, x, w, b)
    want = [[no_norm_value(int(x[0, c, h, v]), int(w[0, 0, h, v]), int(b[0, c, 0, 0]), 4000, 10)
             for h in range(3) for v in range(4)] for c in range(6)]
    assert y.reshape(6, 12).tolist() == want
    assert (y.astype(np.int64) != ((x.astype(np.int64) * w + b) * 4000 >> 10)).any()  # it did wrap


# ---- the C engine on a graph of all three ----------------------------------------------------

def _attrs(**values) -> dict:
    """Deeploy's attributes: one-element float tensors."""
    return {k: numpy_helper.from_array(np.array([v], np.float32), k) for k, v in values.items()}


def norms_model(path, shape=(1, 3, 4, 7), softmaxes=tuple(SOFTMAX_PARAMS), seed=0, rms=(1 << 12, 1 << 20),
                nonorm=(1 << 10, 4000), axis=None):
    """One input; outputs: an iSoftmax of each of ``softmaxes`` (``axis``: the first one's), iRMSNorm
    (D, weight scale ``rms``), iNoNorm (D, mul ``nonorm``; weights per (H, W), a bias per channel)."""
    rng = np.random.default_rng(seed)
    depth = shape[-1]
    w = (np.arange(depth) - depth // 2) * rms[1]
    nw = rng.integers(-128, 128, shape[-2:]).astype(np.float32)
    nb = rng.integers(-70000, 70000, (shape[1],) + (1,) * (len(shape) - 2)).astype(np.float32)
    inits = [numpy_helper.from_array(w.astype(np.float32), "rms_w"), numpy_helper.from_array(nw, "nonorm_w"),
             numpy_helper.from_array(nb, "nonorm_b")]
    extra = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("iSoftmax", ["x"], [f"soft{j}"], **_attrs(**params), **(extra if j == 0 else {}))
             for j, params in enumerate(softmaxes)]
    nodes += [helper.make_node("iRMSNorm", ["x", "rms_w"], ["rms"], D=rms[0], n_levels=256),
              helper.make_node("iNoNorm", ["x", "nonorm_w", "nonorm_b"], ["nonorm"],
                               **_attrs(D=nonorm[0], mul=nonorm[1], n_levels=256))]
    outs = [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, shape) for n in nodes]
    graph = helper.make_graph(nodes, "norms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w, nw, nb


def test_engine_on_edges(tmp_path):
    path = tmp_path / "norms.onnx"
    w, nw, nb = norms_model(path)
    dep = deploy(path, Options(input_type="int8"))
    rng = np.random.default_rng(4)
    samples = [np.tile(np.array(r), (1, 3, 4, 1)) for r in EDGE_ROWS] + [rng.integers(-128, 128, (1, 3, 4, 7))]
    ins = [[to_engine_input(dep.graph, 0, s)] for s in samples]
    outs, _ = run_engine(build_engine(dep), ins)
    for x, got, inp in zip(samples, outs, ins):
        ours, _ = golden.run(dep.graph, inp, dep.kernels)
        for a, b in zip(got, ours):
            assert np.array_equal(a.astype(np.int64), b.astype(np.int64))
        rows = x.reshape(-1, 7).tolist()
        for j, params in enumerate(SOFTMAX_PARAMS):
            assert got[j].reshape(-1, 7).tolist() == [softmax_row(r, **params) for r in rows], params
        assert got[-2].reshape(-1, 7).tolist() == [rms_norm_row(r, w.tolist(), 12) for r in rows]
        want = [no_norm_value(int(x[0, c, h, v]), int(nw[h, v]), int(nb[c, 0, 0]), 4000, 10)
                for c in range(3) for h in range(4) for v in range(7)]
        assert got[-1].reshape(-1).tolist() == want


# ---- what the kernels' widths cannot hold ------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (dict(softmaxes=[dict(DEEPLOY_SOFTMAX, log2=1)]), "log2 1"),
    (dict(softmaxes=[dict(DEEPLOY_SOFTMAX, coeffB=50000)]), "overflow the kernel's int32 polynomial"),
    (dict(softmaxes=[dict(DEEPLOY_SOFTMAX, n_levels=512)]), "n_levels 512"),
    (dict(softmaxes=[dict(DEEPLOY_SOFTMAX, coeffC=0.5)]), "'coeffC' is 0.5, not an integer"),
    (dict(rms=(1000, 1)), "D 1000 is not a power of two"),
    (dict(rms=(1 << 12, 1 << 23)), "weights beyond 2"),
    (dict(nonorm=(1 << 10, 40000)), "overflow the kernel's int32 arithmetic"),
    (dict(axis=1), "over axis 1"),
])
def test_refused(tmp_path, change, message):
    path = tmp_path / "norms.onnx"
    norms_model(path, **change)
    with pytest.raises(UnsupportedOperator, match=message):
        K.lower_graph(read_onnx(path, input_type="int8"))


def test_norms_take_signed_values_only(tmp_path):
    path = tmp_path / "norms.onnx"
    norms_model(path)
    with pytest.raises(UnsupportedOperator, match="iRMSNorm of an unsigned 8-bit activation"):
        read_onnx(path, input_type="uint8")
