"""Quantized ONNX graphs from ``onnxruntime.quantization.quantize_static`` into the IR: the QDQ
format (QuantizeLinear/DequantizeLinear around float ops) and the QOperator format (QLinearConv,
QLinearMatMul, QGemm, QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat).

Every float op sits between DequantizeLinear nodes (its inputs: int8 activations, int8 weights,
int32 biases) and one QuantizeLinear (its output), so each becomes the int8 IR layer of the same
name with the scales and zero points of those nodes. Convolutions and matrix products requantize
the way onnxruntime runs them (``float_requant``: float32 scale, rounding half to even), so they
match it bit for bit; the other layers keep TFLite's integer kernels. uint8
activations (QUInt8) are stored as int8 with the zero point less 128. The graph keeps float
inputs and outputs, quantized and dequantized at its edges by the model's own parameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .cut import CutSpec
from .errors import ModelFormatError, UnsupportedOperator
from .ir import Elementwise, name_text, FullyConnected, Graph, LeakyRelu, Mean, NoAttrs, Pool2D, Quant, Softmax, Source, Transpose
from .onnx_cut import cut_onnx
from .onnx_common import _IR_AXES, STANDARD_DOMAINS, OnnxGraphBuilder, Value, _opset, ir_layout

FLOAT_OPS = ("Conv", "Gemm", "MatMul", "Add", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape",
             "Softmax", "LeakyRelu")
ACTIVATION_OPS = ("Relu", "Clip")
# data movement on the quantized values themselves (the shared builder's handlers); the
# QuantizeLinear after each requantizes where its scale is not the input's
GLUE_OPS = ("Transpose", "Slice", "Split", "Concat", "GlobalMaxPool", "Resize", "Gather", "Squeeze", "Unsqueeze", "Expand")
# QOperator format (quantize_static with QuantFormat.QOperator): the quantized ops themselves
QLINEAR_OPS = ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool",
               "QLinearConcat", "QLinearSoftmax", "QLinearLeakyRelu")
# onnxruntime's contrib ops (all of QLINEAR_OPS but the two standard ones), and its own
# QuantizeLinear / DequantizeLinear, which its quantizer writes on request, the same for 8 bits
CONTRIB_DOMAIN = "com.microsoft"
DOMAINS = {**{op: STANDARD_DOMAINS for op in (*FLOAT_OPS, *ACTIVATION_OPS, *GLUE_OPS, "Constant", "QLinearConv",
                                              "QLinearMatMul")},
           **{op: (CONTRIB_DOMAIN,) for op in QLINEAR_OPS if op not in ("QLinearConv", "QLinearMatMul")},
           "QuantizeLinear": (*STANDARD_DOMAINS, CONTRIB_DOMAIN), "DequantizeLinear": (*STANDARD_DOMAINS, CONTRIB_DOMAIN)}


@dataclass(frozen=True)
class QConst:
    """A constant seen through its DequantizeLinear: integer values, scales, zero points, axis."""
    name: str
    data: np.ndarray
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int


def read_qdq(path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str,
             cut: CutSpec = CutSpec()) -> Graph:
    reader = QdqReader(path, model, input_layout, output_layout)
    graph = reader.read()
    return cut_onnx(graph, path.name, reader.values, reader.integer_edges, cut) if cut else graph


class QdqReader(OnnxGraphBuilder):
    DOMAINS = DOMAINS

    def __init__(self, path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str):
        super().__init__(path, model, input_layout, output_layout)
        self.float_inputs: dict[str, tuple[int, list[int]]] = {}  # graph input -> (tensor, dims)
        self.dq_consts: dict[str, QConst] = {}
        self.float_outputs: dict[str, tuple[Value, Quant]] = {}  # graph output -> its int8 value
        self.integer_edges: dict[str, str] = {}  # float graph edge -> the quantized value beside it

    def read(self) -> Graph:
        for inp in self.g.input:
            if inp.name in self.consts:
                continue
            if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
                raise UnsupportedOperator(f"{self.path.name}: graph input '{inp.name}' of a QDQ graph must be "
                                          f"float32 (quantized by the graph's first QuantizeLinear)")
            dims = self.input_dims(inp)
            self.float_inputs[inp.name] = (self.engine_input(inp.name, dims, "float32", None), dims)
        for i, node in enumerate(self.nodes):
            if i in self.done or node.op_type == "Constant":
                continue
            if node.op_type == "QuantizeLinear":
                self.run_node(i, node, self._quantize)
            elif node.op_type == "DequantizeLinear":
                self.run_node(i, node, self._dequantize)
            elif node.op_type in FLOAT_OPS:
                self.run_node(i, node, self._float_op)
            elif node.op_type in QLINEAR_OPS:
                self.run_node(i, node, self._qlinear)
            elif node.op_type in GLUE_OPS:
                self.run_node(i, node, self.glue_handlers()[node.op_type])
            else:
                raise UnsupportedOperator(f"{self.where(i)}: operator {node.op_type} is not supported in a quantized "
                                          f"graph (supported: {', '.join(FLOAT_OPS + ACTIVATION_OPS + GLUE_OPS)} "
                                          f"between QuantizeLinear/DequantizeLinear, and {', '.join(QLINEAR_OPS)})")
            self.done.add(i)
        outputs, perms, shapes = [], [], []
        for name in self.graph_outputs:
            if name not in self.float_outputs:
                raise UnsupportedOperator(f"{self.path.name}: graph output '{name}' is not produced by a "
                                          f"DequantizeLinear (the engine's outputs are dequantized)")
            v, quant = self.float_outputs[name]
            shapes.append(self.model_shape(v))
            t, perm = self.from_nhwc(v, name)
            out = self.add_tensor(name, self.tensors[t].shape, "float32", None)
            self.add_layer("DEQUANTIZE", [t], [out], NoAttrs(), name)
            outputs.append(out)
            perms.append(perm)
        source = Source("onnx-qdq", self.input_layout, self.output_layout, tuple(self.input_perms), tuple(perms),
                        tuple(self.notes), tuple(self.input_shapes), tuple(shapes))
        return Graph(name_text(self.path.stem), tuple(self.tensors), tuple(self.layers),
                     tuple(self.input_tensors.values()), tuple(outputs), source)

    # ---- quantization parameters --------------------------------------------------------

    def qparams(self, i: int, node) -> tuple[tuple[float, ...], tuple[int, ...], int, str]:
        """(scales, zero points, axis, stored dtype) of a QuantizeLinear/DequantizeLinear."""
        scale = self.const(node.input[1], i, "the scale").astype(np.float64).reshape(-1)
        zp_arr = self.const(node.input[2], i, "the zero point") if len(node.input) > 2 and node.input[2] \
            else np.zeros(scale.shape, np.uint8)
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ModelFormatError(f"{self.where(i)}: scales must be positive, got {scale[:4].tolist()}")
        dtype = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.int32): "int32"}.get(zp_arr.dtype)
        if dtype is None:
            why = ("; onnxruntime's CPU kernels run 16-bit QDQ groups in float32 (a Conv or MatMul as an MLAS float "
                   "GEMM, whose summation order an integer engine cannot reproduce bit for bit): quantize the "
                   "activations to 8 bits, or convert to TFLite's 16x8") if zp_arr.dtype in (np.int16, np.uint16) else ""
            raise UnsupportedOperator(f"{self.where(i)}: {zp_arr.dtype} quantization (supported: int8, uint8, "
                                      f"int32 biases){why}")
        zp = zp_arr.astype(np.int64).reshape(-1)
        if zp.size != scale.size:
            raise ModelFormatError(f"{self.where(i)}: {scale.size} scales but {zp.size} zero points")
        return tuple(float(s) for s in scale), tuple(int(z) for z in zp), int(self.attrs(node).get("axis", 1)), dtype

    def activation_quant(self, i: int, node) -> Quant:
        scale, zp, _, dtype = self.qparams(i, node)
        if len(scale) != 1 or dtype == "int32":
            raise UnsupportedOperator(f"{self.where(i)}: an activation needs one int8/uint8 scale and zero point")
        return Quant(scale, (zp[0] - 128,) if dtype == "uint8" else zp)

    # ---- nodes ------------------------------------------------------------------------------

    def concat_inputs(self, i: int, node, xs: list) -> list:
        """Each input requantized to the output's quantization (QLinearConcat's own, or the
        QuantizeLinear's after a Concat) where its own differs: onnxruntime's arithmetic, as
        _quantize's (QLinearConcat's lookup table dequantizes and quantizes the same way)."""
        if node.op_type == "QLinearConcat":
            q = self.quantized(i, node, 0)
        else:
            j = self.single_consumer(node.output[0])
            if j is None or self.nodes[j].op_type != "QuantizeLinear":
                raise UnsupportedOperator(f"{self.where(i)}: its output is not quantized by one QuantizeLinear")
            q = self.activation_quant(j, self.nodes[j])
        out = []
        for n, x in enumerate(xs):
            xt = self.tensors[x.tensor]
            if xt.quant != q:
                name = f"{node.output[0]}/in{n}_requantized"
                t = self.add_tensor(name, xt.shape, "int8", q)
                self.add_layer("QUANTIZE", [x.tensor], [t], NoAttrs(), name)
                x = Value(t, x.rank)
            out.append(x)
        return out

    def _quantize(self, i: int, node) -> None:
        src = node.input[0]
        if src in self.values:  # after data movement: the same values, or requantized as onnxruntime does
            x = self.values[src]
            xt, q = self.tensors[x.tensor], self.activation_quant(i, node)
            if q == xt.quant:
                self.values[node.output[0]] = x
                return
            out = self.add_tensor(node.output[0], xt.shape, "int8", q)
            self.add_layer("QUANTIZE", [x.tensor], [out], NoAttrs(), node.output[0])
            self.values[node.output[0]] = Value(out, x.rank)
            return
        if src not in self.float_inputs:
            raise UnsupportedOperator(f"{self.where(i)}: quantizes '{src}', which no supported op produces")
        t, dims = self.float_inputs[src]
        self.integer_edges.setdefault(src, node.output[0])
        q = self.activation_quant(i, node)
        out = self.add_tensor(node.output[0], self.tensors[t].shape, "int8", q)
        self.add_layer("QUANTIZE", [t], [out], NoAttrs(), node.output[0])
        self.values[node.output[0]] = Value(self.to_nhwc(out, node.output[0], dims), len(dims))

    def _dequantize(self, i: int, node) -> None:
        src, out = node.input[0], node.output[0]
        if src in self.consts:
            scale, zp, axis, dtype = self.qparams(i, node)
            self.dq_consts[out] = QConst(src, self.consts[src], scale, zp, axis)
            return
        v = self.value(src, i)
        if out in self.graph_outputs:
            self.float_outputs[out] = (v, self.tensors[v.tensor].quant)
            self.integer_edges[out] = src
        self.values[out] = v  # the float value is the int8 one, seen through its scale

    def blended_output(self, i: int, node) -> tuple[Quant, str]:
        """A linear Resize between DequantizeLinear and QuantizeLinear blends the dequantized values
        in float32: its output takes the QuantizeLinear's quantization (onnxruntime keeps that
        Resize in float; a QOperator graph's Resize on the quantized values runs its integer kernel)."""
        j = self.single_consumer(node.output[0])
        if j is None or self.nodes[j].op_type != "QuantizeLinear":
            raise UnsupportedOperator(f"{self.where(i)}: a linear Resize of quantized values (supported: between "
                                      f"DequantizeLinear and QuantizeLinear, as QDQ graphs have it)")
        self.done.add(j)
        return self.activation_quant(j, self.nodes[j]), self.nodes[j].output[0]

    def output_quant(self, i: int, node) -> tuple[Quant, str, str, list[int]]:
        """The QuantizeLinear after a float op (through a Relu or Clip): its quantization, the fused
        activation, the quantized value's name and the nodes taken."""
        cur, activation, taken = node.output[0], "NONE", []
        while True:
            j = self.single_consumer(cur)
            if j is None:
                raise UnsupportedOperator(f"{self.where(i)}: its output is not quantized by one QuantizeLinear "
                                          f"(a float value between layers)")
            nxt = self.nodes[j]
            if nxt.op_type == "QuantizeLinear":
                taken.append(j)
                return self.activation_quant(j, nxt), activation, nxt.output[0], taken
            if nxt.op_type == "Relu" and activation == "NONE":
                activation = "RELU"
            elif nxt.op_type == "Clip" and activation == "NONE":
                a = self.attrs(nxt)
                lo = a.get("min", float(self.consts[nxt.input[1]]) if len(nxt.input) > 1 and nxt.input[1] in self.consts else None)
                hi = a.get("max", float(self.consts[nxt.input[2]]) if len(nxt.input) > 2 and nxt.input[2] in self.consts else None)
                activation = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}.get((lo, hi))
                if activation is None:
                    raise UnsupportedOperator(f"{self.where(j)}: Clip({lo}, {hi}) (supported: 0..6, -1..1, Relu)")
            else:
                raise UnsupportedOperator(f"{self.where(i)}: followed by {nxt.op_type} before its QuantizeLinear")
            taken.append(j)
            cur = nxt.output[0]

    def qconst(self, name: str, i: int, what: str) -> QConst:
        if name not in self.dq_consts:
            raise UnsupportedOperator(f"{self.where(i)}: {what} '{name}' must be a quantized constant "
                                      f"(a DequantizeLinear of an initializer)")
        return self.dq_consts[name]

    def weights(self, name: str, i: int) -> QConst:
        w = self.qconst(name, i, "the weights")
        if w.data.dtype != np.int8 or any(w.zero_point):
            raise UnsupportedOperator(f"{self.where(i)}: weights '{w.name}' must be int8 with zero point 0 "
                                      f"(symmetric), got {w.data.dtype} with zero points {sorted(set(w.zero_point))[:4]}")
        return w

    def bias(self, b: QConst | None, i: int, units: int, x: Value, w: QConst) -> int:
        if b is None:
            return -1
        if b.data.dtype != np.int32 or b.data.size != units:
            raise UnsupportedOperator(f"{self.where(i)}: bias '{b.name}' must be {units} int32 values")
        # the integer kernels add the bias to the accumulator, whose scale is the input's times the
        # weights': another scale (onnxruntime then dequantizes the bias in float) has no integer form
        want = np.float32(self.tensors[x.tensor].quant.scale[0]) * np.asarray(w.scale, np.float32)
        have = np.broadcast_to(np.asarray(b.scale, np.float32), want.shape)
        if not np.allclose(have, want, rtol=1e-6, atol=0):
            raise UnsupportedOperator(f"{self.where(i)}: bias '{b.name}' has scale {float(have[0]):g}, not the input's "
                                      f"times the weights' ({float(want[0]):g}); the integer kernels add it to "
                                      f"their accumulator at that scale only")
        return self.add_tensor(b.name, (units,), "int32", Quant(b.scale, b.zero_point), b.data.reshape(units))

    def quantized(self, i: int, node, k: int) -> Quant:
        """The activation quantization given by ``node``'s inputs k (scale) and k + 1 (zero point)."""
        scale = self.const(node.input[k], i, "the scale").astype(np.float64).reshape(-1)
        zp = self.const(node.input[k + 1], i, "the zero point")
        if scale.size != 1 or zp.size != 1 or zp.dtype not in (np.int8, np.uint8) or not scale[0] > 0:
            raise UnsupportedOperator(f"{self.where(i)}: an activation needs one positive scale and one int8/uint8 "
                                      f"zero point")
        return Quant((float(scale[0]),), (int(zp.reshape(-1)[0]) - (128 if zp.dtype == np.uint8 else 0),))

    def operand(self, i: int, node, k: int):
        """Input k of a QLinear op with its scale and zero point (inputs k + 1, k + 2): an activation,
        checked to carry that quantization, or a quantized constant."""
        name = node.input[k]
        if name in self.consts:
            scale = self.const(node.input[k + 1], i, "the scale").astype(np.float64).reshape(-1)
            zp = self.const(node.input[k + 2], i, "the zero point").astype(np.int64).reshape(-1)
            return QConst(name, self.consts[name], tuple(map(float, scale)), tuple(map(int, zp)), 0)
        v = self.value(name, i)
        if self.tensors[v.tensor].quant != self.quantized(i, node, k + 1):
            raise UnsupportedOperator(f"{self.where(i)}: '{name}' arrives with another quantization than its "
                                      f"producer's (a requantization between layers)")
        return v

    def _qlinear(self, i: int, node) -> None:
        op, ins = node.op_type, node.input
        out = node.output[0]
        if op == "QLinearConv":  # x, xs, xzp, w, ws, wzp, ys, yzp[, B]
            w, quant = self.operand(i, node, 3), self.quantized(i, node, 6)
            b = self.qlinear_bias(i, node, 8, w)
            x, extra = self.input_with_pads(ins[0], i)
            self.operand(i, node, 0)
            self.conv(i, node, x, extra, self.checked_weights(w, i), b, quant, "NONE", out)
        elif op == "QLinearMatMul":  # a, as, azp, b, bs, bzp, ys, yzp
            w = self.operand(i, node, 3)
            self.fc(i, node, self.operand(i, node, 0), self.checked_weights(w, i), None, self.quantized(i, node, 6),
                    "NONE", out)
        elif op == "QGemm":  # A, as, azp, B, bs, bzp[, C, ys, yzp]
            if len(ins) < 9 or not ins[7]:
                raise UnsupportedOperator(f"{self.where(i)}: QGemm with a float output (no y_scale)")
            w = self.operand(i, node, 3)
            self.fc(i, node, self.operand(i, node, 0), self.checked_weights(w, i), self.qlinear_bias(i, node, 6, w),
                    self.quantized(i, node, 7), "NONE", out)
        elif op == "QLinearAdd":  # A, as, azp, B, bs, bzp, cs, czp
            self.add(i, [self.operand(i, node, 0), self.operand(i, node, 3)], self.quantized(i, node, 6), "NONE", out)
        elif op == "QLinearConcat":  # ys, yzp, then (X, xs, xzp) per input
            if len(ins) < 5 or (len(ins) - 2) % 3:
                raise ModelFormatError(f"{self.where(i)}: QLinearConcat takes Y's scale and zero point, then "
                                       f"(X, scale, zero point) per input; got {len(ins)} inputs")
            for k in range(2, len(ins), 3):
                if isinstance(self.operand(i, node, k), QConst):
                    raise UnsupportedOperator(f"{self.where(i)}: QLinearConcat of a constant '{ins[k]}'")
            self._concat(i, node)
        elif op in ("QLinearSoftmax", "QLinearLeakyRelu"):  # X, xs, xzp, ys, yzp
            self.unary(i, node, self.operand(i, node, 0), self.quantized(i, node, 3), out)
        else:  # QLinearAveragePool / QLinearGlobalAveragePool: X, xs, xzp, ys, yzp
            if self.attrs(node).get("channels_last", 0):
                raise UnsupportedOperator(f"{self.where(i)}: channels_last pooling")
            self.pool(i, node, self.operand(i, node, 0), self.quantized(i, node, 3), "NONE", out)

    def unary(self, i: int, node, x, quant: Quant, out_name: str) -> None:
        """Softmax / LeakyRelu (QDQ) and QLinearSoftmax / QLinearLeakyRelu (QOperator), with the
        arithmetic of onnxruntime's kernels for them (which its QDQ fusion also runs)."""
        if isinstance(x, QConst):
            raise UnsupportedOperator(f"{self.where(i)}: {node.op_type} of a constant")
        shape = self.tensors[x.tensor].shape
        if node.op_type.endswith("LeakyRelu"):
            alpha = float(self.attrs(node).get("alpha", 0.01))
            return self.emit("LEAKY_RELU", [x.tensor], shape, quant, LeakyRelu(alpha, onnxruntime=True), out_name,
                             x.rank)
        a = self.attrs(node)
        opset = int(a.get("opset", _opset(self.model))) if node.op_type == "QLinearSoftmax" else _opset(self.model)
        axis = int(a.get("axis", -1 if opset >= 13 else 1))
        if not -x.rank <= axis < x.rank:
            raise ModelFormatError(f"{self.where(i)}: axis {axis} of a rank-{x.rank} activation")
        axis %= x.rank
        inner = [d for k, d in enumerate(self.model_shape(x)) if k > axis]
        # the IR reduces its last axis: the model's axis 1 (channels, per pixel: summed in the same
        # order) or its only feature axis; before opset 13 the axis and all after it, which is that
        # axis when the rest are ones
        last = _IR_AXES[x.rank][-1] if x.rank in _IR_AXES else None
        if axis != last or (opset < 13 and any(d != 1 for d in inner)) or x.flat_chw is not None:
            raise UnsupportedOperator(f"{self.where(i)}: {node.op_type} over axis {axis} of a rank-{x.rank} activation "
                                      f"(supported: the channel or feature axis)")
        self.emit("SOFTMAX", [x.tensor], shape, quant, Softmax(1.0, onnxruntime=True), out_name, x.rank)

    def qlinear_bias(self, i: int, node, k: int, w: QConst) -> QConst | None:
        if len(node.input) <= k or not node.input[k]:
            return None
        data = self.const(node.input[k], i, "the bias")
        # no scale of its own: the input's (input 1 of every QLinear form) times the weights'
        x_scale = np.float32(self.const(node.input[1], i, "the input scale").reshape(-1)[0])
        scale = tuple(float(x_scale * np.float32(s)) for s in w.scale)
        return QConst(node.input[k], data, scale, (0,) * len(w.scale), 0)

    def checked_weights(self, w, i: int) -> QConst:
        if not isinstance(w, QConst) or w.data.dtype != np.int8 or any(w.zero_point):
            raise UnsupportedOperator(f"{self.where(i)}: weights must be a constant int8 tensor with zero point 0")
        return w

    def _float_op(self, i: int, node) -> None:
        """A float op between DequantizeLinear nodes and its QuantizeLinear (QDQ), or (QOperator)
        MaxPool / Flatten / Reshape working on quantized values directly."""
        op = node.op_type
        nxt = self.single_consumer(node.output[0])
        feeds_q = nxt is not None and self.nodes[nxt].op_type in ("QuantizeLinear", *ACTIVATION_OPS)
        if op in ("MaxPool", "Flatten", "Reshape") and not feeds_q and node.input[0] in self.values:
            x = self.value(node.input[0], i)
            if op == "MaxPool":
                return self.pool(i, node, x, self.tensors[x.tensor].quant, "NONE", node.output[0])
            return self._flatten(i, node, quantized=True)
        if op in ("Flatten", "Reshape"):
            return self._flatten(i, node)
        quant, activation, out_name, taken = self.output_quant(i, node)
        optional = (lambda k: self.qconst(node.input[k], i, "the bias") if len(node.input) > k and node.input[k]
                    else None)
        if op == "Conv":
            x, extra = self.input_with_pads(node.input[0], i)
            self.conv(i, node, x, extra, self.weights(node.input[1], i), optional(2), quant, activation, out_name)
        elif op in ("Gemm", "MatMul"):
            self.fc(i, node, self.value(node.input[0], i), self.weights(node.input[1], i), optional(2), quant,
                    activation, out_name)
        elif op == "Add":
            self.add(i, [self.dq_consts.get(n) or self.value(n, i) for n in node.input[:2]], quant, activation,
                     out_name)
        elif op in ("Softmax", "LeakyRelu"):
            if activation != "NONE":
                raise UnsupportedOperator(f"{self.where(i)}: {op} followed by an activation before its QuantizeLinear")
            self.unary(i, node, self.value(node.input[0], i), quant, out_name)
        else:
            self.pool(i, node, self.value(node.input[0], i), quant, activation, out_name)
        self.done.update(taken)

    def conv(self, i, node, x: Value, extra, w: QConst, b: QConst | None, quant, activation, out_name) -> None:
        kind, wdata, shape, attrs = self.conv_geometry(i, node, x, w.data, extra)
        axis = 0 if kind == "CONV_2D" else 3
        inputs = [x.tensor, self.add_tensor(w.name, wdata.shape, "int8", Quant(w.scale, w.zero_point, axis), wdata)]
        inputs += [t for t in [self.bias(b, i, shape[3], x, w)] if t >= 0]
        self.emit(kind, inputs, shape, quant, attrs(None, activation, True), out_name, x.rank)

    def fc(self, i, node, x: Value, w: QConst, b: QConst | None, quant, activation, out_name) -> None:
        if x.rank == 3 and node.op_type in ("MatMul", "QLinearMatMul"):
            return self.fc_rows(i, node, x, w, b, quant, activation, out_name)
        data = self.fc_weights(node, self.attrs(node), w.data, x, self.where(i))
        if x.rank != 2 or data.shape[1] != self.tensors[x.tensor].shape[1]:
            raise UnsupportedOperator(f"{self.where(i)}: weights {list(data.shape)} over input "
                                      f"{list(self.tensors[x.tensor].shape)}")
        inputs = [x.tensor, self.add_tensor(w.name, data.shape, "int8", Quant(w.scale, w.zero_point, 0), data)]
        inputs += [t for t in [self.bias(b, i, data.shape[0], x, w)] if t >= 0]
        self.emit("FULLY_CONNECTED", inputs, (self.tensors[x.tensor].shape[0], data.shape[0]), quant,
                  FullyConnected(activation, False, None, True), out_name, 2)

    def fc_rows(self, i, node, x: Value, w: QConst, b: QConst | None, quant, activation, out_name) -> None:
        """MatMul of a rank-3 activation (N, S, D), S vectors, by constant (D, E) weights: one fully
        connected layer over the S rows. The IR holds a rank-3 value as (N, 1, D, S) (NCL as NHWC),
        so the rows are transposed to (S, D) before it and back after."""
        where = self.where(i)
        _, _, depth, rows = self.nhwc(x)
        # per-channel scales along the columns: a DequantizeLinear's axis 1, QLinearMatMul's b_scale per column
        columns = len(w.scale) == 1 or (w.data.ndim == 2 and len(w.scale) == w.data.shape[1]
                                        and (node.op_type == "QLinearMatMul" or w.axis % 2 == 1))
        if w.data.ndim != 2 or w.data.shape[0] != depth or not columns:
            raise UnsupportedOperator(f"{where}: MatMul weights {list(w.data.shape)} for rows of {depth} values")
        data = np.ascontiguousarray(w.data.T)
        units = data.shape[0]
        xt = self.tensors[x.tensor]
        seq = self.add_tensor(f"{out_name}/rows_in", (1, 1, rows, depth), xt.dtype, xt.quant)
        self.add_layer("TRANSPOSE", [x.tensor], [seq], Transpose((0, 1, 3, 2)), f"{out_name}/rows_in")
        inputs = [seq, self.add_tensor(w.name, data.shape, "int8", Quant(w.scale, w.zero_point, 0), data)]
        inputs += [t for t in [self.bias(b, i, units, x, w)] if t >= 0]
        out = self.add_tensor(f"{out_name}/rows", (rows, units), "int8", quant)
        self.add_layer("FULLY_CONNECTED", inputs, [out], FullyConnected(activation, False, None, True), f"{out_name}/rows")
        view = self.add_tensor(f"{out_name}/view", (1, 1, rows, units), "int8", quant)
        self.add_layer("RESHAPE", [out], [view], NoAttrs(), f"{out_name}/view")
        back = self.add_tensor(out_name, (1, 1, units, rows), "int8", quant)
        self.add_layer("TRANSPOSE", [view], [back], Transpose((0, 1, 3, 2)), out_name)
        self.values[out_name] = Value(back, 3)

    def add(self, i, operands: list, quant, activation, out_name) -> None:
        rank = max((v.rank for v in operands if isinstance(v, Value)), default=1)
        values = []
        for v in operands:
            if isinstance(v, QConst):  # a constant operand (MatMul's bias, quantized like an activation)
                if len(v.scale) != 1 or v.data.dtype not in (np.int8, np.uint8):
                    raise UnsupportedOperator(f"{self.where(i)}: constant operand '{v.name}' must be 8-bit, one scale")
                if v.data.ndim > rank:
                    raise UnsupportedOperator(f"{self.where(i)}: constant operand '{v.name}' of rank {v.data.ndim} "
                                              f"for a rank-{rank} activation")
                shift = 128 if v.data.dtype == np.uint8 else 0
                data = ir_layout((v.data.astype(np.int16) - shift).astype(np.int8), rank)
                v = Value(self.add_tensor(v.name, data.shape, "int8", Quant(v.scale, (v.zero_point[0] - shift,)), data),
                          rank)
            values.append(v)
        a, b = (self.tensors[v.tensor] for v in values)
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise UnsupportedOperator(f"{self.where(i)}: operands {list(a.shape)} and {list(b.shape)} do not "
                                      f"broadcast") from None
        self.emit("ADD", [v.tensor for v in values], shape, quant, Elementwise(activation), out_name,
                  max(v.rank for v in values))

    def pool(self, i, node, x: Value, quant, activation, out_name) -> None:
        kernel, stride, pads, shape = self.pool_geometry(i, node, x)
        op = node.op_type.replace("QLinear", "")
        if op == "GlobalAveragePool":
            return self.emit("MEAN", [x.tensor], shape, quant, Mean((1, 2), True, True), out_name, x.rank)
        a = self.attrs(node)
        if op == "AveragePool" and a.get("count_include_pad", 0) and any(pads):
            raise UnsupportedOperator(f"{self.where(i)}: count_include_pad with padding")
        # onnxruntime on x86-64 runs int8 activations as uint8 (zero points + 128): its float
        # average adds that zero point before rounding
        float_avg = 128 if op == "AveragePool" else None
        self.emit("MAX_POOL_2D" if op == "MaxPool" else "AVERAGE_POOL_2D", [x.tensor], shape, quant,
                  Pool2D(kernel, stride, "EXPLICIT", activation, None, pads, float_avg), out_name, x.rank)

    def emit(self, op: str, inputs: list[int], shape, quant: Quant, attrs, name: str, rank: int) -> None:
        out = self.add_tensor(name, shape, "int8", quant)
        self.add_layer(op, inputs, [out], attrs, name)
        self.values[name] = Value(out, rank)

    def _flatten(self, i: int, node, quantized: bool = False) -> None:
        x = self.value(node.input[0], i)
        if quantized:  # QOperator: the quantized value itself is reshaped
            out_name, taken = node.output[0], []
            readers = [self.nodes[u] for u in self.consumers.get(out_name, [])]
            fc_only = bool(readers) and all(n.op_type in ("QLinearMatMul", "QGemm") for n in readers)
            self.values[out_name] = self.flatten_value(i, node, x, fc_only)
            return
        quant, activation, out_name, taken = self.output_quant(i, node)
        if activation != "NONE" or quant != self.tensors[x.tensor].quant:
            raise UnsupportedOperator(f"{self.where(i)}: a reshape that changes the quantization")
        readers = [self.nodes[u] for u in self.consumers.get(out_name, [])]
        fc_only = bool(readers) and all(
            n.op_type == "DequantizeLinear" and all(self.nodes[u].op_type in ("Gemm", "MatMul")
                                                    for u in self.consumers.get(n.output[0], []))
            for n in readers)
        v = self.flatten_value(i, node, x, fc_only)
        self.values[out_name] = v
        self.done.update(taken)
