"""The Helium (M-profile Vector Extension, Armv8.1-M) kernel family of the Cortex-M55/M85: the
variants, the weight layouts they read, their cost model, and the values their templates
(templates/mve/, which only this family names) need.

Convolutions and fully connected layers are dot products of 16 int8 values per VMLADAVA (the
weights stay int8, each row zero-padded to whole vectors, 4 channels' rows interleaved step by
step); a pass computes 4 output channels of 2 output pixels (batch rows), 8 VMLADAVAs per 6 loads,
and requantizes each pixel's 4 sums as one vector (a fully connected layer's with the 32.32
estimate of its double scale, the doubtful lanes in double). Depthwise layers run 16 channels per
pass on int8 lanes from a line buffer of padded input rows (a layer of C < 16 channels, stride 1
across: 16 / C output pixels a pass), two taps' int16 products summed before they widen into int32 (one at a time where a weight is -128), right shifts only; the others (a
left shift, a kernel beyond the asm's immediates) 4 channels per VMLA on int32 lanes.
Elementwise ADD, SUB and MUL run 4 elements per int32 vector, TFLite's rescalings lane by lane;
average and max pooling 16 channels of an output pixel a pass (int16 sums, or int8 maxima), an
average divided by its window's count through a 32-bit reciprocal; both whole, tile by tile and
region by region in patch stages (an elementwise region row by row, each operand at its buffer's
row stride). 16x8 convolutions and fully connected layers (int16 activations) widen 8 int8 weights
to int16 as they load and sum 8 products into 64 bits per VMLALDAVA, 4 channels sharing each input
vector (templates/mve/sixteen.c.j2); their depthwise layers (whole) 4 channels per int32 vector,
inputs and weights widened on load. Everything here is done once, at generation time."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from layer_analyzer import kernels as K

from .family import KernelFamily
from .geometry import border_walks, folded_bias, interior, pad_channels, tap_guards
from deployer import fixedpoint
from deployer.fixedpoint import scale_q32

from .variants import Variant, VariantRule

TEMPLATES = "mve"  # its folder under templates/
KERNELS = f"{TEMPLATES}/kernels.c.j2"
VECTOR = 16  # int8 lanes of one vector
PIXELS = 2  # output pixels per pass of a convolution (or batch rows of a fully connected layer)
QUAD = 4  # output channels (units) per pass
DW_LANES = 4  # channels per pass of a depthwise layer (int32 lanes)
DW16 = 16  # channels per pass of the line-buffer depthwise kernel (int8 lanes)
# the 16-lane kernel's lane order: VMULLB/VMULLT then VMOVLB/VMOVLT leave channel PERM16[j] of a
# group in lane j of its four int32 accumulators (the saturating narrows restore the order)
PERM16 = (0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15)
DW_LINE_BYTES = 5 * 1024  # stack its k_h padded input rows (16 bytes a pixel) may take
STACK_COLUMNS = 2304  # bytes of stack the im2col columns of one pass's pixels may take


@dataclass(frozen=True, slots=True)
class MveLayout:
    """How one conv, fc or depthwise layer runs on the MVE kernels."""
    variant: str  # "pointwise" | "im2col" | "fc" | "depthwise"
    row: int  # int8 values per dot product (a pixel's window; a unit's inputs)
    row_pad: int  # ... padded to whole vectors (the weights' row stride)
    pixels: int  # output pixels per pass (convolutions)


def right_shifts_only(kern) -> bool:
    """Every channel shifts right by at least 1 bit (or has multiplier 0, whose output is the zero
    point whatever the shift): VQRDMULH, the sign added, VRSHL is then TFLite's requantization."""
    return all(sh <= -1 or m == 0 for m, sh in zip(kern.multiplier, kern.shift))


def depthwise16_fits(kern) -> bool:
    """The 16-lane depthwise kernel's limits: its asm step addresses taps by immediates (a line
    buffer row's taps within 127 bytes, the group's weights within 508), holds k_h row pointers
    beside 7 other registers (gcc found no more than 9 in every function: k_h <= 3), and its k_h
    padded rows fit the stack. In place (output over input),
    no output row may reach an input row its line buffer has not copied yet."""
    if not right_shifts_only(kern) or kern.k_h > 3 or kern.k_w > 7 or kern.stride_w > 7:
        return False
    if kern.k_h * kern.k_w > 32 or kern.k_h * line_width(kern) * DW16 > DW_LINE_BYTES:
        return False
    out_row = kern.out_w * kern.out_c
    return all((oy + 1) * out_row <= (oy * kern.stride_h - kern.pad_t + kern.k_h) * kern.row_bytes
               for oy in range(kern.out_h) if oy * kern.stride_h - kern.pad_t + kern.k_h < kern.in_h)


def depthwise16_pixels(kern) -> int:
    """Output pixels a pass of the 16-lane depthwise kernel computes: 16 / C for a layer of C < 16
    channels (C dividing 16) and stride 1 across, whose line buffer holds a row's pixels C bytes apart,
    so that one 16-byte load reads a tap's inputs of 16 / C neighbouring output pixels and one store
    writes their outputs (the weights and per-channel values repeated in each pixel's lanes); else 1."""
    c = kern.in_c
    return DW16 // c if c < DW16 and DW16 % c == 0 and kern.stride_w == 1 else 1


def line_width(kern) -> int:
    """Pixels of a line buffer row: the input row with its padding on both sides."""
    right = max(0, (kern.out_w - 1) * kern.stride_w + kern.k_w - kern.pad_l - kern.in_w)
    return kern.pad_l + kern.in_w + right


def layout_for(kern) -> MveLayout | None:
    if isinstance(kern, K.FullyConnected):
        n = kern.in_features
        return MveLayout("fc", n, -(-n // VECTOR) * VECTOR, PIXELS)
    if not isinstance(kern, K.Conv) or kern.dil_h != 1 or kern.dil_w != 1:
        return None
    if kern.depthwise:
        if kern.depth_multiplier != 1 or kern.batch != 1:
            return None
        if _plain_rq(kern) and depthwise16_fits(kern):
            return MveLayout("depthwise16", 0, 0, depthwise16_pixels(kern))
        if kern.in_c % DW_LANES:
            return None
        return MveLayout("depthwise", 0, 0, 1)
    if kern.k_h == kern.k_w == 1 and kern.pad_t == kern.pad_l == 0:
        return MveLayout("pointwise", kern.in_c, -(-kern.in_c // VECTOR) * VECTOR, PIXELS)
    row = kern.k_h * kern.k_w * kern.in_c
    pad = -(-row // VECTOR) * VECTOR
    pixels = next((p for p in (PIXELS, 1) if p * pad <= STACK_COLUMNS), None)
    if pixels is None:
        return None  # a window too large for the stack: the next family's kernels
    return MveLayout("im2col", row, pad, pixels)


def pack_rows(weights: np.ndarray, s: MveLayout) -> np.ndarray:
    """OHWI (or units x features) int8 weights -> per group of 4 channels (the last one padded
    with zero rows), per step of 16 values, the 4 channels' 16 weights (zeros past ``row``): the
    order a pass reads them in, as little-endian words."""
    w = weights.reshape(weights.shape[0], -1).astype(np.int8)
    groups = -(-w.shape[0] // QUAD)
    w = np.pad(w, ((0, groups * QUAD - w.shape[0]), (0, s.row_pad - w.shape[1])))
    w = w.reshape(groups, QUAD, s.row_pad // VECTOR, VECTOR).transpose(0, 2, 1, 3)
    return np.frombuffer(np.ascontiguousarray(w).tobytes(), np.uint32)


def pack_depthwise(weights: np.ndarray) -> np.ndarray:
    """1 x KH x KW x C int8 weights -> [group of 4 channels][tap][4 channels], as words."""
    taps = weights.reshape(-1, weights.shape[-1]).astype(np.int8)  # T, C
    t, c = taps.shape
    g = taps.reshape(t, c // DW_LANES, DW_LANES).transpose(1, 0, 2)  # G, T, 4
    return np.frombuffer(np.ascontiguousarray(g).tobytes(), np.uint32)


def pack_depthwise16(weights: np.ndarray, pixels: int = 1) -> np.ndarray:
    """1 x KH x KW x C int8 weights -> [group of 16 channels][tap][16 channels] (the last group
    zero-padded), as words; ``pixels`` > 1 (depthwise16_pixels): each tap's C weights once per pixel
    of a pass, 16 lanes."""
    taps = np.tile(weights.reshape(-1, weights.shape[-1]).astype(np.int8), (1, pixels))  # T, C x pixels
    t, c = taps.shape
    g = -(-c // DW16)
    taps = np.pad(taps, ((0, 0), (0, g * DW16 - c)))
    return np.frombuffer(np.ascontiguousarray(taps.reshape(t, g, DW16).transpose(1, 0, 2)).tobytes(), np.uint32)


def permuted16(values: np.ndarray, fill) -> np.ndarray:
    """Per-channel values padded to whole groups of 16 (``fill``) and put in PERM16's lane order."""
    g = -(-values.size // DW16)
    v = np.concatenate([values, np.full(g * DW16 - values.size, fill, values.dtype)])
    return v.reshape(g, DW16)[:, list(PERM16)].reshape(-1)


def packed_bytes(kern, s: MveLayout) -> int:
    if s.variant == "depthwise16":
        return kern.k_h * kern.k_w * -(-kern.in_c // DW16) * DW16
    if s.variant == "depthwise":
        return kern.k_h * kern.k_w * kern.in_c
    channels = kern.units if s.variant == "fc" else kern.out_c
    return -(-channels // QUAD) * QUAD * s.row_pad


def window_steps(kern, layout: MveLayout) -> dict[str, tuple[int, int]]:
    """A window's kernel starts the weights at its first output channel: a row per channel, or
    (depthwise) a group's taps per 4 channels."""
    if layout.variant == "depthwise":
        return {"wq": (DW_LANES, kern.k_h * kern.k_w)}
    if layout.variant == "depthwise16":
        return {"wq": (DW16, kern.k_h * kern.k_w * DW16 // 4)}
    return {"wq": (QUAD, layout.row_pad)}


# .text of one layer's function by layout (as compiled for the M55 at -O2, the benchmark models)
CODE_BYTES = {"pointwise": 768, "im2col": 1536, "fc": 512, "depthwise": 2048, "depthwise16": 1536}
NAMES = {"pointwise": "conv_1x1_s8_mve", "im2col": "conv_s8_mve_im2col", "fc": "fully_connected_s8_mve",
         "depthwise": "depthwise_conv_s8_mve", "depthwise16": "depthwise_conv_s8_16ch_mve"}


def _plain_rq(kern) -> bool:
    """The per-channel (or per-unit) requantization the kernels vectorize: TFLite's, not an
    integer graph's or a QDQ graph's, on int8 activations."""
    return kern.int_rq is None and kern.float_rq is None and not kern.acc64 and K.activation_dtype(kern) == "int8"


def _conv_fc(kern, weight_bytes: int, use: str) -> Variant | None:
    """Convolutions, depthwise convolutions and fully connected layers, whole from the arena, tile
    by tile in L1 and region by region in patch stages (the weights read where they are)."""
    if use not in ("whole", "tile", "region") or not isinstance(kern, (K.Conv, K.FullyConnected)):
        return None
    if not _plain_rq(kern):
        return None
    s = layout_for(kern)
    if s is None or (use == "region" and s.variant == "fc"):
        return None
    dw = s.variant in ("depthwise", "depthwise16")
    channels = {"depthwise": DW_LANES, "depthwise16": DW16}.get(s.variant, QUAD)
    # lanes: the 16-lane kernel writes over its input row by row itself (no scratch plane: 0)
    lanes = {"depthwise": DW_LANES, "depthwise16": 0}.get(s.variant, 1)
    return Variant(NAMES[s.variant], KERNELS, s.variant, packed_bytes(kern, s), CODE_BYTES[s.variant], lanes, True, False, channels, s, template_context, _window,
                   shares_whole=dw and use == "whole",
                   lane_bytes=_lane_bytes(kern, s),
                   window_steps=window_steps)


def _lane_bytes(kern, s: MveLayout) -> tuple[int, int]:
    """(bias, requantization) bytes of its per-channel arrays: int32 biases; a multiplier and a
    shift byte per channel, or (fc) a double scale."""
    if s.variant == "fc":  # a double scale and its 32.32 estimate per unit
        padded = -(-kern.units // QUAD) * QUAD
        return 4 * padded, 12 * padded
    if s.variant in ("pointwise", "im2col"):
        padded = -(-kern.out_c // QUAD) * QUAD
        return 4 * padded, 5 * padded
    if s.variant == "depthwise16":
        padded = -(-kern.out_c // DW16) * DW16
        return 4 * padded, 5 * padded
    return 4 * kern.out_c, 5 * kern.out_c


def _window(variant: Variant, kern) -> Variant:
    """The variant for a window of its layer: the same weights, walked for the window's shape (a
    16-lane depthwise layer's pixels a pass are the layer's: its arrays are laid out for them)."""
    if variant.layout.variant == "depthwise16":
        return variant
    s = layout_for(kern)
    return replace(variant, layout=replace(variant.layout, pixels=s.pixels) if s is not None else variant.layout)


# ---- elementwise ADD/SUB/MUL and pooling ------------------------------------------------------

ELTWISE = 4  # elements per vector of the elementwise kernels (int32 lanes)
POOL_AREA = 256  # the largest window whose sums int16 lanes hold (256 x -128 at least)
CODE_BYTES_ELTWISE = 384
CODE_BYTES_POOL = 768


def _plain_binary(kern) -> bool:
    """An int8 ADD, SUB or MUL whose operands walk the output's elements in order (no broadcast;
    squared differences and 16-bit layers keep their portable kernels)."""
    return K.activation_dtype(kern) == "int8" and kern.view.dense and not getattr(kern, "squared", False)


def _eltwise(kern, weight_bytes: int, use: str) -> Variant | None:
    """ADD/SUB and MUL on 4 int32 lanes, TFLite's rescalings lane by lane (any shift: no refusal for
    a left shift), whole, over a tile's elements or row by row over a patch region."""
    if use not in ("whole", "tile", "region") or not isinstance(kern, (K.Add, K.Mul)) or not _plain_binary(kern):
        return None
    shifts = (kern.out_shift,) + ((kern.a_shift, kern.b_shift) if isinstance(kern, K.Add) else ())
    if any(not -32 <= sh <= 31 for sh in shifts):
        return None  # beyond VRSHR's immediate (1..32) or a 32-bit left shift
    if isinstance(kern, K.Mul):
        name = "elementwise_mul_s8_mve"
    else:
        name = "elementwise_sub_s8_mve" if kern.subtract else "elementwise_add_s8_mve"
    return Variant(name, KERNELS, "eltwise", 0, CODE_BYTES_ELTWISE, 1, True, False, 1, None, template_context, None)


def pool_counts(kern) -> tuple[list[int], list[int]]:
    """Per output row and per output column, the window's rows and columns inside the input."""
    def axis(out, stride, pad, f, extent):
        return [min(o * stride - pad + f, extent) - max(o * stride - pad, 0) for o in range(out)]
    return (axis(kern.out_h, kern.stride_h, kern.pad_t, kern.f_h, kern.in_h),
            axis(kern.out_w, kern.stride_w, kern.pad_l, kern.f_w, kern.in_w))


def pool_reciprocal(count: int) -> tuple[int, int]:
    """(m, bump) with (n + bump) * m >> 32 == (n + count // 2) // count for 0 <= n <= 128 * count:
    m = ceil(2^32 / count) errs by e = m * count - 2^32 < count, which moves the quotient of
    n' = n + count // 2 only if n' * e >= 2^32; n' * count < 2^32 holds up to count 5780 (POOL_AREA
    is far below). A count of 1 takes m = 2^32 - 1 and bump 1: (n + 1) * (2^32 - 1) >> 32 == n. The
    kernel computes both per pixel (one UDIV); tests/target/test_mve_kernels.py checks every count."""
    if count == 1:
        return 0xFFFFFFFF, 1
    return 0xFFFFFFFF // count + 1, count // 2  # ceil(2^32 / count), as the kernel computes it


def _pool(kern, weight_bytes: int, use: str) -> Variant | None:
    """Average and max pooling of int8 (TFLite's: no integer graph's or QDQ graph's), 16 channels a
    pass, pixel by pixel in row order (as the portable kernel, so an output may start inside its
    input: the same walk), whole, tile by tile or region by region."""
    if use not in ("whole", "tile", "region") or not isinstance(kern, K.Pool) or K.activation_dtype(kern) != "int8":
        return None
    if kern.int_rq is not None or kern.float_avg is not None or kern.f_h * kern.f_w > POOL_AREA:
        return None
    rows, cols = pool_counts(kern)
    if min(rows) <= 0 or min(cols) <= 0:
        return None  # a window wholly in the padding: the portable kernel's special case
    name = "avgpool_s8_mve" if kern.kind == "avg" else "max_pool_s8_mve"
    return Variant(name, KERNELS, "pool", 0, CODE_BYTES_POOL, 1, True, False, 1, None, template_context, None,
                   walk="pixels")


# ---- 16x8 convolutions and fully connected layers -------------------------------------------

LANES16 = 8  # int16 lanes of one vector (and int8 weights widened by VLDRB.S16)
KERNELS16 = f"{TEMPLATES}/sixteen.c.j2"
NAMES16 = {"fc16": "fully_connected_s16_mve", "pointwise16": "convolve_1x1_s16_mve", "im2col16": "convolve_s16_mve"}
CODE_BYTES16 = {"fc16": 768, "pointwise16": 1024, "im2col16": 1536}


def layout16_for(kern) -> MveLayout | None:
    """A 16x8 layer's rows: a fully connected layer's inputs, a pointwise pixel's channels, or a
    regular convolution's window flattened (int16, whole vectors) on the stack."""
    if isinstance(kern, K.FullyConnected):
        n = kern.in_features
        return MveLayout("fc16", n, -(-n // LANES16) * LANES16, 1)
    if not isinstance(kern, K.Conv) or kern.depthwise or kern.dil_h != 1 or kern.dil_w != 1:
        return None
    if kern.k_h == kern.k_w == 1 and kern.pad_t == kern.pad_l == 0:
        return MveLayout("pointwise16", kern.in_c, -(-kern.in_c // LANES16) * LANES16, 1)
    row = kern.k_h * kern.k_w * kern.in_c
    pad = -(-row // LANES16) * LANES16
    if 2 * pad > STACK_COLUMNS:
        return None  # a window too large for the stack: the next family's kernels
    return MveLayout("im2col16", row, pad, 1)


def pack_rows16(weights: np.ndarray, s: MveLayout) -> np.ndarray:
    """OHWI (or units x features) int8 weights -> per group of 4 channels (the last one padded with
    zero rows), per step of 8 values, the 4 channels' 8 weights (zeros past ``row``), as words."""
    w = weights.reshape(weights.shape[0], -1).astype(np.int8)
    groups = -(-w.shape[0] // QUAD)
    w = np.pad(w, ((0, groups * QUAD - w.shape[0]), (0, s.row_pad - w.shape[1])))
    w = w.reshape(groups, QUAD, s.row_pad // LANES16, LANES16).transpose(0, 2, 1, 3)
    return np.frombuffer(np.ascontiguousarray(w).tobytes(), np.uint32)


def mbqm64_terms(multiplier: int, shift: int) -> tuple[int, int, int]:
    """LiteRT's 64-bit MultiplyByQuantizedMultiplier (fx_mbqm64) as one channel's three terms,
    as Python ints: y = (acc * reduced + addend) >> total."""
    return tuple(int(v) for v in fixedpoint.mbqm64_terms(multiplier, shift))


def _sixteen_by_eight(kern, weight_bytes: int, use: str) -> Variant | None:
    """16x8 convolutions (not depthwise, dilation 1) and fully connected layers with int64
    accumulators, whole from the arena or tile by tile in L1: 8 int16 inputs against 8 int8 weights widened on load
    (VLDRB.S16) per VMLALDAVA into a 64-bit sum, 4 output channels per pass reusing each input
    vector (their weights interleaved per step of 8), the row's last step predicated (VCTP) or,
    in a convolution's flattened window, zero-padded; requantized as the portable kernels do
    (fx_mbqm64's terms precomputed per channel; a fully connected layer's double scale)."""
    if use not in ("whole", "tile") or not isinstance(kern, (K.Conv, K.FullyConnected)) or not kern.acc64:
        return None
    if kern.input_offset:
        return None  # (16-bit inputs are symmetric: the kernel adds no offset)
    if kern.int_rq is not None or kern.float_rq is not None:
        return None
    s = layout16_for(kern)
    if s is None:
        return None
    if s.variant != "fc16" and not (all(1 <= 15 - sh <= 62 for sh in kern.shift) and min(kern.multiplier) >= 0):
        return None  # (TFLite's multipliers and shifts: a 16-bit multiplier, a right shift of 1 to 62 bits)
    channels = kern.units if s.variant == "fc16" else kern.out_c
    quads = -(-channels // QUAD) * QUAD
    # lanes: int64 biases; per channel a 16-bit multiplier, an int64 addend and a shift byte (or a double scale)
    return Variant(NAMES16[s.variant], KERNELS16, "conv_fc_s16", quads * s.row_pad, CODE_BYTES16[s.variant], 1, True,
                   False, QUAD, s, sixteen_context, None, walk="pixels",
                   lane_bytes=(8 * quads, (8 if s.variant == "fc16" else 11) * quads),
                   window_steps=lambda kern, layout: {"wq": (QUAD, layout.row_pad)})


def sixteen_context(kern, k: int, sym, variant: Variant, in_place: bool = False) -> dict:
    """The 16x8 kernel's arrays (interleaved weights, int64 biases and the requantization terms
    padded to whole passes of 4 channels) and the shape of its loops."""
    s = variant.layout
    fc = s.variant == "fc16"
    channels = kern.units if fc else kern.out_c
    quads = -(-channels // QUAD) * QUAD
    graph = sym.graph
    w = graph.tensors[kern.weights].data
    bias = graph.tensors[kern.bias].data if kern.bias >= 0 else None

    def padded(values, fill, dtype):
        return pad_channels(values, channels, quads, fill, dtype)

    im2col = s.variant == "im2col16"
    steps = (s.row_pad if im2col else s.row) // LANES16
    ctx = dict(macro="conv_fc_s16", kind=s.variant, out_c=channels, row=s.row, row_pad=s.row_pad,
               steps=steps, rem=0 if im2col else s.row % LANES16, tail_c=channels % QUAD, narrow=False,
               stack_bytes=2 * s.row_pad if im2col else 0,
               # a window's rows of whole steps: read where they are inside the input (no copy)
               run_steps=kern.k_w * kern.in_c // LANES16 if im2col and kern.k_w * kern.in_c % LANES16 == 0 else 0,
               wq=sym.array(f"op{k}_weights_s8x8", "uint32_t", lambda: pack_rows16(w, s), aligned=True, arg="wq"),
               bias=sym.array(f"op{k}_bias64_lanes", "int64_t",
                              lambda: padded(0 if bias is None else bias.astype(np.int64), 0, np.int64), aligned=True,
                              arg="bias64"))
    if fc:
        ctx["scale"] = sym.array(f"op{k}_scale_lanes", "double", lambda: padded(kern.scale, 0.0, np.float64), arg="scale")
    else:
        n = max(len(kern.multiplier), len(kern.shift))  # (a window's kernel: the layer's channels)
        terms = [mbqm64_terms(m, sh) for m, sh in zip(np.broadcast_to(kern.multiplier, (n,)), np.broadcast_to(kern.shift, (n,)))]
        ctx["narrow"] = narrow16(w, bias, terms)
        if ctx["narrow"]:  # VRMULH by reduced * 2^(32 - total): (s * reduced + 2^(total - 1)) >> total exactly
            ctx["mult"] = sym.array(f"op{k}_rq16_mult", "int32_t",
                                    lambda: padded([r << (32 - t) for r, _, t in terms], 0, np.int32), aligned=True,
                                    arg="mult")
            return _im2col_interior(kern, ctx) if im2col else ctx
        ctx["reduced"] = sym.array(f"op{k}_rq64_mult", "uint16_t", lambda: padded([t[0] for t in terms], 0, np.uint16),
                                   arg="rq64_mult")
        ctx["addend"] = sym.array(f"op{k}_rq64_addend", "int64_t", lambda: padded([t[1] for t in terms], 0, np.int64),
                                  aligned=True, arg="rq_add")
        ctx["total"] = sym.array(f"op{k}_rq64_shift", "int8_t", lambda: padded([t[2] for t in terms], 0, np.int8),
                                 arg="rq64_shift")
    return _im2col_interior(kern, ctx) if im2col else ctx


def _im2col_interior(kern, ctx: dict) -> dict:
    oy0, oy1, ox0, ox1 = interior(kern)
    return dict(ctx, interior=dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1))


def narrow16(w: np.ndarray, bias, terms) -> bool:
    """Can a convolution requantize its sums on 32-bit lanes? Where every channel's sum provably
    fits int32 (its bias's magnitude and 32768 times its weights' cannot reach 2^31: the low words
    of the 64-bit sums are the sums) and shifts right by 16 to 32 bits (reduced * 2^(32 - total)
    is then an int32, and VRMULH's (s * m + 2^31) >> 32 is fx_mbqm64's rounding)."""
    rows = np.abs(w.reshape(w.shape[0], -1).astype(np.int64)).sum(axis=1)
    b = [0] * len(rows) if bias is None else [abs(int(v)) for v in bias.reshape(-1)]
    if any(bb + (int(r) << 15) >= 2 ** 31 for bb, r in zip(b, rows)):
        return False
    return all(16 <= t <= 32 for _, _, t in terms)


# ---- 16x8 depthwise convolutions ---------------------------------------------------------

NAME_DW16 = "depthwise_conv_s16_mve"
CODE_BYTES_DW16 = 1536
DW16_TAPS = (2 ** 31 - 1) // (32768 * 128)  # taps whose int16 x int8 products an int32 lane sums (511)


def _depthwise_sixteen(kern, weight_bytes: int, use: str) -> Variant | None:
    """16x8 depthwise convolutions (depth multiplier 1, dilation 1, batch 1), whole layers only:
    4 channels per int32 vector, each tap's int16 inputs widened on load (VLDRH.S32) times its
    int8 weights widened on load (VLDRB.S32), VMUL and VADD into int32 lanes: a window of at most
    DW16_TAPS taps cannot pass int32 (32768 x 128 a product), whatever the values. Border windows
    skip the taps outside the input (the portable kernel's; the input zero point is 0), then
    fx_mbqm64's rounding as the 16x8 convolutions do it (4 lanes by VRMULH where the bias and sums
    fit int32, else each lane in 64 bits). Channel groups outermost (no pixel order: walk None)."""
    if use != "whole" or not isinstance(kern, K.Conv) or not kern.depthwise or not kern.acc64:
        return None
    if kern.depth_multiplier != 1 or kern.batch != 1 or kern.dil_h != 1 or kern.dil_w != 1:
        return None
    if kern.input_offset or kern.output_offset or kern.int_rq is not None or kern.float_rq is not None:
        return None
    if kern.k_h * kern.k_w > DW16_TAPS:
        return None
    if not (all(1 <= 15 - sh <= 62 for sh in np.atleast_1d(kern.shift)) and np.min(kern.multiplier) >= 0):
        return None
    padded = -(-kern.out_c // DW_LANES) * DW_LANES
    # lanes 4: an in-place plane of 4 channels where they divide the channels (else the planner's
    # plane holds 1 and the kernel then runs one channel a pass); weights padded per tap to 4
    return Variant(NAME_DW16, KERNELS16, "depthwise_s16", kern.k_h * kern.k_w * padded, CODE_BYTES_DW16, DW_LANES,
                   True, False, DW_LANES, None, depthwise_sixteen_context, None,
                   lane_bytes=(8 * padded, 11 * padded))


def pack_depthwise_s16(weights: np.ndarray) -> np.ndarray:
    """1 x KH x KW x C int8 weights -> [tap][C padded to 4] (zeros past C), as words."""
    taps = weights.reshape(-1, weights.shape[-1]).astype(np.int8)
    taps = np.pad(taps, ((0, 0), (0, -(-taps.shape[1] // DW_LANES) * DW_LANES - taps.shape[1])))
    return np.frombuffer(np.ascontiguousarray(taps).tobytes(), np.uint32)


def depthwise_sixteen_context(kern, k: int, sym, variant: Variant, in_place: bool = False) -> dict:
    """The 16x8 depthwise kernel's arrays (weights per tap padded to 4 channels; int32 biases and
    VRMULH multipliers, or int64 biases and fx_mbqm64's terms) and its loops' bounds. In place with
    channels 4 do not divide, the planner's plane holds one channel: one channel a pass."""
    graph = sym.graph
    c = kern.out_c
    padded = -(-c // DW_LANES) * DW_LANES
    w = graph.tensors[kern.weights].data
    bias = graph.tensors[kern.bias].data if kern.bias >= 0 else None
    cols = w.reshape(-1, c).astype(np.int64)
    assert 32768 * int(np.abs(cols).sum(axis=0).max(initial=0)) < 2 ** 31  # (DW16_TAPS)

    def lanes(values, fill, dtype):
        return pad_channels(values, c, padded, fill, dtype)

    mult = np.broadcast_to(kern.multiplier, (c,))
    shift = np.broadcast_to(kern.shift, (c,))
    terms = [mbqm64_terms(int(m), int(sh)) for m, sh in zip(mult, shift)]
    group = DW_LANES if not in_place or c % DW_LANES == 0 else 1
    oy0, oy1, ox0, ox1 = interior(kern)
    ctx = dict(macro="depthwise_s16", padded=padded, group=group, full=c - c % DW_LANES if group == DW_LANES else 0,
               tail=c % DW_LANES if group == DW_LANES else 0, in_place=in_place,
               interior=dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1), borders=border_walks(kern), tap_guards=tap_guards(kern),
               narrow=narrow16(cols.T, bias, terms),
               wq=sym.array(f"op{k}_weights_s8x4", "uint32_t", lambda: pack_depthwise_s16(w), aligned=True, arg="wq"))
    if ctx["narrow"]:  # every sum and its bias fit int32; VRMULH by reduced * 2^(32 - total): fx_mbqm64 exactly
        ctx["bias"] = sym.array(f"op{k}_bias_lanes", "int32_t",
                                lambda: lanes(0 if bias is None else bias.astype(np.int64), 0, np.int32), aligned=True, arg="bias")
        ctx["mult"] = sym.array(f"op{k}_rq16_mult", "int32_t", lambda: lanes([r << (32 - t) for r, _, t in terms], 0, np.int32),
                                aligned=True, arg="mult")
        return ctx
    ctx["bias"] = sym.array(f"op{k}_bias64_lanes", "int64_t", lambda: lanes(0 if bias is None else bias.astype(np.int64), 0, np.int64),
                            aligned=True, arg="bias64")
    ctx["reduced"] = sym.array(f"op{k}_rq64_mult", "uint16_t", lambda: lanes([t[0] for t in terms], 0, np.uint16), arg="rq64_mult")
    ctx["addend"] = sym.array(f"op{k}_rq64_addend", "int64_t", lambda: lanes([t[1] for t in terms], 0, np.int64),
                              aligned=True, arg="rq_add")
    ctx["total"] = sym.array(f"op{k}_rq64_shift", "int8_t", lambda: lanes([t[2] for t in terms], 0, np.int8), arg="rq64_shift")
    return ctx


RULES = (VariantRule("mve conv/fc", _conv_fc, (K.Conv, K.FullyConnected)),
         VariantRule("mve add/sub/mul", _eltwise, (K.Add, K.Mul)), VariantRule("mve pool", _pool, (K.Pool,)),
         VariantRule("mve 16x8 conv/fc", _sixteen_by_eight, (K.Conv, K.FullyConnected), dtypes=("int16",)),
         VariantRule("mve 16x8 depthwise", _depthwise_sixteen, (K.Conv,), dtypes=("int16",)))

FAMILY = KernelFamily(
    name="mve", label="Helium",
    description="Armv8.1-M M-profile Vector Extension: 16 int8 MACs per VMLADAVA",
    rules=RULES, templates=TEMPLATES,
    llm_formats=("q4_0", "int8"),  # templates/mve/llm.c.j2: Q4_0 codes in the portable packing
    # Convolutions and depthwise refit by least squares over 162 layers of kws, vww_96 and resnet8
    # counted on QEMU's M55, whole and in --l1 32K tiles (bench/cost_model_bench.py --target
    # cortex-m55 --l1 32K --fit): 0.143 instructions per MAC and 7.5 per output of a convolution,
    # 0.614 and 5.5 of a depthwise (the first estimates from the inner loops, 4 and 1.2 MACs per
    # cycle, were twice the counts). Fully connected layers keep the estimate (their MACs and
    # outputs move together: the fit cannot part them). Elementwise and pooling from `deploy
    # verify --qemu --per-layer` on the M55: resnet8's three ADDs 5.4 instructions per element
    # (88,090 for 16,384), the average pools of kws (125 taps x 64 channels: 4,317), resnet8
    # (64 x 64: 2,209) and vww_96 (9 x 256: 2,169) about 0.55 per tap and channel and 2.5 per
    # output (a pass's division and stores over 16 channels). Layers the Helium kernels leave (a
    # broadcast operand, int16) cost more than this on their portable kernels.
    cost_model=(
        ("macs_per_cycle", 7.0),
        ("macs_per_cycle_depthwise", 1.6),
        ("macs_per_cycle_pool", 1.8),
        ("macs_per_cycle_eltwise", 0.18),
        ("cycles_per_output_conv", 7.5),
        ("cycles_per_output_depthwise", 5.5),
        ("cycles_per_output_fc", 40),
        ("cycles_per_output_pool", 2.5),
    ))


# ---- the templates' values ---------------------------------------------------------------

def template_context(kern, k: int, sym, variant: Variant, in_place: bool = False) -> dict:
    """What the variant's macro needs: the weights and per-channel arrays as .rodata arrays made
    through ``sym`` (the engine's constants), and the shape of its loops."""
    if variant.macro == "eltwise":
        return _eltwise_context(kern)
    if variant.macro == "pool":
        return _pool_context(kern)
    s = variant.layout
    graph = sym.graph
    fc = s.variant == "fc"
    channels = kern.units if fc else kern.out_c
    w = graph.tensors[kern.weights].data
    bias = graph.tensors[kern.bias].data if kern.bias >= 0 else None
    if s.variant == "depthwise16":
        return _depthwise16_context(kern, k, sym, w, bias, in_place, s.pixels)
    if s.variant == "depthwise":
        return _depthwise_context(kern, k, sym, w, bias, in_place)
    quads = -(-channels // QUAD) * QUAD

    def padded(values, fill, dtype):  # per channel, to whole passes of 4
        return pad_channels(values, channels, quads, fill, dtype)

    def folded():  # sums x * w: the input offset's share joins the bias (mod 2^32, as int32 sums wrap)
        f = folded_bias(kern, bias, w)
        return padded((f + 2 ** 31) % 2 ** 32 - 2 ** 31, 0, np.int32)

    im2col = s.variant == "im2col"  # its columns are padded: whole vectors only
    ctx = dict(macro=s.variant, out_c=channels, row=s.row, row_pad=s.row_pad, tail_c=channels % QUAD,
               steps=(s.row_pad if im2col else s.row) // VECTOR, rem=0 if im2col else s.row % VECTOR, pixels=s.pixels,
               stack_bytes=s.pixels * s.row_pad if im2col else 0,
               wq=sym.array(f"op{k}_weights_s8", "uint32_t", lambda: pack_rows(w, s), aligned=True, arg="wq"),
               bias=sym.array(f"op{k}_bias_lanes", "int32_t", folded, arg="bias"))
    if im2col:
        oy0, oy1, ox0, ox1 = interior(kern)
        ctx["interior"] = dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1)
    if fc:
        scales = np.broadcast_to(np.asarray(kern.scale, np.float64), (channels,))
        est = [scale_q32(float(v)) for v in scales]
        ctx["scale"] = sym.array(f"op{k}_scale_lanes", "double", lambda: padded(scales, 0.0, np.float64), arg="scale")
        # fx_rq_fc's 32.32 estimate on 4 lanes, the doubtful ones in double; a scale it cannot
        # estimate (0.5 or more) keeps every unit in double
        ctx["fc_vector"] = all(est)
        if all(est):
            ctx["mult"] = sym.array(f"op{k}_fc_multiplier", "int32_t", lambda: padded(est, 0, np.int32), arg="mult")
    else:
        ctx["right_only"] = right_shifts_only(kern)
        ctx["mult"] = sym.array(f"op{k}_multiplier", "int32_t", lambda: padded(kern.multiplier, 0, np.int32), arg="mult")
        ctx["shift"] = sym.array(f"op{k}_shift", "int8_t", lambda: padded(kern.shift, -1, np.int8), arg="shift")
    return ctx


def _depthwise_context(kern, k: int, sym, w: np.ndarray, bias, in_place: bool) -> dict:
    """The 4-lane depthwise kernel's (the layers the 16-lane one leaves: a left shift, a kernel
    beyond its immediates): weights per group of 4 channels, per-channel arrays as they are."""
    def per_channel(values, dtype):
        return np.broadcast_to(np.asarray(values, dtype), (kern.out_c,)).copy()

    oy0, oy1, ox0, ox1 = interior(kern)
    ctx = dict(macro="depthwise", interior=dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1), borders=border_walks(kern),
               tap_guards=tap_guards(kern),
               wq=sym.array(f"op{k}_weights_s8", "uint32_t", lambda: pack_depthwise(w), aligned=True, arg="wq"),
               bias=sym.array(f"op{k}_bias_lanes", "int32_t", lambda: per_channel(0 if bias is None else bias, np.int32), arg="bias"),
               mult=sym.array(f"op{k}_multiplier", "int32_t", lambda: per_channel(kern.multiplier, np.int32), arg="mult"),
               shift=sym.array(f"op{k}_shift", "int8_t", lambda: per_channel(kern.shift, np.int8), arg="shift"))
    if in_place:  # a pass writes its 4 channels to the scratch plane, 4 bytes per pixel
        ctx.update(out_row=f"plane + oy * {4 * kern.out_w}", out_step=4, out_pixel=f"plane + (oy * {kern.out_w} + ox) * 4")
    else:
        ctx.update(out_row=f"out + oy * {kern.out_w * kern.out_c} + c", out_step=kern.out_c,
                   out_pixel=f"out + (oy * {kern.out_w} + ox) * {kern.out_c} + c")
    return ctx


def _depthwise16_context(kern, k: int, sym, w: np.ndarray, bias, in_place: bool, pixels: int = 1) -> dict:
    """The 16-lane depthwise kernel's arrays (weights per group of 16 channels; bias with the input
    offset's share folded in, multipliers and shifts in PERM16's lane order) and its asm step.
    ``pixels`` > 1 (depthwise16_pixels): one group whose 16 lanes are the C channels of that many
    neighbouring output pixels, every per-channel value repeated per pixel; the line buffer holds a
    row C bytes a pixel, a row's last pass stores the pixels left (``rest``) predicated."""
    taps = w.reshape(-1, w.shape[-1])

    def lanes(values):  # per channel -> per lane of a pass
        return np.tile(values, pixels)

    def folded():  # every tap: a padding pixel holds the input zero point, whose (x + offset) * w is 0
        f = (0 if bias is None else bias.astype(np.int64)) + kern.input_offset * taps.astype(np.int64).sum(0)
        return permuted16(lanes(((f + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)), np.int32(0))

    def per_channel(values, dtype):
        return lanes(np.broadcast_to(np.asarray(values, dtype), (kern.out_c,)).copy())

    # two taps' int16 products summed before widening: exact unless a weight is -128 (2 x 128 x 128
    # overflows int16; weights in [-127, 127] reach 2 x 128 x 127 at most), else one tap at a time
    pairs = not (taps == -128).any()
    groups = -(-kern.in_c // DW16)
    tail = kern.in_c * pixels - (groups - 1) * DW16
    slot = kern.in_c if pixels > 1 else DW16  # line buffer bytes a pixel
    line_w = line_width(kern)
    passes, rest = divmod(kern.out_w, pixels)
    if pixels > 1:  # a last pass's 16-byte loads reach its phantom pixels' taps
        line_w = max(line_w, -(-kern.out_w // pixels) * pixels + kern.k_w - 1)
    return dict(
        macro="depthwise16", groups=groups, tail=tail, line_w=line_w, pairs=pairs, pixels=pixels, slot=slot,
        passes=passes, rest=rest,
        wq=sym.array(f"op{k}_weights_s8", "uint32_t", lambda: pack_depthwise16(w, pixels), aligned=True, arg="wq"),
        bias=sym.array(f"op{k}_bias_lanes", "int32_t", folded, arg="bias"),
        mult=sym.array(f"op{k}_multiplier", "int32_t", lambda: permuted16(per_channel(kern.multiplier, np.int32), np.int32(0)), arg="mult"),
        shift=sym.array(f"op{k}_shift", "int8_t", lambda: permuted16(per_channel(kern.shift, np.int8), np.int8(-1)), arg="shift"),
        step=depthwise16_step(kern, pairs, DW16, pixels), tail_step=depthwise16_step(kern, pairs, tail, pixels),
        rest_step=depthwise16_step(kern, pairs, rest * kern.in_c, pixels) if pixels > 1 and rest else None,
        in_place=in_place, stack_bytes=kern.k_h * line_w * slot)


def depthwise16_step(kern, pairs: bool, lanes: int, pixels: int = 1) -> list[str]:
    """The asm of one output pixel of 16 channels (or of ``pixels`` neighbouring output pixels of
    16 / pixels channels), ``lanes`` of them stored (the kernel's row loop runs it out_w / pixels
    times).
    Registers: x0.. the line buffer rows (16 bytes a pixel, or C bytes when a pass computes several
    pixels; moved on by the stride at each row's first tap), w the group's weights [tap][16],
    pb/pm/pn the group's permuted bias, multipliers and shifts, po the output (moved on by out_c a
    pixel), zp the output zero point; q0-q3 the int32 accumulators, q4 inputs, q5 weights, q6/q7
    the int16 products of the even/odd channels."""
    slot = DW16 // pixels  # line buffer bytes a pixel
    step = kern.stride_w * slot * pixels
    bumped = [False] * kern.k_h

    def x(t: int, again: bool = False) -> str:  # tap t's 16 inputs
        ky, kx = divmod(t, kern.k_w)
        if kx == 0 and not again and not bumped[ky]:
            bumped[ky] = True
            return f"[%[x{ky}]], #{step}"
        off = kx * slot - (step if bumped[ky] else 0)
        return f"[%[x{ky}], #{off}]" if off else f"[%[x{ky}]]"

    asm = [f"vldrw.u32 q{i}, [%[pb], #{16 * i}]" for i in range(4)]
    taps = kern.k_h * kern.k_w
    widen = ["vmovlb.s16 q4, q6", "vadd.i32 q0, q0, q4", "vmovlt.s16 q4, q6", "vadd.i32 q1, q1, q4",
             "vmovlb.s16 q4, q7", "vadd.i32 q2, q2, q4", "vmovlt.s16 q4, q7", "vadd.i32 q3, q3, q4"]
    for a in range(0, taps, 2 if pairs else 1):
        asm += [f"vldrb.8 q4, {x(a)}", f"vldrw.u32 q5, [%[w], #{16 * a}]", "vmullb.s8 q6, q4, q5", "vmullt.s8 q7, q4, q5"]
        if pairs and a + 1 < taps:  # the second tap's inputs loaded twice: no q register is free
            b = a + 1
            asm += [f"vldrb.8 q4, {x(b)}", f"vldrw.u32 q5, [%[w], #{16 * b}]", "vmullt.s8 q4, q4, q5",
                    "vadd.i16 q7, q7, q4", f"vldrb.8 q4, {x(b, again=True)}", "vmullb.s8 q4, q4, q5",
                    "vadd.i16 q6, q6, q4"]
        asm += widen
    for i in range(4):  # MultiplyByQuantizedMultiplier with right shifts only: VQRDMULH, + sign, VRSHL
        q = f"q{i}"
        asm += [f"vldrw.u32 q4, [%[pm], #{16 * i}]", f"vqrdmulh.s32 {q}, {q}, q4", f"vshr.s32 q5, {q}, #31",
                f"vadd.i32 {q}, {q}, q5", f"vldrb.s32 q4, [%[pn], #{4 * i}]", f"vrshl.s32 {q}, {q}, q4"]
    # saturating narrows (channel order again); the zero point added in int16, where it cannot
    # move a value across the int8 range that int32 would not
    asm += ["vqmovnb.s32 q4, q0", "vqmovnt.s32 q4, q1", "vqmovnb.s32 q5, q2", "vqmovnt.s32 q5, q3",
            "vqadd.s16 q4, q4, %[zp]", "vqadd.s16 q5, q5, %[zp]", "vqmovnb.s16 q6, q4", "vqmovnt.s16 q6, q5"]
    if kern.act_min > -128:
        asm += [f"vmov.i8 q0, #{kern.act_min & 0xFF}", "vmax.s8 q6, q6, q0"]
    if kern.act_max < 127:
        asm += [f"vmov.i8 q0, #{kern.act_max & 0xFF}", "vmin.s8 q6, q6, q0"]
    store = "vstrbt.8" if lanes < DW16 else "vstrb.8"
    if lanes < DW16:  # a last group of fewer channels: the loop's P0 holds them (no register is free)
        asm.append("vpst")
    if kern.out_c * pixels <= 127:
        asm.append(f"{store} q6, [%[po]], #{kern.out_c * pixels}")
    else:
        asm += [f"{store} q6, [%[po]]", f"add %[po], %[po], #{kern.out_c}"]
    return asm


def _rq_steps(multiplier: int, shift: int) -> dict:
    """One MultiplyByQuantizedMultiplier with literal operands: the left shift, the multiplier, the
    right shift (0: none)."""
    return dict(left=max(shift, 0), mult=multiplier, right=max(-shift, 0))


def eltwise_rows(view) -> tuple[int, int, int, int]:
    """(rows, elements a row, a's and b's elements from one row to the next) of a view whose
    operands walk its rows in order, each row a run of elements (a patch region: each operand a
    window of its buffer; the output dense); a dense view is one row."""
    if view.dense:
        n = int(np.prod(view.shape, dtype=np.int64))
        return 1, n, n, n
    (_, _, rows, n), (_, _, a_row, a1), (_, _, b_row, b1) = view.shape, view.a_strides, view.b_strides
    assert view.shape[:2] == (1, 1) and a1 == b1 == 1, view
    return rows, n, a_row, b_row


def _eltwise_context(kern) -> dict:
    """ADD/SUB (both operands rescaled, then the sum) or MUL (one rescaling of the product) over
    ``count`` elements a row (a tile's, the layer's, or a patch region's rows)."""
    rows, count, a_row, b_row = eltwise_rows(kern.view)
    ctx = dict(macro="eltwise", count=count, rows=rows, a_row=a_row, b_row=b_row, blocks16=count // 16, blocks4=count % 16 // ELTWISE,
               tail=count % ELTWISE, mul=isinstance(kern, K.Mul), out=_rq_steps(kern.out_multiplier, kern.out_shift))
    if isinstance(kern, K.Add):
        # (x + offset) << left as one VMLAS: x * 2^left + (offset << left), mod 2^32 as the reference's shift
        def shifted(offset):
            return int(np.int32(np.uint32((offset << kern.left_shift) & 0xFFFFFFFF)))
        ctx.update(a=_rq_steps(kern.a_multiplier, kern.a_shift), b=_rq_steps(kern.b_multiplier, kern.b_shift),
                   op="vsubq_s32" if kern.subtract else "vaddq_s32", a_add=shifted(kern.a_offset),
                   b_add=shifted(kern.b_offset), scale=1 << kern.left_shift)
    return ctx


def _pool_context(kern) -> dict:
    """Passes of 16 channels of an output pixel, a last one of ``tail`` channels predicated."""
    groups, tail = divmod(kern.channels, DW16)
    return dict(macro="pool", groups=groups, tail=tail, row=kern.row_bytes)
