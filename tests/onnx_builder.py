"""Small float ONNX models built with onnx's helper API, quantized to QDQ with onnxruntime's
``quantize_static`` (the way most users get an int8 ONNX model)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def const(self, arr: np.ndarray, base: str) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def ints(self, values, base: str) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, pad: int | None = None,
             relu: bool = True) -> str:
        w = self.rng.normal(0, 1 / np.sqrt(k * k * cin / group), (cout, cin // group, k, k))
        b = self.rng.normal(0, 0.1, cout)
        p = k // 2 if pad is None else pad
        y = self.op("Conv", [x, self.const(w, "w"), self.const(b, "b")], kernel_shape=[k, k],
                    strides=[stride, stride], pads=[p, p, p, p], group=group)
        return self.op("Relu", [y]) if relu else y

    def gemm(self, x: str, fin: int, fout: int, matmul: bool = False) -> str:
        w = self.rng.normal(0, 1 / np.sqrt(fin), (fin, fout) if matmul else (fout, fin))
        if matmul:
            y = self.op("MatMul", [x, self.const(w, "w")])
            return self.op("Add", [y, self.const(self.rng.normal(0, 0.1, fout), "b")])
        return self.op("Gemm", [x, self.const(w, "w"), self.const(self.rng.normal(0, 0.1, fout), "b")], transB=1)


def float_model(kind: str, seed: int = 0) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """A float model of ``kind``: "cnn" (conv, depthwise, residual add, pooling, flatten, gemm),
    "mlp" (MatMul + Add layers), "pool" (average and max pooling, global average), "glue" (Transpose,
    Resize, Slice, Split, Concat, GlobalMaxPool, Expand between convolutions), "gather" (Gather,
    Squeeze, Unsqueeze between fully connected layers), "sequence" (MatMul and bias Add over a
    rank-3 (1, S, D) input), "upsample" (linear Resizes: scales up, down, sizes), "heads" (Softmax over
    features and over channels per pixel, LeakyRelu), "channel_add" (a constant per channel added, C equal to H), "branches" (a Concat of two
    convolutions' outputs, each quantized with its own scale)."""
    b = _Builder(seed)
    if kind == "cnn":
        shape = (1, 3, 16, 16)
        x = b.conv("input", 3, 8, 3, stride=2)
        y = b.conv(x, 8, 8, 3, group=8)  # depthwise
        y = b.conv(y, 8, 8, 1, relu=False)
        x = b.op("Add", [x, y])
        x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        x = b.conv(x, 8, 16, 3)
        x = b.op("GlobalAveragePool", [x])
        x = b.op("Flatten", [x], axis=1)
        out = b.gemm(x, 16, 10)
        out_shape = [1, 10]
    elif kind == "mlp":
        shape = (1, 32)
        x = b.op("Relu", [b.gemm("input", 32, 24, matmul=True)])
        x = b.op("Relu", [b.gemm(x, 24, 16)])
        out = b.gemm(x, 16, 4, matmul=True)
        out_shape = [1, 4]
    elif kind == "pool":
        shape = (1, 4, 12, 12)
        x = b.conv("input", 4, 8, 3)
        x = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
        x = b.conv(x, 8, 8, 3, stride=2, pad=1)
        out = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        out_shape = [1, 8, 3, 3]
    elif kind == "glue":  # data movement between convolutions
        shape = (1, 4, 8, 8)
        x = b.conv("input", 4, 8, 3)
        x = b.op("Transpose", [x], perm=[0, 1, 3, 2])
        roi = b.const(np.array([], np.float32), "roi")
        x = b.op("Resize", [x, roi, b.const(np.array([1, 1, 1.5, 0.5]), "scales")], mode="nearest")
        x = b.op("Slice", [x, b.ints([1, 7], "st"), b.ints([8, 0], "en"), b.ints([2, 3], "ax"), b.ints([1, -2], "sp")])
        halves = [f"{b.name('split')}_{k}" for k in range(2)]
        b.nodes.append(helper.make_node("Split", [x, b.ints([3, 5], "parts")], halves, axis=1))
        x = b.op("Concat", [halves[1], halves[0]], axis=1)
        x = b.op("GlobalMaxPool", [x])
        x = b.op("Expand", [x, b.ints([3, 1], "shape")])  # right-aligned: (1, 8, 3, 1)
        out = b.conv(x, 8, 6, 1, relu=False)
        out_shape = [1, 6, 3, 1]
    elif kind == "gather":  # a classifier's scores picked and reshaped as NEMO's exports do
        shape = (1, 4, 6, 6)
        x = b.op("Flatten", [b.op("GlobalAveragePool", [b.conv("input", 4, 8, 3)])], axis=1)
        x = b.op("Gather", [b.gemm(x, 8, 6), b.ints([4, 1, -1, 1], "picks")], axis=1)  # (1, 4)
        x = b.op("Unsqueeze", [b.op("Squeeze", [x, b.ints([0], "sq")]), b.ints([0], "unsq")])
        out = b.gemm(x, 4, 3)
        out_shape = [1, 3]
    elif kind == "sequence":  # a transformer's feed-forward block over a sequence: rank-3 MatMuls
        shape = (1, 6, 16)
        x = b.op("Relu", [b.gemm("input", 16, 12, matmul=True)])
        out = b.gemm(x, 12, 5, matmul=True)
        out_shape = [1, 6, 5]
    elif kind == "channel_add":  # a constant per channel (C, 1, 1) added where C equals H
        shape = (1, 3, 8, 6)
        x = b.conv("input", 3, 8, 3)
        x = b.op("Add", [x, b.const(b.rng.normal(0, 0.5, (8, 1, 1)), "per_channel")])
        out = b.conv(x, 8, 4, 1, relu=False)
        out_shape = [1, 4, 8, 6]
    elif kind == "upsample":  # a decoder's linear Resize (float32 between DequantizeLinear and QuantizeLinear)
        shape = (1, 4, 5, 6)
        x = b.conv("input", 4, 8, 3)
        roi = b.const(np.array([], np.float32), "roi")
        x = b.op("Resize", [x, roi, b.const(np.array([1, 1, 2, 1.5]), "scales")], mode="linear")
        x = b.op("Resize", [x, roi, b.const(np.array([1, 1, 0.5, 1]), "scales")], mode="linear",
                 coordinate_transformation_mode="align_corners")
        x = b.op("Resize", [x, roi, roi, b.ints([1, 8, 4, 7], "sizes")], mode="linear",
                 coordinate_transformation_mode="asymmetric")
        out = b.conv(x, 8, 4, 1, relu=False)
        out_shape = [1, 4, 4, 7]
    elif kind == "heads":  # a classifier's softmax, a detector's per-pixel softmax, LeakyRelu
        shape = (1, 4, 6, 6)
        x = b.op("LeakyRelu", [b.conv("input", 4, 8, 3, relu=False)], alpha=0.1)
        y = b.op("Softmax", [b.conv(x, 8, 5, 1, relu=False)], axis=1)  # over channels, per pixel
        x = b.op("Flatten", [b.op("GlobalAveragePool", [b.conv(y, 5, 8, 3)])], axis=1)
        x = b.op("LeakyRelu", [b.gemm(x, 8, 6)], alpha=0.3)
        out = b.op("Softmax", [x], axis=-1)
        out_shape = [1, 6]
    elif kind == "branches":  # a Concat of two differently scaled branches
        shape = (1, 4, 8, 8)
        x = b.op("Concat", [b.conv("input", 4, 8, 3), b.conv("input", 4, 6, 3, relu=False)], axis=1)
        x = b.op("Transpose", [x], perm=[0, 1, 3, 2])
        out = b.conv(x, 14, 6, 1, relu=False)
        out_shape = [1, 6, 8, 8]
    else:
        raise ValueError(kind)
    graph = helper.make_graph(b.nodes, f"{kind}_float", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, shape


def quantized_model(folder: Path, kind: str, per_channel: bool, activations: str = "int8", seed: int = 0,
                    fmt: str = "qdq") -> Path:
    """``kind`` quantized by onnxruntime (int8 weights; int8 or uint8 activations), calibrated on 16
    random inputs, in the QDQ format or (``fmt="qoperator"``) as QLinearConv/QGemm/... nodes."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    model, shape = float_model(kind, seed)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{kind}_{seed}_float.onnx"
    onnx.save(model, src)
    rng = np.random.default_rng(seed + 100)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"input": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.items, None)

    dst = folder / f"{kind}_{'pc' if per_channel else 'pt'}_{activations}_{fmt}.onnx"
    quantize_static(str(src), str(dst), Reader(),
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator, per_channel=per_channel,
                    activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return dst
