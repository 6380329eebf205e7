"""QDQ ONNX graphs (``onnxruntime.quantization.quantize_static``, QuantFormat.QDQ) into the IR.

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

from .errors import ModelFormatError, UnsupportedOperator
from .ir import Elementwise, FullyConnected, Graph, Mean, NoAttrs, Pool2D, Quant, Source
from .onnx_common import OnnxGraphBuilder, Value

FLOAT_OPS = ("Conv", "Gemm", "MatMul", "Add", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape")
ACTIVATION_OPS = ("Relu", "Clip")


@dataclass(frozen=True)
class QConst:
    """A constant seen through its DequantizeLinear: integer values, scales, zero points, axis."""
    name: str
    data: np.ndarray
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int


def read_qdq(path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str) -> Graph:
    return QdqReader(path, model, input_layout, output_layout).read()


class QdqReader(OnnxGraphBuilder):
    def __init__(self, path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str):
        super().__init__(path, model, input_layout, output_layout)
        self.float_inputs: dict[str, tuple[int, list[int]]] = {}  # graph input -> (tensor, dims)
        self.dq_consts: dict[str, QConst] = {}
        self.float_outputs: dict[str, tuple[Value, Quant]] = {}  # graph output -> its int8 value

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
                self._quantize(i, node)
            elif node.op_type == "DequantizeLinear":
                self._dequantize(i, node)
            elif node.op_type in FLOAT_OPS:
                self._float_op(i, node)
            else:
                raise UnsupportedOperator(f"{self.where(i)}: operator {node.op_type} is not supported in a QDQ "
                                          f"graph (supported: {', '.join(FLOAT_OPS + ACTIVATION_OPS)} between "
                                          f"QuantizeLinear/DequantizeLinear)")
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
        return Graph(self.path.stem, tuple(self.tensors), tuple(self.layers),
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
            raise UnsupportedOperator(f"{self.where(i)}: {zp_arr.dtype} quantization (supported: int8, uint8, "
                                      f"int32 biases)")
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

    def _quantize(self, i: int, node) -> None:
        src = node.input[0]
        if src not in self.float_inputs:
            raise UnsupportedOperator(f"{self.where(i)}: quantizes '{src}', which no supported op produces")
        t, dims = self.float_inputs[src]
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
        self.values[out] = v  # the float value is the int8 one, seen through its scale

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

    def bias(self, name: str | None, i: int, units: int) -> int:
        if not name:
            return -1
        b = self.qconst(name, i, "the bias")
        if b.data.dtype != np.int32 or b.data.size != units:
            raise UnsupportedOperator(f"{self.where(i)}: bias '{b.name}' must be {units} int32 values")
        return self.add_tensor(b.name, (units,), "int32", Quant(b.scale, b.zero_point), b.data.reshape(units))

    def _float_op(self, i: int, node) -> None:
        op = node.op_type
        if op in ("Flatten", "Reshape"):
            return self._flatten(i, node)
        quant, activation, out_name, taken = self.output_quant(i, node)
        if op == "Conv":
            x, extra = self.input_with_pads(node.input[0], i)
            w = self.weights(node.input[1], i)
            kind, wdata, shape, attrs = self.conv_geometry(i, node, x, w.data, extra)
            axis = 0 if kind == "CONV_2D" else 3
            wt = self.add_tensor(w.name, wdata.shape, "int8", Quant(w.scale, w.zero_point, axis), wdata)
            inputs = [x.tensor, wt]
            b = self.bias(node.input[2] if len(node.input) > 2 else None, i, shape[3])
            inputs += [b] if b >= 0 else []
            self.emit(kind, inputs, shape, quant, attrs(None, activation, True), out_name, x.rank)
        elif op in ("Gemm", "MatMul"):
            x = self.value(node.input[0], i)
            w = self.weights(node.input[1], i)
            data = self.fc_weights(node, self.attrs(node), w.data, x, self.where(i))
            if x.rank != 2 or data.shape[1] != self.tensors[x.tensor].shape[1]:
                raise UnsupportedOperator(f"{self.where(i)}: weights {list(data.shape)} over input "
                                          f"{list(self.tensors[x.tensor].shape)}")
            wt = self.add_tensor(w.name, data.shape, "int8", Quant(w.scale, w.zero_point, 0), data)
            inputs = [x.tensor, wt]
            b = self.bias(node.input[2] if len(node.input) > 2 else None, i, data.shape[0])
            inputs += [b] if b >= 0 else []
            batch = self.tensors[x.tensor].shape[0]
            self.emit("FULLY_CONNECTED", inputs, (batch, data.shape[0]), quant,
                      FullyConnected(activation, False, None, True), out_name, 2)
        elif op == "Add":
            operands = []
            for name in node.input[:2]:
                if name in self.dq_consts:  # a constant operand (MatMul's bias, quantized as an activation)
                    c = self.dq_consts[name]
                    if len(c.scale) != 1 or c.data.dtype not in (np.int8, np.uint8):
                        raise UnsupportedOperator(f"{self.where(i)}: constant operand '{c.name}' must be 8-bit, "
                                                  f"one scale")
                    data = c.data.astype(np.int16) - (128 if c.data.dtype == np.uint8 else 0)
                    zp = c.zero_point[0] - (128 if c.data.dtype == np.uint8 else 0)
                    operands.append(Value(self.add_tensor(c.name, data.shape or (1,), "int8", Quant(c.scale, (zp,)),
                                                          data.astype(np.int8).reshape(data.shape or (1,))), 1))
                else:
                    operands.append(self.value(name, i))
            a, b = (self.tensors[v.tensor] for v in operands)
            shape = np.broadcast_shapes(a.shape, b.shape)
            self.emit("ADD", [v.tensor for v in operands], shape, quant, Elementwise(activation), out_name,
                      max(v.rank for v in operands))
        else:  # pooling
            x = self.value(node.input[0], i)
            kernel, stride, pads, shape = self.pool_geometry(i, node, x)
            if op == "GlobalAveragePool":
                self.emit("MEAN", [x.tensor], shape, quant, Mean((1, 2), True, True), out_name, x.rank)
            else:
                a = self.attrs(node)
                if op == "AveragePool" and a.get("count_include_pad", 0) and any(pads):
                    raise UnsupportedOperator(f"{self.where(i)}: count_include_pad with padding")
                # onnxruntime on x86-64 runs int8 activations as uint8 (zero points + 128): its float
                # average adds that zero point before rounding
                float_avg = 128 if op == "AveragePool" else None
                self.emit("MAX_POOL_2D" if op == "MaxPool" else "AVERAGE_POOL_2D", [x.tensor], shape, quant,
                          Pool2D(kernel, stride, "EXPLICIT", activation, None, pads, float_avg), out_name, x.rank)
        self.done.update(taken)

    def emit(self, op: str, inputs: list[int], shape, quant: Quant, attrs, name: str, rank: int) -> None:
        out = self.add_tensor(name, shape, "int8", quant)
        self.add_layer(op, inputs, [out], attrs, name)
        self.values[name] = Value(out, rank)

    def _flatten(self, i: int, node) -> None:
        x = self.value(node.input[0], i)
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
