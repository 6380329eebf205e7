"""A numpy executor of the IR with TFLite reference-kernel integer semantics.

It runs the same lowered kernel records as the C backends, so a layer where
the C engine and this executor agree but the reference interpreter does not
points at the lowering, and a layer where only the C differs points at the
templates (``deploy verify --per-layer``).
"""
from __future__ import annotations

import numpy as np

from layer_analyzer import kernels as K
from network_parser.ir import (LSTM_BIASES, LSTM_CELL, LSTM_HIDDEN, LSTM_INPUT_WEIGHTS, LSTM_LAYER_NORM, LSTM_PEEPHOLE,
                               LSTM_PROJECTION, LSTM_RECURRENT_WEIGHTS, Graph)

from . import fixedpoint as fx

NP_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "float32": np.float32, "int32": np.int32, "int64": np.int64}


def int_requant(acc: np.ndarray, rq, lo: int, hi: int) -> np.ndarray:
    """An integer graph's requantization, channels on the last axis (exact: int64 throughout)."""
    y = (acc.astype(np.int64) * np.array(rq.mul, np.int64) + np.array(rq.add, np.int64)) >> rq.shift
    return np.clip(y, lo, hi)


def float_requant(acc: np.ndarray, scales, zp: int, lo: int, hi: int) -> np.ndarray:
    """onnxruntime's requantization: float32 product, clamped, rounded half to even."""
    v = acc.astype(np.float32) * np.array(scales, np.float32)
    v = np.clip(v, np.float32(lo - zp), np.float32(hi - zp))
    return np.rint(v).astype(np.int64) + zp


def _conv(k: K.Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    acc = _conv_acc(k, x, w, b)
    if k.int_rq is not None:
        return int_requant(acc, k.int_rq, k.act_min, k.act_max)
    if k.float_rq is not None:
        return float_requant(acc, k.float_rq, k.output_offset, k.act_min, k.act_max)
    if k.acc64:  # 16x8: no zero points, the 64-bit requantization
        return np.clip(fx.mbqm64(acc, np.array(k.multiplier), np.array(k.shift)), k.act_min, k.act_max)
    out = fx.mbqm(acc, np.array(k.multiplier), np.array(k.shift)) + k.output_offset
    return np.clip(out, k.act_min, k.act_max)


def _conv_acc(k: K.Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """The accumulators of a convolution, NHWC (exact: float64 holds every partial sum of int8
    weights and 8- or 16-bit inputs below 2^53)."""
    x = x.astype(np.int64) + k.input_offset
    pad_b = max(0, (k.out_h - 1) * k.stride_h + (k.k_h - 1) * k.dil_h + 1 - k.in_h - k.pad_t)
    pad_r = max(0, (k.out_w - 1) * k.stride_w + (k.k_w - 1) * k.dil_w + 1 - k.in_w - k.pad_l)
    # Padding contributes zero after the input offset, as the reference skips it.
    xp = np.pad(x, ((0, 0), (k.pad_t, pad_b), (k.pad_l, pad_r), (0, 0)))
    taps = []
    for i in range(k.k_h):
        for j in range(k.k_w):
            r0, c0 = i * k.dil_h, j * k.dil_w
            taps.append(xp[:, r0: r0 + (k.out_h - 1) * k.stride_h + 1: k.stride_h,
                           c0: c0 + (k.out_w - 1) * k.stride_w + 1: k.stride_w, :])
    patches = np.stack(taps, axis=3).astype(np.float64)  # n, oh, ow, kh*kw, ic (exact in float64)
    if k.depthwise:
        patches = np.repeat(patches, k.depth_multiplier, axis=4)  # channel ic*m + j
        wf = w.reshape(k.k_h * k.k_w, k.out_c).astype(np.float64)
        acc = np.einsum("nhwkc,kc->nhwc", patches, wf)
    else:
        wf = w.reshape(k.out_c, k.k_h * k.k_w * k.in_c).astype(np.float64)
        acc = patches.reshape(k.batch, k.out_h, k.out_w, -1) @ wf.T
    acc = np.rint(acc).astype(np.int64)
    if b is not None:
        acc += b.astype(np.int64)
    return acc


def _transpose_conv(k: K.TransposeConv, x, w, b):
    """The reference's scatter: every input pixel adds its products to the outputs its taps reach."""
    xs = x.astype(np.int64) + k.input_offset
    full_h, full_w = (k.in_h - 1) * k.stride_h + k.k_h, (k.in_w - 1) * k.stride_w + k.k_w
    acc = np.zeros((k.batch, max(full_h, k.pad_t + k.out_h), max(full_w, k.pad_l + k.out_w), k.out_c), np.int64)
    wt = w.astype(np.int64)  # out_c, k_h, k_w, in_c
    for ky in range(k.k_h):
        for kx in range(k.k_w):
            contrib = np.einsum("nhwc,oc->nhwo", xs, wt[:, ky, kx, :])
            acc[:, ky: ky + (k.in_h - 1) * k.stride_h + 1: k.stride_h,
                kx: kx + (k.in_w - 1) * k.stride_w + 1: k.stride_w, :] += contrib
    acc = acc[:, k.pad_t: k.pad_t + k.out_h, k.pad_l: k.pad_l + k.out_w, :]
    if b is not None:
        acc = acc + b.astype(np.int64)
    if k.acc64:
        return np.clip(fx.mbqm64(acc, np.array(k.multiplier), np.array(k.shift)), k.act_min, k.act_max)
    out = fx.mbqm(fx.wrap32(acc), np.array(k.multiplier), np.array(k.shift)) + k.output_offset
    return np.clip(out, k.act_min, k.act_max)


def _batch_matmul(k: K.BatchMatMul, x, w):
    xf, wf = x.reshape(-1).astype(np.int64) + k.x_offset, w.reshape(-1).astype(np.int64) + k.y_offset
    i, kk, j = np.arange(k.rows)[:, None], np.arange(k.depth)[None, :], np.arange(k.cols)[None, :]
    out = []
    for xo, yo in zip(k.x_offsets, k.y_offsets):
        a = xf[xo + i * k.x_strides[0] + kk * k.x_strides[1]]  # rows x depth
        b = wf[yo + kk.T * k.y_strides[0] + j * k.y_strides[1]]  # depth x cols
        out.append(fx.wrap32(a @ b))
    acc = np.stack(out)
    if k.requant is not None:
        return _mat_requant(k, acc)
    return np.clip(fx.mbqm(acc, k.multiplier, k.shift) + k.output_offset, k.act_min, k.act_max).astype(np.int8)


def _mat_vector(values, strides, shape) -> np.ndarray | int:
    """A MatRequant vector over (batch, row, column), broadcast by its strides."""
    if not values:
        return 0
    b, i, j = (np.arange(n).reshape([-1 if d == e else 1 for e in range(3)]) for d, n in enumerate(shape))
    return np.array(values, np.int64)[b * strides[0] + i * strides[1] + j * strides[2]]


def _mat_requant(k: K.BatchMatMul, acc) -> np.ndarray:
    rq = k.requant
    v = rq.alpha * acc + _mat_vector(rq.addend, rq.addend_strides, acc.shape)
    v = v * _mat_vector(rq.mul, rq.mul_strides, acc.shape) + _mat_vector(rq.add, rq.add_strides, acc.shape)
    return np.clip(v >> rq.shift, k.act_min, k.act_max).astype(np.int8 if k.act_min >= -128 else np.int32)


def _fc(k: K.FullyConnected, x, w, b):
    xs = x.reshape(k.batch, k.in_features).astype(np.float64) + k.input_offset
    acc = np.rint(xs @ w.astype(np.float64).T).astype(np.int64)
    if b is not None:
        acc += b.astype(np.int64)
    if k.int_rq is not None:
        return int_requant(acc, k.int_rq, k.act_min, k.act_max)
    if k.float_rq is not None:
        return float_requant(acc, k.float_rq, k.output_offset, k.act_min, k.act_max)
    if not k.acc64:  # the reference sums in int32 (a 16x8 layer's int32 bias too)
        acc = fx.wrap32(acc)
    v = acc.astype(np.float64) * np.array(k.scale)
    # (int32_t)round(v) on x86-64: beyond int32, INT32_MIN; then the zero point, wrapping
    fits = (v > -2147483648.5) & (v < 2147483647.5)
    t = np.where(fits, fx.round_half_away(np.where(fits, v, 0.0)), fx.I32_MIN)
    return np.clip(fx.wrap32(t + k.output_offset), k.act_min, k.act_max)


def _views(view: K.Broadcast, a, b):
    sa = np.lib.stride_tricks.as_strided(a.reshape(-1).astype(np.int64), view.shape,
                                         [s * 8 for s in view.a_strides])
    sb = np.lib.stride_tricks.as_strided(b.reshape(-1).astype(np.int64), view.shape,
                                         [s * 8 for s in view.b_strides])
    return sa, sb


def _add(k: K.Add, a, b):
    sa, sb = _views(k.view, a, b)
    xa = fx.mbqm((sa + k.a_offset) << k.left_shift, k.a_multiplier, k.a_shift)
    xb = fx.mbqm((sb + k.b_offset) << k.left_shift, k.b_multiplier, k.b_shift)
    d = xa - xb if k.subtract else xa + xb
    out = fx.mbqm(fx.wrap32(d * d) if k.squared else d, k.out_multiplier, k.out_shift) + k.output_offset
    return np.clip(out, k.act_min, k.act_max)


def _prelu(k: K.Prelu, x, alpha):
    sx, sa = _views(k.view, x, alpha)
    v = sx + k.input_offset
    pos = fx.mbqm(v, k.multiplier_1, k.shift_1)
    neg = fx.mbqm(fx.wrap32(v * (sa + k.alpha_offset)), k.multiplier_2, k.shift_2)
    return np.clip(np.where(v >= 0, pos, neg) + k.output_offset, k.act_min, k.act_max)


def _min_max(k: K.MinMax, a, b):
    sa, sb = _views(k.view, a, b)
    return (np.maximum if k.maximum else np.minimum)(sa, sb).astype(np.int8)


def _int_add(k: K.IntAdd, a, b):
    sa, sb = _views(k.view, a, b)
    y = ((sa + k.a_offset) * k.a_mul + (sb + k.b_offset) * k.b_mul + k.add) >> k.shift
    y = (y * k.post_mul + k.post_add) >> k.post_shift
    return np.clip(y, k.act_min, k.act_max)


def _int_rescale(k: K.IntRescale, x):
    xs = x.reshape(-1, k.channels).astype(np.int64) + k.input_offset
    return int_requant(xs, k.int_rq, k.act_min, k.act_max)


def _int_reduce(k: K.IntReduce, x):
    v = np.transpose(x.reshape(k.in_shape), k.kept + k.axes).reshape(-1, k.count).astype(np.int64)
    s = v.sum(axis=1) + k.sum_offset
    if k.mean:
        n, sh = k.count, k.mean_shift
        if sh is not None:  # half up, by a shift
            s = (s + ((1 << sh) >> 1)) >> sh
        else:  # half away from zero, C's truncating division
            s = np.where(s >= 0, (s + n // 2) // n, -((-s + n // 2) // n))
        s = s + k.output_offset
    return np.clip(s, k.act_min, k.act_max)


def _int_hardswish(k: K.IntHardswish, x):
    v = x.reshape(-1, k.channels).astype(np.int64) + k.input_offset
    acc = v * (np.clip(v + k.three, 0, k.six) * k.one_over_six)
    return int_requant(acc, k.int_rq, k.act_min, k.act_max)


def _mul(k: K.Mul, a, b):
    sa, sb = _views(k.view, a, b)
    out = fx.mbqm((sa + k.a_offset) * (sb + k.b_offset), k.out_multiplier, k.out_shift) + k.output_offset
    return np.clip(out, k.act_min, k.act_max)


def _float_avg(k: K.Pool, x):
    """onnxruntime's QLinearAveragePool: dequantized values summed in float32 in window order,
    divided by the count, requantized with nearbyint (halves to even)."""
    xs, ys, xzp, yzp, offset = k.float_avg
    v = (np.float32(xs) * (x.astype(np.int64) - xzp).astype(np.float32)).astype(np.float32)
    out = np.zeros((k.batch, k.out_h, k.out_w, k.channels), np.int64)
    for oy in range(k.out_h):
        y0 = oy * k.stride_h - k.pad_t
        rows = range(max(y0, 0), min(y0 + k.f_h, k.in_h))
        for ox in range(k.out_w):
            x0 = ox * k.stride_w - k.pad_l
            cols = range(max(x0, 0), min(x0 + k.f_w, k.in_w))
            acc = np.zeros((k.batch, k.channels), np.float32)
            for r in rows:
                for c in cols:
                    acc = (acc + v[:, r, c, :]).astype(np.float32)
            acc = (acc / np.float32(len(rows) * len(cols))).astype(np.float32)
            q = np.rint((acc / np.float32(ys) + np.float32(yzp)).astype(np.float32))
            out[:, oy, ox, :] = np.clip(q, k.act_min + offset, k.act_max + offset).astype(np.int64) - offset
    return out.astype(np.int8)


def _pool(k: K.Pool, x):
    if k.float_avg is not None:
        return _float_avg(k, x)
    out = np.zeros((k.batch, k.out_h, k.out_w, k.channels), np.int64)
    xi = x.astype(np.int64)
    for oy in range(k.out_h):
        y0 = oy * k.stride_h - k.pad_t
        ys = slice(max(y0, 0), min(y0 + k.f_h, k.in_h))
        for ox in range(k.out_w):
            x0 = ox * k.stride_w - k.pad_l
            win = xi[:, ys, max(x0, 0): min(x0 + k.f_w, k.in_w), :]
            if k.kind == "max":
                out[:, oy, ox, :] = win.max(axis=(1, 2))
            elif k.int_rq is not None:  # the window's sum, requantized (no padding: a whole window)
                out[:, oy, ox, :] = int_requant(win.sum(axis=(1, 2)), k.int_rq, k.act_min, k.act_max)
            else:
                count = win.shape[1] * win.shape[2]
                s = win.sum(axis=(1, 2))
                # round half away from zero, C integer division truncating
                out[:, oy, ox, :] = np.where(s > 0, (s + count // 2) // count,
                                             -((-s + count // 2) // count))
    return np.clip(out, k.act_min, k.act_max)


def _mean(k: K.Mean, x):
    if k.axes:  # the kept axes first, then the reduced ones
        kept = [d for d in range(len(k.in_shape)) if d not in k.axes]
        x = np.transpose(x.reshape(k.in_shape), kept + list(k.axes))
    s = x.reshape(k.outer, k.reduced, k.inner).astype(np.int64).sum(axis=1) + k.sum_offset
    if k.float_scale is not None:
        return float_requant(s, k.float_scale, k.output_offset, -128, 127).astype(np.int8)
    out = fx.mbqm(s, k.multiplier, k.shift) + k.output_offset
    return np.clip(out, *k.act_range)


def _lut16(table, v):
    """An int16 table lookup with linear interpolation (LiteRT's LUTLookup): 512 segments of 128."""
    t = np.array(table, np.int64)
    v = np.asarray(v, np.int64)
    idx, off = 256 + (v >> 7), v & 0x7F
    return fx.wrap16(t[idx] + (((t[idx + 1] - t[idx]) * off + 64) >> 7))


def _sigmoid16(k: K.Sigmoid16, x):
    t = np.array(k.table, np.int64)
    v = (x.astype(np.int64) * k.multiplier + ((1 << (k.shift - 1)) if k.shift else 0)) >> k.shift
    a = np.abs(v)
    if k.tanh:  # tanh(x) = 2 sigmoid(2x) - 1: the table at twice the argument, centred
        hi = a >> 8
        lo = np.minimum(hi, 254)
        r = np.where(hi >= 255, 0xFFFF << 8, (t[lo] << 8) + (a & 0xFF) * (t[lo + 1] - t[lo]))
        r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1)
        return r >> 8
    hi = a >> 9
    lo = np.minimum(hi, 254)
    r = np.where(hi >= 255, 0x7FFF << 10, (t[lo] << 9) + (a & 0x1FF) * (t[lo + 1] - t[lo]))
    r = np.where(v >= 0, r + 512, (1 << 25) - r + 512 - 1)
    return r >> 10


def _softmax16(k: K.Softmax16, x):
    v = x.reshape(k.rows, k.depth).astype(np.int64)
    d = fx.mbqm(v - v.max(axis=1, keepdims=True), k.multiplier, k.shift) + 32767
    e = _lut16(k.exp_table, np.clip(d, -32768, 32767))
    total = e.sum(axis=1, keepdims=True)
    h = 32 - np.vectorize(int.bit_length, otypes=[np.int64])(total)  # leading zeros of the int32 sum
    scaled = ((total << (h - 1)) + (1 << 13)) >> 14
    rec = _lut16(k.reciprocal_table, np.clip(scaled - 98304, -32768, 32767))
    rs = 31 - h
    return np.clip((e * rec + (np.int64(1) << (rs - 1))) >> rs, 0, 32767)


def _slopes(k: K.Slopes, x):
    v = x.astype(np.int64)
    out = np.where(v >= 0, fx.mbqm(v, k.multiplier, k.shift), fx.mbqm(v, k.alpha_multiplier, k.alpha_shift))
    return np.clip(out, -32768, 32767)


def _softmax(k: K.Softmax, x):
    xs = x.reshape(k.rows, k.depth).astype(np.int64)
    out = np.empty_like(xs)
    for r in range(k.rows):
        diff = xs[r] - xs[r].max()
        valid = diff >= k.diff_min
        rescaled = fx.srdhm(fx.wrap32(diff << k.input_left_shift), k.input_multiplier)
        exps = fx.exp_on_negative_values(rescaled, 5)
        total = int(fx.wrap32(np.where(valid, fx.rdbpot(exps, 12), 0).sum()))
        scale, bits = fx.get_reciprocal(total, 12)
        low = k.out_min
        unsat = fx.rdbpot(fx.srdhm(scale, exps), bits + 31 - k.out_bits) + low
        out[r] = np.where(valid, np.clip(unsat, low, -low - 1), low)
    return out.reshape(x.shape).astype(np.int16 if k.out_bits == 16 else np.int8)


def _table_softmax(k: K.TableSoftmax, x):
    f = np.float32
    v = x.reshape(k.rows, k.depth).astype(np.int64)
    e = np.array(k.table, f)[255 - (v.max(axis=1, keepdims=True) - v)]
    total = np.zeros(k.rows, f)
    for c in range(k.depth):  # float32, in order
        total = (total + e[:, c]).astype(f)
    q = np.rint((e * f(k.y_scale)) / total[:, None]).astype(np.int64) + k.zero_point
    return np.clip(q, -128, 127).reshape(x.shape).astype(np.int8)


def _log_softmax(k: K.LogSoftmax, x):
    xs = x.reshape(k.rows, k.depth).astype(np.int64)
    out = np.empty_like(xs)
    for r in range(k.rows):
        diff = xs[r] - max(int(xs[r].max()), -128)
        scaled = fx.mbqm(diff, k.input_multiplier, k.input_left_shift)
        exps = fx.rdbpot(fx.exp_on_negative_values(scaled, 5), 12)
        total = int(fx.wrap32(np.where(diff >= k.diff_min, exps, 0).sum()))
        log_sum = fx.log_x_for_x_ge_1(total, 12, 5)
        floor = max(k.diff_min - 1, int(fx.mbqm(int(fx.wrap32(log_sum - (1 << 31))), k.reverse_multiplier,
                                                 k.reverse_shift)))
        # Q5.26 -> Q4 steps of 1/16 from 127: 31 - 5 - 4 bits
        v = np.clip(fx.rdbpot(fx.wrap32(scaled - log_sum), 22) + 127, -128, 127)
        out[r] = np.where(diff > floor, v, -128)
    return out.reshape(x.shape).astype(np.int8)


def _resize_bilinear(k: K.ResizeBilinear, x):
    (y0, y1, dy), (x0, x1, dx) = (np.array(t, np.int64).T for t in (k.rows, k.cols))
    v = x.astype(np.int64)
    wy, wx = dy[None, :, None, None], dx[None, None, :, None]
    total = (v[:, y0][:, :, x0] * (1024 - wy) * (1024 - wx) + v[:, y1][:, :, x0] * wy * (1024 - wx)
             + v[:, y0][:, :, x1] * (1024 - wy) * wx + v[:, y1][:, :, x1] * wy * wx)
    total = total + np.where(total > 0, 1 << 19, -(1 << 19))
    return (np.sign(total) * (np.abs(total) >> 20)).astype(np.int8)  # C's division truncates


def _resize_linear(k: K.ResizeLinear, x):
    """onnxruntime's float32 blend (products and sums in its order), quantized half to even."""
    f = np.float32
    (y0, y1), (x0, x1) = (np.array([r[:2] for r in t], np.int64).T for t in (k.rows, k.cols))
    (ay, by), (ax, bx) = (np.array([r[2:] for r in t], f).T for t in (k.rows, k.cols))
    v = (x.astype(f) - f(k.in_zero_point)) * f(k.in_scale)  # DequantizeLinear
    wy_hi, wy_lo = ay[None, :, None, None], by[None, :, None, None]
    wx_hi, wx_lo = ax[None, None, :, None], bx[None, None, :, None]
    blend = (wx_lo * wy_lo * v[:, y0][:, :, x0] + wx_hi * wy_lo * v[:, y0][:, :, x1]
             + wx_lo * wy_hi * v[:, y1][:, :, x0] + wx_hi * wy_hi * v[:, y1][:, :, x1])
    return _quantize(K.Quantize(blend.size, k.out_scale, k.out_zero_point, True), blend.astype(f))


def _layer_norm(v, weights, bias, multiplier: int, shift: int, floor: int):
    """LiteRT's integer layer normalization of a gate's sums, per batch row (n values): the mean
    in Q10 and the variance (truncating divisions, the variance through 2^20 / n), 1/sqrt of the
    variance (the floor where it is below one), each value's distance from the mean rescaled by
    it, times the coefficient plus the bias (in int32), divided by 2^10 rounding half away from
    zero, rescaled by the coefficients' scale into Q3.12, saturated."""
    v = v.astype(np.int64)
    n = v.shape[-1]
    total, squares = v.sum(-1, keepdims=True), (v * v).sum(-1, keepdims=True)
    mean = np.sign(total) * (np.abs(total * 1024) // n)  # C division: toward zero
    variance = squares * ((1 << 20) // n) - mean * mean
    variance = np.sign(variance) * (np.abs(variance) >> 20)  # C division: toward zero
    variance = np.where(variance < 1, floor, variance)
    out = np.empty_like(v)
    for r in range(v.shape[0]):
        m, s = fx.inv_sqrt_multiplier(int(variance[r, 0]))
        scaled = fx.mbqm(1024 * v[r] - mean[r], m, s)
        val = fx.wrap32(scaled * weights.astype(np.int64) + bias.astype(np.int64))  # int32 arithmetic in the reference
        val = np.where(val > 0, val + 512, val - 512)
        val = np.sign(val) * (np.abs(val) >> 10)  # C division by 1024: toward zero
        out[r] = np.clip(fx.mbqm(val, multiplier, shift + 12), -32768, 32767)
    return out


def _lstm(k: K.Lstm, ins: list):
    """LiteRT's integer LSTM step by step (``ins``: the layer's inputs at TFLite's positions):
    (output, hidden state, cell state)."""
    x = ins[0]
    seq = x.reshape(k.steps, k.batch, k.n_input) if k.time_major else x.reshape(k.batch, k.steps, k.n_input).transpose(1, 0, 2)
    h = ins[LSTM_HIDDEN].reshape(k.batch, k.n_output).astype(np.int64)
    c = ins[LSTM_CELL].reshape(k.batch, k.n_cell).astype(np.int64)
    w_in = [None if ins[i] is None else ins[i].astype(np.int64) for i in LSTM_INPUT_WEIGHTS]
    w_rec = [None if ins[i] is None else ins[i].astype(np.int64) for i in LSTM_RECURRENT_WEIGHTS]
    out = np.empty((k.steps, k.batch, k.n_output), np.int64)

    def gate(g, step_x, cell):
        acc = np.clip(fx.mbqm(step_x @ w_in[g].T + np.array(k.input_bias[g]), *k.input_scales[g]), -32768, 32767)
        acc = np.clip(fx.mbqm(h @ w_rec[g].T + np.array(k.recurrent_bias[g]), *k.recurrent_scales[g]) + acc,
                      -32768, 32767)
        if k.peephole_scales is not None and k.peephole_scales[g] is not None:
            weights = ins[LSTM_PEEPHOLE[g]].astype(np.int64)
            acc = np.clip(fx.mbqm(weights * cell, *k.peephole_scales[g]) + acc, -32768, 32767)
        if k.layer_norm is not None:
            acc = _layer_norm(acc, ins[LSTM_LAYER_NORM[g]], ins[LSTM_BIASES[g]], *k.layer_norm[g])
        return acc

    for step in range(k.steps):
        xs = seq[step].astype(np.int64)
        f = fx.logistic16(gate(1, xs, c), 3)
        i = None if k.cifg else fx.logistic16(gate(0, xs, c), 3)
        cell_gate = fx.tanh16(gate(2, xs, c), 3)
        c = fx.wrap16(fx.rdbpot(f * c, 15))
        i = (32767 - f) if k.cifg else i
        c = np.clip(c + fx.wrap16(fx.rdbpot(i * cell_gate, 30 - k.cell_shift)), -32768, 32767)
        if k.cell_clip:
            c = np.clip(c, -k.cell_clip, k.cell_clip)
        o = fx.logistic16(gate(3, xs, c), 3)
        raw = fx.mbqm(o * fx.tanh16(c, 15 - k.cell_shift), *k.hidden_scale)
        if k.projection_scale is None:
            h = np.clip(raw + k.hidden_zero_point, -128, 127)
        else:  # the gated values less the hidden zero point, saturated; the bias folds it back in
            gated = np.clip(raw - k.hidden_zero_point, -128, 127)
            acc = gated @ ins[LSTM_PROJECTION].astype(np.int64).T + np.array(k.projection_bias)
            h = np.clip(fx.mbqm(acc, *k.projection_scale) + k.output_zero_point, -128, 127)
            if k.projection_clip:
                h = np.clip(h, -k.projection_clip, k.projection_clip)
        out[step] = h
    y = out if k.time_major else out.transpose(1, 0, 2)
    return y.astype(np.int8), h.astype(np.int8), c.astype(np.int16)


def _svdf(k: K.Svdf, x, wf, wt, bias, state):
    """LiteRT's integer SVDF: (output, state)."""
    s = np.concatenate([state.reshape(-1)[1:], state.reshape(-1)[:1]]).astype(np.int64)  # shifted left by one
    s = s.reshape(k.batch, k.filters, k.memory)
    feature = (x.reshape(k.batch, k.n_input).astype(np.int64) - k.input_zero_point) @ wf.astype(np.int64).T
    low, zp = -(1 << (k.state_bits - 1)), k.state_zero_point
    # saturated to the state's type, then offset by its zero point (which may wrap: TFLite Micro casts)
    newest = np.clip(fx.mbqm(feature, *k.feature_scale), low, -low - 1) + zp
    s[:, :, -1] = (newest - low) % (1 << k.state_bits) + low
    # int32 sums, wrapping as the reference's do: per filter, over a unit's filters, with the bias
    acc = fx.wrap32(fx.wrap32(((s - zp) * wt.astype(np.int64)[None]).sum(-1)).reshape(k.batch, k.units, k.rank).sum(-1))
    if bias is not None:
        acc = fx.wrap32(acc + bias.astype(np.int64))
    y = np.clip(fx.mbqm(acc, *k.output_scale) + k.output_zero_point, -128, 127)
    return y.astype(np.int8), s.reshape(state.shape).astype(np.int8 if k.state_bits == 8 else np.int16)


def _l2_norm(k: K.L2Norm, x):
    v = x.reshape(k.rows, k.depth).astype(np.int64) - k.input_zero_point
    out = np.empty_like(v)
    for r in range(k.rows):
        m, s = fx.inv_sqrt_multiplier(int((v[r] * v[r]).sum()))
        out[r] = np.clip(fx.mbqm(v[r], m, s + 7), -128, 127)
    return out.reshape(x.shape).astype(np.int8)


U32 = np.uint64(0xFFFFFFFF)


def _int_softmax(k: K.IntSoftmax, x):
    """Deeploy's iSoftmax in its kernel's widths: uint64 exponentials kept to 32 bits, their sum
    and each scaled one wrapping in 32 bits (a zero sum, which only a wrap gives, yields 0)."""
    v = x.reshape(k.outer, k.depth, k.inner).astype(np.int64)
    z, p = K.isoftmax_exponent(k.log2, v - v.max(axis=1, keepdims=True))
    t = k.coeff_a * (p + k.coeff_b) ** 2 + k.coeff_c  # int64: checked by the lowering not to overflow
    y = (t.astype(np.uint64) >> z.astype(np.uint64)) & U32
    total = y.sum(axis=1, keepdims=True, dtype=np.uint64) & U32
    q = ((y * np.uint64(k.n_levels - 1)) & U32) // np.maximum(total, np.uint64(1))
    q = np.where(total == 0, np.uint64(0), q)
    return ((q & np.uint64(0xFF)).astype(np.int64) - 128).reshape(x.shape).astype(np.int8)


def isqrt_floor(v: np.ndarray) -> np.ndarray:
    """floor(sqrt(v)) of non-negative integers below 2^52, exactly."""
    r = np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64)
    r -= (r * r > v).astype(np.int64)
    return r + ((r + 1) * (r + 1) <= v).astype(np.int64)


def _int_rms_norm(k: K.IntRmsNorm, x, w):
    v = x.reshape(k.outer, k.depth, k.inner).astype(np.int64)
    root = isqrt_floor((v * v).sum(axis=1, keepdims=True) // k.depth + 1)
    t = v * w.astype(np.int64).reshape(1, k.depth, 1)
    q = np.sign(t) * (np.abs(t) // root)  # C's division truncates
    return np.clip(q >> k.log2_d, -128, 127).reshape(x.shape).astype(np.int8)


def _int_no_norm(k: K.IntNoNorm, x, w, b):
    shape = k.view.shape
    xs, ws, bs = (np.broadcast_to(a.reshape((1,) * (4 - a.ndim) + a.shape), shape).astype(np.int64)
                  for a in (x, w, b))
    r = (((xs * ws + bs) * k.mul) >> k.log2_d) & 0xFF
    return ((r ^ 0x80) - 0x80).astype(np.int8)


def _lookup(k: K.Lookup, x):
    return np.array(k.table, np.int8)[x.astype(np.int64) + 128]


def _hard_swish(k: K.HardSwish, x):
    hires = (x.astype(np.int64) - k.input_zero_point) * 128
    preshift_out = fx.srdhm16(hires, k.output_multiplier)
    reluish = hires
    if k.reluish_shift > 0:
        reluish = fx.shl16_saturating(reluish, k.reluish_shift - 1)
    reluish = fx.srdhm16(reluish, k.reluish_multiplier)
    if k.reluish_shift > 0:
        reluish = fx.shl16_saturating(reluish, 1)
    if k.reluish_shift < 0:
        reluish = fx.rdbpot(reluish, -k.reluish_shift)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1] in Q15
    out = fx.rdbpot(fx.sdhm16(reluish, preshift_out), -k.output_shift) + k.output_zero_point
    return np.clip(out, -128, 127).astype(np.int8)


def _requantize(k: K.Requantize, x):
    out = fx.mbqm(x.astype(np.int64) + k.input_offset, k.multiplier, k.shift) + k.output_offset
    return np.clip(out, k.act_min, k.act_max)


def _quantize(k: K.Quantize, x):
    """The engine's fx_quantize / fx_quantize_even, NaN and infinities included (numpy's float
    -> int cast of those is undefined, so it only ever sees finite, in-range values)."""
    with np.errstate(over="ignore", invalid="ignore"):  # x / scale may overflow to inf: defined below
        v = x.astype(np.float32) / np.float32(k.scale)
    if k.half_even:  # onnxruntime: clamped to the output range first, NaN to its lowest value
        lo, hi = k.act_min - k.zero_point, k.act_max - k.zero_point
        return np.rint(np.where(v >= lo, np.minimum(v, hi), lo)).astype(np.int64) + k.zero_point
    # TFLite's reference on x86-64: what int32 cannot hold becomes INT32_MIN, and + zero point wraps
    fits = (v >= -2.0 ** 31) & (v < 2.0 ** 31)
    t = np.where(fits, fx.round_half_away(np.where(fits, v, 0)), fx.I32_MIN)
    return np.clip(fx.wrap32(t + k.zero_point), k.act_min, k.act_max)


def _dequantize(k: K.Dequantize, x):
    return (np.float64(k.scale) * (x.astype(np.int64) - k.zero_point)).astype(np.float32)


def _pad(k: K.Pad, x):
    widths = [(b, o - i - b) for i, o, b in zip(k.in_shape, k.out_shape, k.before)]
    return np.pad(x, widths, constant_values=k.value)


def _concat(k: K.Concat, *xs):
    parts = [x.reshape(k.outer, -1) for x in xs]
    return np.concatenate(parts, axis=1)


def run_kernel(kernel, layer, graph: Graph, values: dict[int, np.ndarray]) -> np.ndarray:
    ins = [values[i] if i >= 0 and not graph.tensors[i].is_const else
           (graph.tensors[i].data if i >= 0 else None) for i in layer.inputs]
    out_t = graph.tensors[layer.outputs[0]]
    match kernel:
        case K.Conv():
            y = _conv(kernel, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
        case K.TransposeConv():
            y = _transpose_conv(kernel, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
        case K.BatchMatMul():
            y = _batch_matmul(kernel, ins[0], ins[1])
        case K.FullyConnected():
            y = _fc(kernel, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
        case K.Add():
            y = _add(kernel, ins[0], ins[1])
        case K.Mul():
            y = _mul(kernel, ins[0], ins[1])
        case K.MinMax():
            y = _min_max(kernel, ins[0], ins[1])
        case K.Prelu():
            y = _prelu(kernel, ins[0], ins[1])
        case K.IntAdd():
            y = _int_add(kernel, ins[0], ins[1])
        case K.IntRescale():
            y = _int_rescale(kernel, ins[0])
        case K.IntReduce():
            y = _int_reduce(kernel, ins[0])
        case K.IntHardswish():
            y = _int_hardswish(kernel, ins[0])
        case K.Offset():
            y = ins[0].astype(np.int64) + kernel.delta
        case K.IntSoftmax():
            y = _int_softmax(kernel, ins[0])
        case K.IntRmsNorm():
            y = _int_rms_norm(kernel, ins[0], ins[1])
        case K.IntNoNorm():
            y = _int_no_norm(kernel, ins[0], ins[1], ins[2])
        case K.Pool():
            y = _pool(kernel, ins[0])
        case K.Mean():
            y = _mean(kernel, ins[0])
        case K.Softmax():
            y = _softmax(kernel, ins[0])
        case K.TableSoftmax():
            y = _table_softmax(kernel, ins[0])
        case K.L2Norm():
            y = _l2_norm(kernel, ins[0])
        case K.LogSoftmax():
            y = _log_softmax(kernel, ins[0])
        case K.Lookup():
            y = _lookup(kernel, ins[0])
        case K.Sigmoid16():
            y = _sigmoid16(kernel, ins[0])
        case K.Softmax16():
            y = _softmax16(kernel, ins[0])
        case K.Slopes():
            y = _slopes(kernel, ins[0])
        case K.HardSwish():
            y = _hard_swish(kernel, ins[0])
        case K.Requantize():
            y = _requantize(kernel, ins[0])
        case K.Quantize():
            y = _quantize(kernel, ins[0])
        case K.Dequantize():
            y = _dequantize(kernel, ins[0])
        case K.Copy():
            y = ins[0]
        case K.Pad():
            y = _pad(kernel, ins[0])
        case K.Concat():
            y = _concat(kernel, *ins)
        case K.Transpose():
            y = np.transpose(ins[0], kernel.perm)
        case K.Gather():
            flat = ins[0].reshape(-1).view(np.uint8).reshape(kernel.outer, kernel.axis_size, kernel.inner)
            y = flat[:, list(kernel.indices), :].reshape(-1).view(ins[0].dtype)
        case K.Reduce():
            v = ins[0].reshape(kernel.outer, kernel.reduced, kernel.inner)
            pick = (np.argmax if kernel.maximum else np.argmin) if kernel.index else (np.max if kernel.maximum else np.min)
            y = pick(v, axis=1)
        case K.AxisGather():
            idx = sum(np.array(t, np.int64).reshape([-1 if e == d else 1 for e in range(len(kernel.tables))])
                      for d, t in enumerate(kernel.tables))
            y = ins[0].reshape(-1)[idx]
        case K.Strided():
            idx = np.full(kernel.counts, kernel.base, np.int64)
            for d, (n, st) in enumerate(zip(kernel.counts, kernel.strides)):
                idx += (np.arange(n, dtype=np.int64) * st).reshape([-1 if e == d else 1 for e in range(len(kernel.counts))])
            y = ins[0].reshape(-1)[idx]
        case K.ResizeBilinear():
            y = _resize_bilinear(kernel, ins[0])
        case K.ResizeLinear():
            y = _resize_linear(kernel, ins[0])
        case K.ResizeNearest():
            y = ins[0][:, list(kernel.rows)][:, :, list(kernel.cols)]
        case K.Svdf():  # its state tensor is updated in place
            y, values[layer.inputs[4]] = _svdf(kernel, ins[0], ins[1], ins[2], ins[3], ins[4])
        case K.Lstm():  # the state tensors are updated in place
            y, h, c = _lstm(kernel, ins)
            values[layer.inputs[LSTM_HIDDEN]] = h.reshape(ins[LSTM_HIDDEN].shape)
            values[layer.inputs[LSTM_CELL]] = c.reshape(ins[LSTM_CELL].shape)
        case _:
            raise TypeError(kernel)
    return np.ascontiguousarray(y).reshape(out_t.shape).astype(NP_DTYPES[out_t.dtype])


def run(graph: Graph, inputs: list[np.ndarray], kernels=None,
        state: dict[int, np.ndarray] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Run the graph; returns (outputs, the output of every layer in order). ``state``: the
    variable tensors' values, carried from the previous run and updated (None, or a tensor it
    lacks: the state as inference_reset_state() leaves it)."""
    kernels = kernels or K.lower_graph(graph)
    values: dict[int, np.ndarray] = {}
    for t in graph.state():
        tt = graph.tensors[t]
        values[t] = state[t] if state is not None and t in state else np.full(tt.shape, tt.state_fill, NP_DTYPES[tt.dtype])
    for t, x in zip(graph.inputs, inputs):
        values[t] = np.asarray(x).reshape(graph.tensors[t].shape)
    trace = []
    for kernel, layer in zip(kernels, graph.layers):
        y = run_kernel(kernel, layer, graph, values)
        values[layer.outputs[0]] = y
        trace.append(y)
    if state is not None:
        state.update({t: values[t] for t in graph.state()})
    return [values[o] for o in graph.outputs], trace
