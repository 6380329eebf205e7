"""What a model file holds, read leniently (no IR, no support checks): its operators, constant
parameters and graph inputs/outputs. ``deploy suggest`` shows it even for a model whose
operators the readers do not support."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ModelFormatError
from .ir import DTYPE_BYTES
from .side_files import read_model_file


@dataclass(frozen=True)
class Port:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Inventory:
    format: str  # "tflite" | "onnx"
    ops: tuple[tuple[str, int], ...]  # operator -> count, in order of first use
    parameters: int  # elements of the constant tensors (weights, biases, tables)
    parameter_bytes: int
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]


def _count(names) -> tuple[tuple[str, int], ...]:
    return tuple(Counter(names).items())  # Counter keeps first-seen order


def _tflite(path: Path) -> Inventory:
    import tflite
    from .tflite_reader import _OP_NAMES, _TYPE_NAMES

    buf = read_model_file(path)
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ModelFormatError(f"{path}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    model = tflite.Model.GetRootAsModel(buf, 0)
    if model.SubgraphsLength() < 1:
        raise ModelFormatError(f"{path}: model has no subgraph")
    g = model.Subgraphs(0)
    names = []
    for k in range(g.OperatorsLength()):
        oc = model.OperatorCodes(g.Operators(k).OpcodeIndex())
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        names.append(_OP_NAMES.get(code, f"builtin {code}") if code != tflite.BuiltinOperator.CUSTOM
                     else f"CUSTOM({(oc.CustomCode() or b'?').decode('utf-8', 'replace')})")

    def port(i: int) -> Port:
        t = g.Tensors(int(i))
        return Port((t.Name() or b"").decode("utf-8", "replace"),
                    tuple(int(d) for d in (t.ShapeAsNumpy() if t.ShapeLength() else ())),
                    _TYPE_NAMES.get(t.Type(), f"type{t.Type()}"))

    elements = nbytes = 0
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        b = t.Buffer()
        if not 0 < b < model.BuffersLength():
            continue
        buffer = model.Buffers(b)
        size = buffer.DataLength() or (buffer.Size() if buffer.Offset() > 1 else 0)
        if size:
            nbytes += size
            elements += size // DTYPE_BYTES.get(_TYPE_NAMES.get(t.Type(), ""), 1)
    return Inventory("tflite", _count(names), elements, nbytes,
                     tuple(port(i) for i in (g.InputsAsNumpy() if g.InputsLength() else ())),
                     tuple(port(i) for i in (g.OutputsAsNumpy() if g.OutputsLength() else ())))


def _onnx(path: Path) -> Inventory:
    import onnx
    from onnx import helper

    data = read_model_file(path)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - any decoding failure is a format error
        raise ModelFormatError(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
    g = model.graph
    consts = {i.name for i in g.initializer}
    elements = sum(int(np.prod(i.dims, dtype=np.int64)) for i in g.initializer)
    nbytes = sum(int(np.prod(i.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(i.data_type).itemsize
                 for i in g.initializer)

    def port(v) -> Port:
        tt = v.type.tensor_type
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "unknown"
        return Port(v.name, dims, dtype)

    return Inventory("onnx", _count(n.op_type for n in g.node), elements, nbytes,
                     tuple(port(v) for v in g.input if v.name not in consts), tuple(port(v) for v in g.output))


def inventory(path: str | Path) -> Inventory:
    path = Path(path)
    readers = {".tflite": _tflite, ".onnx": _onnx}
    if path.suffix.lower() not in readers:
        raise ModelFormatError(f"{path}: unknown model format '{path.suffix.lower()}' (supported: .tflite, .onnx)")
    if not path.is_file():
        raise ModelFormatError(f"{path}: cannot read (no such file)")
    try:
        return readers[path.suffix.lower()](path)
    except ModelFormatError:
        raise
    except Exception as e:  # a corrupt file surfaces as any decoding error
        raise ModelFormatError(f"{path}: corrupt model file ({type(e).__name__}: {e})") from None
