"""Fixed-point parameters exactly as TFLite's kernels prepare them.

Every float-to-integer conversion here mirrors the reference kernels' types
(float32 products where TFLite multiplies floats, doubles where it widens),
because a single ULP of difference in a multiplier moves outputs by one LSB.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127


def f32(x) -> float:
    """Round a Python float (double) to float32 and back, like a C float variable."""
    return float(np.float32(x))


def round_away(x: float) -> int:
    """std::round / TfLiteRound: halves away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: real = m * 2^(shift - 31) with m in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = round_away(q * (1 << 31))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:  # TFLite saturates multipliers that large
        return (1 << 31) - 1, 30
    return q_fixed, shift


def quantize_multiplier_smaller_than_one(real: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: shift is the (non-positive) exponent."""
    if not 0.0 < real < 1.0:
        raise ValueError(f"rescale factor {real:g} must be in (0, 1) for this int8 kernel")
    return quantize_multiplier(real)


def quantize_multiplier_greater_than_one(real: float) -> tuple[int, int]:
    if not real > 1.0:
        raise ValueError(f"rescale factor {real:g} must be above 1 for this int8 kernel")
    m, shift = quantize_multiplier(real)
    return m, shift


def quantize_value(x: float, scale: float, zero_point: int) -> int:
    """zero_point + round(x / scale), computed in float32 as TFLite's Quantize helper does."""
    return zero_point + round_away(f32(f32(x) / f32(scale)))


def activation_range(activation: str, scale: float, zero_point: int,
                     qmin: int = INT8_MIN, qmax: int = INT8_MAX) -> tuple[int, int]:
    """CalculateActivationRangeQuantized for a fused activation."""
    if activation == "NONE":
        return qmin, qmax
    if activation == "RELU":
        return max(qmin, quantize_value(0.0, scale, zero_point)), qmax
    if activation == "RELU6":
        return (max(qmin, quantize_value(0.0, scale, zero_point)),
                min(qmax, quantize_value(6.0, scale, zero_point)))
    if activation == "RELU_N1_TO_1":
        return (max(qmin, quantize_value(-1.0, scale, zero_point)),
                min(qmax, quantize_value(1.0, scale, zero_point)))
    if activation == "RELU_0_TO_1":  # the operator only; no fused activation has this range
        return (max(qmin, quantize_value(0.0, scale, zero_point)),
                min(qmax, quantize_value(1.0, scale, zero_point)))
    raise ValueError(activation)


def _libm_expf():
    """The C library's expf: LiteRT builds its sigmoid table with it."""
    name = ctypes.util.find_library("m")
    if name is None:
        return None
    fn = ctypes.CDLL(name).expf
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


_EXPF = _libm_expf()


def expf(x: np.float32) -> np.float32:
    return np.float32(_EXPF(float(x))) if _EXPF else np.exp(np.float32(x))


def sigmoid_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """LUTPopulateInt8 for the logistic function, all in float32 as the reference does."""
    one = np.float32(1.0)
    inv = one / np.float32(out_scale)
    table = []
    for v in range(-128, 128):
        x = np.float32(in_scale) * np.float32(v - in_zp)
        y = one / (one + expf(-x))
        r = np.float32(round_away(float(np.float32(y * inv))))
        q = int(np.float32(r + np.float32(out_zp)))
        table.append(min(max(q, INT8_MIN), INT8_MAX))
    return tuple(table)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """MultiplyByQuantizedMultiplier on one int32 (gemmlowp's double rounding, as LiteRT's
    reference kernels): x * 2^max(shift, 0), the rounding doubling high multiply, then a
    rounding right shift by max(-shift, 0), half away from zero."""
    a = x * (1 << max(shift, 0))
    a = (a + (1 << 31)) % (1 << 32) - (1 << 31)  # an int32, as the C shift leaves it
    if a == multiplier == -(1 << 31):
        high = (1 << 31) - 1
    else:
        ab = a * multiplier
        nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
        q = abs(ab + nudge) >> 31  # C's division truncates toward zero
        high = q if ab + nudge >= 0 else -q
    e = max(-shift, 0)
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> e) + ((high & mask) > threshold)


def leaky_relu_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, alpha: float) -> tuple[int, ...]:
    """LiteRT's QuantizeLeakyRelu for every int8 input: x - zp rescaled by in/out (x >= zp) or by
    alpha * in/out, plus the output zero point, clamped. LeakyReluPrepare forms both
    multipliers in float32 before QuantizeMultiplier widens them."""
    identity = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
    negative = quantize_multiplier(float(np.float32(np.float32(in_scale) * np.float32(alpha)) / np.float32(out_scale)))
    table = []
    for v in range(-128, 128):
        d = v - in_zp
        m, s = identity if d >= 0 else negative
        table.append(min(max(out_zp + multiply_by_quantized_multiplier(d, m, s), INT8_MIN), INT8_MAX))
    return tuple(table)


def abs_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """LiteRT's int8 ABS for every input: |x - zp|, rescaled by in/out (a float32 quotient, as
    AbsPrepare forms it) only when the two scales differ, plus the output zero point, clamped."""
    rescale = np.float32(in_scale) != np.float32(out_scale)
    m, s = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
    table = []
    for v in range(-128, 128):
        d = abs(v - in_zp)
        q = (multiply_by_quantized_multiplier(d, m, s) if rescale else d) + out_zp
        table.append(min(max(q, INT8_MIN), INT8_MAX))
    return tuple(table)
