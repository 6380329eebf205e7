"""Fixed-point parameters exactly as TFLite's kernels prepare them.

Every float-to-integer conversion here mirrors the reference kernels' types
(float32 products where TFLite multiplies floats, doubles where it widens),
because a single ULP of difference in a multiplier moves outputs by one LSB.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127


def f32(x) -> float:
    """Round a Python float (double) to float32 and back, like a C float variable."""
    return float(np.float32(x))


def round_away(x: float) -> int:
    """std::round / TfLiteRound: halves away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class RescaleError(ValueError):
    """A rescale factor the int32 fixed-point requantization cannot represent (lower() names the
    op and the scales of its tensors)."""


MAX_LEFT_SHIFT = 30  # x * (1 << shift) in int32: 1 << 31 overflows


def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: real = m * 2^(shift - 31) with m in [2^30, 2^31). Factors below 2^-32
    flush to zero as TFLite's do. From 2^30 up (a shift above 30) int32 has no representation:
    the reference's 1 << shift overflows (TFLite saturates such factors only in its
    single-rounding build), so they are refused with a RescaleError."""
    if not math.isfinite(real):  # scales whose float32 products overflow
        raise RescaleError(f"rescale factor {real:g} is not a finite number")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = round_away(q * (1 << 31))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > MAX_LEFT_SHIFT:
        raise RescaleError(f"rescale factor {real:g} is 2^{MAX_LEFT_SHIFT} or more: the int32 fixed-point "
                           f"multiplier's shift would be {shift}, beyond {MAX_LEFT_SHIFT}")
    return q_fixed, shift


def quantize_multiplier_smaller_than_one(real: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: shift is the (non-positive) exponent."""
    if not 0.0 < real < 1.0:
        raise ValueError(f"rescale factor {real:g} must be in (0, 1) for this kernel")
    return quantize_multiplier(real)


def quantize_multiplier_greater_than_one(real: float) -> tuple[int, int]:
    if not real > 1.0:
        raise ValueError(f"rescale factor {real:g} must be above 1 for this int8 kernel")
    m, shift = quantize_multiplier(real)
    return m, shift


def quantize_value(x: float, scale: float, zero_point: int) -> int:
    """zero_point + round(x / scale), computed in float32 as TFLite's Quantize helper does."""
    return zero_point + round_away(f32(f32(x) / f32(scale)))


INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def dtype_range(dtype: str) -> tuple[int, int]:
    """The stored range of an activation type (int16 in 16x8 layers, int32: an integer graph's raw
    values, else int8)."""
    if dtype == "int32":
        return -(1 << 31), (1 << 31) - 1
    return (INT16_MIN, INT16_MAX) if dtype == "int16" else (INT8_MIN, INT8_MAX)


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


def _libm(name: str):
    """A float function of the C library: LiteRT builds its int8 tables with them."""
    lib = ctypes.util.find_library("m")
    if lib is None:
        return None
    fn = getattr(ctypes.CDLL(lib), name)
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


_LIBM = {name: _libm(name) for name in ("expf", "tanhf", "logf", "sqrtf")}
_NUMPY = {"expf": np.exp, "tanhf": np.tanh, "logf": np.log, "sqrtf": np.sqrt}


def libm(name: str, x) -> np.float32:
    """``name`` (expf, tanhf, logf, sqrtf) of float32 ``x`` as the C library computes it."""
    fn = _LIBM[name]
    with np.errstate(all="ignore"):
        return np.float32(fn(float(x))) if fn else np.float32(_NUMPY[name](np.float32(x)))


def expf(x: np.float32) -> np.float32:
    return libm("expf", x)


# the float function of each int8 op LiteRT runs as a table (LUTPopulate)
FLOAT_FUNCTIONS = {
    "logistic": lambda x: np.float32(1.0) / (np.float32(1.0) + libm("expf", -x)),
    "tanh": lambda x: libm("tanhf", x),
    "exp": lambda x: libm("expf", x),
    "log": lambda x: libm("logf", x),
    "rsqrt": lambda x: np.float32(1.0) / libm("sqrtf", x),
}


def float_table(fn: str, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """LUTPopulate for the int8 op ``fn``: each input dequantized, the float function, times the
    inverse output scale, rounded, plus the output zero point, clamped, all in float32 as the
    reference does. A value int32 cannot hold (log of zero, a NaN) becomes INT32_MIN, as the
    reference's float-to-int conversion gives on x86-64, so it is clamped to -128."""
    f = FLOAT_FUNCTIONS[fn]
    inv = np.float32(1.0) / np.float32(out_scale)
    table = []
    for v in range(-128, 128):
        with np.errstate(all="ignore"):  # an absurd scale's infinities are defined below
            x = np.float32(in_scale) * np.float32(v - in_zp)
            p = np.float32(f(x) * inv)
        if not np.isfinite(p) or not -2.0 ** 31 <= round_away(float(p)) < 2.0 ** 31:
            q = -2 ** 31
        else:
            q = int(np.float32(np.float32(round_away(float(p))) + np.float32(out_zp)))
        table.append(min(max(q, INT8_MIN), INT8_MAX))
    return tuple(table)


def float_requant_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """onnxruntime's DequantizeLinear then QuantizeLinear of each int8 value: (v - zp) * scale in
    float32, divided by the output scale in float32, rounded half to even, plus the output zero
    point, saturated."""
    table = []
    for v in range(-128, 128):
        x = np.float32(v - in_zp) * np.float32(in_scale)
        q = int(np.rint(x / np.float32(out_scale))) + out_zp
        table.append(min(max(q, INT8_MIN), INT8_MAX))
    return tuple(table)


def sqrt_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """SQRT's int8 kernel in LiteRT (not a LUTPopulate table): each input dequantized in float32,
    its square root divided by the output scale and truncated toward zero (a cast, not a
    rounding), plus the output zero point, clamped. The reference refuses inputs below zero;
    the engine gives them -128, as for a value int32 cannot hold."""
    table = []
    for v in range(-128, 128):
        x = np.float32(in_scale) * np.float32(v - in_zp)
        with np.errstate(all="ignore"):
            p = libm("sqrtf", x) / np.float32(out_scale)
        if x < 0 or not np.isfinite(p) or not -2.0 ** 31 < float(p) < 2.0 ** 31:
            q = -2 ** 31
        else:
            q = int(p) + out_zp
        table.append(min(max(q, INT8_MIN), INT8_MAX))
    return tuple(table)


def sigmoid_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """LUTPopulateInt8 for the logistic function."""
    return float_table("logistic", in_scale, in_zp, out_scale, out_zp)


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


@functools.lru_cache(maxsize=None)
def int16_lut(function: str, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> tuple[int, ...]:
    """LiteRT's 513-entry int16 table of ``function`` ("exp" or "reciprocal": 1 / (1 + x)) for
    linear interpolation (its LUTPopulate in double): 512 segments over the input's int16 range;
    each entry is the function's value at the segment's start, less half of how far the
    interpolated midpoint misses the function's midpoint (so the error is shared between the two),
    the last the value at the range's end; rounding halves away from zero, saturated to int16."""
    f = {"exp": math.exp, "reciprocal": lambda v: 1.0 / (1.0 + v)}[function]
    in_min, in_max = in_scale * (-32768 - in_zp), in_scale * (32767 - in_zp)
    out_min, out_max = out_scale * (-32768 - out_zp), out_scale * (32767 - out_zp)
    step = (in_max - in_min) / 512
    inverse = 65536.0 / (out_max - out_min)
    table = []
    for i in range(512):
        start = f(in_min + i * step) * inverse
        middle = round_away(f(in_min + i * step + step / 2) * inverse)
        interpolated = round_away((f(in_min + (i + 1) * step) * inverse + round_away(start)) / 2)
        table.append(round_away(start) - round_away((interpolated - middle) / 2))
    table.append(round_away(f(in_max) * inverse))
    return tuple(int(min(max(v, -32768.0), 32767.0)) for v in table)


@functools.lru_cache(maxsize=None)
def sigmoid_table16() -> tuple[int, ...]:
    """The 256 entries (unsigned 0.16 fixed point) of LiteRT's 16-bit logistic and tanh, read
    with linear interpolation: sigmoid(i / 24), raised by half the gap between the curve and the
    chord at the segment's midpoint (the shift that shares the interpolation's error between the
    two); the last entry saturated to 65535. Reproduces LiteRT's table entry for entry."""
    def f(v: float) -> float:
        return 1.0 / (1.0 + math.exp(-v))
    table = []
    for i in range(255):
        a, b, m = f(i / 24), f((i + 1) / 24), f((i + 0.5) / 24)
        table.append(int(math.floor(65536 * (a + (m - (a + b) / 2) / 2) + 0.5)))
    return tuple(table) + (65535,)


def checked_log2(scale: float) -> int | None:
    """TFLite's CheckedLog2: the exponent n of a scale that is 2^n to within 1e-3 in log2, else None."""
    if scale <= 0:
        return None
    log2 = math.log(scale) / math.log(2.0)
    return round(log2) if abs(log2 - round(log2)) < 1e-3 else None


def sigmoid16_input_rescale(scale: float, tanh: bool) -> tuple[int, int]:
    """(multiplier, shift) LiteRT's 16-bit LOGISTIC / TANH apply to the input before the table:
    x * 3 * 2^12 * scale as (x * multiplier + rounding) >> shift. A power-of-two scale that makes
    the product a whole multiple of 3 (2^-12; TANH also 2^-11) multiplies by 3 << shift exactly."""
    log2 = checked_log2(scale)
    if log2 is not None and 12 + log2 in ((0, 1) if tanh else (0,)):
        return 3 << (12 + log2), 0
    m, shift = scale * 4096.0 * 3.0, 0
    while m <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        m *= 2.0
    return int(m), shift
