"""The onnxruntime reference multiplies uint8 activations by int8 weights exactly on every CPU.

On x86 without VNNI onnxruntime's default u8 x s8 kernels saturate each pair of products to
int16; the engines never do, so such a reference would differ from them by CPU. Each graph here
is one integer product whose pairs pass 32767, checked against int32 arithmetic with the
requantization the engines use (float32 scale, rounding half to even)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
import onnx
from onnx import TensorProto, helper, numpy_helper

from deployer.reference import run_onnxruntime

K, N = 16, 4
Y_SCALE, Y_ZP = 4096.0, 128  # a power of two: the float32 scale is exact


def operands(activations: str):
    rng = np.random.default_rng(7)
    x = rng.integers(200, 256, (1, K)).astype(np.uint8)
    w = rng.choice(np.array([-127, -120, 120, 127], np.int8), (K, N))
    if activations == "int8":  # stored x - 128 with zero point -128: the same values
        return (x.astype(np.int16) - 128).astype(np.int8), -128, w
    return x, 0, w


def exact(x: np.ndarray, x_zp: int, w: np.ndarray) -> np.ndarray:
    acc = (x.astype(np.int64) - x_zp) @ w.astype(np.int64)
    y = np.rint(acc.astype(np.float32) * np.float32(1 / Y_SCALE)) + Y_ZP
    return np.clip(y, 0, 255).astype(np.uint8)


def saturates(x: np.ndarray, x_zp: int, w: np.ndarray) -> bool:
    """Whether a u8 x s8 kernel summing adjacent products in int16 would clip this product."""
    u = (x.astype(np.int64) - x_zp).reshape(-1)  # the uint8 values such a kernel multiplies
    pairs = u[0::2, None] * w[0::2].astype(np.int64) + u[1::2, None] * w[1::2].astype(np.int64)
    return bool((np.abs(pairs) > 32767).any())


def save(tmp_path, nodes, inits, x: np.ndarray, contrib: bool = False):
    x_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("x", x_type, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)] if contrib else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    path = tmp_path / "product.onnx"
    onnx.save(model, path)
    return path


def qparams(x_zp: int, x_dtype) -> dict[str, np.ndarray]:
    return {"xs": np.array(1.0, np.float32), "xz": np.array(x_zp, x_dtype), "ws": np.full(N, 1.0, np.float32),
            "wz": np.zeros(N, np.int8), "ys": np.array(Y_SCALE, np.float32), "yz": np.array(Y_ZP, np.uint8)}


@pytest.mark.parametrize("op", ["QLinearMatMul", "QGemm", "QLinearConv"])
def test_qoperator_product_is_exact(tmp_path, op):
    x, x_zp, w = operands("uint8")
    assert saturates(x, x_zp, w)
    inits = qparams(x_zp, np.uint8)
    feed = x
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if op == "QLinearMatMul":
        inits["w"] = w
        node = helper.make_node(op, names, ["y"])
    elif op == "QGemm":
        inits["w"] = np.ascontiguousarray(w.T)
        node = helper.make_node(op, names[:6] + [""] + names[6:], ["y"], domain="com.microsoft", transB=1)
    else:  # a 1x1 convolution over K channels
        inits["w"] = np.ascontiguousarray(w.T).reshape(N, K, 1, 1)
        feed = x.reshape(1, K, 1, 1)
        node = helper.make_node(op, names, ["y"])
    path = save(tmp_path, [node], inits, feed, contrib=op == "QGemm")
    got = run_onnxruntime(path, [feed])[0]
    assert np.array_equal(got.reshape(1, N), exact(x, x_zp, w))


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_qdq_product_is_exact(tmp_path, activations):
    """DequantizeLinear -> MatMul -> QuantizeLinear, which onnxruntime fuses into its integer kernel
    (int8 activations too: on x86 it stores them as uint8 first)."""
    x, x_zp, w = operands(activations)
    assert saturates(x, x_zp, w)
    inits = qparams(x_zp, x.dtype) | {"w": w, "ws": np.array(1.0, np.float32), "wz": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("MatMul", ["xf", "wf"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    real = x.astype(np.float32) - x_zp  # x_scale 1: the float input QuantizeLinear turns back into x
    path = save(tmp_path, nodes, inits, real)
    got = run_onnxruntime(path, [real])[0]
    assert np.array_equal(got, exact(x, x_zp, w))
