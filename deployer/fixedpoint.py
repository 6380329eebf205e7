"""Vectorised gemmlowp / TFLite fixed-point primitives on int64 numpy arrays.

Values are int32 quantities carried in int64 so that products never overflow;
results are exactly what the C kernels compute in int32/int64.
"""
from __future__ import annotations

import math

import numpy as np

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def round_half_away(v) -> np.ndarray:
    """C round(): to nearest, halves away from zero (exact, no v + 0.5 double rounding)."""
    v = np.asarray(v)
    t = np.trunc(v)
    frac = v - t
    return (t + (frac >= 0.5) - (frac <= -0.5)).astype(np.int64)


def wrap32(x) -> np.ndarray:
    """Two's complement wrap to int32 (what the C code's unsigned shifts produce)."""
    return ((_i64(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul."""
    a, b = _i64(a), _i64(b)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    r = np.where(s >= 0, s >> 31, -((-s) >> 31))  # C division truncates toward zero
    return np.where((a == I32_MIN) & (b == I32_MIN), I32_MAX, r)


def rdbpot(x, exponent) -> np.ndarray:
    """RoundingDivideByPOT: round half away from zero."""
    x, e = _i64(x), _i64(exponent)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def mbqm(x, multiplier, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier, gemmlowp's double-rounding form."""
    shift = _i64(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rdbpot(srdhm(wrap32(_i64(x) << left), multiplier), right)


def mbqm64_terms(multiplier, shift) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mbqm64's per-channel terms: the multiplier rounded to 16 bits (0x7FFF from 0x7FFF0000
    up), the rounding addend and the right shift 15 - shift: y = (x * reduced + addend) >> total."""
    m = _i64(multiplier)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - _i64(shift)
    return reduced, np.int64(1) << (total - 1), total


def mbqm64(x, multiplier, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier of an int64 accumulator (TFLite's 16x8 kernels): one
    rounding right shift of x times the reduced multiplier (mbqm64_terms), the result wrapped to
    int32 as the reference's cast does."""
    reduced, addend, total = mbqm64_terms(multiplier, shift)
    return wrap32((_i64(x) * reduced + addend) >> total)


def saturating_left_shift(x, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a non-negative exponent."""
    return np.clip(_i64(x) << exponent, I32_MIN, I32_MAX)


# ---- gemmlowp FixedPoint<int32, IntegerBits> helpers -----------------------

def _one(integer_bits: int) -> int:
    return I32_MAX if integer_bits == 0 else 1 << (31 - integer_bits)


def fp_mul(a, b) -> np.ndarray:
    return srdhm(a, b)


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(x) for x in [-1/4, 0), Q0.31 in and out."""
    constant_term = 1895147668  # exp(-1/8)
    constant_1_over_3 = 715827883
    x = _i64(a) + (1 << 28)  # a + 1/8
    x2 = fp_mul(x, x)
    x3 = fp_mul(x2, x)
    x4 = fp_mul(x2, x2)
    x4_over_4 = rdbpot(x4, 2)
    poly = rdbpot(fp_mul(x4_over_4 + x3, constant_1_over_3) + x2, 1)
    return constant_term + fp_mul(constant_term, x + poly)


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values for FixedPoint<int32, integer_bits>; result Q0.31."""
    a = _i64(a)
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter
    # rescale a_mod... from integer_bits to 0 integer bits
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_left_shift(a_mod_quarter_minus_one_quarter, integer_bits))
    remainder = a_mod_quarter_minus_one_quarter - a
    multipliers = {-2: 1672461947, -1: 1302514674, 0: 790015084, 1: 290630308,
                   2: 39332535, 3: 720401, 4: 242}
    for exponent, mult in multipliers.items():
        if integer_bits > exponent:
            shift = fractional_bits + exponent
            if 0 <= shift < 31:
                bit = (remainder & (1 << shift)) != 0
                result = np.where(bit, fp_mul(result, mult), result)
    if integer_bits > 5:
        clamp = -(1 << (fractional_bits + 5))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, I32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1 / (1 + x) for x in [0, 1); Q0.31 in, Q0.31 out (Newton-Raphson, as gemmlowp)."""
    a = _i64(a)
    half_denominator = rounding_half_sum(a, I32_MAX)
    constant_48_over_17 = 1515870810  # Q2.29
    constant_neg_32_over_17 = -1010580540  # Q2.29
    x = constant_48_over_17 + fp_mul(half_denominator, constant_neg_32_over_17)  # Q2.29
    one_q2 = 1 << 29
    for _ in range(3):
        half_denominator_times_x = fp_mul(half_denominator, x)  # Q2.29
        one_minus = one_q2 - half_denominator_times_x
        x = x + saturating_left_shift(fp_mul(x, one_minus), 2)
    # ExactMulByPot<-1> reinterprets Q2.29 as Q1.30 (x / 2); rescaling Q1.30 to Q0.31
    # is a saturating left shift by one.
    return saturating_left_shift(x, 1)


def rounding_half_sum(a, b) -> np.ndarray:
    """RoundingHalfSum: (a + b) / 2, rounding half away from zero."""
    s = _i64(a) + _i64(b)
    return np.where(s >= 0, (s + 1) >> 1, -((-s + 1) >> 1))


def count_leading_zeros32(x: int) -> int:
    x &= 0xFFFFFFFF
    return 32 - x.bit_length()


def get_reciprocal(x: int, integer_bits: int) -> tuple[int, int]:
    """GetReciprocal: (1 / x as Q0.31 of the normalised value, num_bits_over_unit)."""
    headroom_plus_one = count_leading_zeros32(x)
    num_bits_over_unit = integer_bits - headroom_plus_one
    shifted_minus_one = (((x & 0xFFFFFFFF) << headroom_plus_one) - (1 << 31)) & 0xFFFFFFFF
    shifted_minus_one = shifted_minus_one - (1 << 32) if shifted_minus_one >= (1 << 31) else shifted_minus_one
    return int(one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)), num_bits_over_unit


def _sat32(v: int) -> int:
    return max(I32_MIN, min(I32_MAX, v))


def _wrap(v: int) -> int:
    return int(wrap32(v))


def _mul(a: int, b: int) -> int:
    return int(srdhm(a, b))


def log_x_for_x_ge_1(x: int, input_bits: int, output_bits: int) -> int:
    """ln(x) for x >= 1 given in Q(input_bits) as a Q(output_bits) raw value: the reference's
    fixed-point logarithm (LOG_SOFTMAX), step by step. It normalises x two ways (as is and times
    sqrt(1/2)), keeps the reduced value r in [sqrt(1/2), 1) with its power of two, and evaluates
    a rational approximation of ln(r) around 2^(-1/4); sums of raw values wrap as int32."""
    accum_bits = output_bits + 1
    log_2, sqrt_sqrt_half, sqrt_half, one_quarter = 1488522236, 1805811301, 1518500250, 536870912
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    shifted_quarter = int(rdbpot(one_quarter, accum_bits))
    headroom_a = count_leading_zeros32(x)  # its headroom plus one
    r_a = int(saturating_left_shift(_mul(int(saturating_left_shift(x, headroom_a - 1)), sqrt_half), 1))
    pow2_a = _sat32(int(saturating_left_shift(input_bits - headroom_a, 31 - accum_bits)) + shifted_quarter)
    z_b = _mul(x, sqrt_half)
    headroom_b = count_leading_zeros32(z_b) - 1
    r_b = int(saturating_left_shift(x, headroom_b))
    pow2_b = _sat32(int(saturating_left_shift(input_bits - headroom_b, 31 - accum_bits)) - shifted_quarter)
    r, pow2 = min(r_a, r_b), max(pow2_a, pow2_b)
    p = int(rounding_half_sum(r, sqrt_sqrt_half))
    q = _wrap(2 * _wrap(r - sqrt_sqrt_half))
    sq = _mul(q, q)
    num = _wrap(_mul(q, r) + _mul(_mul(q, sq), alpha_n))
    denom_minus_one = _wrap(_mul(p, _wrap(_wrap(alpha_i + q) + _mul(alpha_d, sq))) + _mul(alpha_f, q))
    recip = int(one_over_one_plus_x_for_x_in_0_1(denom_minus_one))
    total = _wrap(_mul(pow2, log_2) + _mul(int(rdbpot(num, accum_bits)), recip))
    return int(saturating_left_shift(total, accum_bits - output_bits))


def inv_sqrt_multiplier(x: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp with a reverse shift of -1 (L2_NORMALIZATION): 1/sqrt(x)
    as a Q31 multiplier and a left shift, by five Newton-Raphson steps in Q3 on x normalised to
    [2^27, 2^29)."""
    if x <= 1:
        return I32_MAX, 0
    shift = 11
    while x >= 1 << 29:
        x //= 4
        shift += 1
    pairs = (count_leading_zeros32(x) - 1) // 2 - 1
    shift -= pairs
    x <<= 2 * pairs
    half = int(rdbpot(x >> 1, 1))  # x / 2 in Q3
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3
    y = 1 << 28  # 1 in Q3
    for _ in range(5):
        y3 = int(saturating_left_shift(_mul(_mul(y, y), y), 6))  # Q9 -> Q3
        y = int(saturating_left_shift(_wrap(_mul(half_three, y) - _mul(half, y3)), 3))  # Q6 -> Q3
    y = _mul(y, 1518500250)  # times sqrt(2) / 2
    if shift < 0:
        y, shift = _wrap(y << -shift), 0
    return y, -shift


# ---- int16 helpers of the HARD_SWISH reference kernel --------------------------

I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1


def srdhm16(a, b) -> np.ndarray:
    a, b = _i64(a), _i64(b)
    ab = a * b
    s = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    r = np.where(s >= 0, s >> 15, -((-s) >> 15))
    return np.where((a == I16_MIN) & (b == I16_MIN), I16_MAX, r)


def sdhm16(a, b) -> np.ndarray:
    """SaturatingDoublingHighMul without rounding (truncating division)."""
    a, b = _i64(a), _i64(b)
    ab = a * b
    r = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == I16_MIN) & (b == I16_MIN), I16_MAX, r)


def shl16_saturating(x, shift: int) -> np.ndarray:
    return np.clip(_i64(x) << shift, I16_MIN, I16_MAX)


# ---- gemmlowp FixedPoint<int16, IntegerBits>: the integer LSTM's gate activations ----------
# Raw values are int16; gemmlowp's plain + and - wrap there (only its exp polynomial's last sum
# saturates), its products are SaturatingRoundingDoublingHighMul on int16 and its 32-bit
# constants are rounded to 16 bits (so exp(-16) is 0).

def wrap16(x) -> np.ndarray:
    return ((_i64(x) + (1 << 15)) & 0xFFFF) - (1 << 15)


def _const16(raw32: int) -> int:
    """RescaleConstantInitializer: a Q0.31-style constant as its int16 value."""
    return int(rdbpot(raw32, 16))


def _pot16(x, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT<exponent> on int16."""
    x = _i64(x)
    if exponent > 0:
        threshold = (1 << (15 - exponent)) - 1
        return np.where(x > threshold, I16_MAX, np.where(x < -threshold, I16_MIN, x << exponent))
    return rdbpot(x, -exponent) if exponent < 0 else x


def _exp_quarter16(a) -> np.ndarray:
    """exp(x) for x in [-1/4, 0), Q0.15."""
    constant_term, one_third = _const16(1895147668), _const16(715827883)
    x = wrap16(_i64(a) + (1 << 12))
    x2 = srdhm16(x, x)
    x3 = srdhm16(x2, x)
    x4 = srdhm16(x2, x2)
    poly = _pot16(wrap16(srdhm16(wrap16(_pot16(x4, -2) + x3), one_third) + x2), -1)
    return np.clip(constant_term + srdhm16(constant_term, wrap16(x + poly)), I16_MIN, I16_MAX)


def exp_on_negative_values16(a, integer_bits: int) -> np.ndarray:
    a = _i64(a)
    fractional = 15 - integer_bits
    quarter = 1 << (fractional - 2)
    shifted = wrap16((a & (quarter - 1)) - quarter)
    result = _exp_quarter16(_pot16(shifted, integer_bits))
    remainder = wrap16(shifted - a)
    for exponent, multiplier in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                                 (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent:
            bit = (remainder & (1 << (fractional + exponent))) != 0
            result = np.where(bit, srdhm16(result, _const16(multiplier)), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (20 - integer_bits)), 0, result)
    return np.where(a == 0, I16_MAX, result)


def _newton16(a) -> np.ndarray:
    """x ~ 1 / ((1 + a) / 2) in Q2.13 for a in Q0.15, three Newton-Raphson steps."""
    half_denominator = _i64(a) + I16_MAX
    half_denominator = np.where(half_denominator >= 0, (half_denominator + 1) // 2, -((-half_denominator + 1) // 2))
    x = wrap16(_const16(1515870810) + srdhm16(half_denominator, _const16(-1010580540)))
    for _ in range(3):
        one_minus = wrap16((1 << 13) - srdhm16(half_denominator, x))
        x = wrap16(x + _pot16(srdhm16(x, one_minus), 2))
    return x


def logistic16(a, integer_bits: int) -> np.ndarray:
    """gemmlowp logistic: Q(integer_bits) int16 in, Q0.15 out."""
    a = _i64(a)
    positive = a > 0
    magnitude = np.where(positive, a, wrap16(-a))
    on_positive = _pot16(_newton16(exp_on_negative_values16(wrap16(-magnitude), integer_bits)), 1)
    return np.where(a == 0, _const16(1 << 30), np.where(positive, on_positive, wrap16(I16_MAX - on_positive)))


def tanh16(a, integer_bits: int) -> np.ndarray:
    """gemmlowp tanh: Q(integer_bits) int16 in, Q0.15 out."""
    a = _i64(a)
    negative = a < 0
    n = np.where(negative, a, wrap16(-a))
    t = _pot16(wrap16(_newton16(exp_on_negative_values16(n, integer_bits + 1)) - (1 << 13)), 2)
    return np.where(a == 0, 0, np.where(negative, wrap16(-t), t))


def scale_q32(scale: float) -> int:
    """round(scale * 2^32): the integer estimate of a double-precision scale that fx_rq_fc
    multiplies by, when it is below 2^31 (scales under 0.5); 0 otherwise (the engine then
    multiplies in double)."""
    from fractions import Fraction
    if not 0 < scale < 0.5 or not math.isfinite(scale):
        return 0
    m = round(Fraction(scale) * 2 ** 32)
    return m if m < 2 ** 31 else 0
