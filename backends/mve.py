"""The Helium (M-profile Vector Extension, Armv8.1-M) kernel family of the Cortex-M55/M85: the
variants, the weight layouts they read, their cost model, and the values their templates
(templates/mve/, which only this family names) need.

Convolutions and fully connected layers are dot products of 16 int8 values per VMLADAVA (the
weights stay int8, each row zero-padded to whole vectors); a pass computes one output channel
for 4 output pixels (whose 4 accumulators are requantized together with the channel's scalar
multiplier and shift, and stored by one scatter) or, for a fully connected layer, 4 units of one
row. Depthwise layers multiply-accumulate 4 channels per VMLA on int32 lanes. Everything here is
done once, at generation time."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from layer_analyzer import kernels as K

from .family import KernelFamily
from .geometry import border_walks, folded_bias, interior, tap_guards
from .variants import Variant, VariantRule

TEMPLATES = "mve"  # its folder under templates/
KERNELS = f"{TEMPLATES}/kernels.c.j2"
VECTOR = 16  # int8 lanes of one vector
PIXELS = 4  # output pixels per pass of a convolution
UNITS = 4  # units per pass of a fully connected layer
DW_LANES = 4  # channels per pass of a depthwise layer (int32 lanes)
STACK_COLUMNS = 2304  # bytes of stack the im2col columns of one pass's pixels may take


@dataclass(frozen=True, slots=True)
class MveLayout:
    """How one conv, fc or depthwise layer runs on the MVE kernels."""
    variant: str  # "pointwise" | "im2col" | "fc" | "depthwise"
    row: int  # int8 values per dot product (a pixel's window; a unit's inputs)
    row_pad: int  # ... padded to whole vectors (the weights' row stride)
    pixels: int  # output pixels per pass (convolutions)


def layout_for(kern) -> MveLayout | None:
    if isinstance(kern, K.FullyConnected):
        n = kern.in_features
        return MveLayout("fc", n, -(-n // VECTOR) * VECTOR, 1)
    if not isinstance(kern, K.Conv) or kern.dil_h != 1 or kern.dil_w != 1:
        return None
    if kern.depthwise:
        if kern.depth_multiplier != 1 or kern.in_c % DW_LANES or kern.batch != 1:
            return None
        return MveLayout("depthwise", 0, 0, 1)
    if kern.k_h == kern.k_w == 1 and kern.pad_t == kern.pad_l == 0:
        return MveLayout("pointwise", kern.in_c, -(-kern.in_c // VECTOR) * VECTOR, PIXELS)
    row = kern.k_h * kern.k_w * kern.in_c
    pad = -(-row // VECTOR) * VECTOR
    pixels = next((p for p in (PIXELS, 2, 1) if p * pad <= STACK_COLUMNS), None)
    if pixels is None:
        return None  # a window too large for the stack: the next family's kernels
    return MveLayout("im2col", row, pad, pixels)


def pack_rows(weights: np.ndarray, s: MveLayout) -> np.ndarray:
    """OHWI (or units x features) int8 weights -> rows of ``row_pad`` bytes (zeros past ``row``),
    as little-endian words."""
    w = weights.reshape(weights.shape[0], -1).astype(np.int8)
    w = np.pad(w, ((0, 0), (0, s.row_pad - w.shape[1])))
    return np.frombuffer(np.ascontiguousarray(w).tobytes(), np.uint32)


def pack_depthwise(weights: np.ndarray) -> np.ndarray:
    """1 x KH x KW x C int8 weights -> [group of 4 channels][tap][4 channels], as words."""
    taps = weights.reshape(-1, weights.shape[-1]).astype(np.int8)  # T, C
    t, c = taps.shape
    g = taps.reshape(t, c // DW_LANES, DW_LANES).transpose(1, 0, 2)  # G, T, 4
    return np.frombuffer(np.ascontiguousarray(g).tobytes(), np.uint32)


def packed_bytes(kern, s: MveLayout) -> int:
    if s.variant == "depthwise":
        return kern.k_h * kern.k_w * kern.in_c
    channels = kern.units if s.variant == "fc" else kern.out_c
    return channels * s.row_pad


def window_steps(kern, layout: MveLayout) -> dict[str, tuple[int, int]]:
    """A window's kernel starts the weights at its first output channel: a row per channel, or
    (depthwise) a group's taps per 4 channels."""
    if layout.variant == "depthwise":
        return {"wq": (DW_LANES, kern.k_h * kern.k_w)}
    return {"wq": (1, layout.row_pad // 4)}


# .text of one layer's function by layout (as compiled for the M55 at -O2, the benchmark models)
CODE_BYTES = {"pointwise": 768, "im2col": 1536, "fc": 512, "depthwise": 2048}
NAMES = {"pointwise": "conv_1x1_s8_mve", "im2col": "conv_s8_mve_im2col", "fc": "fully_connected_s8_mve",
         "depthwise": "depthwise_conv_s8_mve"}


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
    channels = DW_LANES if s.variant == "depthwise" else 1
    return Variant(NAMES[s.variant], KERNELS, s.variant, packed_bytes(kern, s), CODE_BYTES[s.variant],
                   DW_LANES if s.variant == "depthwise" else 1, True, False, channels, s, template_context, _window,
                   shares_whole=s.variant == "depthwise" and use == "whole",
                   lane_bytes=_lane_bytes(kern, s),
                   window_steps=window_steps)


def _lane_bytes(kern, s: MveLayout) -> tuple[int, int]:
    """(bias, requantization) bytes of its per-channel arrays: int32 biases; a multiplier and a
    shift byte per channel, or (fc) a double scale."""
    if s.variant == "fc":
        return 4 * kern.units, 8 * kern.units
    return 4 * kern.out_c, 5 * kern.out_c


def _window(variant: Variant, kern) -> Variant:
    """The variant for a window of its layer: the same weights, walked for the window's shape."""
    s = layout_for(kern)
    return replace(variant, layout=replace(variant.layout, pixels=s.pixels) if s is not None else variant.layout)


RULES = (VariantRule("mve conv/fc", _conv_fc, (K.Conv, K.FullyConnected)),)

FAMILY = KernelFamily(
    name="mve", label="Helium",
    description="Armv8.1-M M-profile Vector Extension: 16 int8 MACs per VMLADAVA",
    rules=RULES, templates=TEMPLATES,
    # first estimates from the kernels' inner loops (9 instructions per 64 MACs of a convolution,
    # 3 per 4 of a depthwise tap, 3 per output for the vector requantization); refit with
    # bench/cost_model_bench.py --fit once per-layer counts of the M55 are in
    cost_model=(
        ("macs_per_cycle", 4.0),
        ("macs_per_cycle_depthwise", 1.2),
        ("macs_per_cycle_pool", 0.1),
        ("macs_per_cycle_eltwise", 0.04),
        ("cycles_per_output_conv", 12),
        ("cycles_per_output_depthwise", 8),
        ("cycles_per_output_fc", 40),
        ("cycles_per_output_pool", 35),
    ))


# ---- the templates' values ---------------------------------------------------------------

def template_context(kern, k: int, sym, variant: Variant, in_place: bool = False) -> dict:
    """What the variant's macro needs: the weights and per-channel arrays as .rodata arrays made
    through ``sym`` (the engine's constants), and the shape of its loops."""
    s = variant.layout
    graph = sym.graph
    fc = s.variant == "fc"
    channels = kern.units if fc else kern.out_c
    w = graph.tensors[kern.weights].data
    bias = graph.tensors[kern.bias].data if kern.bias >= 0 else None

    def per_channel(values, dtype):
        return np.broadcast_to(np.asarray(values, dtype), (channels,)).copy()

    im2col = s.variant == "im2col"  # its columns are padded: whole vectors only
    ctx = dict(macro=s.variant, out_c=channels, row=s.row, row_pad=s.row_pad,
               steps=(s.row_pad if im2col else s.row) // VECTOR, rem=0 if im2col else s.row % VECTOR, pixels=s.pixels, mult=None, shift=None, scale=None, fc_est=None,
               stack_bytes=s.pixels * s.row_pad if s.variant == "im2col" else 0)
    if s.variant == "depthwise":
        ctx["wq"] = sym.array(f"op{k}_weights_s8", "uint32_t", lambda: pack_depthwise(w), aligned=True)
        ctx["bias"] = sym.array(f"op{k}_bias_lanes", "int32_t",
                                lambda: per_channel(0 if bias is None else bias, np.int32))
        oy0, oy1, ox0, ox1 = interior(kern)
        ctx.update(interior=dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1), borders=border_walks(kern), tap_guards=tap_guards(kern))
        if in_place:  # a pass writes its 4 channels to the scratch plane, 4 bytes per pixel
            ctx.update(out_row=f"plane + oy * {4 * kern.out_w}", out_step=4, out_pixel=f"plane + (oy * {kern.out_w} + ox) * 4")
        else:
            ctx.update(out_row=f"out + oy * {kern.out_w * kern.out_c} + c", out_step=kern.out_c,
                       out_pixel=f"out + (oy * {kern.out_w} + ox) * {kern.out_c} + c")
    else:
        ctx["wq"] = sym.array(f"op{k}_weights_s8", "uint32_t", lambda: pack_rows(w, s), aligned=True)

        def folded():  # sums x * w: the input offset's share joins the bias (mod 2^32, as int32 sums wrap)
            f = folded_bias(kern, bias, w)
            return ((f + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
        ctx["bias"] = sym.array(f"op{k}_bias_lanes", "int32_t", lambda: per_channel(folded(), np.int32))
        if s.variant == "im2col":
            oy0, oy1, ox0, ox1 = interior(kern)
            ctx["interior"] = dict(oy0=oy0, oy1=oy1, ox0=ox0, ox1=ox1)
    if fc:
        ctx["scale"] = sym.array(f"op{k}_scale_lanes", "double", lambda: per_channel(kern.scale, np.float64))
        ctx["fc_est"] = sym.double_scales(f"op{k}_scale_lanes", per_channel(kern.scale, np.float64))
    else:
        ctx["mult"] = sym.array(f"op{k}_multiplier", "int32_t", lambda: per_channel(kern.multiplier, np.int32))
        ctx["shift"] = sym.array(f"op{k}_shift", "int8_t", lambda: per_channel(kern.shift, np.int8))
    return ctx
