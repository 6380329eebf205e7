"""The Armv7E-M DSP kernel family (SXTAB16 + SMLAD) of the Cortex-M targets: the variants, the
weight layouts they read, their cost model, and the values their templates (templates/smlad/,
which only this family names) need.

The kernels compute four output channels at once. An int8 input word (four consecutive
values x0..x3) becomes two halfword pairs with the input offset added: (x0, x2) and
(x1, x3). Weights are stored pre-extended in the matching order, so the inner step is one
input load, two SXTAB16 and, per channel, one LDRD of two weight pairs and two SMLADs:
sixteen MACs. Everything here is done once, at generation time."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from layer_analyzer import kernels as K

from .family import KernelFamily
from .geometry import border_walks, folded_bias, interior, pad_channels, tap_guards  # noqa: F401 (the family's names for them)
from .variants import CODE_BYTES_DSP, CODE_BYTES_PORTABLE, Variant, VariantRule

TEMPLATES = "smlad"  # its folder under templates/
KERNELS = f"{TEMPLATES}/kernels.c.j2"  # the module of its variants' macros
LANES = 4  # output channels per pass
COLUMN_LIMIT = 1152  # bytes of stack one pixel's flattened window (im2col) may take: 3x3x128


@dataclass(frozen=True, slots=True)
class DspLayout:
    """How one conv or fc layer runs on the DSP kernels."""
    # "pointwise" (1x1 conv and fc: steps of 4 inputs), "im2col" (the same steps over one pixel's
    # window, flattened on the stack), "rows" (dot products along kernel rows) or "depthwise"
    variant: str
    groups: int  # passes of LANES output channels
    row: int  # rows: int8 values per kernel row (k_w * in_c; in_features for fc)
    row_words: int  # rows: packed weight words per kernel row of one group
    fast_requant: bool  # every channel shifts right by 2..31 bits and accumulators stay below 2^30
    fold_zp: bool  # ... by at most 22 bits: the output zero point joins the requantization addend


def _pair(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Two int16 values per uint32 word, ``lo`` in the bottom half."""
    return (lo.astype(np.int64) & 0xFFFF | (hi.astype(np.int64) & 0xFFFF) << 16).astype(np.uint32)


def right_shifts(kern: K.Conv) -> list[int]:
    """Each channel's right shift for fx_rq. A channel with multiplier 0 (pruned) always gives
    the zero point, which fx_rq also gives for any shift: it takes 2."""
    return [2 if m == 0 else -sh for m, sh in zip(kern.multiplier, kern.shift)]


def _rq_fast(kern: K.Conv) -> tuple[bool, bool]:
    """(fast, fold_zp): the short requantization (fx_rq) equals fx_mbqm for every int32
    accumulator when every channel shifts right by 2 to 31 bits; the zero point joins its
    addend when no shift exceeds 22 bits (the zero point times 2^(e - 1) then stays far from
    2^31). tests/unit/test_simd.py checks both against the reference arithmetic. (Integer graphs'
    requantization has its own form: neither applies.)"""
    if kern.int_rq is not None or kern.float_rq is not None:
        return False, False
    e = right_shifts(kern)
    fast = all(2 <= v <= 31 for v in e)
    return fast, fast and max(e) <= 22


def layout_for(kern) -> DspLayout | None:
    """The DSP variant for a lowered conv/fc kernel, or None where only the plain C applies."""
    if isinstance(kern, K.FullyConnected):
        n = kern.in_features
        if n % 4:
            return None
        return DspLayout("pointwise", -(-kern.units // LANES), n, 2 * n, False, False)
    if not isinstance(kern, K.Conv) or kern.dil_h != 1 or kern.dil_w != 1:
        return None
    if kern.depthwise:
        if kern.depth_multiplier != 1 or kern.in_c % LANES or kern.batch != 1:
            return None
        return DspLayout("depthwise", kern.in_c // LANES, 0, 0, *_rq_fast(kern))
    row = kern.k_w * kern.in_c
    if kern.k_h == kern.k_w == 1 and kern.pad_t == kern.pad_l == 0 and kern.in_c % 4 == 0:
        return DspLayout("pointwise", -(-kern.out_c // LANES), row, 2 * row, *_rq_fast(kern))
    column = -(-kern.k_h * row // 4) * 4
    if column <= COLUMN_LIMIT:
        return DspLayout("im2col", -(-kern.out_c // LANES), column, 2 * column, *_rq_fast(kern))
    # A window too large for the stack: dot products along its rows in the input. Rows outside
    # the input are skipped; a row cut at the left or right border starts at a whole tap, which
    # keeps its steps aligned only with whole channel words.
    border = kern.pad_l > 0 or (kern.out_w - 1) * kern.stride_w - kern.pad_l + kern.k_w > kern.in_w
    if kern.in_c % 4 and border:
        return None
    return DspLayout("rows", -(-kern.out_c // LANES), row, 8 * (row // 4) + 2 * (row % 4), *_rq_fast(kern))


def add_one_multiply(kern: K.Add) -> bool:
    """A same-shape ADD whose three rescalings shift right (by 0 to 31 bits; no left shift):
    each runs as one multiply-accumulate with a literal shift (fx_rq_lit)."""
    shifts = (kern.a_shift, kern.b_shift, kern.out_shift)
    mults = (kern.a_multiplier, kern.b_multiplier, kern.out_multiplier)
    return kern.view.dense and all(-31 <= v <= 0 for v in shifts) and all(m >= 0 for m in mults)


def _lanes(w: np.ndarray, groups: int) -> np.ndarray:
    """(channels, ...) -> (groups, LANES, ...), zero-padded to whole groups."""
    pad = groups * LANES - w.shape[0]
    w = np.concatenate([w, np.zeros((pad, *w.shape[1:]), w.dtype)]) if pad else w
    return w.reshape(groups, LANES, *w.shape[1:])


def pack_rows(weights: np.ndarray, s: DspLayout, scale: int = 1) -> np.ndarray:
    """OHWI (or units x features) int8 weights (times ``scale``: 2 for doubled accumulators, see
    doubles) -> words [group][ky][chunk][lane][2] then, for the row's last ``row % 4`` values,
    [group][ky][value][2] (lanes 0|1 and 2|3)."""
    w = weights.reshape(weights.shape[0], -1).astype(np.int16) * np.int16(scale)
    if s.variant == "im2col":  # one row: the whole window, zero-padded to whole steps
        w = np.pad(w, ((0, 0), (0, s.row - w.shape[1])))
    w = w.reshape(w.shape[0], -1, s.row)  # O, KH (1 but for "rows"), row
    g = _lanes(w, s.groups)  # G, 4, KH, row
    n4 = s.row // 4
    chunks = g[..., :4 * n4].reshape(s.groups, LANES, g.shape[2], n4, 4)
    body = np.stack([_pair(chunks[..., 0], chunks[..., 2]), _pair(chunks[..., 1], chunks[..., 3])], -1)
    body = body.transpose(0, 2, 3, 1, 4).reshape(s.groups, g.shape[2], -1)  # G, KH, n4 * 4 lanes * 2
    tail = g[..., 4 * n4:]  # G, 4, KH, r
    rest = np.stack([_pair(tail[:, 0], tail[:, 1]), _pair(tail[:, 2], tail[:, 3])], -1)  # G, KH, r, 2
    packed = np.concatenate([body, rest.reshape(s.groups, g.shape[2], -1)], -1)
    assert packed.shape[-1] == s.row_words
    return packed.reshape(-1)


def pack_stream(packed: np.ndarray, bias: np.ndarray, rq, s: DspLayout) -> np.ndarray:
    """Per pass of 4 lanes, what it reads in order: 4 biases, its packed weights, and with
    ``rq`` = (multipliers, addend high words, shifts less one) per lane, the 4 (multiplier,
    high word) pairs and one word of the 4 shifts (byte j = lane j)."""
    parts = [bias.view(np.uint32).reshape(s.groups, LANES), packed.reshape(s.groups, -1)]
    if rq is not None:
        mult, hi, e1 = (np.asarray(a).reshape(s.groups, LANES) for a in rq)
        parts.append(np.stack([mult.view(np.uint32), hi.view(np.uint32)], -1).reshape(s.groups, -1))
        parts.append(e1.astype(np.int8).view(np.uint8).astype(np.uint32) @ (1 << (8 * np.arange(LANES, dtype=np.uint32))))
        parts[-1] = parts[-1].astype(np.uint32).reshape(s.groups, 1)
    return np.concatenate(parts, 1).reshape(-1)


def pack_depthwise(weights: np.ndarray, s: DspLayout, scale: int = 1) -> np.ndarray:
    """1 x KH x KW x C int8 weights (times ``scale``: 2 for the doubled accumulators of
    doubles) -> words [group][tap][2]: lanes (0, 2) then (1, 3)."""
    taps = weights.reshape(-1, weights.shape[-1]).astype(np.int16).T * np.int16(scale)  # C, T
    g = _lanes(taps, s.groups)  # G, 4, T
    return np.stack([_pair(g[:, 0], g[:, 2]), _pair(g[:, 1], g[:, 3])], -1).reshape(-1)


def doubles(kern, s: DspLayout, weights: np.ndarray, bias: np.ndarray | None) -> bool:
    """Whether a depthwise, pointwise or im2col convolution's kernel sums twice each product (its
    weights and bias packed doubled) for the short requantization of doubled accumulators
    (dsp_rq2: SMMLAR, one add and a shift): when fx_rq applies and every partial sum, the input
    offset's share folded into the bias or not, stays below 2^30 (|x| at most 128 and |offset|
    at most 128: 256 per weight unit bounds both), so that doubled it fits an int32."""
    if s.variant not in ("depthwise", "pointwise", "im2col") or not s.fast_requant or not isinstance(kern, K.Conv):
        return False
    w = np.abs(weights.astype(np.int64))
    w = w.reshape(-1, w.shape[-1]).sum(0) if s.variant == "depthwise" else w.reshape(w.shape[0], -1).sum(1)  # per channel
    b = np.zeros_like(w) if bias is None else np.abs(bias.astype(np.int64))
    return int((b + 256 * w).max(initial=0)) < 2 ** 30


def packed_bytes(kern, s: DspLayout | None, weight_bytes: int) -> int:
    """Bytes of .rodata the layer's weights take in the kernel's layout."""
    if s is None:
        return weight_bytes
    if s.variant == "depthwise":
        return 4 * 2 * s.groups * kern.k_h * kern.k_w
    k_h = kern.k_h if s.variant == "rows" else 1
    return 4 * s.groups * k_h * s.row_words


def lane_arrays_bytes(kern, s: DspLayout) -> tuple[int, int]:
    """(bias, requantization) bytes of .rodata the kernel's per-lane arrays take (padded to whole
    passes of 4; a stream holds its biases and fx_rq's words inline), as template_context makes them."""
    lanes = s.groups * LANES
    stream = s.variant in ("pointwise", "im2col")
    bias = 4 * lanes if stream or kern.bias >= 0 else 0
    if kern.float_rq is not None:
        rq = 4 * lanes
    elif kern.int_rq is not None:
        rq = 12 * lanes
    elif isinstance(kern, K.FullyConnected):
        rq = 8 * lanes  # double scales
    else:
        rq = 9 * lanes if s.fast_requant else 5 * lanes  # (multiplier, addend) words and a shift byte; or word and byte
    return bias, rq


# ---- the variants ----------------------------------------------------------------------

# .text of one layer's function by layout, as compiled for the M7 at -O2 (measured on the benchmark
# models: pointwise and fc 0.4-0.5 KB, im2col and rows about 0.7-1 KB, depthwise 1.4-2.2 KB over a
# padded plane, about 3 KB with cut border windows)
CODE_BYTES = {"pointwise": 512, "im2col": 1024, "rows": 1024, "depthwise": 3072}
NAMES = {"pointwise": "conv_1x1_s8_smlad", "im2col": "conv_s8_smlad_im2col", "rows": "conv_s8_smlad_rows",
         "depthwise": "depthwise_conv_s8_smlad"}
MACROS = {"pointwise": "pointwise", "im2col": "im2col", "rows": "conv_rows", "depthwise": "depthwise"}


def _conv_fc(kern, weight_bytes: int, use: str) -> Variant | None:
    """Convolutions and fully connected layers, whole from the arena or tile by tile in L1 (the
    tile's input and output there, the packed weights read where they are: a Cortex-M core reads
    flash directly, and copying them would only cost instructions)."""
    if use not in ("whole", "tile", "region") or not isinstance(kern, (K.Conv, K.FullyConnected)):
        return None
    if kern.int_rq is not None and (kern.act_min < -128 or kern.act_max > 127 or kern.batch > 1):
        return None  # an integer graph's raw int32 output, or a Gemm bias per row: the portable kernel
    s = layout_for(kern)
    if s is None:
        return None
    fc = isinstance(kern, K.FullyConnected)
    name = "fully_connected_s8_smlad" if fc else NAMES[s.variant]
    # the depthwise kernels (their border windows unrolled, the longest) are shared per shape; shared,
    # the short pointwise ones of few channels ran up to 22% more instructions on the M7, im2col 25%
    # lanes: a whole depthwise layer whose padded plane holds its whole input writes over its
    # input itself, each pass's channels copied first (no scratch plane: 0)
    lanes = 1 if s.variant != "depthwise" else 0 if use == "whole" and _plane_whole(kern) else LANES
    return Variant(name, KERNELS, MACROS[s.variant], packed_bytes(kern, s, weight_bytes), CODE_BYTES[s.variant],
                   lanes, True, False, LANES, s, template_context, _window,
                   shares_whole=s.variant == "depthwise" and use == "whole", lane_bytes=lane_arrays_bytes(kern, s),
                   walk=None if s.variant == "depthwise" else "pixels", window_steps=window_steps)  # depthwise: 4 channels' planes at a time


def window_steps(kern, layout: DspLayout) -> dict[str, tuple[int, int]]:
    """Words of the packed weight array per group of 4 output channels."""
    if layout.variant == "depthwise":
        words = 2 * kern.k_h * kern.k_w
    elif layout.variant == "rows":
        words = kern.k_h * layout.row_words
    else:
        words = 4 + layout.row_words + (9 if layout.fast_requant else 0)  # a stream: biases, weights, requantization
    return {"wq": (LANES, words)}


def _window(variant: Variant, kern) -> Variant:
    """The variant for a window of its layer: the same packed weights, walked for the window's shape."""
    return replace(variant, layout=layout_for(kern))


def _add(kern, weight_bytes: int, use: str) -> Variant | None:
    """A same-shape ADD whose rescalings all shift right: one multiply-accumulate each (whole, or
    over a tile's elements)."""
    if use not in ("whole", "tile") or not isinstance(kern, K.Add) or kern.squared or not add_one_multiply(kern):
        return None
    return Variant("sub_s8_smlad" if kern.subtract else "add_s8_smlad", KERNELS, "add", 0, CODE_BYTES_PORTABLE, 1,
                   True, False, 1, None, template_context, None)


def shadow_conv(kern: K.TransposeConv) -> K.Conv:
    """The convolution whose weights (OHWI), requantization and packing a TRANSPOSE_CONV shares:
    its weight layout and per-lane arrays are the "rows" kernel's."""
    return K.Conv(depthwise=False, batch=kern.batch, in_h=kern.in_h, in_w=kern.in_w, in_c=kern.in_c, out_h=kern.out_h,
                  out_w=kern.out_w, out_c=kern.out_c, k_h=kern.k_h, k_w=kern.k_w, stride_h=1, stride_w=1, dil_h=1,
                  dil_w=1, pad_t=0, pad_l=0, depth_multiplier=1, input_offset=kern.input_offset,
                  output_offset=kern.output_offset, multiplier=kern.multiplier, shift=kern.shift,
                  act_min=kern.act_min, act_max=kern.act_max, weights=kern.weights, bias=kern.bias)


def _transpose_layout(kern: K.TransposeConv) -> DspLayout:
    row = kern.k_w * kern.in_c
    return DspLayout("rows", -(-kern.out_c // LANES), row, 8 * (row // 4), *_rq_fast(shadow_conv(kern)))


def _transpose_conv(kern, weight_bytes: int, use: str) -> Variant | None:
    """TRANSPOSE_CONV, whole from the arena or tile by tile in L1 (the weights read where they
    are): per output pixel and pass of 4 channels, a dot product of in_c values (4 at a time) for
    each tap that reaches it, against the "rows" packing of its weights; in_c a multiple of 4 keeps
    every tap's steps aligned. A tile is a transposed convolution of its own whose padding places
    its first output; that padding is at least k - stride, so tiles need kernels no smaller than
    their strides (the usual 2x2, 3x3 and 4x4 by 2 are)."""
    if use not in ("whole", "tile") or not isinstance(kern, K.TransposeConv) or kern.in_c % 4:
        return None
    if use == "tile" and (kern.k_h < kern.stride_h or kern.k_w < kern.stride_w):
        return None
    shadow = shadow_conv(kern)
    s = _transpose_layout(kern)

    def context(kern, k, sym, variant, in_place=False):
        return dict(template_context(shadow_conv(kern), k, sym, variant, in_place), macro="transpose_conv",
                    odd_chunks=(kern.in_c // 4) % 2 == 1)

    def window(variant, kern):
        return replace(variant, layout=_transpose_layout(kern))

    return Variant("transpose_conv_s8_smlad", KERNELS, "transpose_conv", packed_bytes(shadow, s, weight_bytes),
                   CODE_BYTES_DSP, 1, True, False, LANES, s, context, window, lane_bytes=lane_arrays_bytes(shadow, s),
                   window_steps=lambda kern, layout: window_steps(shadow_conv(kern), layout))


def batch_matmul_form(kern) -> str | None:
    """How the DSP kernel walks a BATCH_MATMUL (x's rows contiguous along k): "dot" when y's
    columns are contiguous too (adj_y: two dot products of 4 values per pair of SMLADs), "cols"
    when its rows are (4 columns per word: SMLAxy against each halfword); None otherwise."""
    if not isinstance(kern, K.BatchMatMul) or kern.x_strides[1] != 1 or kern.depth < 4:
        return None
    if kern.y_strides[0] == 1:
        return "dot"
    if kern.y_strides[1] == 1 and kern.cols >= 4:
        return "cols"
    return None


def _batch_matmul(kern, weight_bytes: int, use: str) -> Variant | None:
    """BATCH_MATMUL of two int8 operands (activations or constants, read where they are), whole
    from the arena: both offsets added by SXTAB16 as the values are unpacked."""
    form = batch_matmul_form(kern)
    if use != "whole" or form is None:
        return None

    def context(kern, k, sym, variant, in_place=False):
        # an integer graph's element-wise scaling: the portable kernel's terms (L.mat_rq), per column
        ctx = dict(macro="batch_matmul", form=form, xo2=_offset_pair(kern.x_offset), yo2=_offset_pair(kern.y_offset),
                   x_offsets=None, y_offsets=None, portable_values=kern.requant is not None)
        if len(kern.x_offsets) > 1:
            ctx.update(x_offsets=sym.array(f"op{k}_x_offsets", "int32_t", np.array(kern.x_offsets, np.int32)),
                       y_offsets=sym.array(f"op{k}_y_offsets", "int32_t", np.array(kern.y_offsets, np.int32)))
        return ctx

    return Variant("batch_matmul_s8_smlad", KERNELS, "batch_matmul", weight_bytes, CODE_BYTES_DSP, 1, True, False, 1,
                   None, context, None)


def _lstm(kern, weight_bytes: int, use: str) -> Variant | None:
    """The integer LSTM's gate products four cells at a time (a layer-normalized one's too, before
    its rows are normalized): each input word sign-extended once (SXTB16) for the four rows, each
    weight word at its use; the weights stay int8 as stored."""
    if use != "whole" or not isinstance(kern, K.Lstm):
        return None

    def context(kern, k, sym, variant, in_place=False):
        return dict(macro="lstm", portable_values=True)

    return Variant("lstm_s8_s16_smlad", KERNELS, "lstm", weight_bytes, CODE_BYTES_DSP, 4, True, False, 1, None, context,
                   None)


def _svdf(kern, weight_bytes: int, use: str) -> Variant | None:
    """SVDF's feature products four filters at a time (the input word offset by its zero point
    once, SXTAB16, for four rows) and its time products on int16 pairs, one SMLAD per two."""
    if use != "whole" or not isinstance(kern, K.Svdf) or kern.state_bits != 16:  # int16 time products only
        return None

    def context(kern, k, sym, variant, in_place=False):
        return dict(macro="svdf", portable_values=True, off2=_offset_pair(-kern.input_zero_point))

    return Variant("svdf_s8_smlad", KERNELS, "svdf", weight_bytes, CODE_BYTES_DSP, 4, True, False, 1, None, context, None)


def _sixteen_by_eight(kern, weight_bytes: int, use: str) -> Variant | None:
    """16x8 convolutions (not depthwise, dilation 1 along rows) and fully connected layers with
    int64 accumulators, whole from the arena: four output channels per pass; two words of int16
    inputs (x0, x1), (x2, x3) rearranged once into (x0, x2), (x1, x3) for four weight rows, whose
    int8 words are sign-extended at their use (SXTB16, the weights stay as stored); SMLALD adds two
    products to a 64-bit accumulator, as the reference sums. A convolution's kernel row inside
    the image is one contiguous run of inputs and weights: one dot product per row."""
    if use != "whole" or not isinstance(kern, (K.Conv, K.FullyConnected)) or not kern.acc64 or kern.input_offset:
        return None  # (16-bit inputs are symmetric: the kernel adds no offset)
    if isinstance(kern, K.Conv) and (kern.depthwise or kern.dil_w != 1):
        return None

    def context(kern, k, sym, variant, in_place=False):
        return dict(macro="conv_fc_s16", portable_values=True)

    fc = isinstance(kern, K.FullyConnected)
    return Variant("fully_connected_s16_smlald" if fc else "convolve_s16_smlald", KERNELS, "conv_fc_s16", weight_bytes,
                   CODE_BYTES_DSP, 1, True, False, 1, None, context, None, walk="pixels")


def _offset_pair(offset: int) -> int:
    """An int8 offset in both halfwords of a word (SXTAB16's addend), as a C int32 literal."""
    off = offset & 0xFFFF
    return int(np.int32(np.uint32(off | off << 16)))


RULES = (VariantRule("smlad conv/fc", _conv_fc, (K.Conv, K.FullyConnected)), VariantRule("smlad add", _add, (K.Add,)),
         VariantRule("smlad transpose conv", _transpose_conv, (K.TransposeConv,)),
         VariantRule("smlad batch matmul", _batch_matmul, (K.BatchMatMul,)),
         VariantRule("smlad lstm", _lstm, (K.Lstm,)), VariantRule("smlad svdf", _svdf, (K.Svdf,)),
         VariantRule("smlald 16x8 conv/fc", _sixteen_by_eight, (K.Conv, K.FullyConnected), dtypes=("int16",)))

# The language-model matvec's Q4_0 layout: each group of 8 codes is one little-endian word whose
# nibble s holds element Q4_SLOTS[s], so that (w >> 4k) & 0x000F000F is a halfword pair matching an
# input pair from SXTB16: (e0, e2), (e1, e3) of the group's first input word, (e4, e6), (e5, e7)
# of its second. One AND (its shift folded in) per two codes, one SMLAD per two MACs.
Q4_SLOTS = (0, 1, 4, 5, 2, 3, 6, 7)


def pack_q4(codes: np.ndarray) -> np.ndarray:
    """[rows, cols] Q4_0 codes (cols a multiple of 8) as bytes in the order above."""
    rows, cols = codes.shape
    slots = codes.reshape(rows, cols // 8, 8)[:, :, Q4_SLOTS].astype(np.uint8)
    return (slots[:, :, 0::2] | (slots[:, :, 1::2] << 4)).reshape(-1)


FAMILY = KernelFamily(
    name="smlad", label="SMLAD",
    description="Armv7E-M DSP extension: SXTAB16 + SMLAD, two int8 MACs per instruction",
    rules=RULES, templates=TEMPLATES, llm_formats=("q4_0",), llm_q4_pack=pack_q4, llm_input_pairs=True,
    # fitted by least squares to the per-layer counts of `deploy verify --qemu --per-layer` (kws,
    # vww_96 and resnet8 on the M7, untiled and tiled at 64K/32K/16K by both tilers: 378 layers,
    # median error 5%): about one MAC per instruction on convolutions and fully connected
    # layers, fewer on depthwise ones; depthwise refit after its several-pixel steps
    # (bench/cost_model_bench.py --target stm32h743 --l1 32K --fit, 162 layers, median error
    # 3.2%: 1.405 instructions per MAC and 12.6 per output, from 1/0.56 and 16)
    cost_model=(
        ("macs_per_cycle", 1.0),
        ("macs_per_cycle_depthwise", 0.71),
        ("macs_per_cycle_pool", 0.1),
        ("macs_per_cycle_eltwise", 0.04),
        ("cycles_per_output_conv", 11),
        ("cycles_per_output_depthwise", 12.6),
        ("cycles_per_output_fc", 99),
        ("cycles_per_output_pool", 35),
    ))


# ---- the templates' values ---------------------------------------------------------------

def template_context(kern, k: int, sym, variant: Variant, in_place: bool = False) -> dict:
    """What the variant's macro needs: the packed weights and the per-lane arrays (padded to whole
    passes of 4 channels) as .rodata arrays made through ``sym`` (the engine's constants), and the
    shape of its loops. ``in_place``: a depthwise layer writing over its input."""
    if variant.macro == "add":
        return dict(macro="add", count=int(np.prod(kern.view.shape, dtype=np.int64)))
    s = variant.layout
    graph = sym.graph
    fc = isinstance(kern, K.FullyConnected)
    channels = kern.units if fc else kern.out_c

    def padded(values, fill, dtype):
        return pad_channels(values, channels, s.groups * LANES, fill, dtype)

    # the arrays are made only where ``sym`` keeps their values (a window's kernel only names them)
    w = graph.tensors[kern.weights].data
    bias = graph.tensors[kern.bias].data if kern.bias >= 0 else None

    dbl = doubles(kern, s, w, bias)
    scale = 2 if dbl else 1

    def packed():
        return pack_depthwise(w, s, scale) if s.variant == "depthwise" else pack_rows(w, s, scale)

    def rq():  # fx_rq's per-lane multipliers, addend high words and shifts less one
        e = right_shifts(kern)
        zp = kern.output_offset if s.fold_zp else 0
        return (padded(kern.multiplier, 0, np.int32),
                padded([(1 << (v - 2)) + zp * (1 << (v - 1)) for v in e], 1, np.int32),
                padded([v - 1 for v in e], 1, np.int8))

    def rq2():  # dsp_rq2's per-lane multipliers, addends 2^(e - 1) (+ zp * 2^e) and right shifts e
        e = right_shifts(kern)
        zp = kern.output_offset if s.fold_zp else 0
        return (padded(kern.multiplier, 0, np.int32), padded([(1 << (v - 1)) + zp * (1 << v) for v in e], 1, np.int32),
                padded(e, 1, np.int8))

    def stream_words():  # sums x * w: the input offset's share joins the bias (mod 2^32, as int32 sums wrap)
        folded = scale * folded_bias(kern, bias, w)
        folded = ((folded + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
        return pack_stream(packed(), padded(folded, 0, np.int32), (rq2() if dbl else rq()) if s.fast_requant else None, s)

    stream = s.variant in ("pointwise", "im2col")
    ctx = dict(macro={"depthwise": "depthwise", "pointwise": "pointwise", "im2col": "im2col",
                      "rows": "conv_rows"}[s.variant],
               kind="fc" if fc else "conv", groups=s.groups, row=s.row, row_words=s.row_words,
               chunks=s.row // 4, rem=s.row % 4, fast_requant=s.fast_requant,
               fold_zp=s.fold_zp, out_c=channels, oc_tail=channels % LANES,
               off2=_offset_pair(kern.input_offset),
               # can a row's step count be odd? (aligned rows: per tap in_c / 4 steps)
               odd_chunks=(s.row // 4) % 2 == 1 or (not fc and kern.in_c % 4 == 0 and (kern.in_c // 4) % 2 == 1),
               stream=stream, stream_rq=stream and s.fast_requant, bias=None, int_rq=None, float_rq=None, dbl=dbl,
               stack_bytes=s.row if s.variant == "im2col" else 0)  # the im2col column, on the stack
    if stream:
        ctx["wq"] = sym.array(f"op{k}_stream", "uint32_t", stream_words, aligned=True, arg="wq")
    else:
        ctx["wq"] = sym.array(f"op{k}_weights_q15", "uint32_t", packed, aligned=True, arg="wq")
        if bias is not None:
            ctx["bias"] = sym.array(f"op{k}_bias_lanes", "int32_t", lambda: padded(bias, 0, np.int32), arg="bias")
    if s.variant in ("depthwise", "im2col"):
        oy0, oy1, ox0, ox1 = interior(kern)
        ctx["interior"] = dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1)
    if s.variant == "depthwise":
        ctx.update(_depthwise_context(kern, in_place))
    if kern.float_rq is not None:  # onnxruntime's float requantization: per-lane scales
        ctx["float_rq"] = sym.array(f"op{k}_scale_f32_lanes", "float", lambda: padded(kern.float_rq, 0.0, np.float32), arg="frq")
    elif kern.int_rq is not None:  # an integer graph's requantization: per-lane multipliers and addends
        rq_int = kern.int_rq
        ctx["int_rq"] = dict(mul=sym.array(f"op{k}_rq_mul_lanes", "int32_t", lambda: padded(rq_int.mul, 0, np.int64), arg="rq_mul"),
                             add=sym.array(f"op{k}_rq_add_lanes", "int64_t", lambda: padded(rq_int.add, 0, np.int64), arg="rq_add"),
                             shift=rq_int.shift)
    elif fc:
        ctx["scale"] = sym.array(f"op{k}_scale_lanes", "double", lambda: padded(kern.scale, 0.0, np.float64), arg="scale")
        ctx["fc_est"] = sym.double_scales(f"op{k}_scale_lanes", padded(kern.scale, 0.0, np.float64))
    elif dbl and not stream:
        ctx.update(mult=sym.array(f"op{k}_multiplier", "int32_t", lambda: rq2()[0], arg="mult"),
                   rq_hi=sym.array(f"op{k}_addend", "int32_t", lambda: rq2()[1], arg="rq_hi"),
                   rq_e1=sym.array(f"op{k}_shift_right", "int8_t", lambda: rq2()[2], arg="rq_e1"))
    elif s.fast_requant and not stream:
        ctx.update(mult=sym.array(f"op{k}_multiplier", "int32_t", lambda: rq()[0], arg="mult"),
                   rq_hi=sym.array(f"op{k}_addend_hi", "int32_t", lambda: rq()[1], arg="rq_hi"),
                   rq_e1=sym.array(f"op{k}_shift_less_1", "int8_t", lambda: rq()[2], arg="rq_e1"))
    elif not s.fast_requant:
        ctx.update(mult=sym.array(f"op{k}_multiplier", "int32_t", lambda: padded(kern.multiplier, 0, np.int32), arg="mult"),
                   shift=sym.array(f"op{k}_shift", "int8_t", lambda: padded(kern.shift, -1, np.int8), arg="shift"))
    return ctx


PLANE_LIMIT = 1024  # bytes of stack a depthwise pass's padded plane may take
STRIP_COPIES = 2  # input words a plane in strips may copy per output pixel (stride 1: 1 + (k_h - 1) / strip)


def depthwise_plane(kern) -> dict | None:
    """The zero-point-padded plane of one pass's 4 channels (a word a pixel, on the stack) of a
    depthwise layer whose windows cross the input's border, of at most PLANE_LIMIT bytes: its
    rows and columns, the input rows and columns copied into it (those some window reads), and
    the output rows it serves at a time (``strip``: all of them, or strips of at least 2 whose
    input rows it holds in turn; None when not even 2 fit, or when the strips would copy more
    than STRIP_COPIES input words per output pixel, as a stride of 2 does)."""
    oy0, oy1, ox0, ox1 = interior(kern)
    if (oy0, oy1, ox0, ox1) == (0, kern.out_h, 0, kern.out_w):
        return None  # every window whole already
    h = (kern.out_h - 1) * kern.stride_h + kern.k_h
    w = (kern.out_w - 1) * kern.stride_w + kern.k_w
    h, w = max(h, kern.pad_t + 1), max(w, kern.pad_l + 1)
    strip = kern.out_h
    if 4 * h * w > PLANE_LIMIT:  # strips of output rows, each copying the input rows it reads
        strip = (PLANE_LIMIT // (4 * w) - kern.k_h) // kern.stride_h + 1
        h = (strip - 1) * kern.stride_h + kern.k_h
        if strip < 2 or h * min(kern.in_w, w - kern.pad_l) > STRIP_COPIES * strip * kern.out_w:
            return None  # the copies would cost more than the cut windows save
    zp = -kern.input_offset & 0xFF
    return dict(h=h, w=w, bytes=4 * h * w, rows=min(kern.in_h, h - kern.pad_t), cols=min(kern.in_w, w - kern.pad_l),
                fill=f"0x{zp * 0x01010101:08x}", strip=strip)


def _plane_whole(kern) -> bool:
    """Whether a depthwise layer's padded plane holds its whole input (one strip)."""
    plane = depthwise_plane(kern)
    return plane is not None and plane["strip"] == kern.out_h


def _depthwise_context(kern, in_place: bool) -> dict:
    """Where a depthwise layer's passes write, and the shapes of its border windows."""
    plane = depthwise_plane(kern)
    if plane is not None and (not in_place or plane["strip"] == kern.out_h):
        # written straight to the output (in place: over the input, all of it copied first)
        plane.update(out_row=f"{'in' if in_place else 'out'} + oy * {kern.out_w * kern.out_c} + c", out_step=kern.out_c,
                     direct=True)
    elif plane is not None:  # in place in strips: through the scratch plane, as the cut windows
        plane.update(out_row=f"plane + oy * {4 * kern.out_w}", out_step=4, direct=False)
    ctx = dict(tap_guards=tap_guards(kern), borders=border_walks(kern), plane=plane,
               stack_bytes=0 if plane is None else plane["bytes"])
    if in_place:  # a pass writes its 4 channels to the scratch plane, 4 bytes per pixel
        return dict(ctx, out_row=f"plane + oy * {4 * kern.out_w}", out_step=4,
                    out_pixel=f"plane + (oy * {kern.out_w} + ox) * 4")
    return dict(ctx, out_row=f"out + oy * {kern.out_w * kern.out_c} + c", out_step=kern.out_c,
                out_pixel=f"out + (oy * {kern.out_w} + ox) * {kern.out_c} + c")
