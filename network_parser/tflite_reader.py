"""Read an int8 ``.tflite`` flatbuffer into the IR (subgraph 0)."""
from __future__ import annotations

import math
import traceback
from pathlib import Path

import flatbuffers
import numpy as np
import tflite

from .cut import CutSpec, OpEdges, cut_graph, float_tail, unsigned_edges
from .errors import ModelFormatError, UnsupportedOperator
from .ir import (ACTIVATIONS, Axis, BatchMatMul, Block, SpaceBatch, FileEdges, Source, Tile, name_text, Concat, Conv2D, Gather, GatherNd, Reduce, DepthwiseConv2D, Elementwise, FullyConnected,
                 Graph, Layer, LeakyRelu, Lstm, LSTM_BIASES, LSTM_CELL, LSTM_HIDDEN, LSTM_INPUT_WEIGHTS, LSTM_LAYER_NORM,
                 LSTM_PEEPHOLE, LSTM_PROJECTION, LSTM_PROJECTION_BIAS, LSTM_RECURRENT_WEIGHTS, Mean, Svdf, NoAttrs, Pad, Resize, Pool2D, Quant, Softmax, StridedSlice, Tensor, Transpose,
                 TransposeConv2D)
from .side_files import read_model_file

_OP_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
_NP_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32,
             "int64": np.int64, "float32": np.float32}
_PADDING = {tflite.Padding.SAME: "SAME", tflite.Padding.VALID: "VALID"}
_ACT = {getattr(tflite.ActivationFunctionType, a): a for a in ACTIVATIONS}

# Activation dtypes each op accepts on its data inputs / outputs.
_INT8 = ("int8",)
# ops that also run with int16 activations ("16x8": int16 activations, int8 weights, int64
# biases), in and out of one type (QUANTIZE / DEQUANTIZE convert)
_INT16_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL", "AVERAGE_POOL_2D",
              "MAX_POOL_2D", "PAD", "PADV2", "STRIDED_SLICE", "SLICE", "CONCATENATION", "RESHAPE", "SQUEEZE",
              "EXPAND_DIMS", "RELU", "RELU6", "LEAKY_RELU", "PRELU", "MEAN", "SOFTMAX", "LOGISTIC", "TANH", "QUANTIZE", "DEQUANTIZE")
_INT8_16 = ("int8", "int16")
# why an operator takes no int16 activations, where the reason is the reference's
_NO_INT16 = {"HARD_SWISH": "LiteRT has no 16-bit HARD_SWISH kernel",
             "SQUARED_DIFFERENCE": "LiteRT has no 16-bit SQUARED_DIFFERENCE kernel"}
# QUANTIZE to and from int32 as TFLite Micro's kernel: int8 / int16 -> int32 and back, never int32 -> int32
_IO_TYPES = {"QUANTIZE": (("float32", "int8", "uint8", "int16", "int32"), ("int8", "uint8", "int16", "int32")),
             "DEQUANTIZE": (_INT8_16, ("float32",)),
             "ARG_MAX": (_INT8, ("int32", "int64")), "ARG_MIN": (_INT8, ("int32", "int64")),
             **{op: (_INT8_16, _INT8_16) for op in _INT16_OPS if op not in ("QUANTIZE", "DEQUANTIZE")}}
_QUANTIZE_INT32 = (("int8", "int32"), ("int16", "int32"), ("int32", "int8"), ("int32", "int16"))
# ops with one output per piece: read as one STRIDED_SLICE per output
_SPLITS = ("SPLIT", "SPLIT_V", "UNPACK")


def _printable(text: str) -> str:
    """Names end up in one-line messages and C comments: escape anything unprintable."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _options(op, cls, where: str | None = None):
    """The op's options table; ``where`` given: the options are required."""
    table = op.BuiltinOptions()
    if table is None:
        if where is not None:
            raise ModelFormatError(f"{where}: no {cls.__name__} (the op's options are missing)")
        return None
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return opts


def _act(code: int, where: str) -> str:
    if code not in _ACT:
        raise UnsupportedOperator(f"{where}: fused activation {code} is not supported "
                                  f"(supported: {', '.join(ACTIVATIONS)})")
    return _ACT[code]


def _pad(code: int, where: str) -> str:
    if code not in _PADDING:
        raise ModelFormatError(f"{where}: unknown padding {code}")
    return _PADDING[code]


def _bias32(o) -> bool:
    """Whether a weighted op's options say its bias is int32 (quantized_bias_type; schemas before
    it have no such field: the default)."""
    return hasattr(o, "QuantizedBiasType") and o.QuantizedBiasType() == tflite.TensorType.INT32


def _conv(op, where):
    o = _options(op, tflite.Conv2DOptions, where)
    return Conv2D((o.StrideH(), o.StrideW()), (o.DilationHFactor() or 1, o.DilationWFactor() or 1),
                  _pad(o.Padding(), where), _act(o.FusedActivationFunction(), where),
                  bias32=_bias32(o))


def _dwconv(op, where):
    o = _options(op, tflite.DepthwiseConv2DOptions, where)
    return DepthwiseConv2D((o.StrideH(), o.StrideW()),
                           (o.DilationHFactor() or 1, o.DilationWFactor() or 1),
                           _pad(o.Padding(), where), _act(o.FusedActivationFunction(), where),
                           o.DepthMultiplier() or 1)


def _transpose_conv(op, where):
    o = _options(op, tflite.TransposeConvOptions, where)
    return TransposeConv2D((o.StrideH(), o.StrideW()), _pad(o.Padding(), where), _act(o.FusedActivationFunction(), where),
                           _bias32(o))


def _batch_matmul(op, where):
    o = _options(op, tflite.BatchMatMulOptions)
    return BatchMatMul(bool(o.AdjX()) if o else False, bool(o.AdjY()) if o else False)


def _fc(op, where):
    o = _options(op, tflite.FullyConnectedOptions)
    if o is None:
        return FullyConnected("NONE", False)
    if o.WeightsFormat() != 0:
        raise UnsupportedOperator(f"{where}: shuffled FULLY_CONNECTED weights are not supported")
    return FullyConnected(_act(o.FusedActivationFunction(), where), bool(o.KeepNumDims()),
                          bias32=_bias32(o))


def _pool(op, where):
    o = _options(op, tflite.Pool2DOptions, where)
    return Pool2D((o.FilterHeight(), o.FilterWidth()), (o.StrideH(), o.StrideW()),
                  _pad(o.Padding(), where), _act(o.FusedActivationFunction(), where))


def _elementwise(cls):
    def parse(op, where):
        o = _options(op, cls)
        # ADD / SUB: int16 operands with power-of-two scales take a shift-only kernel unless the
        # model turns it off (the schema's default is on; 16x8 converters write it off; without an
        # options table LiteRT's parameters are zero: off)
        pot = bool(o.PotScaleInt16()) if o is not None and hasattr(o, "PotScaleInt16") else False
        return Elementwise(_act(o.FusedActivationFunction(), where) if o else "NONE", pot)
    return parse


def _softmax(op, where):
    o = _options(op, tflite.SoftmaxOptions)
    return Softmax(float(o.Beta()) if o else 1.0)


def _resize(cls):
    """RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR: how output pixels map to input ones (the size is the
    constant input, folded below)."""
    def parse(op, where):
        o = _options(op, cls)
        return Resize((0, 0), bool(o.AlignCorners()) if o else False, bool(o.HalfPixelCenters()) if o else False)
    return parse


def _leaky_relu(op, where):
    o = _options(op, tflite.LeakyReluOptions)
    return LeakyRelu(float(o.Alpha()) if o else 0.0)


def _concat(op, where):
    o = _options(op, tflite.ConcatenationOptions, where)
    return Concat(o.Axis(), _act(o.FusedActivationFunction(), where))


def _mean(op, where):
    o = _options(op, tflite.ReducerOptions)
    return Mean((), bool(o.KeepDims()) if o else False)  # axes filled from the constant input


def _strided_slice(op, where):
    o = _options(op, tflite.StridedSliceOptions)
    if o is None:
        return StridedSlice((), (), ())
    if o.EllipsisMask() or o.NewAxisMask():
        raise UnsupportedOperator(f"{where}: STRIDED_SLICE with an ellipsis or new-axis mask is not supported "
                                  f"(the converter folds these into RESHAPE for static shapes)")
    if o.Offset():
        raise UnsupportedOperator(f"{where}: STRIDED_SLICE with offset=true (end relative to begin) is not supported")
    return StridedSlice((), (), (), o.BeginMask(), o.EndMask(), o.ShrinkAxisMask())


def _pack(op, where):
    o = _options(op, tflite.PackOptions)
    return Concat(o.Axis() if o else 0, "NONE")


def _unpack(op, where):
    o = _options(op, tflite.UnpackOptions)
    return Axis(o.Axis() if o else 0)


def _gather(op, where):
    o = _options(op, tflite.GatherOptions)
    if o is not None and o.BatchDims():
        raise UnsupportedOperator(f"{where}: GATHER with batch_dims {o.BatchDims()} is not supported")
    return Gather(o.Axis() if o else 0, (), ())


def _block(cls):
    def parse(op, where):
        o = _options(op, cls, where)
        if o.BlockSize() < 1:
            raise ModelFormatError(f"{where}: block size {o.BlockSize()} must be positive")
        return Block(o.BlockSize())
    return parse


def _mirror_pad(op, where):
    o = _options(op, tflite.MirrorPadOptions)
    mode = o.Mode() if o else tflite.MirrorPadMode.REFLECT
    names = {tflite.MirrorPadMode.REFLECT: "REFLECT", tflite.MirrorPadMode.SYMMETRIC: "SYMMETRIC"}
    if mode not in names:
        raise ModelFormatError(f"{where}: unknown mirror padding mode {mode}")
    return Pad((), None, names[mode])


def _none(op, where):
    return NoAttrs()


# op name -> (attribute parser, number of leading data inputs; the rest are constants)
_OPS = {
    "CONV_2D": (_conv, None), "DEPTHWISE_CONV_2D": (_dwconv, None),
    "FULLY_CONNECTED": (_fc, None), "TRANSPOSE_CONV": (_transpose_conv, None),
    "BATCH_MATMUL": (_batch_matmul, None),
    "ADD": (_elementwise(tflite.AddOptions), None), "MUL": (_elementwise(tflite.MulOptions), None),
    "SUB": (_elementwise(tflite.SubOptions), None), "MAXIMUM": (_none, None), "MINIMUM": (_none, None),
    "SQUARED_DIFFERENCE": (_none, None), "PRELU": (_none, None),
    "AVERAGE_POOL_2D": (_pool, None), "MAX_POOL_2D": (_pool, None),
    "MEAN": (_mean, 1), "RESHAPE": (_none, 1), "SQUEEZE": (_none, 1),
    "SOFTMAX": (_softmax, None), "LOG_SOFTMAX": (_none, None), "L2_NORMALIZATION": (_elementwise(tflite.L2NormOptions), None), "LOGISTIC": (_none, None), "PAD": (_none, 1),
    "CONCATENATION": (_concat, None), "QUANTIZE": (_none, None), "DEQUANTIZE": (_none, None),
    "TRANSPOSE": (_none, 1), "HARD_SWISH": (_none, None), "RELU": (_none, None),
    "RELU6": (_none, None), "RELU_N1_TO_1": (_none, None), "RELU_0_TO_1": (_none, None),
    "LEAKY_RELU": (_leaky_relu, None), "ABS": (_none, None), "TANH": (_none, None), "EXP": (_none, None),
    "LOG": (_none, None), "RSQRT": (_none, None), "SQRT": (_none, None), "NEG": (_none, None),
    "RESIZE_NEAREST_NEIGHBOR": (_resize(tflite.ResizeNearestNeighborOptions), 1),
    "RESIZE_BILINEAR": (_resize(tflite.ResizeBilinearOptions), 1),
    "STRIDED_SLICE": (_strided_slice, 1), "SLICE": (_none, 1),
    "SPLIT": (_none, 1), "SPLIT_V": (_none, 1), "UNPACK": (_unpack, 1), "PACK": (_pack, None),
    "GATHER": (_gather, 1), "GATHER_ND": (_none, 1), "EXPAND_DIMS": (_none, 1), "PADV2": (_none, 1), "MIRROR_PAD": (_mirror_pad, 1),
    "REDUCE_MAX": (_mean, 1), "REDUCE_MIN": (_mean, 1), "ARG_MAX": (_none, 1), "ARG_MIN": (_none, 1),
    "DEPTH_TO_SPACE": (_block(tflite.DepthToSpaceOptions), None),
    "SPACE_TO_DEPTH": (_block(tflite.SpaceToDepthOptions), None), "TILE": (_none, 1), "BROADCAST_TO": (_none, 1),
    "SPACE_TO_BATCH_ND": (_none, 1), "BATCH_TO_SPACE_ND": (_none, 1),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (_none, None), "SVDF": (_none, None),  # read by _RECURRENT's readers
}


# Operators refused on purpose, with the reason (the reader's error and ``deploy ops`` say it).
# The reference for int8 is LiteRT's reference kernels; an op it has no int8 kernel for has no
# reference to be bit-exact with.
REFUSED = {
    "SQUARE": "LiteRT's reference kernel is float32 only (TFLite Micro's too)",
    "ADD_N": "LiteRT's reference kernel takes float32 and int32, no int8",
    "CUMSUM": "LiteRT's reference kernel takes float32, int32 and int64, no int8",
    "SUM": ("LiteRT's int8 kernel (float rescaling of the sum) departs from the integer arithmetic "
            "TFLite Micro runs, so no reference stands for both"),
    "ELU": "LiteRT's reference resolver has no ELU kernel to check against",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "TFLite has only float and hybrid kernels for it",
    "WHILE": "control flow: the engine's schedule is static",
    "IF": "control flow: the engine's schedule is static",
    "CUSTOM": "a custom operator's kernel is the application's, not TFLite's",
}


def supported_operators() -> dict[str, tuple[tuple[str, ...], tuple[str, ...], str]]:
    """Every TFLite operator the reader takes: the types of its activation inputs and outputs,
    and the IR op it is read as (``deploy ops``)."""
    return {op: (*_IO_TYPES.get(op, (_INT8, _INT8)), "STRIDED_SLICE" if op in _SPLITS else op) for op in _OPS}


def read_tflite(path: str | Path, cut: CutSpec = CutSpec()) -> Graph:
    """The model's subgraph 0; with ``cut``, the part of it between the tensors it names."""
    path = Path(path)
    buf = read_model_file(path)
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ModelFormatError(f"{path}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    try:
        return _read(buf, path, cut)
    except (ModelFormatError, UnsupportedOperator):
        raise
    except Exception as e:
        if not _in_decoder(e):  # our own code's slip: a bug to fix, not the file's fault
            raise
        raise ModelFormatError(f"{path}: corrupt TFLite flatbuffer ({type(e).__name__}: {e})") from None


_DECODERS = tuple(str(Path(m.__file__).resolve().parent) for m in (tflite, flatbuffers))


def _in_decoder(error: BaseException) -> bool:
    """A corrupt flatbuffer surfaces as any error raised inside the generated accessors or the
    flatbuffers runtime (an offset past the end, a vector that does not fit)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(_DECODERS)


def _tensor(model, graph, index: int, buf: bytes, path) -> Tensor:
    t = graph.Tensors(index)
    name = _printable((t.Name() or b"").decode("utf-8", "replace")) or f"tensor_{index}"
    dtype = _TYPE_NAMES.get(t.Type(), f"type{t.Type()}")
    shape = tuple(int(d) for d in (t.ShapeAsNumpy() if t.ShapeLength() else ()))
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"{path}: tensor {index} '{name}' has a negative or dynamic "
                               f"dimension {list(shape)}")
    quant = None
    q = t.Quantization()
    if q is not None and q.ScaleLength() > 0:
        scales = tuple(float(s) for s in q.ScaleAsNumpy())
        zps = tuple(int(z) for z in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else (0,) * len(scales)
        if len(zps) == 1 and len(scales) > 1:
            zps = zps * len(scales)
        # A 1-D tensor can only be quantized along axis 0 (person_detect stores 3 there).
        axis = 0 if len(shape) <= 1 or len(scales) == 1 else int(q.QuantizedDimension())
        if len(scales) != len(zps) or (len(scales) > 1 and not (0 <= axis < len(shape) and shape[axis] == len(scales))):
            raise ModelFormatError(f"{path}: tensor {index} '{name}': {len(scales)} scales and "
                                   f"{len(zps)} zero points do not match shape {list(shape)} "
                                   f"on axis {axis}")
        if not all(np.isfinite(s) and s > 0 for s in scales):
            raise ModelFormatError(f"{path}: tensor {index} '{name}' has a zero, negative or "
                                   f"non-finite quantization scale")
        quant = Quant(scales, zps, axis)
    data = None
    b = t.Buffer()
    if 0 < b < model.BuffersLength():
        buffer = model.Buffers(b)
        raw = None
        if buffer.DataLength() > 0:
            raw = buffer.DataAsNumpy().tobytes()
        elif buffer.Offset() > 1:  # large models keep data after the flatbuffer
            raw = buf[buffer.Offset(): buffer.Offset() + buffer.Size()]
        if raw is not None:
            if dtype not in _NP_TYPES:
                raise UnsupportedOperator(f"{path}: constant tensor {index} '{name}' has "
                                          f"unsupported type {dtype}")
            count = math.prod(shape)  # exact: an int64 product wraps, and may wrap to the buffer's size
            if len(raw) != count * np.dtype(_NP_TYPES[dtype]).itemsize:
                raise ModelFormatError(f"{path}: tensor {index} '{name}' holds {len(raw)} bytes, "
                                       f"shape {list(shape)} {dtype} needs "
                                       f"{count * np.dtype(_NP_TYPES[dtype]).itemsize}")
            data = np.frombuffer(raw, dtype=_NP_TYPES[dtype]).reshape(shape).copy()
            data.setflags(write=False)
    return Tensor(name, shape, dtype, quant, data, bool(t.IsVariable()) and data is None)


def _op_name(model, op, k: int, path) -> str:
    if not 0 <= op.OpcodeIndex() < model.OperatorCodesLength():
        raise ModelFormatError(f"{path}: op {k} uses opcode {op.OpcodeIndex()}, the model has "
                               f"{model.OperatorCodesLength()}")
    oc = model.OperatorCodes(op.OpcodeIndex())
    code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
    return _OP_NAMES.get(code, f"CUSTOM({(oc.CustomCode() or b'?').decode('utf-8', 'replace')})"
                         if code == tflite.BuiltinOperator.CUSTOM else f"builtin {code}")


def _read(buf: bytes, path, cut: CutSpec) -> Graph:
    model = tflite.Model.GetRootAsModel(buf, 0)
    if model.SubgraphsLength() < 1:
        raise ModelFormatError(f"{path}: model has no subgraph")
    g = model.Subgraphs(0)
    tensors = [_tensor(model, g, i, buf, path) for i in range(g.TensorsLength())]
    n = len(tensors)

    def check_index(i, what):
        if not -1 <= i < n:
            raise ModelFormatError(f"{path}: {what} refers to tensor {i}, the model has {n}")
        return int(i)

    inputs = tuple(check_index(i, "graph input") for i in g.InputsAsNumpy()) if g.InputsLength() else ()
    outputs = tuple(check_index(i, "graph output") for i in g.OutputsAsNumpy()) if g.OutputsLength() else ()
    edges = []
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        name = _op_name(model, op, k, path)
        edges.append(OpEdges(name, tuple(check_index(i, f"op {k} ({name}) input") for i in
                                         (op.InputsAsNumpy() if op.InputsLength() else [])),
                             tuple(check_index(i, f"op {k} ({name}) output") for i in
                                   (op.OutputsAsNumpy() if op.OutputsLength() else []))))
    kept, file_edges, notes = range(len(edges)), None, ()
    consts = {i for i, t in enumerate(tensors) if t.is_const or t.variable}
    shape_ops = _shape_computations(edges, tensors, consts, outputs)
    tail = None if cut.outputs else float_tail([t.dtype for t in tensors], consts, edges, outputs)
    if cut or tail:
        c = cut_graph(path.name, [t.name for t in tensors], [t.dtype for t in tensors], consts, edges, inputs,
                      tail.outputs if tail else outputs, cut)
        file_edges, notes = FileEdges(inputs, outputs), c.notes
        if tail:
            ops = ", ".join(f"op {k} {edges[k].name}" for k in tail.ops)
            notes = (f"{ops} compute{'s' if len(tail.ops) == 1 else ''} on float values after the last DEQUANTIZE: "
                     f"left to the application, the engine gives float32 "
                     f"{', '.join(repr(tensors[t].name) for t in tail.outputs)} (what {'it reads' if len(tail.ops) == 1 else 'they read'}"
                     f"; --outputs names other edges)", *notes)
        kept, inputs, outputs = c.ops, c.inputs, c.outputs
    layers = []
    produced = set(inputs) | {i for i, t in enumerate(tensors) if t.is_const or t.variable}
    for k in kept:
        if k in shape_ops:  # a TRANSPOSE_CONV's output shape, which its output tensor states
            continue
        name = edges[k].name
        op = g.Operators(k)
        ins, outs = list(edges[k].inputs), list(edges[k].outputs)
        out_name = tensors[outs[0]].name if outs and outs[0] >= 0 else "?"
        where = f"{path.name}: op {k} {name} (output '{out_name}')"
        if name in _RECURRENT:  # state and intermediates of their own
            layers.append(_RECURRENT[name](op, k, tensors, ins, outs, where))
            produced.update(outs)
            continue
        if name not in _OPS:
            why = f": {REFUSED[name]}" if name in REFUSED else ""
            raise UnsupportedOperator(f"{where}: operator {name} is not supported{why}")
        if not outs or any(o < 0 for o in outs):
            raise ModelFormatError(f"{where} has no output tensor")
        if len(outs) != 1 and name not in _SPLITS:
            raise ModelFormatError(f"{where}: {len(outs)} outputs, {name} has one")
        for o in outs:
            if o in produced or outs.count(o) > 1:
                raise ModelFormatError(f"{where}: writes tensor {o} '{tensors[o].name}', which a graph input, a "
                                       f"constant or an earlier op already holds")
        parse, n_data = _OPS[name]
        output_shape = None
        if name == "TRANSPOSE_CONV" and len(ins) >= 3 and ins[0] >= 0:
            # (output shape, weights, input[, bias]): the data input first, as every weighted op has it
            output_shape = ins[0]
            ins = [ins[2], ins[1], *ins[3:]]
        if name == "SPLIT" and len(ins) >= 2:  # (axis, input): the data input first
            ins = [ins[1], ins[0]]
        need = _MIN_INPUTS.get(name, 1)
        if len(ins) < need or any(i < 0 for i in ins[:need]):
            raise ModelFormatError(f"{where}: inputs {ins}, {name} needs at least {need} (-1 marks an "
                                   f"omitted optional input)")
        attrs = parse(op, where)
        _check_window(attrs, where)
        data_ins = ins if n_data is None else ins[:n_data]
        consts = ins[len(data_ins):]
        if name not in _WEIGHTED and any(i < 0 for i in data_ins):
            raise ModelFormatError(f"{where}: inputs {ins}: -1 (an omitted input) where {name} needs a tensor")
        for i in data_ins:
            if i >= 0 and i not in produced:
                raise ModelFormatError(f"{where} reads tensor {i} '{tensors[i].name}' before "
                                       f"any op writes it (cycle or dangling tensor)")
        # Constant weights and biases have types of their own; any other input is an activation.
        _check_types(name, where, [tensors[i] for i in data_ins
                                   if i >= 0 and not (tensors[i].is_const and name in _WEIGHTED)],
                     [tensors[o] for o in outs])
        for i in ins:
            if i >= 0 and tensors[i].dtype == "int8" and tensors[i].quant is None:
                raise ModelFormatError(f"{where}: int8 tensor {i} '{tensors[i].name}' has no quantization")
        if name in _SPLITS:  # one slice per output
            for o, piece in zip(outs, _pieces(name, attrs, tensors[data_ins[0]], [tensors[o] for o in outs],
                                              [tensors[i] for i in consts], where)):
                layers.append(Layer(k, "STRIDED_SLICE", (data_ins[0],), (o,), piece, tensors[o].name))
            produced.update(outs)
            continue
        attrs = _fold_constants(name, attrs, [tensors[i] for i in consts], where)
        if name == "PADV2" and (tensors[consts[1]].quant != tensors[data_ins[0]].quant
                                or tensors[consts[1]].dtype != tensors[data_ins[0]].dtype):
            raise UnsupportedOperator(f"{where}: the padding value '{tensors[consts[1]].name}' must share the input's "
                                      f"type and quantization")
        if output_shape is not None and not (any(output_shape in edges[j].outputs for j in shape_ops)
                                             and all(d > 0 for d in tensors[outs[0]].shape)):
            _check_output_shape(tensors[output_shape], tensors[outs[0]], where)
        if name == "SPACE_TO_BATCH_ND" and attrs.crops != ((0, 0), (0, 0)):
            # its padding as a PAD of its own (filled with the zero point, as the reference pads)
            data_ins, attrs = _padded_input(tensors, layers, k, data_ins[0], attrs, where), SpaceBatch(attrs.block)
        layers.append(Layer(k, name, tuple(data_ins), tuple(outs), attrs, out_name))
        produced.update(outs)
    for o in outputs:
        if o < 0 or o not in produced:
            raise ModelFormatError(f"{path}: graph output {o} is never written")
    for i in inputs:
        # an int32 input is a QUANTIZE's alone (the int32 values an application's front end makes)
        int32_ok = tensors[i].dtype == "int32" and all(l.op == "QUANTIZE" for l in layers if i in l.inputs)
        if tensors[i].dtype not in ("int8", "uint8", "int16", "float32") and not int32_ok:
            raise UnsupportedOperator(f"{path}: graph input '{tensors[i].name}' has type {tensors[i].dtype}; only "
                                      f"int8, uint8, int16 and float32 are supported (int32 when QUANTIZEs alone read it)")
    if cut.io == "uint8":  # the int8 edges as uint8 ones: value + 128, zero point + 128
        tensors, layers, inputs, outputs, derived = unsigned_edges(tensors, layers, inputs, outputs, len(edges))
        file_edges = FileEdges(file_edges.inputs, file_edges.outputs, derived)
    if shape_ops:
        notes = (*notes, f"{', '.join(f'op {k} {edges[k].name}' for k in sorted(shape_ops))}: TRANSPOSE_CONV output "
                         f"shapes, which its output tensors state; not run")
    name = name_text(path.stem)
    source = Source("tflite", notes=notes) if notes else None
    return Graph(name, tuple(tensors), tuple(layers), inputs, outputs, source, file_edges)


_WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")
_MIN_INPUTS = {"TRANSPOSE_CONV": 2, "BATCH_MATMUL": 2, "CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "ADD": 2, "SUB": 2, "MUL": 2, "MAXIMUM": 2, "MINIMUM": 2, "SQUARED_DIFFERENCE": 2, "PRELU": 2,
               "MEAN": 2, "PAD": 2, "TRANSPOSE": 2, "RESIZE_NEAREST_NEIGHBOR": 2, "RESIZE_BILINEAR": 2,
               "STRIDED_SLICE": 4, "SLICE": 3, "SPLIT": 2, "SPLIT_V": 3, "GATHER": 2, "GATHER_ND": 2, "EXPAND_DIMS": 2,
               "PADV2": 3, "MIRROR_PAD": 2, "REDUCE_MAX": 2, "REDUCE_MIN": 2, "ARG_MAX": 2, "ARG_MIN": 2, "TILE": 2,
               "BROADCAST_TO": 2, "SPACE_TO_BATCH_ND": 3, "BATCH_TO_SPACE_ND": 3}


def _pieces(op: str, attrs, x: Tensor, outs: list[Tensor], consts: list[Tensor], where: str) -> list[StridedSlice]:
    """SPLIT, SPLIT_V and UNPACK as one slice of the input per output, along their axis."""
    rank = len(x.shape)
    if op == "UNPACK":
        axis = attrs.axis
    else:
        axis_t = consts[0] if op == "SPLIT" else consts[1]
        axis = int(_const_ints([axis_t], "the axis", where).reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ModelFormatError(f"{where}: axis {axis} does not index the input's {rank} axes")
    axis %= rank
    dim = x.shape[axis]
    if op == "SPLIT_V":
        sizes = [int(v) for v in _const_ints(consts[:1], "the split sizes", where).reshape(-1)]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = dim - sum(v for v in sizes if v != -1)
    else:
        sizes = [dim // len(outs) if op == "SPLIT" else 1] * len(outs)
    if len(sizes) != len(outs) or any(v < 0 for v in sizes) or sum(sizes) != dim:
        raise ModelFormatError(f"{where}: {len(outs)} pieces of sizes {sizes} do not split axis {axis} of "
                               f"{list(x.shape)}")
    pieces, start = [], 0
    for size in sizes:
        begin = tuple(start if d == axis else 0 for d in range(rank))
        end = tuple(start + size if d == axis else x.shape[d] for d in range(rank))
        pieces.append(StridedSlice(begin, end, (1,) * rank, 0, 0, (1 << axis) if op == "UNPACK" else 0))
        start += size
    return pieces


def _padded_input(tensors: list, layers: list, k: int, x: int, attrs, where: str) -> list[int]:
    """SPACE_TO_BATCH_ND's input padded (top, bottom, left, right) by a PAD layer of its own: the tensor
    it then reads."""
    t = tensors[x]
    if len(t.shape) != 4:
        raise UnsupportedOperator(f"{where}: expects a 4-D NHWC input, '{t.name}' is {list(t.shape)}")
    (pt, pb), (pl, pr) = attrs.crops
    n, h, w, c = t.shape
    tensors.append(Tensor(f"{t.name}/padded", (n, h + pt + pb, w + pl + pr, c), t.dtype, t.quant))
    layers.append(Layer(k, "PAD", (x,), (len(tensors) - 1,), Pad(((0, 0), (pt, pb), (pl, pr), (0, 0))),
                        tensors[-1].name))
    return [len(tensors) - 1]


_SHAPE_ARITHMETIC = ("SHAPE", "STRIDED_SLICE", "SLICE", "PACK", "CONCATENATION", "MUL", "ADD", "SUB", "CAST",
                     "RESHAPE", "GATHER")


def _shape_computations(edges: list[OpEdges], tensors: list[Tensor], consts: set[int], outputs) -> frozenset:
    """Ops that only compute TRANSPOSE_CONV output shapes (SHAPE of an activation, then integer
    arithmetic on shapes, as converters emit for a transposed convolution): the output tensor's
    shape in the file is the answer, so they need not run."""
    writer = {o: k for k, e in enumerate(edges) for o in e.outputs if o >= 0}
    found, stack = set(), [writer[e.inputs[0]] for e in edges if e.name == "TRANSPOSE_CONV" and e.inputs
                           and e.inputs[0] >= 0 and e.inputs[0] not in consts and e.inputs[0] in writer]
    while stack:
        k = stack.pop()
        e = edges[k]
        if k in found or e.name not in _SHAPE_ARITHMETIC or \
                any(o < 0 or tensors[o].dtype not in ("int32", "int64") or o in outputs for o in e.outputs):
            continue
        found.add(k)
        if e.name != "SHAPE":  # SHAPE reads an activation's shape only
            stack += [writer[i] for i in e.inputs if i >= 0 and i not in consts and i in writer]
    readers: dict[int, list[tuple[int, int]]] = {}
    for k, e in enumerate(edges):
        for pos, i in enumerate(e.inputs):
            readers.setdefault(i, []).append((k, pos))
    changed = True
    while changed:  # each result read only by another of them or as a TRANSPOSE_CONV's output shape
        changed = False
        for k in sorted(found):
            if any(not (j in found or (edges[j].name == "TRANSPOSE_CONV" and pos == 0))
                   for o in edges[k].outputs for j, pos in readers.get(o, [])):
                found.discard(k)
                changed = True
    return frozenset(found)


def _check_output_shape(shape: Tensor, out: Tensor, where: str) -> None:
    """TRANSPOSE_CONV's output shape input: a constant that states the output tensor's shape (a
    computed one would make the shape dynamic)."""
    if not shape.is_const:
        raise UnsupportedOperator(f"{where}: the output shape '{shape.name}' is computed at run time (a dynamic "
                                  f"shape); only a constant one can be planned")
    if tuple(int(v) for v in np.asarray(shape.data).reshape(-1)) != out.shape:
        raise ModelFormatError(f"{where}: the output shape {np.asarray(shape.data).reshape(-1).tolist()} differs from "
                               f"the output tensor's {list(out.shape)}")


def _check_window(attrs, where: str) -> None:
    """Strides, dilations and pooling windows must be positive."""
    for field in ("stride", "dilation", "filter"):
        values = getattr(attrs, field, None)
        if values is not None and any(v < 1 for v in values):
            raise ModelFormatError(f"{where}: {field} {list(values)} must be positive")
    if getattr(attrs, "depth_multiplier", 1) < 1:
        raise ModelFormatError(f"{where}: depth multiplier {attrs.depth_multiplier} must be positive")


_LSTM_WEIGHTS = (*LSTM_INPUT_WEIGHTS, *LSTM_RECURRENT_WEIGHTS)
_LSTM_PEEPHOLE = tuple(sorted(LSTM_PEEPHOLE.values()))
_LSTM_INPUT_GATE = (LSTM_INPUT_WEIGHTS[0], LSTM_RECURRENT_WEIGHTS[0], LSTM_PEEPHOLE[0], LSTM_BIASES[0])  # CIFG omits


def _lstm(op, k: int, tensors: list[Tensor], ins: list[int], outs: list[int], where: str) -> Layer:
    """TFLite's integer LSTM (int8 activations and weights, int16 cell state), with or without an
    input gate (CIFG), peephole weights, a projection or layer normalization."""
    o = _options(op, tflite.UnidirectionalSequenceLSTMOptions)
    if len(ins) not in (20, 24) or len(outs) != 1:
        raise ModelFormatError(f"{where}: {len(ins)} inputs and {len(outs)} outputs (an LSTM has 20 or 24 "
                               f"inputs and one output)")
    given = lambda i: i < len(ins) and ins[i] >= 0  # noqa: E731
    x, y = tensors[ins[0]], tensors[outs[0]]
    if x.dtype != "int8":
        raise UnsupportedOperator(f"{where}: input '{x.name}' is {x.dtype}; the LSTM runs TFLite's integer kernel "
                                  f"(int8 input; float and hybrid LSTMs are not supported)")
    cifg = not given(LSTM_INPUT_WEIGHTS[0])  # coupled input and forget gates: no input gate of its own
    required = [i for i in (*_LSTM_WEIGHTS, *LSTM_BIASES, LSTM_HIDDEN, LSTM_CELL) if not (cifg and i in _LSTM_INPUT_GATE)]
    missing = [i for i in required if not given(i)]
    alone = [i for i in _LSTM_INPUT_GATE[1:] if given(i)] if cifg else []
    if missing or alone:
        raise ModelFormatError(f"{where}: inputs {missing or alone} are omitted or "
                               f"given alone; the LSTM needs its gates' weights, biases and both states (a CIFG "
                               f"LSTM omits the input gate's weights and bias together)")

    def every_gate(positions: tuple[int, ...]) -> list[int]:
        """A per-gate input's positions an LSTM gives (the first, the input gate's: not with CIFG)."""
        return [i for i in positions if not (cifg and i == positions[0])]
    peephole = [i for i in _LSTM_PEEPHOLE if given(i)]
    if peephole and peephole != every_gate(_LSTM_PEEPHOLE):
        raise ModelFormatError(f"{where}: peephole weights {peephole} (all of the gates' or none)")
    layer_norm = given(LSTM_LAYER_NORM[1])  # LiteRT's test: the forget gate's coefficients
    if layer_norm:
        norms = [i for i in LSTM_LAYER_NORM if given(i)]
        if norms != every_gate(LSTM_LAYER_NORM):
            raise ModelFormatError(f"{where}: layer normalization coefficients {norms} (every gate's, the input "
                                   f"gate's only without CIFG)")
    if given(LSTM_PROJECTION_BIAS) and not given(LSTM_PROJECTION):
        raise ModelFormatError(f"{where}: a projection bias without projection weights")
    if given(LSTM_PROJECTION) and peephole:
        raise UnsupportedOperator(f"{where}: an LSTM with both peepholes and a projection (LiteRT's integer kernel "
                                  f"walks the peephole weights by the projection's size)")
    kinds = {**{i: "int8" for i in (*_LSTM_WEIGHTS, LSTM_PROJECTION)},
             **{i: "int32" for i in (*LSTM_BIASES, LSTM_PROJECTION_BIAS)},
             **{i: "int16" for i in (*_LSTM_PEEPHOLE, *(LSTM_LAYER_NORM if layer_norm else ()))}}
    for i, want in kinds.items():
        if not given(i):
            continue
        t = tensors[ins[i]]
        if not t.is_const or t.dtype != want or t.quant is None or t.quant.per_channel:
            raise UnsupportedOperator(f"{where}: '{t.name}' must be a constant {want} tensor with one scale (the "
                                      f"integer LSTM's weights and biases)")
    h, c = tensors[ins[LSTM_HIDDEN]], tensors[ins[LSTM_CELL]]
    if not (h.variable and c.variable) or h.dtype != "int8" or c.dtype != "int16" or h.quant is None or c.quant is None:
        raise UnsupportedOperator(f"{where}: the hidden and cell state must be variable int8 and int16 tensors "
                                  f"(got {h.dtype}{' variable' if h.variable else ''} and "
                                  f"{c.dtype}{' variable' if c.variable else ''})")
    if y.dtype != "int8" or y.quant is None or x.quant is None:
        raise UnsupportedOperator(f"{where}: the LSTM's input and output must be quantized int8")
    if o is not None and o.FusedActivationFunction() != tflite.ActivationFunctionType.TANH:
        raise UnsupportedOperator(f"{where}: LSTM activation code {o.FusedActivationFunction()} (the integer "
                                  f"kernel's is TANH)")
    inter = op.IntermediatesAsNumpy().tolist() if op.IntermediatesLength() else []
    if any(not 0 <= i < len(tensors) for i in inter):
        raise ModelFormatError(f"{where}: intermediate tensors {inter} (the model has {len(tensors)} tensors)")
    if len(inter) != 5 or tensors[inter[4]].quant is None:
        raise ModelFormatError(f"{where}: the integer LSTM needs its five intermediate tensors, the last one "
                               f"quantized (the hidden scale)")
    gate_sums = None
    if layer_norm:  # LiteRT reads the four gates' (a CIFG LSTM's input gate too); without them it outputs zeros
        sums = [tensors[i].quant for i in inter[:4]]
        if any(q is None or q.per_channel or q.scale[0] <= 0 for q in sums):
            raise ModelFormatError(f"{where}: a layer-normalized LSTM needs intermediates 0-3 quantized with one "
                                   f"scale each (the gates' sums before normalization)")
        gate_sums = tuple(sums)
    data_ins = tuple(ins[i] if given(i) else -1 for i in range(24 if layer_norm else 20))  # TFLite's positions
    attrs = Lstm(float(o.CellClip()) if o else 0.0, float(o.ProjClip()) if o else 0.0, bool(o.TimeMajor()) if o else False,
                 tensors[inter[4]].quant, gate_sums)
    return Layer(k, "UNIDIRECTIONAL_SEQUENCE_LSTM", data_ins, (outs[0],), attrs, y.name)


def _svdf(op, k: int, tensors: list[Tensor], ins: list[int], outs: list[int], where: str) -> Layer:
    """TFLite's integer SVDF: int8 input and output, int8 feature and int16 time weights, an int32
    bias or none, a variable int16 activation state (or TFLite Micro's int8 time weights and
    state, whose zero point may be other than 0)."""
    o = _options(op, tflite.SVDFOptions, where)
    if len(ins) != 5 or len(outs) != 1 or any(ins[i] < 0 for i in (0, 1, 2, 4)):
        raise ModelFormatError(f"{where}: inputs {ins} (an SVDF takes input, feature weights, time weights, bias "
                               f"or -1, and its state)")
    x, wf, wt, state, y = (tensors[i] for i in (ins[0], ins[1], ins[2], ins[4], outs[0]))
    if x.dtype != "int8" or x.quant is None:
        raise UnsupportedOperator(f"{where}: input '{x.name}' is {x.dtype}{'' if x.quant else ' without quantization'}; "
                                  f"the SVDF runs TFLite's integer kernel (quantized int8 input; float and hybrid "
                                  f"SVDFs are not supported)")
    # int16 time weights and state (LiteRT's and TFLite Micro's), or int8 ones (TFLite Micro's only)
    narrow = wt.dtype == "int8" and state.dtype == "int8"
    memory_type = "int8" if narrow else "int16"
    checks = ((wf, "int8", True), (wt, memory_type, True), (state, memory_type, False), (y, "int8", False))
    for t, dtype, const in checks:
        if t.dtype != dtype or t.quant is None or t.quant.per_channel or t.is_const != const:
            raise UnsupportedOperator(f"{where}: '{t.name}' must be {'a constant' if const else 'an'} {dtype} tensor "
                                      f"with one scale (the integer SVDF's)")
    if ins[3] >= 0 and (tensors[ins[3]].dtype != "int32" or not tensors[ins[3]].is_const):
        raise UnsupportedOperator(f"{where}: the bias must be a constant int32 tensor")
    if not state.variable or (state.zero_point != 0 and not narrow):
        raise UnsupportedOperator(f"{where}: the state '{state.name}' must be a variable tensor with zero point 0 "
                                  f"(an int16 state)")
    if o.FusedActivationFunction() != tflite.ActivationFunctionType.RELU:
        raise UnsupportedOperator(f"{where}: SVDF activation code {o.FusedActivationFunction()} (LiteRT's integer "
                                  f"kernel takes RELU only)")
    return Layer(k, "SVDF", tuple(ins), (outs[0],), Svdf(int(o.Rank())), y.name)


_RECURRENT = {"UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm, "SVDF": _svdf}


def _check_types(op: str, where: str, ins: list[Tensor], outs: list[Tensor]) -> None:
    in_ok, out_ok = _IO_TYPES.get(op, (_INT8, _INT8))
    for t in ins:
        if t.dtype not in in_ok:
            why = " (float-only models are not supported)" if t.dtype == "float32" else \
                f" ({_NO_INT16.get(op, '16-bit activations run on the operators `deploy ops` lists with int16')})" \
                if t.dtype == "int16" else ""
            raise UnsupportedOperator(f"{where}: input '{t.name}' is {t.dtype}; {op} supports {'/'.join(in_ok)}{why}")
    for t in outs:
        if t.dtype not in out_ok:
            raise UnsupportedOperator(f"{where}: output '{t.name}' is {t.dtype}; {op} supports "
                                      f"{'/'.join(out_ok)}")
    for t in (*ins, *outs):
        if t.dtype in _INT8_16 and t.quant is None:
            raise ModelFormatError(f"{where}: {t.dtype} tensor '{t.name}' has no quantization")
        if t.quant is not None and t.quant.per_channel and not t.is_const:
            raise UnsupportedOperator(f"{where}: activation '{t.name}' has {len(t.quant.scale)} scales; TFLite's "
                                      f"kernels read one scale per activation tensor")
        # SOFTMAX's int16 probabilities of int8 values: zero point -32768, TFLite's one exception
        widening_softmax = op == "SOFTMAX" and t is outs[0] and ins[0].dtype == "int8"
        if t.dtype == "int16" and any(z != 0 for z in t.quant.zero_point) and not widening_softmax:
            raise UnsupportedOperator(f"{where}: int16 tensor '{t.name}' has zero point {t.quant.zero_point[0]}; "
                                      f"TFLite's 16-bit kernels take symmetric activations (zero point 0)")
    if op == "PRELU" and ins[0].dtype == "int16" and len(ins) > 1:  # LiteRT reads a 16-bit PRELU's alpha as int8
        if ins[1].dtype != "int8":
            raise UnsupportedOperator(f"{where}: alpha '{ins[1].name}' is {ins[1].dtype}; a 16-bit PRELU takes an int8 alpha")
        ins = ins[:1]
    if op == "QUANTIZE" and "int32" in (ins[0].dtype, outs[0].dtype):
        pair = (ins[0].dtype, outs[0].dtype)
        if pair not in _QUANTIZE_INT32:
            raise UnsupportedOperator(f"{where}: QUANTIZE from {pair[0]} to {pair[1]}; TFLite's kernel converts int32 "
                                      f"from and to int8 and int16 only")
        wide = ins[0] if ins[0].dtype == "int32" else outs[0]
        if wide.quant is None or wide.quant.zero_point[0] != 0:
            raise UnsupportedOperator(f"{where}: int32 tensor '{wide.name}' has "
                                      f"{'no quantization' if wide.quant is None else f'zero point {wide.quant.zero_point[0]}'}; "
                                      f"a QUANTIZE takes int32 values with a scale and zero point 0")
    types = {t.dtype for t in (*ins, *outs)}
    widening = op == "SOFTMAX" and [t.dtype for t in (*ins, *outs)] == ["int8", "int16"]  # int8 -> int16 probabilities
    if op not in ("QUANTIZE", "DEQUANTIZE") and "int16" in types and len(types) > 1 and not widening:
        raise UnsupportedOperator(f"{where}: mixes {' and '.join(sorted(types))} activations; {op} runs on one type "
                                  f"(a QUANTIZE converts between them)")


def _const_ints(ts: list[Tensor], what: str, where: str) -> np.ndarray:
    if not ts or not ts[0].is_const:
        raise UnsupportedOperator(f"{where}: {what} must be a constant tensor")
    if ts[0].dtype not in ("int16", "int32", "int64"):
        raise ModelFormatError(f"{where}: {what} '{ts[0].name}' is {ts[0].dtype}; integers are expected")
    return np.asarray(ts[0].data, dtype=np.int64)


def _fold_constants(op: str, attrs, consts: list[Tensor], where: str):
    if op == "MEAN":
        axes = _const_ints(consts, "the axes", where).reshape(-1)
        return Mean(tuple(int(a) for a in axes), attrs.keep_dims)
    if op == "PAD":
        p = _const_ints(consts, "the paddings", where)
        if p.ndim != 2 or p.shape[1] != 2 or (p < 0).any():
            raise ModelFormatError(f"{where}: paddings must be a non-negative N x 2 array, got {p.tolist()}")
        return Pad(tuple((int(a), int(b)) for a, b in p))
    if op == "TRANSPOSE":
        return Transpose(tuple(int(a) for a in _const_ints(consts, "the permutation", where)))
    if op in ("RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"):
        size = _const_ints(consts, "the output size", where)
        if consts[0].dtype != "int32" or size.shape != (2,) or (size < 1).any():
            raise ModelFormatError(f"{where}: the output size must be an int32 tensor of two positive integers, got "
                                   f"{consts[0].dtype} {size.tolist()}")
        return Resize((int(size[0]), int(size[1])), attrs.align_corners, attrs.half_pixel_centers)
    if op == "STRIDED_SLICE":
        begin, end, strides = (tuple(int(v) for v in _const_ints([t], what, where).reshape(-1))
                               for t, what in zip(consts[:3], ("the begin", "the end", "the strides")))
        if not len(begin) == len(end) == len(strides) or 0 in strides:
            raise ModelFormatError(f"{where}: begin {list(begin)}, end {list(end)} and strides {list(strides)} must "
                                   f"have one value per axis, strides non-zero")
        return StridedSlice(begin, end, strides, attrs.begin_mask, attrs.end_mask, attrs.shrink_axis_mask)
    if op == "SLICE":
        begin, size = (tuple(int(v) for v in _const_ints([t], what, where).reshape(-1))
                       for t, what in zip(consts[:2], ("the begin", "the size")))
        if len(begin) != len(size) or any(b < 0 for b in begin) or any(s < -1 for s in size):
            raise ModelFormatError(f"{where}: begin {list(begin)} and size {list(size)} must have one value per "
                                   f"axis, begin non-negative, size -1 (to the end) or more")
        # size -1: to the axis's end (the end mask)
        end_mask = sum(1 << i for i, s in enumerate(size) if s == -1)
        return StridedSlice(begin, tuple(b + max(s, 0) for b, s in zip(begin, size)), (1,) * len(begin), 0, end_mask)
    if op == "GATHER":
        idx = _const_ints(consts, "the indices", where)
        return Gather(attrs.axis, tuple(int(v) for v in idx.reshape(-1)), tuple(idx.shape))
    if op == "GATHER_ND":
        idx = _const_ints(consts, "the indices", where)
        if idx.ndim < 1 or idx.shape[-1] < 1:
            raise ModelFormatError(f"{where}: the indices must end in an axis of at least one coordinate, got "
                                   f"shape {list(idx.shape)}")
        return GatherNd(tuple(int(v) for v in idx.reshape(-1)), tuple(idx.shape))
    if op == "PADV2":
        padded = _fold_constants("PAD", attrs, consts[:1], where)
        value = consts[1] if len(consts) > 1 else None
        if value is None or not value.is_const or value.elements != 1 or value.dtype not in _INT8_16:
            raise UnsupportedOperator(f"{where}: the padding value must be a constant int8 or int16 scalar")
        return Pad(padded.paddings, int(np.asarray(value.data).reshape(-1)[0]))
    if op in ("REDUCE_MAX", "REDUCE_MIN"):
        return Reduce(tuple(int(a) for a in _const_ints(consts, "the axes", where).reshape(-1)), attrs.keep_dims)
    if op in ("ARG_MAX", "ARG_MIN"):
        axis = _const_ints(consts, "the axis", where).reshape(-1)
        if axis.size != 1:
            raise ModelFormatError(f"{where}: the axis must be one value, got {axis.tolist()}")
        return Reduce((int(axis[0]),))
    if op == "TILE":
        return Tile(tuple(int(v) for v in _const_ints(consts, "the multiples", where).reshape(-1)))
    if op == "BROADCAST_TO":
        _const_ints(consts, "the shape", where)  # a constant: the output tensor holds it
        return attrs
    if op == "MIRROR_PAD":
        return Pad(_fold_constants("PAD", attrs, consts[:1], where).paddings, None, attrs.mirror)
    if op in ("SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"):
        block = _const_ints(consts[:1], "the block shape", where).reshape(-1)
        edges = _const_ints(consts[1:2], "the paddings" if op == "SPACE_TO_BATCH_ND" else "the crops", where)
        if block.shape != (2,) or (block < 1).any() or edges.shape != (2, 2) or (edges < 0).any():
            raise UnsupportedOperator(f"{where}: block {block.tolist()} and {edges.tolist()}: a 2-D block of positive "
                                      f"sizes and non-negative 2 x 2 edges (NHWC spatial axes) are supported")
        return SpaceBatch((int(block[0]), int(block[1])), tuple((int(a), int(b)) for a, b in edges))
    return attrs
