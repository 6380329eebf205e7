"""Integer transformer blocks as Deeploy's quantization flow exports them (integer values carried
in float tensors, RequantShift after every product, its integer softmax and norms), built here with
random weights: an attention block, an encoder layer and a LLaMA-style decoder block. onnxruntime
cannot run these operators; the golden executor, checked against Deeploy's own kernel tests, is
their reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class IntegerGraph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base: str, dtype=np.float32) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr).astype(dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], domain: str = "", **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, domain=domain, **attrs))
        return out

    def requant(self, x: str, mul: int, shift: int = 16, add: int = 0) -> str:
        """RequantShift to signed 8 bits: clip(round((x * mul + add) / 2^shift))."""
        return self.op("RequantShift", [x, self.const(np.array(mul), "mul"), self.const(np.array(add), "add")],
                       div=helper.make_tensor("div", TensorProto.FLOAT, [], [float(1 << shift)]),
                       n_levels_out=helper.make_tensor("n", TensorProto.FLOAT, [], [256.0]),
                       signed=helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]))

    def linear(self, x: str, fin: int, fout: int, mul: int) -> str:
        """MatMul by int8 weights, an int32 bias, RequantShift (Deeploy's integerized linear layer)."""
        w = self.rng.integers(-16, 17, (fin, fout))
        y = self.op("MatMul", [x, self.const(w, "w")])
        y = self.op("Add", [self.const(self.rng.integers(-2000, 2000, fout), "b"), y])
        return self.requant(y, mul)

    def softmax(self, x: str) -> str:
        """Deeploy's integer softmax (its Attention kernel test's constants)."""
        f = lambda v: helper.make_tensor("c", TensorProto.FLOAT, [], [float(v)])  # noqa: E731
        return self.op("iSoftmax", [x], coeffA=f(1), coeffB=f(173), coeffC=f(15599), log2=f(127), n_levels=f(256))

    def rmsnorm(self, x: str, dim: int) -> str:
        """Deeploy's integer RMSNorm (its kernel test's constants)."""
        return self.op("iRMSNorm", [x, self.const(np.full(dim, 3957066.0), "g")], D=65536, n_levels=256)

    def heads(self, x: str, seq: int, heads: int, perm) -> str:
        d = self.op("Reshape", [x, self.const(np.array([1, seq, heads, -1]), "shape", np.int64)])
        return self.op("Transpose", [d], perm=list(perm))

    def attention(self, x: str, seq: int, dim: int, heads: int) -> str:
        q = self.heads(self.linear(x, dim, dim, 257), seq, heads, (0, 2, 1, 3))
        k = self.heads(self.linear(x, dim, dim, 257), seq, heads, (0, 2, 3, 1))
        v = self.heads(self.linear(x, dim, dim, 257), seq, heads, (0, 2, 1, 3))
        scores = self.softmax(self.requant(self.op("MatMul", [q, k]), 514))
        ctx = self.requant(self.op("MatMul", [scores, v]), 257)
        ctx = self.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.const(np.array([1, seq, dim]), "shape", np.int64)])
        return self.linear(ctx, dim, dim, 514)

    def residual(self, a: str, b: str) -> str:
        """Add of two 8-bit branches, requantized back to 8 bits."""
        return self.requant(self.op("Add", [self.requant(a, 32768), self.requant(b, 32768)]), 65536)

    def save(self, path: Path, inputs: dict, output: str, out_shape) -> Path:
        graph = helper.make_graph(
            self.nodes, "integer_transformer",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.save(model, path)
        return path


def attention_block(path: Path, seq: int = 16, dim: int = 32, heads: int = 4, seed: int = 0) -> Path:
    """Q, K and V projections, scores per head through the integer softmax, the context, the output
    projection (Deeploy's Attention kernel test, at other sizes)."""
    g = IntegerGraph(seed)
    return g.save(path, {"x": [1, seq, dim]}, g.attention("x", seq, dim, heads), [1, seq, dim])


def encoder_layer(path: Path, seq: int = 16, dim: int = 32, heads: int = 4, seed: int = 1) -> Path:
    """Attention with its residual, then a two-layer MLP (ReLU) with its residual."""
    g = IntegerGraph(seed)
    h = g.residual("x", g.attention("x", seq, dim, heads))
    mlp = g.linear(g.op("Relu", [g.linear(h, dim, 2 * dim, 1028)]), 2 * dim, dim, 257)
    return g.save(path, {"x": [1, seq, dim]}, g.residual(h, mlp), [1, seq, dim])


def llama_block(path: Path, seq: int = 16, dim: int = 32, heads: int = 4, seed: int = 2) -> Path:
    """A LLaMA-style decoder block: RMSNorm, attention, residual; RMSNorm, MLP, residual."""
    g = IntegerGraph(seed)
    h = g.residual("x", g.attention(g.rmsnorm("x", dim), seq, dim, heads))
    mlp = g.linear(g.op("Relu", [g.linear(g.rmsnorm(h, dim), dim, 2 * dim, 1028)]), 2 * dim, dim, 257)
    return g.save(path, {"x": [1, seq, dim]}, g.residual(h, mlp), [1, seq, dim])
