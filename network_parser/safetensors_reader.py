"""Read a ``.safetensors`` file: an 8-byte little-endian header length, a JSON header naming
every tensor's dtype, shape and byte range, then the data.

The container is parsed here rather than through the ``safetensors`` package because its numpy
API has no bfloat16 (and GPT-Neo checkpoints mix F32, F16 and BF16), and because every way a
file can be wrong must become a ModelFormatError naming the tensor: offsets past the end,
overlapping ranges, sizes that do not match the shape, unknown dtypes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .errors import ModelFormatError
from .side_files import read_model_file

MAX_HEADER_BYTES = 100 << 20  # the format's own limit
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8"),
          "I8": np.dtype("i1"), "U8": np.dtype("u1"), "I16": np.dtype("<i2"), "I32": np.dtype("<i4"),
          "I64": np.dtype("<i8"), "BOOL": np.dtype("?")}


def read_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str]]:
    """(tensors as float32 for the float dtypes, integers as stored; each tensor's stored dtype;
    the header's ``__metadata__``)."""
    path = Path(path)
    data = read_model_file(path)
    if len(data) < 8:
        raise ModelFormatError(f"{path}: not a safetensors file ({len(data)} bytes, no header length)")
    n = int.from_bytes(data[:8], "little")
    if n > MAX_HEADER_BYTES or 8 + n > len(data):
        raise ModelFormatError(f"{path}: not a safetensors file (header of {n} bytes in a file of {len(data)})")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise ModelFormatError(f"{path}: the safetensors header is not JSON ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: the safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise ModelFormatError(f"{path}: __metadata__ is not an object")
    body = memoryview(data)[8 + n:]
    tensors, dtypes, ranges = {}, {}, []
    for name, info in header.items():
        where = f"{path.name}: tensor '{name}'"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise ModelFormatError(f"{where}: needs dtype, shape and data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:  # a list or object is no key
            raise ModelFormatError(f"{where}: dtype {dtype!r} is not supported (known: {', '.join(DTYPES)})")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise ModelFormatError(f"{where}: shape {shape!r} must be a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= len(body)):
            raise ModelFormatError(f"{where}: data_offsets {offsets!r} lie outside the {len(body)} data bytes")
        need = math.prod(shape) * DTYPES[dtype].itemsize
        if offsets[1] - offsets[0] != need:
            raise ModelFormatError(f"{where}: {offsets[1] - offsets[0]} bytes, {dtype} {shape} needs {need}")
        ranges.append((offsets[0], offsets[1], name))
        raw = np.frombuffer(body[offsets[0]:offsets[1]], dtype=DTYPES[dtype]).reshape(shape)
        tensors[name], dtypes[name] = _widen(raw, dtype), dtype
    ranges.sort()
    for (s0, e0, a), (s1, e1, b) in zip(ranges, ranges[1:]):
        if s1 < e0:
            raise ModelFormatError(f"{path.name}: tensors '{a}' and '{b}' overlap in the data")
    return tensors, dtypes, {str(k): str(v) for k, v in meta.items()}


def _widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Float dtypes as float32 (exact for F16 and BF16); the others as stored."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in ("F16", "F32", "F64"):
        return raw.astype(np.float32)
    return raw.copy()


def take_float(tensors: dict, dtypes: dict, left: set, path: Path, name: str, shape: tuple[int, ...],
               hint: str) -> np.ndarray:
    """The tensor ``name`` as a reader asks for it: present (else the error says ``hint``, what
    the configuration implies), of ``shape``, of finite floats. It leaves ``left``, so that what
    remains there at the end was never asked for."""
    if name not in tensors:
        raise ModelFormatError(f"{path.name}: tensor '{name}' is missing ({hint})")
    t = tensors[name]
    left.discard(name)
    if tuple(t.shape) != shape:
        raise ModelFormatError(f"{path.name}: tensor '{name}' is {list(t.shape)}, config.json implies {list(shape)}")
    if t.dtype != np.float32 or not np.isfinite(t).all():
        raise ModelFormatError(f"{path.name}: tensor '{name}' must hold finite floats ({dtypes[name]})")
    return t
