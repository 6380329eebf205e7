"""Readers for the real sample inputs that ship beside the reference models.

MLPerf Tiny ships C arrays (``kws_input_data.cc``: int8 spectrograms;
``ic_inputs.cc``: uint8 RGB images), TFLite Micro ships 8-bit grayscale BMPs
(``person.bmp``). Images are converted to the int8 models' inputs the way the
reference applications do: ``int8 = uint8 - 128``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")


def c_array_rows(path: Path) -> list[np.ndarray]:
    """The innermost ``{...}`` groups of integers of the first array initializer in a C file."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", Path(path).read_text()))
    body = text[text.index("=") + 1:]
    rows = [np.array([int(v) for v in re.findall(r"-?\d+", group)], dtype=np.int64)
            for group in re.findall(r"\{([^{}]*)\}", body)]
    if not rows:
        raise ValueError(f"{path}: no array initializer found")
    return rows


def read_gray_bmp(path: Path) -> np.ndarray:
    """An uncompressed 8-bit BMP as an (height, width) uint8 array, top row first."""
    data = Path(path).read_bytes()
    if data[:2] != b"BM":
        raise ValueError(f"{path}: not a BMP file")
    offset = int.from_bytes(data[10:14], "little")
    width = int.from_bytes(data[18:22], "little", signed=True)
    height = int.from_bytes(data[22:26], "little", signed=True)
    bpp = int.from_bytes(data[28:30], "little")
    if bpp != 8:
        raise ValueError(f"{path}: {bpp} bits per pixel, expected 8")
    stride = (width + 3) // 4 * 4
    rows = np.frombuffer(data, np.uint8, stride * abs(height), offset).reshape(abs(height), stride)[:, :width]
    return rows[::-1].copy() if height > 0 else rows.copy()  # positive height: bottom-up rows


def uint8_to_int8(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.int16) - 128).astype(np.int8)
