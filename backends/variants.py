"""Kernel variants: which kernel runs a layer, named as CMSIS-NN names its kernels.

A target lists its variants in order of preference (``Backend.variants``); the first whose
rule accepts a layer runs it. A rule sees the lowered record and how the layer runs (``use``:
"whole" from the arena, "tile" in L1, "region" in the patch stage, "streamed" from L3) and
returns the variant bound to that layer, with what it costs: the bytes its weights take in its
layout, its code, and the channels it computes at once. The portable variants (plain C99, the
reference every target's engine is checked against) accept every layer, so every list ends
with them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from layer_analyzer import kernels as K

# Rough .text per generated layer function: a portable kernel's, and a DSP kernel's that does not
# state its own (backends.smlad.CODE_BYTES by layout); the compiled engine's measured size is in
# the manifest's "elf" (Cortex-M targets).
CODE_BYTES_PORTABLE = 640
CODE_BYTES_DSP = 1536
USES = ("whole", "tile", "region", "streamed")


@dataclass(frozen=True, slots=True)
class Variant:
    """One kernel, bound to the layer it runs."""
    name: str  # e.g. "conv_1x1_s8_smlad", "depthwise_conv_s8"
    template: str  # the templates' module of its macro: "kernels.c.j2" (portable) or its family's
    macro: str  # the macro that writes its C
    weight_bytes: int = 0  # .rodata its weights take in its layout
    code_bytes: int = CODE_BYTES_PORTABLE
    lanes: int = 1  # output channels computed at once (an in-place depthwise plane holds that many; 0: no plane)
    dsp: bool = False
    stages_weights: bool = True  # a tile's weights are moved into L1 with it (else read where they are)
    channel_quantum: int = 1  # a tile's output channels: a multiple of this (or all of them)
    layout: Any = None  # how it lays out and walks the weights (backends.smlad.DspLayout), when it has its own
    # the values its macro needs beyond the layer's record: (kernel, op, constants, variant, in place) -> dict,
    # made by the target that owns the variant; None: the portable kernels' own (deployer.emit)
    context: Callable | None = field(default=None, compare=False)
    # the same variant for a window of the layer (an L1 tile, a patch region): (variant, window kernel) -> variant
    for_window: Callable | None = field(default=None, compare=False)
    # untiled, one C function per shape shared by the layers that have it (else a copy per layer,
    # whose literal addresses can run faster)
    shares_whole: bool = False
    # (bias, requantization) bytes of its own per-channel arrays, when it lays them out itself
    # (padded, or inline in a weight stream); None: the layer's biases and parameters as they are
    lane_bytes: tuple[int, int] | None = None
    # the order its whole kernel walks the layer in, which an output over its input may rely on
    # (layer_analyzer.overlap): "pixels" (output pixel by pixel in row order, every channel of one
    # before the next, reading only the pixel's window); None: no order to rely on
    walk: str | None = None
    # a window's kernel (an L1 tile, a patch region) starts its packed arrays at the window's first
    # output channel: (kernel, layout) -> {kernel_args_t field: (channels per group, words per group)}
    # for the arrays laid out per group of channels (the others step by one element per channel)
    window_steps: Callable | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class VariantRule:
    """A variant as a target lists it: ``bind(kernel, weight_bytes, use)`` gives the variant
    for a layer, or None where it does not apply; ``kernels``: the kernel records it may take
    (what ``deploy ops`` lists; ``bind`` decides per layer). ``use`` is "whole", "tile",
    "region" (a patch stage's) or "streamed"; an elementwise kernel bound for "region" gets a
    view whose rows are strided (each operand at its buffer's row stride) and must honour it."""
    name: str
    bind: Callable[[Any, int, str], Variant | None]
    kernels: tuple[type, ...] = ()
    dtypes: tuple[str, ...] = ("int8",)  # the activation types its kernels compute on


# ---- the portable variants -------------------------------------------------------------

def portable_name(kern) -> str:
    name = _portable_name8(kern)
    wide = {"int16": "_s16", "int32": "_s32"}.get(K.activation_dtype(kern))
    return name.replace("_s8", wide) if wide else name


def _portable_name8(kern) -> str:
    match kern:
        case K.Conv(depthwise=True):
            return "depthwise_conv_s8"
        case K.Conv():
            return "conv_s8"
        case K.Pool(kind="avg"):
            return "avgpool_s8"
        case K.Pool():
            return "max_pool_s8"
        case K.Add(squared=True):
            return "squared_difference_s8"
        case K.Add(subtract=True):
            return "elementwise_sub_s8"
        case K.MinMax():
            return "maximum_s8" if kern.maximum else "minimum_s8"
        case K.Strided() | K.AxisGather():
            return f"{kern.name}_s8"
        case K.Reduce():
            return f"{'arg_' if kern.index else 'reduce_'}{'max' if kern.maximum else 'min'}_s8"
        case K.Lookup():
            return f"{kern.name}_s8"  # logistic_s8, leaky_relu_s8: a table either way
        case K.Sigmoid16():
            return "tanh_s16" if kern.tanh else "logistic_s16"
        case K.IntReduce():
            return "reduce_mean_int_s8" if kern.mean else "reduce_sum_int_s8_s32"
        case K.IntHardswish():
            return "ihardswish_s8_s32" if kern.act_max > 127 or kern.act_min < -128 else "rq_ihardswish_s8"
    return PORTABLE_NAMES[type(kern)]


PORTABLE_NAMES = {
    K.FullyConnected: "fully_connected_s8", K.Mean: "mean_s8", K.TransposeConv: "transpose_conv_s8", K.BatchMatMul: "batch_matmul_s8", K.Add: "elementwise_add_s8", K.Mul: "elementwise_mul_s8", K.Prelu: "prelu_s8",
    K.IntAdd: "elementwise_add_int", K.IntRescale: "requant_shift_s8", K.Offset: "offset_u8_s8",
    K.IntSoftmax: "isoftmax_s8", K.IntRmsNorm: "irmsnorm_s8", K.IntNoNorm: "inonorm_s8",
    K.IntReduce: "reduce_sum_int_s8_s32", K.IntHardswish: "ihardswish_s8_s32",
    K.Softmax: "softmax_s8", K.TableSoftmax: "softmax_table_s8", K.Lstm: "lstm_s8_s16", K.Svdf: "svdf_s8", K.LogSoftmax: "log_softmax_s8", K.L2Norm: "l2_normalization_s8", K.HardSwish: "hard_swish_s8", K.Slopes: "leaky_relu_s16", K.Softmax16: "softmax_s16",
    K.Requantize: "requantize_s8", K.Quantize: "quantize_f32_s8", K.Dequantize: "dequantize_s8_f32",
    K.Copy: "reshape", K.Pad: "pad_s8", K.Concat: "concatenation_s8", K.Transpose: "transpose_s8", K.Gather: "gather_s8",
    K.ResizeNearest: "resize_nearest_neighbor_s8", K.ResizeBilinear: "resize_bilinear_s8",
    K.ResizeLinear: "resize_linear_f32_s8",
}


def _portable(kern, weight_bytes: int, use: str) -> Variant:
    pixels = isinstance(kern, (K.Conv, K.FullyConnected)) or (isinstance(kern, K.Pool) and kern.float_avg is None)
    return Variant(portable_name(kern), "kernels.c.j2", type(kern).__name__, weight_bytes,
                   walk="pixels" if pixels else None)


PORTABLE = VariantRule("portable", _portable, dtypes=("int8", "int16", "int32"))  # every kernel


def choose(rules: tuple[VariantRule, ...], kern, weight_bytes: int, use: str = "whole") -> Variant:
    """The first variant of ``rules`` that runs ``kern`` used as ``use`` (the portable ones run
    every layer)."""
    dtype = K.activation_dtype(kern)
    for rule in rules:
        if dtype not in rule.dtypes:
            continue
        v = rule.bind(kern, weight_bytes, use)
        if v is not None:
            return v
    return _portable(kern, weight_bytes, use)
