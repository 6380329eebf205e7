"""Hostile models: each a small valid model made wrong in one way, with the error it must get.

    CASES: list[Case]   Case(name, suffix, make() -> bytes, kind, where)

``kind`` is the DeployError kind the CLI must report and ``where`` a piece of the message that
names the place (the tensor, op or node). tests/unit/test_hostile.py runs every case through
the ``deploy`` command under a memory limit and a timeout; bench/robustness_report.py tabulates them.
"""
from __future__ import annotations

import functools
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tests import tflite_builder as tb


@dataclass(frozen=True)
class Case:
    name: str
    suffix: str
    make: Callable[[], bytes]
    kind: str
    where: str
    beside: Callable[[], dict[str, bytes]] | None = None  # files next to the model (config.json)


def write_case(case: Case, folder: Path, stem: str = "model") -> Path:
    """The case's model (and the files it needs beside it) in ``folder``."""
    model = folder / f"{stem}{case.suffix}"
    model.write_bytes(case.make())
    for name, data in (case.beside() if case.beside else {}).items():
        (folder / name).write_bytes(data)
    return model


LIMIT_BYTES = 2 << 30  # the address space the deploy command gets


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def run_deploy(model: Path, out: Path, timeout: float = 120) -> tuple[int, str, float, int]:
    """``deploy MODEL -o OUT`` in a subprocess under the memory limit, killed after ``timeout``
    seconds (TimeoutError): (exit status, stderr, seconds, peak resident KiB of that process)."""
    root = Path(__file__).resolve().parents[1]
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "deployer.cli", str(model), "-o", str(out)], cwd=root,
                                stdout=subprocess.DEVNULL, stderr=err, text=True, preexec_fn=_limit_memory)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory
        finally:
            killer.cancel()
        err.seek(0)
        text = err.read()
    wall = time.monotonic() - start
    if wall >= timeout:
        raise TimeoutError(f"deploy {model.name} was still running after {timeout:g} s")
    return os.waitstatus_to_exitcode(status), text, wall, usage.ru_maxrss


# ---- .tflite: a conv -> pool -> reshape -> fc model, tampered before serialization ---------

def _cnn() -> tb.ModelBuilder:
    mb = tb.ModelBuilder(seed=3)
    x = mb.input((1, 8, 8, 3))
    y = mb.conv2d(x, 8, kernel=(3, 3), activation="RELU")  # tensors 1 weights, 2 bias, 3 out; op 0
    y = mb.max_pool(y)  # tensor 4; op 1
    y = mb.reshape(y, (1, 128))  # tensors 5 shape, 6 out; op 2
    mb.output(mb.fully_connected(y, 4))  # tensors 7 weights, 8 bias, 9 out; op 3
    return mb


def _mixed() -> tb.ModelBuilder:
    """float in -> quantize -> concat(x, logistic) -> hard_swish -> transposes -> pool -> mul ->
    relu6 -> softmax -> mean -> dequantize: the elementwise and layout ops."""
    mb = tb.ModelBuilder(seed=2)
    q = mb.quantize(mb.input((1, 4, 4, 6), dtype="float32"))  # tensors 0, 1; op 0
    b = mb.concat([q, mb.logistic(q)], axis=-1)  # 2 logistic (op 1); 3, 4 requantized inputs; 5 concat
    b = mb.transpose(mb.hard_swish(b), (0, 3, 1, 2))
    b = mb.reshape(mb.avg_pool(mb.transpose(b, (0, 2, 3, 1)), filter=(2, 2)), (1, 48))
    b = mb.softmax(mb.relu6(mb.mul(b, b)))
    b = mb.mean(mb.reshape(b, (1, 4, 12)), axes=(1,), keep_dims=False)
    mb.output(mb.dequantize(b))
    return mb


def _newer() -> tb.ModelBuilder:
    """STRIDED_SLICE -> TRANSPOSE_CONV -> GATHER -> SPLIT -> MIRROR_PAD: ops with constant parameters."""
    mb = tb.ModelBuilder(seed=4)
    x = mb.input((1, 6, 6, 4))  # tensor 0
    s = mb.strided_slice(x, [0, 1, 0, 0], [1, 5, 6, 4], [1, 1, 2, 1])  # 1-3 begin/end/strides, 4 out; op 0
    t = mb.transpose_conv(s, 4, kernel=(2, 2), stride=(2, 2))  # 5 output shape, 6 weights, 7 bias, 8 out; op 1
    g = mb.gather(t, [0, 2], axis=3)  # 9 indices, 10 out; op 2
    a, b = mb.split(g, 2, axis=1)  # 11 axis, 12 and 13 out; op 3
    mb.output(mb.mirror_pad(a, [[0, 0], [1, 1], [1, 1], [0, 0]]), b)  # 14 paddings, 15 out; op 4
    return mb


def _const_data(index: int, values, dtype=np.int32) -> Callable:
    """Tensor ``index`` (a constant) holding ``values`` instead, its shape unchanged."""
    def tamper(mb):
        t = mb._tensors[index]
        arr = np.asarray(values, dtype).reshape(t.shape)
        mb._buffers[t.buffer] = arr.tobytes()
    return tamper


def _const_type(index: int, dtype: str) -> Callable:
    def tamper(mb):
        t = mb._tensors[index]
        mb._buffers[t.buffer] = np.zeros(t.shape, np.float32).tobytes()
        t.dtype = dtype
    return tamper


def _tflite(tamper: Callable[[tb.ModelBuilder], None], base: Callable[[], tb.ModelBuilder] = _cnn) -> Callable[[], bytes]:
    def make() -> bytes:
        mb = base()
        tamper(mb)
        return mb.to_bytes()
    return make


def _shape(index: int, shape) -> Callable:
    def tamper(mb):
        mb._tensors[index].shape = tuple(shape)
    return tamper


def _scale(index: int, scale) -> Callable:
    def tamper(mb):
        mb._tensors[index].scale = np.asarray(scale, np.float32)
        mb._tensors[index].zero_point = np.zeros(len(scale), np.int64)
    return tamper


def _conv_options(**fields) -> Callable:
    def tamper(mb):
        base = dict(Padding=tb.fb.Padding.SAME, StrideW=1, StrideH=1, DilationWFactor=1, DilationHFactor=1,
                    FusedActivationFunction=1)
        mb._ops[0].options = tb._opts("Conv2DOptions", **{**base, **fields})
    return tamper


def _op_io(op: int, inputs=None, outputs=None) -> Callable:
    def tamper(mb):
        if inputs is not None:
            mb._ops[op].inputs = list(inputs)
        if outputs is not None:
            mb._ops[op].outputs = list(outputs)
    return tamper


def _drop_last_op(mb):
    mb._ops = mb._ops[:3]


def _float_only(mb):
    for t in mb._tensors:
        if t.dtype == "int8" and t.buffer == 0:
            t.dtype, t.scale, t.zero_point = "float32", None, None


def _weights_data(nbytes: int) -> Callable:
    def tamper(mb):
        mb._buffers[mb._tensors[1].buffer] = bytes(nbytes)
    return tamper


def _huge_weights(mb):
    mb._tensors[1].shape = (8, 3000, 3000, 3)  # 216 MB declared, 216 B stored


def _no_options(mb):
    mb._ops[1].options = None


def _opcode(code: int) -> Callable:
    def tamper(mb):
        mb._ops[1].code = code
    return tamper


def _swish() -> tb.ModelBuilder:
    mb = tb.ModelBuilder(seed=1)
    mb.output(mb.hard_swish(mb.input((1, 8))))  # tensors 0 input, 1 output; op 0
    return mb


def _huge_input_scale(mb):  # HARD_SWISH's input scale so large that its float32 rescale overflows
    mb._tensors[0].scale = mb._tensors[0].scale * 0 + 3.4e38


def _no_quant(mb):
    mb._tensors[7].scale = mb._tensors[7].zero_point = None


def _int32_operand(mb):
    mb._ops[1].code, mb._ops[1].inputs, mb._ops[1].options = tb.Op.ADD, [3, 2], None


def _no_ops(mb):
    mb._ops, mb._outputs = [], [0]


def _negative_axis(mb):
    mb._tensors[1].qdim = -3


def _constant_output(mb):
    mb._outputs = [1]


def _not_flatbuffer() -> bytes:
    return b"\x1c\x00\x00\x00TFL3" + bytes(range(256)) * 4


def _truncated() -> bytes:
    return _cnn().to_bytes()[:300]


# ---- .onnx: a QDQ MLP from onnxruntime's quantizer, tampered as a protobuf -------------------

@functools.lru_cache(maxsize=1)
def _qdq_bytes() -> bytes:
    import tempfile
    from pathlib import Path

    from tests.onnx_builder import quantized_model

    with tempfile.TemporaryDirectory() as tmp:
        return Path(quantized_model(Path(tmp), "cnn", per_channel=True)).read_bytes()


def _onnx(tamper: Callable) -> Callable[[], bytes]:
    def make() -> bytes:
        import onnx

        model = onnx.load_from_string(_qdq_bytes())
        tamper(model)
        return model.SerializeToString()
    return make


def _onnx_input_dims(*dims) -> Callable:
    def tamper(model):
        shape = model.graph.input[0].type.tensor_type.shape
        for d, v in zip(shape.dim, dims):
            d.dim_value = v
    return tamper


def _first(model, op_type: str):
    return next(n for n in model.graph.node if n.op_type == op_type)


def _init(model, name: str):
    return next(t for t in model.graph.initializer if t.name == name)


def _onnx_scale(value) -> Callable:
    """The first weight DequantizeLinear's scale(s) replaced by ``value``."""
    def tamper(model):
        from onnx import numpy_helper

        dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear"
                  and any(t.name == n.input[0] and len(t.dims) == 4 for t in model.graph.initializer))
        init = _init(model, dq.input[1])
        init.CopyFrom(numpy_helper.from_array(np.asarray(value, np.float32), init.name))
    return tamper


def _onnx_cycle(model):
    conv = _first(model, "Conv")
    conv.input[0] = model.graph.node[-1].output[0]


def _onnx_dangling(model):
    _first(model, "Conv").input[0] = "no_such_tensor"


def _onnx_external(model):
    from onnx import TensorProto

    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="/etc/passwd")


def _onnx_short_data(model):
    t = next(t for t in model.graph.initializer if t.raw_data and len(t.dims) == 4)
    t.raw_data = t.raw_data[:-3]


def _onnx_float() -> bytes:
    """The same network before quantization."""
    from tests.onnx_builder import float_model

    return float_model("cnn")[0].SerializeToString()


def _onnx_group(model):
    conv = next(n for n in model.graph.node if n.op_type == "Conv" and
                any(a.name == "group" and a.i > 1 for a in n.attribute))
    for a in conv.attribute:
        if a.name == "group":
            a.i = 3


def _onnx_strides(model):
    for a in _first(model, "Conv").attribute:
        if a.name == "strides":
            a.ints[:] = [0, 0]


def _onnx_undefined_type(model):
    next(t for t in model.graph.initializer if len(t.dims) == 4).data_type = 0


def _onnx_no_output(model):
    del _first(model, "Conv").output[:]


def _onnx_constant_without_output(model):
    from onnx import helper

    model.graph.node.insert(0, helper.make_node("Constant", [], [], name="orphan",
                                                value=helper.make_tensor("v", 1, [1], [1.0])))


def _onnx_bad_utf8() -> bytes:
    import onnx

    model = onnx.load_from_string(_qdq_bytes())
    _first(model, "Conv").name = "PLACEHOLDER"
    return model.SerializeToString().replace(b"PLACEHOLDER", b"\xff\xfe-conv-\xc3\x28x")  # same length


def _requant_shift(div, pad_cycle: bool = False) -> Callable[[], bytes]:
    """A Deeploy-style integer graph: Conv -> RequantShift, whose ``div`` attribute is ``div``
    (``pad_cycle``: the Conv reads two zero Pads that read each other)."""
    def make() -> bytes:
        from onnx import TensorProto, helper, numpy_helper

        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(rng.integers(-8, 8, (4, 2, 3, 3)).astype(np.float32), "weight"),
                 numpy_helper.from_array(np.full((1, 4, 1, 1), 3, np.int32), "mul"),
                 numpy_helper.from_array(np.zeros((1, 4, 1, 1), np.int32), "add")]
        pads = [helper.make_node("Pad", ["p2"], ["p1"], name="pad1", pads=[0, 0, 1, 1, 0, 0, 1, 1]),
                helper.make_node("Pad", ["p1"], ["p2"], name="pad2", pads=[0, 0, 0, 0, 0, 0, 0, 0])] if pad_cycle else []
        nodes = [*pads, helper.make_node("Conv", ["p1" if pad_cycle else "x", "weight"], ["acc"], kernel_shape=[3, 3],
                                         pads=[1, 1, 1, 1]),
                 helper.make_node("RequantShift", ["acc", "mul", "add"], ["y"], name="rqs", div=div,
                                  n_levels=numpy_helper.from_array(np.array(256, np.int64)),
                                  signed=numpy_helper.from_array(np.array(1, np.int64)))]
        graph = helper.make_graph(nodes, "rqs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4, 8, 8])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    return make


def _onnx_garbage() -> bytes:
    return bytes(range(7, 250)) * 9


# ---- the catalogue ---------------------------------------------------------------------------

CASES = [
    Case("absurd shape 1x65535x65535x3", ".tflite", _tflite(_shape(0, (1, 65535, 65535, 3))), "ModelFormatError",
         "tensor 0 'input_0' (1x65535x65535x3 int8) is 12,884,508,675 bytes"),
    Case("zero-size dimension", ".tflite", _tflite(_shape(3, (1, 8, 0, 8))), "ModelFormatError",
         "'conv2d_0/out' (1x8x0x8) has no elements"),
    Case("negative dimension", ".tflite", _tflite(_shape(4, (1, -4, 4, 8))), "ModelFormatError",
         "tensor 4 'max_pool_0/out' has a negative or dynamic dimension"),
    Case("huge declared weights", ".tflite", _tflite(_huge_weights), "ModelFormatError",
         "tensor 1 'conv2d_0/weights' holds 216 bytes, shape [8, 3000, 3000, 3] int8 needs 216000000"),
    Case("weights shorter than their shape", ".tflite", _tflite(_weights_data(100)), "ModelFormatError",
         "tensor 1 'conv2d_0/weights' holds 100 bytes"),
    Case("cycle", ".tflite", _tflite(_op_io(1, inputs=[6])), "ModelFormatError",
         "op 1 MAX_POOL_2D (output 'max_pool_0/out') reads tensor 6 'reshape_0/out' before any op writes it"),
    Case("dangling tensor index", ".tflite", _tflite(_op_io(3, inputs=[6, 70, 8])), "ModelFormatError",
         "op 3 (FULLY_CONNECTED) input refers to tensor 70"),
    Case("output never written", ".tflite", _tflite(_drop_last_op), "ModelFormatError",
         "graph output 9 is never written"),
    Case("tensor written twice", ".tflite", _tflite(_op_io(3, outputs=[6])), "ModelFormatError",
         "op 3 FULLY_CONNECTED (output 'reshape_0/out'): writes tensor 6 'reshape_0/out', which a graph input, a "
         "constant or an earlier op already holds"),
    Case("rescale overflowing float32", ".tflite", _tflite(_huge_input_scale, _swish), "UnsupportedOperator",
         "op 0 HARD_SWISH (output 'hard_swish_0/out'): rescale factor inf is not a finite number"),
    Case("omitted required input", ".tflite", _tflite(_op_io(3, inputs=[-1, 7, 8])), "ModelFormatError",
         "op 3 FULLY_CONNECTED (output 'fully_connected_0/out'): inputs [-1, 7, 8], FULLY_CONNECTED needs at least 2"),
    Case("per-channel scales of the wrong length", ".tflite", _tflite(_scale(1, [0.1, 0.2, 0.3])),
         "ModelFormatError", "tensor 1 'conv2d_0/weights': 3 scales and 3 zero points do not match shape [8, 3, 3, 3]"),
    Case("zero scale", ".tflite", _tflite(_scale(3, [0.0])), "ModelFormatError",
         "tensor 3 'conv2d_0/out' has a zero, negative or non-finite quantization scale"),
    Case("negative scale", ".tflite", _tflite(_scale(1, [-0.1] * 8)), "ModelFormatError",
         "tensor 1 'conv2d_0/weights' has a zero, negative or non-finite quantization scale"),
    Case("NaN scale", ".tflite", _tflite(_scale(6, [float("nan")])), "ModelFormatError",
         "tensor 6 'reshape_0/out' has a zero, negative or non-finite quantization scale"),
    Case("float-only model", ".tflite", _tflite(_float_only), "UnsupportedOperator",
         "op 0 CONV_2D (output 'conv2d_0/out'): input 'input_0' is float32"),
    Case("unsupported fused activation", ".tflite", _tflite(_conv_options(FusedActivationFunction=4)),
         "UnsupportedOperator", "op 0 CONV_2D (output 'conv2d_0/out'): fused activation 4 is not supported"),
    Case("zero stride", ".tflite", _tflite(_conv_options(StrideH=0)), "ModelFormatError",
         "op 0 CONV_2D (output 'conv2d_0/out'): stride [0, 1] must be positive"),
    Case("unknown padding", ".tflite", _tflite(_conv_options(Padding=7)), "ModelFormatError",
         "op 0 CONV_2D (output 'conv2d_0/out'): unknown padding 7"),
    Case("options missing", ".tflite", _tflite(_no_options), "ModelFormatError",
         "op 1 MAX_POOL_2D (output 'max_pool_0/out'): no Pool2DOptions"),
    Case("unsupported operator", ".tflite", _tflite(_opcode(tb.Op.SQUARE)),
         "UnsupportedOperator", "op 1 SQUARE (output 'max_pool_0/out')"),
    Case("recurrent op without its inputs", ".tflite", _tflite(_opcode(tb.Op.UNIDIRECTIONAL_SEQUENCE_LSTM)),
         "ModelFormatError", "op 1 UNIDIRECTIONAL_SEQUENCE_LSTM (output 'max_pool_0/out')"),
    # found by the fuzzers (tests/fuzz), kept as regressions
    Case("weights without quantization", ".tflite", _tflite(_no_quant), "ModelFormatError",
         "op 3 FULLY_CONNECTED (output 'fully_connected_0/out'): int8 tensor 7 'fully_connected_0/weights' has no "
         "quantization"),
    Case("constant int32 operand of ADD", ".tflite", _tflite(_int32_operand), "UnsupportedOperator",
         "op 1 ADD (output 'max_pool_0/out'): input 'conv2d_0/bias' is int32"),
    Case("quantized dimension out of range", ".tflite", _tflite(_negative_axis), "ModelFormatError",
         "tensor 1 'conv2d_0/weights': 8 scales and 8 zero points do not match shape [8, 3, 3, 3] on axis -3"),
    Case("constant graph output", ".tflite", _tflite(_constant_output), "ModelFormatError",
         "graph output 1 'conv2d_0/weights' is a constant tensor"),
    Case("elementwise output smaller than its input", ".tflite", _tflite(_shape(2, (1,)), _mixed),
         "UnsupportedOperator", "op 1 LOGISTIC (output 'logistic_0/out'): input [1, 4, 4, 6] and output [1] differ"),
    Case("concatenation of mismatched shapes", ".tflite", _tflite(_shape(5, (1, 4, 4, 13)), _mixed),
         "UnsupportedOperator", "do not concatenate to [1, 4, 4, 13] on axis 3"),
    Case("mean to the wrong shape", ".tflite", _tflite(_shape(20, (1, 24)), _mixed), "UnsupportedOperator",
         "output [1, 24] is not [1, 4, 12] reduced over axes [1]"),
    Case("fully connected output of the wrong size", ".tflite", _tflite(_shape(9, ())), "UnsupportedOperator",
         "op 3 FULLY_CONNECTED (output 'fully_connected_0/out'): output [] does not hold 1 x 4 values"),
    Case("no operators", ".tflite", _tflite(_no_ops), "ModelFormatError", "the model has no operators"),
    Case("not a flatbuffer", ".tflite", _not_flatbuffer, "ModelFormatError", "corrupt TFLite flatbuffer"),
    Case("truncated file", ".tflite", _truncated, "ModelFormatError", "TFLite flatbuffer"),
    Case("empty file", ".tflite", lambda: b"", "ModelFormatError", "not a TFLite flatbuffer"),
    Case("onnx: absurd input shape", ".onnx", _onnx(_onnx_input_dims(1, 3, 65535, 65535)), "ModelFormatError",
         "tensor 0 'input' (1x3x65535x65535 float32) is 51,538,034,700 bytes"),
    Case("onnx: zero-size input", ".onnx", _onnx(_onnx_input_dims(1, 3, 0, 16)), "UnsupportedOperator",
         "graph input 'input' has shape [1, 3, 0, 16]"),
    Case("onnx: cycle", ".onnx", _onnx(_onnx_cycle), "ModelFormatError",
         "node 12 Conv 'conv3': reads 'gemm22' before any node writes it (a cycle"),
    Case("onnx: dangling input", ".onnx", _onnx(_onnx_dangling), "ModelFormatError",
         "node 12 Conv 'conv3': reads 'no_such_tensor' before any node writes it"),
    Case("onnx: external data", ".onnx", _onnx(_onnx_external), "ModelFormatError",
         "initializer 'input_zero_point': its data is in an external file"),
    Case("onnx: initializer shorter than its dims", ".onnx", _onnx(_onnx_short_data), "ModelFormatError",
         "initializer 'w1_quantized': unreadable tensor data"),
    Case("onnx: zero weight scale", ".onnx", _onnx(_onnx_scale([0.0] * 8)), "ModelFormatError",
         "node 6 DequantizeLinear 'w14_DequantizeLinear': scales must be positive"),
    Case("onnx: per-channel scales of the wrong length", ".onnx", _onnx(_onnx_scale([0.1, 0.2, 0.3])),
         "ModelFormatError", "node 6 DequantizeLinear 'w14_DequantizeLinear': 3 scales but 16 zero points"),
    Case("onnx: float-only model", ".onnx", _onnx_float, "UnsupportedOperator",
         "node 0 Conv 'conv3': weights holds non-integer values; an integer graph needs integer constants"),
    Case("onnx: group that does not divide the channels", ".onnx", _onnx(_onnx_group), "UnsupportedOperator",
         "node 15 Conv 'conv7': grouped convolution (group 3"),
    Case("onnx: zero stride", ".onnx", _onnx(_onnx_strides), "ModelFormatError",
         "node 12 Conv 'conv3': strides (0, 0)"),
    Case("onnx: initializer of undefined type", ".onnx", _onnx(_onnx_undefined_type), "ModelFormatError",
         "initializer 'w1_quantized': unreadable tensor data"),
    Case("onnx: node without outputs", ".onnx", _onnx(_onnx_no_output), "ModelFormatError",
         "node 12 Conv 'conv3': 3 inputs and 0 outputs"),
    Case("onnx: Constant without output", ".onnx", _onnx(_onnx_constant_without_output), "ModelFormatError",
         "node 0 Constant 'orphan' has no output"),
    Case("onnx: name not UTF-8", ".onnx", _onnx_bad_utf8, "ModelFormatError", "node 12 name b'\\xff\\xfe-conv-\\xc3(x' is not valid UTF-8"),
    Case("onnx: RequantShift div that is not a number", ".onnx", _requant_shift("sixteen"), "ModelFormatError",
         "node 1 RequantShift 'rqs': attribute 'div' must hold one number"),
    Case("onnx: RequantShift div of several values", ".onnx",
         _requant_shift(__import__("onnx").numpy_helper.from_array(np.array([4, 8], np.int64))), "ModelFormatError",
         "node 1 RequantShift 'rqs': attribute 'div' must hold one number, found [4, 8]"),
    Case("onnx: cycle of Pad nodes", ".onnx", _requant_shift(16, pad_cycle=True), "ModelFormatError",
         "node 2 Conv 'acc': its input 'p1' comes from a cycle of Pad nodes"),
    Case("onnx: not a protobuf", ".onnx", _onnx_garbage, "ModelFormatError", "not a readable ONNX model"),
]


# ---- .safetensors: a small GPT-Neo checkpoint and its config.json, one of them made wrong ------

def _gptneo(tamper=None, cfg_edit=None) -> tuple[Callable[[], bytes], Callable[[], dict[str, bytes]]]:
    """(make, beside) for a random 2-layer GPT-Neo: ``tamper(tensors)`` edits the tensors before
    encoding (or returns the file's bytes itself), ``cfg_edit(cfg)`` the config."""
    import json

    from tests import gptneo_builder as gb

    def config() -> dict:
        cfg = gb.config()
        return cfg_edit(cfg) or cfg if cfg_edit else cfg

    def make() -> bytes:
        ts = gb.tensors(gb.config())
        out = tamper(ts) if tamper else None
        with np.errstate(over="ignore"):  # a float32 beyond float16's range becomes inf: one case wants it
            return out if isinstance(out, bytes) else gb.encode(ts, {"format": "pt"})

    return make, lambda: {"config.json": json.dumps(config()).encode()}


def _st_header(header: dict, data: bytes = b"") -> bytes:
    import json
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def _st_case(name, kind, where, tamper=None, cfg_edit=None, beside=None) -> Case:
    make, config = _gptneo(tamper, cfg_edit)
    return Case(f"safetensors: {name}", ".safetensors", make, kind, where, beside or config)


def _set(key, value):
    def edit(cfg):
        cfg[key] = value
    return edit


def _replace(name, arr=None, dtype=None):
    def tamper(ts):
        old_dtype, old = ts[name]
        ts[name] = (dtype or old_dtype, old if arr is None else arr(old))
    return tamper


WTE = "transformer.wte.weight"
SAFETENSORS_CASES = [
    _st_case("not a safetensors file", "ModelFormatError", "not a safetensors file",
             tamper=lambda ts: b"PK\x03\x04 this is a zip archive"),
    _st_case("empty file", "ModelFormatError", "not a safetensors file", tamper=lambda ts: b""),
    _st_case("header longer than the file", "ModelFormatError", "not a safetensors file (header of",
             tamper=lambda ts: (1 << 40).to_bytes(8, "little") + b"{}"),
    _st_case("header nested 100,000 deep", "ModelFormatError", "not JSON (RecursionError",
             tamper=lambda ts: (200_002).to_bytes(8, "little") + b"[" * 100_001 + b"]" * 100_001),
    _st_case("absurd declared shape", "ModelFormatError", f"tensor '{WTE}'",
             tamper=lambda ts: _st_header({WTE: {"dtype": "F32", "shape": [65535, 65535, 4096],
                                                 "data_offsets": [0, 16]}}, bytes(16))),
    _st_case("data past the end", "ModelFormatError", "tensor 'w': data_offsets",
             tamper=lambda ts: _st_header({"w": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 1 << 22]}},
                                          bytes(64))),
    _st_case("unsupported dtype", "ModelFormatError", f"tensor '{WTE}': dtype 'F8_E4M3'",
             tamper=lambda ts: _st_header({WTE: {"dtype": "F8_E4M3", "shape": [64, 32], "data_offsets": [0, 2048]}},
                                          bytes(2048))),
    _st_case("overlapping tensors", "ModelFormatError", "'a' and 'b' overlap",
             tamper=lambda ts: _st_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))),
    _st_case("missing tensor", "ModelFormatError", "tensor 'transformer.h.1.mlp.c_proj.bias' is missing",
             tamper=lambda ts: ts.pop("transformer.h.1.mlp.c_proj.bias") and None),
    _st_case("tensor of the wrong shape", "ModelFormatError",
             "tensor 'transformer.h.0.mlp.c_fc.weight' is [64, 31], config.json implies [64, 32]",
             tamper=_replace("transformer.h.0.mlp.c_fc.weight", lambda w: w[:, :31])),
    _st_case("NaN weight", "ModelFormatError", "tensor 'transformer.h.1.attn.attention.v_proj.weight' must hold "
             "finite floats", tamper=_replace("transformer.h.1.attn.attention.v_proj.weight",
                                              lambda w: np.where(np.arange(w.size).reshape(w.shape) == 7, np.nan, w))),
    _st_case("infinite F16 weight", "ModelFormatError", f"tensor '{WTE}' must hold finite floats",
             tamper=_replace(WTE, lambda w: np.full_like(w, 1e6), "F16")),
    _st_case("tensor GPT-Neo does not have", "ModelFormatError", "transformer.h.0.lora_a",
             tamper=lambda ts: ts.update({"transformer.h.0.lora_a": ("F32", np.zeros(4, np.float32))})),
    _st_case("untied output head", "UnsupportedOperator", "lm_head.weight differs from wte",
             tamper=lambda ts: ts.update({"lm_head.weight": ("F32", np.ones_like(ts[WTE][1]))})),
    _st_case("config.json missing", "ModelFormatError", "needs its config.json beside it",
             beside=lambda: {}),
    _st_case("config.json not JSON", "ModelFormatError", "config.json: not JSON",
             beside=lambda: {"config.json": b"{\"model_type\": "}),
    _st_case("config.json of another architecture", "UnsupportedOperator", "model_type 'bert'",
             cfg_edit=_set("model_type", "bert")),
    _st_case("heads that do not divide d_model", "ModelFormatError", "hidden_size 32 is not a multiple of num_heads 5",
             cfg_edit=_set("num_heads", 5)),
    _st_case("negative layer count", "ModelFormatError", "num_layers must be a positive integer, got -2",
             cfg_edit=_set("num_layers", -2)),
    _st_case("attention layers of the wrong length", "ModelFormatError", "attention_layers must list",
             cfg_edit=_set("attention_layers", ["global"])),
    _st_case("absurd vocabulary in config.json", "ModelFormatError",
             f"tensor '{WTE}' is [64, 32], config.json implies [4294967296, 32]",
             cfg_edit=_set("vocab_size", 1 << 32)),
    _st_case("layer-norm epsilon out of range", "ModelFormatError", "layer_norm_epsilon 2 must be in (0, 1)",
             cfg_edit=_set("layer_norm_epsilon", 2)),
]
CASES += SAFETENSORS_CASES

# the operators' constant parameters (begin/end, output shape, indices, axis, paddings)
CASES += [
    Case("slice begin of floats", ".tflite", _tflite(_const_type(1, "float32"), _newer), "ModelFormatError",
         "op 0 STRIDED_SLICE (output 'strided_slice_0/out'): the begin 'strided_slice_0/begin' is float32"),
    Case("slice that does not give its output", ".tflite", _tflite(_const_data(2, [1, 6, 6, 4]), _newer),
         "UnsupportedOperator", "op 0 STRIDED_SLICE (output 'strided_slice_0/out'): the slice gives [1, 5, 3, 4]"),
    Case("zero slice stride", ".tflite", _tflite(_const_data(3, [1, 0, 1, 1]), _newer), "ModelFormatError",
         "strides [1, 0, 1, 1] must have one value per axis, strides non-zero"),
    Case("transpose conv output shape unlike its output", ".tflite", _tflite(_const_data(5, [1, 9, 6, 4]), _newer),
         "ModelFormatError", "op 1 TRANSPOSE_CONV (output 'transpose_conv_0/out'): the output shape [1, 9, 6, 4] "
         "differs from the output tensor's [1, 8, 6, 4]"),
    Case("gather index out of range", ".tflite", _tflite(_const_data(9, [0, 7]), _newer), "UnsupportedOperator",
         "op 2 GATHER (output 'gather_0/out'): indices [0, 7] outside the axis's 4 entries"),
    Case("split axis out of range", ".tflite", _tflite(_const_data(11, 9), _newer), "ModelFormatError",
         "op 3 SPLIT (output 'split_0/out0'): axis 9 does not index the input's 4 axes"),
    Case("mirror padding wider than the axis", ".tflite", _tflite(_const_data(14, [[0, 0], [4, 1], [1, 1], [0, 0]]),
                                                                   _newer),
         "UnsupportedOperator", "op 4 MIRROR_PAD (output 'mirror_pad_0/out'): paddings"),
]

