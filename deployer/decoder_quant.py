"""Weight and KV-cache quantization for the decoder engines, bit for bit what the C does.

Weights (``--weights``):
  q4_0  blocks of 32 inputs per row: 4-bit codes q in 0..15 and one bfloat16 scale d (of
        either sign), the weight being d * (q - 8) (4.5 bits per weight). d puts the block's
        largest-magnitude value on code 0 (d = peak / -8, as ggml's Q4_0) or on code 15
        (d = peak / 7), whichever has the smaller squared error: a block that was Q4_0 with
        bfloat16 scales comes back exactly.
  int8  one float32 scale per row, codes in -127..127.
Activations entering a quantized matmul are quantized per block of 32 to int8 (one float32
scale each), so each block's dot product is an exact integer sum; the float work is one
multiply-add per block.
KV cache (``--kv-cache``): int8 or int4 codes with one float32 scale per block of 32 values.

Rounding is round-half-away-from-zero of ``x * (1 / scale)`` in float32, which the C computes
the same way (compiled with -ffp-contract=off): for weights as trunc(v +- 0.5) in float32, for
activations and the KV cache exactly (round_half_away).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32
BLOCK = 32


def round_away(x: np.ndarray) -> np.ndarray:
    """Round half away from zero, in float32 (the C: (int)(x + (x >= 0 ? 0.5f : -0.5f)))."""
    x = np.asarray(x, F32)
    return np.trunc(x + np.where(x >= 0, F32(0.5), F32(-0.5)).astype(F32)).astype(np.int32)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round half away from zero exactly (the engine's round_half_away for activations and the KV
    cache: VCVTA, or v + (0.5 - 2^-25) truncated, which equals it for |v| <= 128)."""
    x = np.asarray(x, F32).astype(np.float64)
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(np.int32)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even."""
    bits = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(F32)


def padded(cols: int) -> int:
    """A quantized row's stored length: whole blocks, the last one zero-padded (an MLP of 172)."""
    return -(-cols // BLOCK) * BLOCK


def matrix_bytes(fmt: str, rows: int, cols: int) -> int:
    """A rows x cols matrix stored as ``fmt``: Q4_0 18 bytes per block of 32 (16 of codes and a
    bfloat16 scale), int8 a byte each and a float32 scale per row, f32 four bytes each; quantized
    rows are padded to whole blocks."""
    return {"q4_0": rows * padded(cols) // BLOCK * 18, "int8": rows * padded(cols) + 4 * rows,
            "f32": 4 * rows * cols}[fmt]


@dataclass(frozen=True)
class Q4Matrix:
    """rows x cols weights: ``codes`` [rows, padded(cols)] in 0..15 (packed two per byte in the
    C; code 8, a zero, past ``cols``), ``scales`` [rows, padded(cols) / 32] bfloat16 bits."""
    codes: np.ndarray
    scales: np.ndarray
    cols: int

    def dequantize(self) -> np.ndarray:
        d = from_bf16(self.scales).repeat(BLOCK, axis=1)
        return ((self.codes.astype(F32) - F32(8)) * d).astype(F32)[:, :self.cols]

    @property
    def nbytes(self) -> int:
        return matrix_bytes("q4_0", self.codes.shape[0], self.cols)


@dataclass(frozen=True)
class Int8Matrix:
    codes: np.ndarray  # [rows, padded(cols)] int8, zeros past cols
    scales: np.ndarray  # [rows] float32
    cols: int

    def dequantize(self) -> np.ndarray:
        return (self.codes.astype(F32) * self.scales[:, None]).astype(F32)[:, :self.cols]

    @property
    def nbytes(self) -> int:
        return matrix_bytes("int8", self.codes.shape[0], self.cols)


def _codes(blocks: np.ndarray, d: np.ndarray) -> np.ndarray:
    inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    return np.clip(round_away(blocks * inv[..., None]) + 8, 0, 15).astype(np.uint8)


def _pad(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, F32)
    return np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, padded(w.shape[-1]) - w.shape[-1])])


def quantize_q4_0(w: np.ndarray) -> Q4Matrix:
    rows, cols = w.shape
    blocks = _pad(w).reshape(rows, padded(cols) // BLOCK, BLOCK)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)[..., 0]  # signed
    best_codes, best_scales, best_err = None, None, None
    for div in (-8, 7):  # the peak on code 0 (d * -8) or on code 15 (d * 7)
        bits = to_bf16(peak / F32(div))
        d = from_bf16(bits)
        codes = _codes(blocks, d)
        err = (((codes.astype(F32) - 8) * d[..., None] - blocks) ** 2).sum(axis=2)
        if best_err is None:
            best_codes, best_scales, best_err = codes, bits, err
        else:
            better = err < best_err
            best_codes = np.where(better[..., None], codes, best_codes)
            best_scales = np.where(better, bits, best_scales)
            best_err = np.minimum(err, best_err)
    return Q4Matrix(best_codes.reshape(rows, padded(cols)), best_scales, cols)


def quantize_int8_rows(w: np.ndarray) -> Int8Matrix:
    cols = np.shape(w)[1]
    w = _pad(w)
    amax = np.abs(w).max(axis=1)
    s = (amax / F32(127)).astype(F32)
    inv = np.where(s > 0, F32(1) / np.where(s > 0, s, F32(1)), F32(0)).astype(F32)
    return Int8Matrix(np.clip(round_away(w * inv[:, None]), -127, 127).astype(np.int8), s, cols)


def quantize_blocks(x: np.ndarray, levels: int = 127, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """A vector in blocks of ``block`` (the last zero-padded): int codes in -levels..levels and one
    float32 scale per block."""
    x = np.asarray(x, F32)
    xb = np.pad(x, (0, -len(x) % block)).reshape(-1, block)
    amax = np.abs(xb).max(axis=1)
    s = (amax / F32(levels)).astype(F32)
    inv = np.where(s > 0, F32(1) / np.where(s > 0, s, F32(1)), F32(0)).astype(F32)
    v = (xb * inv[:, None]).astype(F32)
    return np.clip(round_half_away(np.clip(v, -levels, levels)), -levels, levels).astype(np.int8), s


def matvec(w, x: np.ndarray) -> np.ndarray:
    """y = W x as the engine computes it: float32 for a float matrix; for a quantized one, x in
    int8 blocks, an exact integer sum per block, then one float multiply-add per block (in
    block order)."""
    if isinstance(w, np.ndarray):  # each row summed left to right, as the C's loop
        return np.cumsum(w * np.asarray(x, F32)[None, :], axis=1, dtype=F32)[:, -1]
    xq, xs = quantize_blocks(x)
    rows, cols = w.codes.shape  # padded
    nb = cols // BLOCK
    if isinstance(w, Q4Matrix):
        q = w.codes.astype(np.int32).reshape(rows, nb, BLOCK) - 8
        wd = from_bf16(w.scales)  # [rows, nb]
    else:
        q = w.codes.astype(np.int32).reshape(rows, nb, BLOCK)
        wd = np.repeat(w.scales[:, None], nb, axis=1)
    isum = (q * xq.astype(np.int32)[None]).sum(axis=2)  # [rows, nb], exact
    acc = np.zeros(rows, F32)
    for b in range(nb):  # the C's order: block by block
        acc = (acc + isum[:, b].astype(F32) * (wd[:, b] * xs[b]).astype(F32)).astype(F32)
    return acc


def error_stats(w: np.ndarray, approx: np.ndarray) -> tuple[float, float]:
    """(RMSE, SNR in dB) of a quantized matrix against the float one."""
    err = np.asarray(approx, np.float64) - np.asarray(w, np.float64)
    rmse = float(np.sqrt((err ** 2).mean()))
    power = float((np.asarray(w, np.float64) ** 2).mean())
    snr = float("inf") if rmse == 0 else 10 * np.log10(power / rmse ** 2)
    return rmse, snr
