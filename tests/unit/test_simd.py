"""The Armv7E-M DSP kernels' arithmetic, emulated in numpy: the one-multiply requantization
against the reference's two roundings, and the packed weight layouts against plain dot
products (read in the order the kernels read them, halves paired as SXTB16 pairs them)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer.fixedpoint import mbqm
from layer_analyzer import kernels as K
from backends import smlad as simd


def fx_rq(acc, m, e, zp, fold):
    """The generated fx_rq (with the zero point folded into the addend or added after)."""
    acc, m, e, zp = (np.asarray(v, np.int64) for v in (acc, m, e, zp))
    s = acc >> 31  # 0 or -1
    lo = (0x40000000 + ((s << 31) & 0xFFFFFFFF)) & 0xFFFFFFFF
    hi0 = (1 << (e - 2)) + (zp << (e - 1) if fold else 0)
    assert np.all(np.abs(hi0) < 2 ** 31)
    top = (((hi0 + s) << 32) + lo + acc * m) >> 32
    assert np.all((top >= -2 ** 31) & (top < 2 ** 31)), "the high word must fit a register"
    return (top >> (e - 1)) + (0 if fold else zp)


@pytest.mark.parametrize("fold", [False, True])
def test_one_multiply_requantization_equals_the_reference(fold):
    rng = np.random.default_rng(3)
    n = 400_000
    acc = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, n), rng.integers(-4096, 4096, n),
                          [-2 ** 31, 2 ** 31 - 1, 0, -1, 1]]).astype(np.int64)
    m = rng.integers(2 ** 30, 2 ** 31, acc.size)
    m[::5] = 0  # pruned channels
    e = rng.integers(2, 23 if fold else 32, acc.size)
    zp = rng.integers(-128, 128, acc.size)
    ref = mbqm(acc.astype(np.int32), m.astype(np.int32), (-e).astype(np.int32)).astype(np.int64) + zp
    assert np.array_equal(fx_rq(acc, m, e, zp, fold), ref)


@pytest.mark.parametrize("fold", [False, True])
def test_doubled_accumulator_requantization_equals_the_reference(fold):
    """dsp_rq2: SMMLAR of the doubled accumulator with the addend 2^(e - 1) (+ zp * 2^e) in the
    high word, plus the sign, shifted right by e, for |acc| < 2^30."""
    rng = np.random.default_rng(5)
    n = 400_000
    acc = np.concatenate([rng.integers(-2 ** 30 + 1, 2 ** 30, n), rng.integers(-5000, 5000, n),
                          [-2 ** 30 + 1, 2 ** 30 - 1, 0, -1, 1]]).astype(np.int64)
    m = rng.integers(2 ** 30, 2 ** 31, acc.size)
    m[::7] = 0  # pruned channels
    e = rng.integers(2, 23 if fold else 32, acc.size)
    zp = rng.integers(-128, 128, acc.size)
    ref = mbqm(acc.astype(np.int32), m.astype(np.int32), (-e).astype(np.int32)).astype(np.int64) + zp
    a2 = 2 * acc
    k = (1 << (e - 1)) + (zp << e if fold else 0)
    x = ((k << 32) + a2 * m + (1 << 31)) >> 32  # SMMLAR: the rounded high word
    assert np.all((x >= -2 ** 31) & (x < 2 ** 31))
    ours = ((x + (a2 >> 31)) >> e) + (0 if fold else zp)
    assert np.array_equal(ours, ref)


def test_literal_shift_requantization_equals_the_reference():
    """fx_rq_lit (ADD's rescalings): e = 0 is the doubling high multiply alone."""
    rng = np.random.default_rng(4)
    acc = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, 200_000), rng.integers(-5000, 5000, 200_000)])
    m = rng.integers(0, 2 ** 31, acc.size)
    for e in range(0, 32):
        ref = mbqm(acc.astype(np.int32), m.astype(np.int32), np.full(acc.size, -e, np.int32)).astype(np.int64)
        if e == 0:
            ours = (acc * m + (1 << 30)) >> 31
        else:
            ours = (acc * m + (1 << 30) + (1 << (30 + e)) - np.where(acc < 0, 1 << 31, 0)) >> (31 + e)
        assert np.array_equal(ours, ref), e


def test_pruned_channels_take_the_shortest_shift():
    kern = _conv(out_c=3, multiplier=(1 << 30, 0, 1 << 30), shift=(-5, 0, -31))
    assert simd.right_shifts(kern) == [5, 2, 31]
    s = simd.layout_for(kern)
    assert s.fast_requant and not s.fold_zp  # a 31-bit shift: the zero point is added after


def _conv(in_c=8, out_c=4, k=1, depthwise=False, multiplier=None, shift=None, pad=0, stride=1, hw=4):
    out_hw = (hw + 2 * pad - k) // stride + 1
    return K.Conv(depthwise, 1, hw, hw, in_c, out_hw, out_hw, out_c, k, k, stride, stride, 1, 1, pad, pad, 1,
                  3, -2, multiplier or (1 << 30,) * out_c, shift or (-6,) * out_c, -128, 127, 0, -1)


def _halves(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = word.astype(np.uint32)
    return (w & 0xFFFF).astype(np.uint16).view(np.int16).astype(np.int64), \
        (w >> 16).astype(np.uint16).view(np.int16).astype(np.int64)


def _smlad(x4: np.ndarray, lo_word, hi_word) -> int:
    """SXTB16 pairs (x0, x2) and (x1, x3); each SMLAD adds the two halfword products."""
    a, b = _halves(np.array([lo_word]))
    c, d = _halves(np.array([hi_word]))
    return int(x4[0] * a[0] + x4[2] * b[0] + x4[1] * c[0] + x4[3] * d[0])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(out_c=st.integers(1, 11), k=st.integers(1, 3), in_c=st.integers(1, 9), seed=st.integers(0, 999))
def test_stream_layout_reads_back_as_the_dot_products(out_c, k, in_c, seed):
    """im2col / pointwise streams: per pass 4 biases, then per step of 4 inputs the 4 lanes'
    (lo, hi) words, then the requantization words; the window is zero-padded to whole steps."""
    rng = np.random.default_rng(seed)
    kern = _conv(in_c=in_c, out_c=out_c, k=k, pad=1 if k > 1 else 0)
    s = simd.layout_for(kern)
    if k == 1 and in_c % 4 == 0:
        assert s.variant == "pointwise"
    w = rng.integers(-128, 128, (out_c, k, k, in_c)).astype(np.int8)
    bias = rng.integers(-1000, 1000, s.groups * 4).astype(np.int32)
    rq = (np.full(s.groups * 4, 7, np.int32), np.full(s.groups * 4, 9, np.int32), np.full(s.groups * 4, 4, np.int8))
    stream = simd.pack_stream(simd.pack_rows(w, s), bias, rq, s)
    x = np.zeros(s.row, np.int64)
    x[:k * k * in_c] = rng.integers(-128, 128, k * k * in_c)
    pos = 0
    for g in range(s.groups):
        acc = stream[pos:pos + 4].view(np.int32).astype(np.int64).copy()
        pos += 4
        for step in range(s.row // 4):
            for lane in range(4):
                acc[lane] += _smlad(x[4 * step:4 * step + 4], stream[pos], stream[pos + 1])
                pos += 2
        expected = bias[4 * g:4 * g + 4].astype(np.int64)
        for lane in range(4):
            if 4 * g + lane < out_c:
                expected[lane] += int(w[4 * g + lane].reshape(-1).astype(np.int64) @ x[:k * k * in_c])
        assert np.array_equal(acc[:min(4, out_c - 4 * g)], expected[:min(4, out_c - 4 * g)])
        assert list(stream[pos:pos + 8:2].view(np.int32)) == [7] * 4 and stream[pos + 8] == 0x04040404
        pos += 9
    assert pos == stream.size


@settings(max_examples=25, deadline=None, derandomize=True)
@given(groups=st.integers(1, 4), k=st.integers(1, 5), seed=st.integers(0, 999))
def test_depthwise_layout_pairs_channels_per_tap(groups, k, seed):
    """Per pass and tap: word 0 holds lanes (0, 2), word 1 lanes (1, 3): SMLABB/SMLATT
    against SXTAB16's (x0, x2) and (x1, x3)."""
    rng = np.random.default_rng(seed)
    c = 4 * groups
    kern = _conv(in_c=c, out_c=c, k=k, depthwise=True, pad=k // 2)
    s = simd.layout_for(kern)
    w = rng.integers(-128, 128, (1, k, k, c)).astype(np.int8)
    packed = simd.pack_depthwise(w, s).reshape(groups, k * k, 2)
    for g in range(groups):
        for t in range(k * k):
            lo, hi = _halves(packed[g, t])  # bottom and top halves of words 0 and 1
            taps = w[0].reshape(k * k, c)[t, 4 * g:4 * g + 4]
            assert (lo[0], hi[0], lo[1], hi[1]) == (taps[0], taps[2], taps[1], taps[3])


def test_variant_choice():
    assert simd.layout_for(_conv(in_c=8, k=1)).variant == "pointwise"
    assert simd.layout_for(_conv(in_c=3, k=3, pad=1)).variant == "im2col"
    assert simd.layout_for(_conv(in_c=64, k=5, pad=2)).variant == "rows"  # 1600 B: too large for the stack
    assert simd.layout_for(_conv(in_c=63, k=5, pad=2)) is None  # rows cut at a border would misalign
    assert simd.layout_for(_conv(in_c=8, out_c=8, k=3, depthwise=True, pad=1)).variant == "depthwise"
    assert simd.layout_for(_conv(in_c=6, out_c=6, k=3, depthwise=True, pad=1)) is None
    assert simd.layout_for(K.FullyConnected(1, 10, 3, 0, 0, (0.1,), -128, 127, 0, -1)) is None
    assert simd.layout_for(K.FullyConnected(1, 12, 3, 0, 0, (0.1,), -128, 127, 0, -1)).variant == "pointwise"


@pytest.mark.parametrize("k, stride, pad, hw", [(3, 1, 1, 5), (3, 2, 0, 7), (5, 2, 2, 9), (3, 1, 1, 1), (5, 1, 2, 3),
                                                (3, 3, 1, 8), (5, 1, 4, 2)])
def test_border_taps_read_each_window_inside_the_input(k, stride, pad, hw):
    """The depthwise kernel's border walk reads, for every pixel, exactly the tap columns of its
    window inside the input: the unguarded taps and those whose guard holds (the C guards,
    evaluated here for every pixel of every walk)."""
    kern = _conv(in_c=4, out_c=4, k=k, depthwise=True, pad=pad, stride=stride, hw=hw)
    guards = simd._depthwise_context(kern, False)["tap_guards"]
    for (a, b, c, d), x0, x1 in simd.border_walks(kern):
        for ox in range(x0, x1):
            ix0 = ox * stride - pad
            kx0, kx1 = max(0, -ix0), min(k, hw - ix0)
            read = {kx for kx, g in enumerate(guards)
                    if not g or eval(g.replace("&&", "and"), {}, dict(kx0=kx0, kx1=kx1))}
            assert read == set(range(kx0, kx1)), (ox, guards)


def test_interior_and_border_walks_cover_every_pixel_once():
    for k, stride, pad, hw in [(3, 1, 1, 5), (3, 2, 0, 7), (5, 2, 2, 9), (3, 1, 1, 1), (1, 1, 0, 4)]:
        kern = _conv(in_c=4, out_c=4, k=k, depthwise=True, pad=pad, stride=stride, hw=hw)
        oy0, oy1, ox0, ox1 = simd.interior(kern)
        seen = np.zeros((kern.out_h, kern.out_w), int)
        seen[oy0:oy1, ox0:ox1] += 1
        for (a, b, c, d), x0, x1 in simd.border_walks(kern):
            assert a <= b <= c <= d
            seen[a:b, x0:x1] += 1
            seen[c:d, x0:x1] += 1
        assert (seen == 1).all(), (k, stride, pad, hw)
        for oy in range(kern.out_h):
            for ox in range(kern.out_w):
                inside = all(0 <= o * stride - pad and o * stride - pad + k <= hw for o in (oy, ox))
                assert inside == (oy0 <= oy < oy1 and ox0 <= ox < ox1)
