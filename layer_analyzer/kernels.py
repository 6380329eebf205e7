"""Lower each IR layer to the integer kernel it runs: shapes, offsets, multipliers.

The golden executor and every C backend consume the same records, so the
arithmetic is decided once, here, from the IR.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from network_parser.errors import UnsupportedOperator
from network_parser.ir import DTYPE_BYTES, Graph, IntegerAdd, IntegerHardswish, IntegerReduce, IntRequant, Layer, Tensor

from network_parser import conv_geometry as geo
from .recurrent import Lstm, Svdf, lower_lstm, lower_svdf
from .requant import (INT8_MAX, INT8_MIN, abs_table, activation_range, checked_log2, dtype_range, int16_lut, sigmoid16_input_rescale, sigmoid_table16, f32, float_table, leaky_relu_table, quantize_multiplier, RescaleError, round_away, sigmoid_table, sqrt_table, float_requant_table,
                      quantize_multiplier_greater_than_one, quantize_multiplier_smaller_than_one)


@dataclass(frozen=True, slots=True)
class Conv:
    """CONV_2D and DEPTHWISE_CONV_2D (depthwise when ``depthwise``)."""
    depthwise: bool
    batch: int
    in_h: int
    in_w: int
    in_c: int
    out_h: int
    out_w: int
    out_c: int
    k_h: int
    k_w: int
    stride_h: int
    stride_w: int
    dil_h: int
    dil_w: int
    pad_t: int
    pad_l: int
    depth_multiplier: int
    input_offset: int
    output_offset: int
    multiplier: tuple[int, ...]
    shift: tuple[int, ...]
    act_min: int
    act_max: int
    weights: int  # tensor index
    bias: int  # tensor index or -1
    int_rq: IntRequant | None = None  # integer graphs: used instead of multiplier/shift
    float_rq: tuple[float, ...] | None = None  # QDQ graphs: float32 scales, onnxruntime's requantization
    in_row: int = 0  # elements from one input row to the next when the input is a window of a wider buffer
    dtype: str = "int8"  # the activations' type: "int16" in a 16x8 layer
    # 16x8 with an int64 bias: an int64 accumulator and LiteRT's 64-bit MultiplyByQuantizedMultiplier
    # (a multiplier rounded to 16 bits, one rounding shift); with an int32 bias the 8-bit arithmetic
    acc64: bool = False

    @property
    def row_bytes(self) -> int:
        """Elements from one input row to the next."""
        return self.in_row or self.in_w * self.in_c

    @property
    def macs(self) -> int:
        per_out = self.k_h * self.k_w * (1 if self.depthwise else self.in_c)
        return self.batch * self.out_h * self.out_w * self.out_c * per_out


@dataclass(frozen=True, slots=True)
class TransposeConv:
    """TRANSPOSE_CONV, computed per output pixel: output (oy, ox) sums the input pixels (iy, ix)
    with iy * stride_h - pad_t + ky = oy (and the same for columns) for every kernel tap; the same
    integer sums as the reference's scatter, requantized per output channel as a convolution."""
    batch: int
    in_h: int
    in_w: int
    in_c: int
    out_h: int
    out_w: int
    out_c: int
    k_h: int
    k_w: int
    stride_h: int
    stride_w: int
    pad_t: int
    pad_l: int
    input_offset: int
    output_offset: int
    multiplier: tuple[int, ...]
    shift: tuple[int, ...]
    act_min: int
    act_max: int
    weights: int  # tensor index: out_c x k_h x k_w x in_c
    bias: int  # tensor index or -1
    dtype: str = "int8"  # the activations' type: "int16" in a 16x8 layer
    acc64: bool = False  # 16x8 with an int64 bias: as Conv

    @property
    def macs(self) -> int:
        return self.batch * self.in_h * self.in_w * self.in_c * self.k_h * self.k_w * self.out_c


@dataclass(frozen=True, slots=True)
class BatchMatMul:
    """BATCH_MATMUL of two int8 operands (either may be a constant): per output batch the offsets
    of its two operand matrices, then out[i, j] = sum over k of (x[i, k] + x_offset) * (y[k, j] +
    y_offset), requantized with one multiplier (the scales' product over the output's)."""
    rows: int
    depth: int
    cols: int
    x_offsets: tuple[int, ...]  # per output batch, element offset of its x matrix
    y_offsets: tuple[int, ...]
    x_strides: tuple[int, int]  # (row, k) steps in x
    y_strides: tuple[int, int]  # (k, col) steps in y
    x_offset: int
    y_offset: int
    multiplier: int
    shift: int
    output_offset: int
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    requant: Any = None  # network_parser.ir.MatRequant: an integer graph's scaling (then multiplier/shift unused)

    @property
    def macs(self) -> int:
        return len(self.x_offsets) * self.rows * self.depth * self.cols


@dataclass(frozen=True, slots=True)
class FullyConnected:
    """LiteRT's reference FC requantizes in double: round(acc * scale), halves away from zero."""
    batch: int
    in_features: int
    units: int
    input_offset: int
    output_offset: int
    scale: tuple[float, ...]  # in_scale * w_scale / out_scale (double), one per unit or one
    act_min: int
    act_max: int
    weights: int
    bias: int
    int_rq: IntRequant | None = None  # integer graphs: used instead of scale
    float_rq: tuple[float, ...] | None = None  # QDQ graphs: float32 scales, onnxruntime's requantization
    dtype: str = "int8"  # the activations' type: "int16" in a 16x8 layer
    acc64: bool = False  # 16x8 without an int32 bias: an int64 accumulator (requantized in double as in 8 bits)

    @property
    def macs(self) -> int:
        return self.batch * self.in_features * self.units


@dataclass(frozen=True, slots=True)
class Broadcast:
    """A binary elementwise op on 4-D views; a stride of 0 broadcasts that dim."""
    shape: tuple[int, int, int, int]
    a_strides: tuple[int, int, int, int]
    b_strides: tuple[int, int, int, int]

    @property
    def dense(self) -> bool:
        """Neither operand broadcasts: both walk the output's elements in order."""
        step, ok = 1, True
        for n, a, b in zip(reversed(self.shape), reversed(self.a_strides), reversed(self.b_strides)):
            ok = ok and (n == 1 or a == b == step)
            step *= n
        return ok


@dataclass(frozen=True, slots=True)
class Add:
    view: Broadcast
    a_offset: int
    b_offset: int
    left_shift: int
    a_multiplier: int
    a_shift: int
    b_multiplier: int
    b_shift: int
    out_multiplier: int
    out_shift: int
    output_offset: int
    act_min: int
    act_max: int
    subtract: bool = False  # SUB: the rescaled b is subtracted (LiteRT's SubElementwise), else added
    squared: bool = False  # SQUARED_DIFFERENCE: the difference squared (below 2^30: int32 holds it) before the output rescale
    dtype: str = "int8"  # the activations' type ("int16": TFLite's general int16 kernel, left shift 15)


@dataclass(frozen=True, slots=True)
class Prelu:
    """PRELU: x - zp rescaled to the output where it is not negative, else times the (broadcast,
    constant) alpha - its zero point and rescaled by the second multiplier, as LiteRT's kernel."""
    view: Broadcast
    input_offset: int
    alpha_offset: int
    multiplier_1: int
    shift_1: int
    multiplier_2: int
    shift_2: int
    output_offset: int
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    alpha_constant: bool = False  # alpha is a constant of the model (not an activation)
    dtype: str = "int8"  # the input's and output's type (a 16-bit PRELU's alpha is int8)


@dataclass(frozen=True, slots=True)
class MinMax:
    """MAXIMUM / MINIMUM: LiteRT compares the raw int8 values (its converter gives the inputs and
    the output one quantization)."""
    view: Broadcast
    maximum: bool
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX


@dataclass(frozen=True, slots=True)
class Mul:
    view: Broadcast
    a_offset: int
    b_offset: int
    out_multiplier: int
    out_shift: int
    output_offset: int
    act_min: int
    act_max: int
    dtype: str = "int8"  # the activations' type


@dataclass(frozen=True, slots=True)
class Pool:
    kind: str  # "avg" | "max"
    batch: int
    in_h: int
    in_w: int
    channels: int
    out_h: int
    out_w: int
    f_h: int
    f_w: int
    stride_h: int
    stride_w: int
    pad_t: int
    pad_l: int
    act_min: int
    act_max: int
    int_rq: IntRequant | None = None  # "avg" of integer graphs: requantizes the window's sum
    # "avg" of QDQ graphs, as onnxruntime computes it: (x_scale, y_scale, the input zero point, the
    # output's model zero point, the stored-to-model offset); a float32 sum of dequantized values
    float_avg: tuple[float, float, int, int, int] | None = None
    dtype: str = "int8"  # the activations' type
    in_row: int = 0  # elements from one input row to the next when the input is a window of a wider buffer

    @property
    def row_bytes(self) -> int:
        """Elements from one input row to the next."""
        return self.in_row or self.in_w * self.channels


@dataclass(frozen=True, slots=True)
class IntAdd:
    """ADD of an integer graph: clamp(floor(((a + a_offset) * a_mul + (b + b_offset) * b_mul + add)
    / 2^shift)), in 64 bits."""
    view: Broadcast
    a_offset: int
    b_offset: int
    a_mul: int
    b_mul: int
    add: int
    shift: int
    act_min: int
    act_max: int
    post_mul: int = 1  # a second rounding stage: clamp(floor((s * post_mul + post_add) / 2^post_shift))
    post_add: int = 0
    post_shift: int = 0


@dataclass(frozen=True, slots=True)
class IntRescale:
    """REQUANT_SHIFT on its own: per channel (the last axis) of an 8-bit activation (or of an
    int16 / int32 one, requantized down)."""
    elements: int
    channels: int
    input_offset: int
    act_min: int
    act_max: int
    int_rq: IntRequant
    dtype: str = "int8"  # the input's type


@dataclass(frozen=True, slots=True)
class IntReduce:
    """SUM / MEAN of an integer graph (Deeploy's ReduceSum, ReduceMean): per output element, in
    order, the input elements over ``axes`` summed in int32 (``sum_offset``: the input offset's
    share); MEAN divides by their count, a power of two by a shift rounding half up, another
    count rounding half away from zero. The output walks the input's ``kept`` axes in order."""
    in_shape: tuple[int, ...]
    kept: tuple[int, ...]
    axes: tuple[int, ...]
    sum_offset: int
    mean: bool
    output_offset: int
    act_min: int
    act_max: int
    dtype: str = "int8"  # the input's type

    @property
    def count(self) -> int:
        return math.prod(self.in_shape[a] for a in self.axes)

    @property
    def mean_shift(self) -> int | None:
        """log2 of the count when it is a power of two (the mean is a rounding shift), else None."""
        n = self.count
        return n.bit_length() - 1 if n & (n - 1) == 0 else None


@dataclass(frozen=True, slots=True)
class IntHardswish:
    """HARD_SWISH of an integer graph (Deeploy's iHardswish): x = in + input_offset,
    acc = x * (clamp(x + three, 0, six) * one_over_six) in int32, requantized by ``int_rq`` per
    channel (the last axis; an identity clamped to int32 when the output is the raw value)."""
    elements: int
    channels: int
    input_offset: int
    one_over_six: int
    three: int
    six: int
    act_min: int
    act_max: int
    int_rq: IntRequant
    dtype: str = "int8"  # the input's type


@dataclass(frozen=True, slots=True)
class IntSoftmax:
    """Deeploy's iSoftmax over the middle axis of an (outer, depth, inner) view of int8 values, in
    its kernel's integer widths. Per row, each d = x - max (-255..0) splits as d = p - z * log2
    (z = -d / log2 truncated, at most 31); its exponential y = coeff_a * (p + coeff_b)^2 + coeff_c,
    as uint64 shifted right by z, kept to 32 bits; the row's sum wraps in 32 bits, and each output
    is y * (n_levels - 1) (32 bits) / sum: an unsigned value, stored as its low byte - 128."""
    outer: int
    depth: int
    inner: int
    coeff_a: int
    coeff_b: int
    coeff_c: int
    log2: int
    n_levels: int


@dataclass(frozen=True, slots=True)
class IntRmsNorm:
    """Deeploy's iRMSNorm over the middle axis of an (outer, depth, inner) view of int8 values: r,
    the integer square root of the row's mean square (its int32 sum of squares / depth, floored)
    plus one; each output is (x * weight[j] / r, truncated) >> log2_d, clamped to int8. Inputs: x,
    the int32 weights (one per position j along the axis)."""
    outer: int
    depth: int
    inner: int
    log2_d: int


@dataclass(frozen=True, slots=True)
class IntNoNorm:
    """Deeploy's iNoNorm: ((x * w + b) * mul) >> log2_d in int32, stored as its low byte (its
    kernel wraps, never clamps). ``view``: x against the int8 weights; ``bias_strides``: the
    int32 bias against the output (a stride of 0 broadcasts)."""
    view: Broadcast
    bias_strides: tuple[int, int, int, int]
    mul: int
    log2_d: int


@dataclass(frozen=True, slots=True)
class Offset:
    """uint8 <-> int8 at a graph's edge: unsigned activations are stored as value - 128."""
    elements: int
    delta: int


@dataclass(frozen=True, slots=True)
class Mean:
    """Mean over the middle axis of an (outer, reduced, inner) view of the input; over axes that
    are not contiguous, ``in_shape`` and ``axes`` say which (outer: the kept axes, inner 1)."""
    outer: int
    reduced: int
    inner: int
    sum_offset: int  # -input_zero_point * reduced, added to the raw sum
    output_offset: int
    multiplier: int
    shift: int
    float_scale: float | None = None  # QDQ: onnxruntime's x_scale / (y_scale * count), float32
    in_shape: tuple[int, ...] = ()
    axes: tuple[int, ...] = ()  # set for a reduction over axes that are not contiguous
    dtype: str = "int8"  # the activations' type

    @property
    def act_range(self) -> tuple[int, int]:
        return dtype_range(self.dtype)


@dataclass(frozen=True, slots=True)
class Softmax:
    """SOFTMAX of int8 values: the reference's fixed-point exponentials and reciprocal; int8 out
    (scale 1/256, zero point -128) or int16 out (scale 1/65536, zero point -32768: the one 16-bit
    activation TFLite's kernels take with a zero point other than 0)."""
    rows: int
    depth: int
    input_multiplier: int
    input_left_shift: int
    diff_min: int
    out_bits: int = 8

    @property
    def out_min(self) -> int:
        return -(1 << (self.out_bits - 1))


class _Int16Only:
    """A kernel of int16 activations only (its 8-bit form is another record)."""
    __slots__ = ()

    @property
    def dtype(self) -> str:
        return "int16"


@dataclass(frozen=True, slots=True)
class Sigmoid16(_Int16Only):
    """LOGISTIC and TANH of int16 activations (LiteRT's 16-bit kernels, output scale 2^-15): the
    input rescaled to the table's 1/24ths, its magnitude's entry of the 256-entry sigmoid table
    interpolated linearly (tanh: at twice the argument), mirrored for negative inputs."""
    elements: int
    multiplier: int
    shift: int
    tanh: bool

    @property
    def table(self) -> tuple[int, ...]:
        return sigmoid_table16()


@dataclass(frozen=True, slots=True)
class Softmax16(_Int16Only):
    """SOFTMAX of int16 activations (LiteRT's SoftmaxInt16): per row, each difference from the
    row's maximum rescaled onto [-10, 0] and looked up in an exponential table, the sum's
    reciprocal looked up in a 1 / (1 + x) table, their product rounded to the output (scale
    1/32768). The tables interpolate linearly between 513 entries."""
    rows: int
    depth: int
    multiplier: int
    shift: int

    @property
    def exp_table(self) -> tuple[int, ...]:
        return int16_lut("exp", 10.0 / 65535, 32767, 2.0 / 65535, 0)

    @property
    def reciprocal_table(self) -> tuple[int, ...]:
        return int16_lut("reciprocal", 1.0 / 65535, -32768, 2.0 / 65535, 0)


@dataclass(frozen=True, slots=True)
class TableSoftmax:
    """onnxruntime's QLinearSoftmax: per row, each value's distance below the row's maximum
    indexes a float32 table of exponentials; their float32 sum (in order) divides each one times
    floor(1 / output scale), rounded half to even, plus the zero point, saturated."""
    rows: int
    depth: int
    table: tuple[float, ...]  # exp of (255 - distance) steps, distance 0..255 from the maximum
    y_scale: float  # floor(1 / output scale), float32
    zero_point: int


@dataclass(frozen=True, slots=True)
class LogSoftmax:
    """LOG_SOFTMAX (int8, output scale 16/256 and zero point 127): the reference's fixed-point
    sum of exponentials and logarithm per row."""
    rows: int
    depth: int
    input_multiplier: int
    input_left_shift: int
    reverse_multiplier: int  # the input's scale undone: turns the log of the sum back into an input step
    reverse_shift: int  # its (non-positive) exponent
    diff_min: int


@dataclass(frozen=True, slots=True)
class L2Norm:
    """L2_NORMALIZATION (int8, output scale 1/128, zero point 0): per row the sum of squares of
    x - zp, its inverse square root as a multiplier (the reference's Newton-Raphson), each value
    rescaled by it and by 2^7."""
    rows: int
    depth: int
    input_zero_point: int


@dataclass(frozen=True, slots=True)
class Lookup:
    """A unary int8 op as a 256-entry table indexed by the input, each entry computed as the
    reference kernel computes that input's output (LOGISTIC's reference kernel is one)."""
    elements: int
    table: tuple[int, ...]  # output for input -128..127
    name: str = "logistic"  # the op, for the kernel's name


@dataclass(frozen=True, slots=True)
class Slopes(_Int16Only):
    """LEAKY_RELU of int16 activations (LiteRT's QuantizeLeakyRelu, zero points 0): x rescaled to
    the output by one multiplier at or above zero, by alpha's below, clamped to int16."""
    elements: int
    multiplier: int
    shift: int
    alpha_multiplier: int  # negative for a negative alpha
    alpha_shift: int  # (8-bit LEAKY_RELU is a table: Lookup)


@dataclass(frozen=True, slots=True)
class HardSwish:
    elements: int
    input_zero_point: int
    output_zero_point: int
    reluish_multiplier: int
    reluish_shift: int
    output_multiplier: int
    output_shift: int


@dataclass(frozen=True, slots=True)
class Requantize:
    """RELU, RELU6 and QUANTIZE between int8 and int16: rescale, then clamp."""
    elements: int
    input_offset: int
    output_offset: int
    multiplier: int
    shift: int
    act_min: int
    act_max: int
    dtype: str = "int8"  # the output's type


@dataclass(frozen=True, slots=True)
class Quantize:
    """float32 -> int8 or int16 (rounding halves away from zero as TFLite; to even as onnxruntime)."""
    elements: int
    scale: float
    zero_point: int
    half_even: bool = False
    act_min: int = INT8_MIN  # the output type's range
    act_max: int = INT8_MAX
    dtype: str = "int8"  # the output's type


@dataclass(frozen=True, slots=True)
class Dequantize:
    """int8 or int16 -> float32."""
    elements: int
    scale: float
    zero_point: int
    dtype: str = "int8"  # the input's type


@dataclass(frozen=True, slots=True)
class Copy:
    """RESHAPE / SQUEEZE: the bytes do not change."""
    nbytes: int


@dataclass(frozen=True, slots=True)
class Pad:
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    before: tuple[int, ...]
    value: int
    dtype: str = "int8"


@dataclass(frozen=True, slots=True)
class AxisGather:
    """Output element (i_0, ..., i_n), in order, copies the input element at offset
    tables[0][i_0] + ... + tables[n][i_n]: each output axis adds its own table's offset.
    MIRROR_PAD (positions mirrored at the edges), BATCH_TO_SPACE_ND and SPACE_TO_BATCH_ND (a
    position's block and batch folded into its offsets)."""
    tables: tuple[tuple[int, ...], ...]  # input elements
    name: str = "mirror_pad"  # the op, for the kernel's name


@dataclass(frozen=True, slots=True)
class Concat:
    outer: int
    chunks: tuple[int, ...]  # bytes each input contributes per outer step


@dataclass(frozen=True, slots=True)
class Gather:
    """GATHER with constant indices on an (outer, axis, inner) view: output slice (o, j) copies
    input slice (o, indices[j]), ``inner`` bytes each."""
    outer: int
    axis_size: int
    inner: int  # bytes
    indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reduce:
    """REDUCE_MAX / REDUCE_MIN (the extreme stored value, as the reference compares them) and
    ARG_MAX / ARG_MIN (its first index) over the middle axis of an (outer, reduced, inner) view."""
    outer: int
    reduced: int
    inner: int
    maximum: bool
    index: bool  # ARG_MAX / ARG_MIN: the position, not the value


@dataclass(frozen=True, slots=True)
class Transpose:
    in_shape: tuple[int, ...]
    perm: tuple[int, ...]
    out_shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Strided:
    """A strided copy: output element (i_0, ..., i_n), in order, copies input element
    base + sum(i_d * strides[d]) (a stride may be 0: broadcast and tile, or negative: a slice
    walked backwards). STRIDED_SLICE, SLICE, DEPTH_TO_SPACE, SPACE_TO_DEPTH, TILE, BROADCAST_TO."""
    base: int
    counts: tuple[int, ...]
    strides: tuple[int, ...]  # input elements
    name: str = "strided_slice"  # the op, for the kernel's name


def element_strides(shape: tuple[int, ...]) -> list[int]:
    """Elements from one index to the next along each axis of a dense tensor."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def slice_axis(size: int, begin: int, end: int, stride: int, begin_masked: bool, end_masked: bool,
               shrink: bool) -> range:
    """The input indices one axis of a strided slice reads, as the reference's StartForAxis and
    StopForAxis find them: a masked bound is the axis's end in the stride's direction, a negative
    one counts from the end, both are clamped ([0, size] forwards, [-1, size - 1] backwards), and a
    shrunk axis reads its start only."""
    if size == 0:
        return range(0)
    lo, hi = (0, size) if stride > 0 else (-1, size - 1)
    def bound(value: int) -> int:
        return min(max(value + size if value < 0 else value, lo), hi)

    start = (lo if stride > 0 else hi) if begin_masked else bound(begin)
    if shrink:
        return range(start, start + 1)
    stop = (hi if stride > 0 else lo) if end_masked else bound(end)
    return range(start, stop, stride)


@dataclass(frozen=True, slots=True)
class ResizeNearest:
    """RESIZE_NEAREST_NEIGHBOR: each output pixel copies the input pixel at (rows[y], cols[x])."""
    batch: int
    in_h: int
    in_w: int
    channels: int
    rows: tuple[int, ...]  # input row of each output row
    cols: tuple[int, ...]  # input column of each output column


@dataclass(frozen=True, slots=True)
class ResizeBilinear:
    """RESIZE_BILINEAR as LiteRT's integer kernel: per output row (and column) the two input rows
    it blends and the lower one's distance in 1/1024ths; the four products summed in 64 bits and
    divided by 2^20, rounding halves away from zero (the stored values: input and output share a
    quantization)."""
    batch: int
    in_h: int
    in_w: int
    channels: int
    rows: tuple[tuple[int, int, int], ...]  # (y0, y1, dy) per output row
    cols: tuple[tuple[int, int, int], ...]  # (x0, x1, dx) per output column


@dataclass(frozen=True, slots=True)
class ResizeLinear:
    """An ONNX linear Resize of a QDQ graph, as onnxruntime runs it: the four input pixels
    dequantized to float32, blended with float32 weights in its order ((w_x * w_y) * v, summed
    left to right), the sum quantized rounding half to even."""
    batch: int
    in_h: int
    in_w: int
    channels: int
    rows: tuple[tuple[int, int, float, float], ...]  # (lower, upper, weight of upper, weight of lower)
    cols: tuple[tuple[int, int, float, float], ...]
    in_scale: float
    in_zero_point: int
    out_scale: float
    out_zero_point: int


def _c_div(a: int, b: int) -> int:
    """C's integer division, truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def bilinear_steps(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool) -> tuple:
    """The reference's ComputeInterpolationValuesInteger for every output index: (lower, upper,
    distance of the scaled position from the lower, in 1/1024ths)."""
    if align_corners and out_size > 1:
        scale = _c_div((1 << 10) * (in_size - 1) + (out_size - 1) // 2, out_size - 1)
    else:
        scale = _c_div((1 << 10) * in_size + out_size // 2, out_size)
    steps = []
    for i in range(out_size):
        v = i * scale + scale // 2 - (1 << 9) if half_pixel_centers else i * scale
        lo, hi = max(_c_div(v, 1 << 10), 0), min(_c_div(v + (1 << 10) - 1, 1 << 10), in_size - 1)
        steps.append((lo, hi, v - (lo << 10)))
    return tuple(steps)


def nearest_indices(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool) -> tuple[int, ...]:
    """The reference's GetNearestNeighbor for every output index, in float32 as it computes."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5 if half_pixel_centers else 0.0)
    result = []
    for i in range(out_size):
        v = np.float32(np.float32(i) + offset) * scale
        j = min(round_away(float(v)) if align_corners else math.floor(float(v)), in_size - 1)
        result.append(max(j, 0) if half_pixel_centers else j)
    return tuple(result)


def _nhwc(t: Tensor, where: str) -> tuple[int, int, int, int]:
    if len(t.shape) != 4:
        raise UnsupportedOperator(f"{where}: expects a 4-D NHWC tensor, '{t.name}' is {list(t.shape)}")
    return t.shape  # type: ignore[return-value]


def _where(graph: Graph, layer: Layer) -> str:
    return f"{graph.name}: op {layer.index} {layer.op} (output '{layer.name}')"


def _act(t: Tensor, activation: str) -> tuple[int, int]:
    return activation_range(activation, t.scale, t.zero_point, *dtype_range(t.dtype))


def _float_scales(x: Tensor, w: Tensor, y: Tensor, channels: int) -> tuple[float, ...]:
    """onnxruntime's per-channel requantization scales: (x_scale * w_scale) / y_scale in float32."""
    ws = np.array(w.quant.scale if w.quant.per_channel else w.quant.scale * channels, np.float32)
    with np.errstate(over="ignore"):
        scales = (np.float32(x.scale) * ws) / np.float32(y.scale)
    if not np.all(np.isfinite(scales)):  # inf * 0 is NaN, which no rounding of the engine's defines
        raise RescaleError(f"rescale factor {float(scales[~np.isfinite(scales)][0]):g} overflows float32")
    return tuple(float(v) for v in scales)


def _check_bias(g: Graph, bias: int, counts: tuple[int, ...], where: str) -> None:
    """A bias holds one constant per output channel (or, for a GEMM's C, per output value):
    the kernels read that many."""
    if bias < 0:
        return
    b = g.tensors[bias]
    if b.data is None or b.elements not in counts:
        raise UnsupportedOperator(f"{where}: bias '{b.name}' {list(b.shape)} must be a constant of "
                                  f"{' or '.join(map(str, sorted(set(counts))))} values")


def _check_channel_scales(w: Tensor, channels: int, where: str) -> None:
    """Per-channel weights hold one scale per output channel (quantized along the output channels'
    axis); the kernels index their multipliers by output channel."""
    if w.quant is not None and w.quant.per_channel and len(w.quant.scale) != channels:
        raise UnsupportedOperator(f"{where}: weights '{w.name}' have {len(w.quant.scale)} scales (axis "
                                  f"{w.quant.axis}) for {channels} output channels")


def _check_conv_weights(w: Tensor, where: str) -> None:
    """A convolution's weights (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV): constant, symmetric, 4-D int8."""
    if w.data is None:
        raise UnsupportedOperator(f"{where}: weights '{w.name}' must be constant")
    if w.quant is None or any(z != 0 for z in w.quant.zero_point):
        raise UnsupportedOperator(f"{where}: weights '{w.name}' must be symmetric int8 (zero point 0)")
    if w.dtype != "int8" or len(w.shape) != 4:
        raise UnsupportedOperator(f"{where}: weights '{w.name}' {list(w.shape)} {w.dtype}: expected 4-D int8")


def _channel_multipliers(x: Tensor, w: Tensor, y: Tensor, channels: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Each output channel's multiplier and shift, as PopulateConvolutionQuantizationParams forms
    them: double(input) * double(filter) / double(output)."""
    scales = w.quant.scale if w.quant.per_channel else w.quant.scale * channels
    return tuple(zip(*(quantize_multiplier(x.scale * s / y.scale) for s in scales)))  # type: ignore[return-value]


def _check_acc64(g: Graph, l: Layer, b: Tensor | None, where: str) -> None:
    """LiteRT's 64-bit MultiplyByQuantizedMultiplier holds for accumulators below 2^47 in
    magnitude (its stated range: the product with the 16-bit multiplier then fits 64 bits) and
    shifts up to 14 (its rounding shift, 15 - shift, stays positive): the layer's largest
    possible accumulator and its rescales must be inside."""
    x, w, y = g.tensors[l.inputs[0]], g.tensors[l.inputs[1]], g.tensors[l.outputs[0]]
    magnitudes = np.abs(w.data.astype(np.int64))
    # per output channel: OHWI rows (a depthwise layer's channels are its last axis)
    per_channel = magnitudes.reshape(-1, w.shape[-1]).sum(axis=0) if l.op == "DEPTHWISE_CONV_2D" else \
        magnitudes.reshape(w.shape[0], -1).sum(axis=1)
    reach = int(per_channel.max(initial=0)) * 32768 + (int(np.abs(b.data.astype(np.int64)).max(initial=0)) if b else 0)
    if reach >= 1 << 47:
        raise UnsupportedOperator(f"{where}: its accumulators can reach {reach:.3g}, beyond the 2^47 the reference's "
                                  f"64-bit requantization holds")
    largest = max(x.scale * s / y.scale for s in w.quant.scale)
    if largest >= 2.0 ** 14:
        raise UnsupportedOperator(f"{where}: a rescale of {largest:g} (2^14 or more) is beyond the reference's 64-bit "
                                  f"requantization")


def _weighted_types(g: Graph, l: Layer, x: Tensor, bias: int, where: str) -> dict:
    """The activation type of a weighted layer and its accumulator: an 8-bit layer takes int32
    biases; a 16x8 one (int16 input) int64 biases, summed in 64 bits, or int32 biases summed in 32
    bits when its options' quantized_bias_type says INT32 (LiteRT reads an int32 bias as int64
    otherwise; its 16x8 depthwise kernel takes int64 biases only)."""
    b = g.tensors[bias] if bias >= 0 else None
    if x.dtype != "int16":
        if b is not None and b.dtype != "int32":
            raise UnsupportedOperator(f"{where}: bias '{b.name}' is {b.dtype}; a layer with {x.dtype} input takes "
                                      f"int32 biases")
        return dict(dtype="int8")
    bias32 = getattr(l.attrs, "bias32", False)
    if b is None or b.dtype == "int64":
        if bias32:
            raise UnsupportedOperator(f"{where}: quantized_bias_type INT32 with "
                                      f"{'no bias' if b is None else 'an int64 bias'} '{'' if b is None else b.name}'")
        if l.op != "FULLY_CONNECTED":  # (FC requantizes in double: exact up to 2^53)
            _check_acc64(g, l, b, where)
        return dict(dtype="int16", acc64=True)
    if b.dtype == "int32" and bias32:
        return dict(dtype="int16", acc64=False)
    raise UnsupportedOperator(f"{where}: bias '{b.name}' of a 16x8 layer is {b.dtype}; LiteRT's kernel takes int64 "
                              f"biases, or int32 ones when the options' quantized_bias_type is INT32"
                              f"{' (the depthwise kernel: int64 only)' if l.op == 'DEPTHWISE_CONV_2D' else ''}")


def _conv(g: Graph, l: Layer, where: str) -> Conv:
    x, w = g.tensors[l.inputs[0]], g.tensors[l.inputs[1]]
    bias = l.inputs[2] if len(l.inputs) > 2 else -1
    y = g.tensors[l.outputs[0]]
    a = l.attrs
    depthwise = l.op == "DEPTHWISE_CONV_2D"
    n, ih, iw, ic = _nhwc(x, where)
    _, oh, ow, oc = _nhwc(y, where)
    _check_conv_weights(w, where)
    if y.shape[0] != n:
        raise UnsupportedOperator(f"{where}: output batch {y.shape[0]} differs from the input's {n}")
    _check_bias(g, bias, (oc,), where)
    _check_channel_scales(w, oc, where)
    kh, kw = w.shape[1], w.shape[2]
    mult = a.depth_multiplier if depthwise else 1
    if depthwise:
        if w.shape[0] != 1 or w.shape[3] != oc or oc != ic * mult:
            raise UnsupportedOperator(f"{where}: depthwise weights {list(w.shape)} do not match "
                                      f"{ic} input / {oc} output channels")
    elif w.shape[3] != ic or w.shape[0] != oc:
        raise UnsupportedOperator(f"{where}: weights {list(w.shape)} do not match {ic} input / "
                                  f"{oc} output channels (grouped convolution is not supported)")
    (sh, sw), (dh, dw) = a.stride, a.dilation
    ph, pw = (a.pads[:2], a.pads[2:]) if a.pads else (None, None)
    exp_h = geo.output_size(ih, kh, sh, dh, a.padding, ph)
    exp_w = geo.output_size(iw, kw, sw, dw, a.padding, pw)
    if (oh, ow) != (exp_h, exp_w):
        raise UnsupportedOperator(f"{where}: output {oh}x{ow} does not match the geometry ({exp_h}x{exp_w})")
    float_rq = None
    if a.requant is not None:
        ms, ss, zp, (lo, hi) = (), (), 0, _int_range(a.requant, oc, where)
    elif a.float_requant:
        float_rq = _float_scales(x, w, y, oc)
        ms, ss, zp, (lo, hi) = (), (), y.zero_point, _act(y, a.activation)
    else:
        ms, ss = _channel_multipliers(x, w, y, oc)
        zp, (lo, hi) = y.zero_point, _act(y, a.activation)
    return Conv(depthwise, n, ih, iw, ic, oh, ow, oc, kh, kw, sh, sw, dh, dw,
                geo.pad_before(ih, kh, sh, dh, a.padding, ph), geo.pad_before(iw, kw, sw, dw, a.padding, pw),
                mult, -x.zero_point, zp, ms, ss, lo, hi, l.inputs[1], bias, a.requant, float_rq,
                **_weighted_types(g, l, x, bias, where))


def _transpose_conv(g: Graph, l: Layer, where: str) -> TransposeConv:
    x, w = g.tensors[l.inputs[0]], g.tensors[l.inputs[1]]
    bias = l.inputs[2] if len(l.inputs) > 2 else -1
    y = g.tensors[l.outputs[0]]
    a = l.attrs
    n, ih, iw, ic = _nhwc(x, where)
    yn, oh, ow, oc = _nhwc(y, where)
    _check_conv_weights(w, where)
    if w.shape[0] != oc or w.shape[3] != ic or yn != n:
        raise UnsupportedOperator(f"{where}: weights {list(w.shape)} do not map {list(x.shape)} to {list(y.shape)}")
    _check_bias(g, bias, (oc,), where)
    _check_channel_scales(w, oc, where)
    kh, kw = w.shape[1], w.shape[2]
    (sh, sw) = a.stride
    back = geo.output_size(oh, kh, sh, 1, a.padding), geo.output_size(ow, kw, sw, 1, a.padding)
    if back != (ih, iw):
        raise UnsupportedOperator(f"{where}: a {a.padding} convolution of the {oh}x{ow} output gives {back[0]}x{back[1]}, "
                                  f"the input is {ih}x{iw} (the reference requires them equal)")
    # the padding of the convolution this one transposes (from the output back to the input)
    pad_t, pad_l = geo.pad_before(oh, kh, sh, 1, a.padding), geo.pad_before(ow, kw, sw, 1, a.padding)
    ms, ss = _channel_multipliers(x, w, y, oc)
    lo, hi = _act(y, a.activation)
    return TransposeConv(n, ih, iw, ic, oh, ow, oc, kh, kw, sh, sw, pad_t, pad_l, -x.zero_point, y.zero_point,
                         ms, ss, lo, hi, l.inputs[1], bias, **_weighted_types(g, l, x, bias, where))


def _batch_matmul(g: Graph, l: Layer, where: str) -> BatchMatMul:
    x, w, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    a = l.attrs
    if len(x.shape) < 2 or len(w.shape) < 2:
        raise UnsupportedOperator(f"{where}: operands {list(x.shape)} and {list(w.shape)} need two axes each")
    for t in (x, w):
        if t.dtype != "int8" or t.quant is None or t.quant.per_channel:
            raise UnsupportedOperator(f"{where}: operand '{t.name}' must be int8 with one quantization")
    rows, depth = (x.shape[-1], x.shape[-2]) if a.adj_x else x.shape[-2:]
    depth_y, cols = (w.shape[-1], w.shape[-2]) if a.adj_y else w.shape[-2:]
    if depth != depth_y:
        raise UnsupportedOperator(f"{where}: {list(x.shape)} x {list(w.shape)}: inner sizes {depth} and {depth_y}")
    try:
        batch = tuple(np.broadcast_shapes(x.shape[:-2], w.shape[:-2]))
    except ValueError:
        raise UnsupportedOperator(f"{where}: batch axes of {list(x.shape)} and {list(w.shape)} do not broadcast") from None
    if y.shape != batch + (rows, cols):
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not {list(batch + (rows, cols))}")

    def offsets(t: Tensor) -> tuple[int, ...]:
        shape = (1,) * (len(batch) - len(t.shape) + 2) + tuple(t.shape[:-2])
        size = t.shape[-1] * t.shape[-2]
        step = [math.prod(shape[d + 1:]) * size for d in range(len(shape))]
        idx = np.zeros(batch, np.int64) if batch else np.zeros((), np.int64)
        for d, (n, st) in enumerate(zip(shape, step)):
            if n > 1:
                idx = idx + (np.arange(n) * st).reshape([-1 if e == d else 1 for e in range(len(batch))])
        return tuple(int(v) for v in np.broadcast_to(idx, batch).reshape(-1))

    xs = (1, x.shape[-1]) if a.adj_x else (x.shape[-1], 1)
    ys = (1, w.shape[-1]) if a.adj_y else (w.shape[-1], 1)
    if a.requant is not None:  # exact integers: only unsigned operands stored as int8 carry an offset
        rq = a.requant
        lo, hi = (rq.lo, rq.hi) if y.dtype == "int8" else (-(1 << 31), (1 << 31) - 1)
        return BatchMatMul(rows, depth, cols, offsets(x), offsets(w), xs, ys, -x.zero_point, -w.zero_point, 0, 0,
                           0, lo, hi, rq)
    m, s = quantize_multiplier(x.scale * w.scale / y.scale)
    return BatchMatMul(rows, depth, cols, offsets(x), offsets(w), xs, ys, -x.zero_point, -w.zero_point, m, s,
                       y.zero_point)


def _fc(g: Graph, l: Layer, where: str) -> FullyConnected:
    x, w = g.tensors[l.inputs[0]], g.tensors[l.inputs[1]]
    bias = l.inputs[2] if len(l.inputs) > 2 else -1
    y = g.tensors[l.outputs[0]]
    if w.data is None or len(w.shape) != 2 or w.dtype != "int8":
        raise UnsupportedOperator(f"{where}: weights '{w.name}' must be a constant 2-D int8 matrix")
    units, depth = w.shape
    if depth == 0 or x.elements % depth:
        raise UnsupportedOperator(f"{where}: input of {x.elements} elements is not a multiple of {depth}")
    if y.elements != x.elements // depth * units:
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} does not hold {x.elements // depth} x {units} "
                                  f"values")
    _check_bias(g, bias, (units, x.elements // depth * units), where)
    _check_channel_scales(w, units, where)
    if any(z != 0 for z in w.quant.zero_point):
        raise UnsupportedOperator(f"{where}: weights '{w.name}' must be symmetric (zero point 0)")
    rq = l.attrs.requant
    if rq is not None:
        return FullyConnected(x.elements // depth, depth, units, -x.zero_point, 0, (), *_int_range(rq, units, where),
                              l.inputs[1], bias, rq)
    lo, hi = _act(y, l.attrs.activation)
    if l.attrs.float_requant:
        return FullyConnected(x.elements // depth, depth, units, -x.zero_point, y.zero_point, (), lo, hi,
                              l.inputs[1], bias, None, _float_scales(x, w, y, units))
    scales = tuple(x.scale * s / y.scale for s in w.quant.scale)
    return FullyConnected(x.elements // depth, depth, units, -x.zero_point, y.zero_point,
                          scales, lo, hi, l.inputs[1], bias, **_weighted_types(g, l, x, bias, where))


def _broadcast(a: Tensor, b: Tensor, out: Tensor, where: str) -> Broadcast:
    rank = len(out.shape)
    if rank > 4:
        raise UnsupportedOperator(f"{where}: more than 4 dimensions")
    shape = (1,) * (4 - rank) + tuple(out.shape)

    def strides(t: Tensor):
        s = (1,) * (4 - len(t.shape)) + tuple(t.shape)
        res, acc = [0] * 4, 1
        for d in range(3, -1, -1):
            if s[d] not in (1, shape[d]):
                raise UnsupportedOperator(f"{where}: cannot broadcast {list(t.shape)} to {list(out.shape)}")
            res[d] = 0 if s[d] == 1 and shape[d] != 1 else acc
            acc *= s[d]
        return tuple(res)
    return Broadcast(shape, strides(a), strides(b))  # type: ignore[arg-type]


def _int_range(rq: IntRequant, channels: int, where: str) -> tuple[int, int]:
    """The clamp of an integer requantization, after checking it fits the kernels' arithmetic
    (int32 multipliers, a 64-bit sum that cannot overflow)."""
    if len(rq.mul) not in (1, channels) or len(rq.add) not in (1, channels):
        raise UnsupportedOperator(f"{where}: requantization has {len(rq.mul)} multipliers and {len(rq.add)} "
                                  f"addends for {channels} channels")
    if not 0 <= rq.shift <= 62 or any(abs(m) >= 2 ** 31 for m in rq.mul) or any(abs(v) >= 2 ** 61 for v in rq.add):
        raise UnsupportedOperator(f"{where}: requantization constants out of range (shift {rq.shift}, "
                                  f"multipliers up to {max(map(abs, rq.mul))}, addends up to {max(map(abs, rq.add))})")
    return rq.lo, rq.hi


def _int_add(g: Graph, l: Layer, where: str) -> IntAdd:
    a, b, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    p: IntegerAdd = l.attrs
    if max(abs(p.a_mul), abs(p.b_mul), abs(p.post_mul)) >= 2 ** 31 or max(abs(p.add), abs(p.post_add)) >= 2 ** 61 \
            or not (0 <= p.shift <= 62 and 0 <= p.post_shift <= 62):
        raise UnsupportedOperator(f"{where}: integer ADD constants out of range")
    return IntAdd(_broadcast(a, b, y, where), -a.zero_point, -b.zero_point, p.a_mul, p.b_mul, p.add, p.shift,
                  p.lo, p.hi, p.post_mul, p.post_add, p.post_shift)


def _rescale(g: Graph, l: Layer, where: str) -> IntRescale:
    x = g.tensors[l.inputs[0]]
    channels = x.shape[-1] if x.shape else 1
    lo, hi = _int_range(l.attrs.requant, channels, where)
    return IntRescale(x.elements, channels, -x.zero_point, lo, hi, l.attrs.requant, x.dtype)


def _int_reduce(g: Graph, l: Layer, where: str) -> IntReduce:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    a: IntegerReduce = l.attrs
    rank = len(x.shape)
    if sorted((*a.kept, *a.axes)) != list(range(rank)):
        raise UnsupportedOperator(f"{where}: kept axes {list(a.kept)} and reduced axes {list(a.axes)} do not "
                                  f"cover the input's {rank} axes once each")
    if y.elements != math.prod(x.shape[k] for k in a.kept):
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not {list(x.shape)} reduced over {list(a.axes)}")
    if x.dtype not in ("int8", "int16"):
        raise UnsupportedOperator(f"{where}: {l.op} of a {x.dtype} input (supported: int8, int16)")
    count = math.prod(x.shape[d] for d in a.axes)
    mean = l.op == "MEAN"
    if mean and (y.dtype, y.quant) != (x.dtype, x.quant) or not mean and y.dtype != "int32":
        raise UnsupportedOperator(f"{where}: {l.op} to {y.dtype} (MEAN keeps its input's type and "
                                  f"quantization; SUM gives int32)")
    lo, hi = dtype_range(y.dtype)
    return IntReduce(tuple(x.shape), a.kept, a.axes, -x.zero_point * count, mean, y.zero_point if mean else 0,
                     lo, hi, x.dtype)


def _sum(g: Graph, l: Layer, where: str) -> IntReduce:
    if not isinstance(l.attrs, IntegerReduce):
        raise UnsupportedOperator(f"{where}: SUM outside an integer graph")
    return _int_reduce(g, l, where)


def _int_hardswish(g: Graph, l: Layer, where: str) -> IntHardswish:
    x, y = _same_shape(g, l, where)
    a: IntegerHardswish = l.attrs
    if x.dtype != "int8":
        raise UnsupportedOperator(f"{where}: integer HARD_SWISH of a {x.dtype} input (supported: int8)")
    channels = x.shape[-1] if x.shape else 1
    lo, hi = _int_range(a.requant, channels, where)
    if (lo, hi) != (max(lo, dtype_range(y.dtype)[0]), min(hi, dtype_range(y.dtype)[1])):
        raise UnsupportedOperator(f"{where}: requantization clamp {lo}..{hi} beyond the {y.dtype} output")
    return IntHardswish(x.elements, channels, -x.zero_point, a.one_over_six, a.three, a.six, lo, hi, a.requant)


def _row_view(x: Tensor, axis: int) -> tuple[int, int, int]:
    """(outer, depth, inner) of ``x`` around ``axis``."""
    return math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])


def isoftmax_exponent(log2: int, d):
    """(z, p) of Deeploy's iSoftmax for differences ``d`` from the row's maximum (d <= 0):
    z = -d / log2 (truncated, at most 31), p = d + z * log2."""
    z = np.minimum(-np.asarray(d, np.int64) // log2, 31)
    return z, d + z * log2


def _int_softmax(g: Graph, l: Layer, where: str) -> IntSoftmax:
    x, y = _same_shape(g, l, where)
    a = l.attrs
    if x.dtype != "int8" or y.dtype != "int8" or not x.shape:
        raise UnsupportedOperator(f"{where}: iSoftmax of a {x.dtype} {list(x.shape)} value (int8 rows are needed)")
    if not 2 <= a.n_levels <= 256:
        raise UnsupportedOperator(f"{where}: iSoftmax with n_levels {a.n_levels} (the output is 8-bit: 2..256)")
    if not 2 <= a.log2 < 2 ** 31:
        # below 2 the kernel's 8-bit exponent -(x - max) / log2 overflows
        raise UnsupportedOperator(f"{where}: iSoftmax log2 {a.log2} (supported: 2 up to int32)")
    # coeff_a * (p + coeff_b)^2 is int32 arithmetic in the kernel: it must not overflow for any p
    _, p = isoftmax_exponent(a.log2, np.arange(-255, 1))
    square = int(((p + a.coeff_b) ** 2).max())
    if square >= 2 ** 31 or abs(a.coeff_a) * square >= 2 ** 31 or abs(a.coeff_c) >= 2 ** 62:
        raise UnsupportedOperator(f"{where}: iSoftmax coefficients {a.coeff_a}, {a.coeff_b}, {a.coeff_c} overflow "
                                  f"the kernel's int32 polynomial")
    return IntSoftmax(*_row_view(x, a.axis), a.coeff_a, a.coeff_b, a.coeff_c, a.log2, a.n_levels)


def _int_rms_norm(g: Graph, l: Layer, where: str) -> IntRmsNorm:
    x, y = _same_shape(g, l, where)
    w = g.tensors[l.inputs[1]]
    outer, depth, inner = _row_view(x, l.attrs.axis)
    if x.dtype != "int8" or y.dtype != "int8" or w.dtype != "int32" or not w.is_const or w.elements != depth:
        raise UnsupportedOperator(f"{where}: iRMSNorm needs int8 values and {depth} constant int32 weights")
    if depth * 128 * 128 >= 2 ** 31:
        raise UnsupportedOperator(f"{where}: iRMSNorm over {depth} values (the int32 sum of squares holds 131,071)")
    if 128 * int(np.abs(w.data.astype(np.int64)).max()) >= 2 ** 31:
        raise UnsupportedOperator(f"{where}: iRMSNorm weights beyond 2^24 overflow the kernel's int32 products")
    if not 0 <= l.attrs.log2_d <= 31:
        raise UnsupportedOperator(f"{where}: iRMSNorm D = 2^{l.attrs.log2_d} (supported: up to 2^31)")
    return IntRmsNorm(outer, depth, inner, l.attrs.log2_d)


def _int_no_norm(g: Graph, l: Layer, where: str) -> IntNoNorm:
    x, w, b, y = (g.tensors[i] for i in (*l.inputs[:3], l.outputs[0]))
    a = l.attrs
    if x.shape != y.shape or (x.dtype, w.dtype, b.dtype, y.dtype) != ("int8", "int8", "int32", "int8") \
            or not (w.is_const and b.is_const):
        raise UnsupportedOperator(f"{where}: iNoNorm needs int8 values, constant int8 weights and an int32 bias")
    top = 128 * 128 + int(np.abs(b.data.astype(np.int64)).max(initial=0))
    if top * abs(a.mul) >= 2 ** 31:
        raise UnsupportedOperator(f"{where}: iNoNorm mul {a.mul} and bias overflow the kernel's int32 arithmetic")
    if not 0 <= a.log2_d <= 31:
        raise UnsupportedOperator(f"{where}: iNoNorm D = 2^{a.log2_d} (supported: up to 2^31)")
    return IntNoNorm(_broadcast(x, w, y, where), _broadcast(x, b, y, where).b_strides, a.mul, a.log2_d)


def _add(g: Graph, l: Layer, where: str) -> Add | IntAdd:
    if isinstance(l.attrs, IntegerAdd):
        return _int_add(g, l, where)
    a, b, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    left_shift = 20  # int8 ADD headroom
    if y.dtype == "int16":
        if l.attrs.pot_scale_int16 and all(checked_log2(t.scale) is not None for t in (a, b, y)):
            raise UnsupportedOperator(f"{where}: int16 {l.op} with power-of-two scales and pot_scale_int16 set runs "
                                      f"TFLite's shift-only kernel, which the engine does not have")
        left_shift = 15  # the general int16 kernel's headroom
    twice_max = 2.0 * f32(max(np.float32(a.scale), np.float32(b.scale)))
    am, ash = quantize_multiplier_smaller_than_one(a.scale / twice_max)
    bm, bsh = quantize_multiplier_smaller_than_one(b.scale / twice_max)
    om, osh = quantize_multiplier_smaller_than_one(twice_max / f32((1 << left_shift) * np.float32(y.scale)))
    lo, hi = _act(y, l.attrs.activation)
    return Add(_broadcast(a, b, y, where), -a.zero_point, -b.zero_point, left_shift,
               am, ash, bm, bsh, om, osh, y.zero_point, lo, hi, subtract=l.op == "SUB", dtype=y.dtype)


def _squared_difference(g: Graph, l: Layer, where: str) -> Add:
    """SQUARED_DIFFERENCE: the inputs rescaled (left shift 7) to half the larger scale, subtracted,
    squared, and the square rescaled to the output, as LiteRT's int8 kernel."""
    a, b, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    left_shift = 7
    twice_max = 2.0 * max(a.scale, b.scale)
    am, ash = quantize_multiplier_smaller_than_one(a.scale / twice_max)
    bm, bsh = quantize_multiplier_smaller_than_one(b.scale / twice_max)
    om, osh = quantize_multiplier(twice_max * twice_max / ((1 << (2 * left_shift)) * y.scale))
    lo, hi = _act(y, "NONE")
    return Add(_broadcast(a, b, y, where), -a.zero_point, -b.zero_point, left_shift, am, ash, bm, bsh, om, osh,
               y.zero_point, lo, hi, subtract=True, squared=True)


def _prelu(g: Graph, l: Layer, where: str) -> Prelu:
    x, alpha, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    if alpha.quant is None or alpha.quant.per_channel:
        raise UnsupportedOperator(f"{where}: PRELU's alpha '{alpha.name}' must have one quantization (the reference "
                                  f"reads one scale)")
    m1, s1 = quantize_multiplier(x.scale / y.scale)
    m2, s2 = quantize_multiplier(x.scale * alpha.scale / y.scale)
    return Prelu(_broadcast(x, alpha, y, where), -x.zero_point, -alpha.zero_point, m1, s1, m2, s2, y.zero_point,
                 *dtype_range(y.dtype), alpha_constant=alpha.is_const, dtype=y.dtype)


def _min_max(g: Graph, l: Layer, where: str) -> MinMax:
    a, b, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    return MinMax(_broadcast(a, b, y, where), l.op == "MAXIMUM")


def _mul(g: Graph, l: Layer, where: str) -> Mul:
    a, b, y = (g.tensors[i] for i in (*l.inputs[:2], l.outputs[0]))
    with np.errstate(over="ignore"):  # an overflow is inf, which quantize_multiplier refuses
        real = f32(np.float32(a.scale) * np.float32(b.scale) / np.float32(y.scale))
    m, s = quantize_multiplier(real)
    lo, hi = _act(y, l.attrs.activation)
    return Mul(_broadcast(a, b, y, where), -a.zero_point, -b.zero_point, m, s, y.zero_point, lo, hi, y.dtype)


def _pool(g: Graph, l: Layer, where: str) -> Pool:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    n, ih, iw, c = _nhwc(x, where)
    _, oh, ow, oc = _nhwc(y, where)
    a = l.attrs
    (fh, fw), (sh, sw) = a.filter, a.stride
    ph, pw = (a.pads[:2], a.pads[2:]) if a.pads else (None, None)
    if (oh, ow) != (geo.output_size(ih, fh, sh, 1, a.padding, ph), geo.output_size(iw, fw, sw, 1, a.padding, pw)):
        raise UnsupportedOperator(f"{where}: output {oh}x{ow} does not match the pooling geometry")
    kind = "avg" if l.op == "AVERAGE_POOL_2D" else "max"
    pads = geo.pad_before(ih, fh, sh, 1, a.padding, ph), geo.pad_before(iw, fw, sw, 1, a.padding, pw)
    rq = a.requant
    if rq is not None:
        if kind != "avg" or any(pads) or a.padding == "SAME" or (a.pads and any(a.pads)):
            raise UnsupportedOperator(f"{where}: an integer requantization applies to unpadded average pooling only")
        # the kernel sums stored values: the input offset's share of each window joins the addend
        extra = -x.zero_point * fh * fw
        n_ch = max(len(rq.mul), len(rq.add))
        mul = rq.mul * n_ch if len(rq.mul) == 1 else rq.mul
        add = rq.add * n_ch if len(rq.add) == 1 else rq.add
        rq = IntRequant(rq.mul, tuple(v + m * extra for m, v in zip(mul, add)), rq.shift, rq.lo, rq.hi)
        return Pool(kind, n, ih, iw, c, oh, ow, fh, fw, sh, sw, *pads, *_int_range(rq, c, where), rq)
    lo, hi = _act(y, a.activation)
    if a.float_requant is not None and kind == "avg":
        return Pool(kind, n, ih, iw, c, oh, ow, fh, fw, sh, sw, *pads, lo, hi, None,
                    (f32(x.scale), f32(y.scale), x.zero_point, y.zero_point + a.float_requant, a.float_requant))
    if (x.scale, x.zero_point) != (y.scale, y.zero_point):
        raise UnsupportedOperator(f"{where}: pooling with different input and output quantization")
    return Pool(kind, n, ih, iw, c, oh, ow, fh, fw, sh, sw, *pads, lo, hi, dtype=y.dtype)


def _mean(g: Graph, l: Layer, where: str) -> Mean | IntReduce:
    if isinstance(l.attrs, IntegerReduce):
        return _int_reduce(g, l, where)
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    rank = len(x.shape)
    if any(not -rank <= a < rank for a in l.attrs.axes):
        raise UnsupportedOperator(f"{where}: MEAN axes {list(l.attrs.axes)} do not index {list(x.shape)}")
    axes = sorted({a % rank for a in l.attrs.axes}) if rank else []
    if not axes:
        raise UnsupportedOperator(f"{where}: MEAN over no axis")
    contiguous = axes == list(range(axes[0], axes[-1] + 1))
    reduced = math.prod(x.shape[a] for a in axes)
    if contiguous:
        outer, inner = math.prod(x.shape[:axes[0]]), math.prod(x.shape[axes[-1] + 1:])
    else:  # the kept axes outside, the reduced ones inside, walked through the input's strides
        outer, inner = x.elements // reduced, 1
    if y.elements != outer * inner:
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not {list(x.shape)} reduced over "
                                  f"axes {axes}")
    view = {} if contiguous else dict(in_shape=tuple(x.shape), axes=tuple(axes))
    if l.attrs.float_requant:  # MlasQLinearGlobalAveragePool: scale in float32, requantized like a conv
        scale = float(np.float32(x.scale) / (np.float32(y.scale) * np.float32(reduced)))
        return Mean(outer, reduced, inner, -x.zero_point * reduced, y.zero_point, 0, 0, scale, **view)
    m, s = quantize_multiplier(x.scale / y.scale)
    # QuantizedMeanOrSum folds the division by the element count into the multiplier.
    extra = min((reduced.bit_length() - 1), 32, 31 + s)
    m, s = (m << extra) // reduced, s - extra
    return Mean(outer, reduced, inner, -x.zero_point * reduced, y.zero_point, m, s, **view, dtype=y.dtype)


def _same_shape(g: Graph, l: Layer, where: str) -> tuple[Tensor, Tensor]:
    """The input and output of an elementwise op, which must have one shape (the kernels loop
    over one count: a smaller output would be written past its end)."""
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    if x.shape != y.shape:
        raise UnsupportedOperator(f"{where}: input {list(x.shape)} and output {list(y.shape)} differ in shape")
    return x, y


def softmax_table(x_scale: float, depth: int) -> tuple[float, ...]:
    """QLinearSoftmax's table for a row of ``depth``: entry j is exp((j - 255 + shift) * scale) in
    double, stored as float32, where the shift (in input steps) keeps a row's sum of exponentials
    within float32: (log(FLT_MAX / depth) - 5) / scale, the logarithm taken in float32."""
    s = float(np.float32(x_scale))
    f32 = np.finfo(np.float32).max
    shift = max(0.0, float(np.log(np.float32(f32) / np.float32(depth))) - 5.0) / s
    return tuple(float(np.float32(math.exp((j - 255 + shift) * s))) for j in range(256))


def _softmax(g: Graph, l: Layer, where: str) -> Softmax | TableSoftmax | Softmax16:
    x, y = _same_shape(g, l, where)
    if not x.shape:
        raise UnsupportedOperator(f"{where}: softmax of a scalar")
    if x.dtype == "int16":
        if x.shape[-1] > 65536:
            raise UnsupportedOperator(f"{where}: int16 softmax over {x.shape[-1]} values (the reference's int32 sum "
                                      f"of exponentials overflows beyond 65536)")
        if abs(y.scale * 32768 - 1) > 1e-3:
            raise UnsupportedOperator(f"{where}: int16 softmax output must have scale 1/32768 (got {y.scale:g})")
        # the input's differences onto the exponential table's range [-10, 0] (the product in float32)
        m, s = quantize_multiplier(float(np.float32(np.float32(x.scale) * np.float32(l.attrs.beta))) / (10.0 / 65535.0))
        return Softmax16(x.elements // x.shape[-1], x.shape[-1], m, s)
    if l.attrs.onnxruntime:
        depth = x.shape[-1]
        y_scale = float(np.floor(np.float32(1.0) / np.float32(y.scale)))
        if depth < 2 or not 1 <= y_scale < 2 ** 22:
            raise UnsupportedOperator(f"{where}: QLinearSoftmax over {depth} value(s) with output scale {y.scale:g} "
                                      f"(supported: rows of 2 or more, 1 / scale below 2^22)")
        return TableSoftmax(x.elements // depth, depth, softmax_table(x.scale, depth), y_scale, y.zero_point)
    out_bits = 16 if y.dtype == "int16" else 8
    if (y.scale, y.zero_point) != (1 / (1 << out_bits), -(1 << (out_bits - 1))):
        raise UnsupportedOperator(f"{where}: {y.dtype} softmax output of int8 values must have scale "
                                  f"1/{1 << out_bits}, zero point {-(1 << (out_bits - 1))}")
    score_bits = 5  # kScaledDiffIntegerBits
    real = min(l.attrs.beta * x.scale * (1 << (31 - score_bits)), (1 << 31) - 1.0)
    m, s = quantize_multiplier_greater_than_one(real)
    # CalculateInputRadius(5, shift, 31)
    max_rescaled = ((1 << score_bits) - 1) * (1 << (31 - score_bits)) / (1 << s)
    diff_min = -int(np.floor(max_rescaled))
    depth = x.shape[-1]
    return Softmax(x.elements // depth, depth, m, s, diff_min, out_bits)


def _log_softmax(g: Graph, l: Layer, where: str) -> LogSoftmax:
    x, y = _same_shape(g, l, where)
    if not x.shape:
        raise UnsupportedOperator(f"{where}: log-softmax of a scalar")
    if (y.scale, y.zero_point) != (16 / 256, 127):
        raise UnsupportedOperator(f"{where}: int8 LOG_SOFTMAX output must have scale 16/256, zero point 127")
    score_bits = 5  # kScaledDiffIntegerBits, beta 1
    real = min(x.scale * (1 << (31 - score_bits)), (1 << 31) - 1.0)
    m, s = quantize_multiplier_greater_than_one(real)
    # PreprocessLogSoftmaxScalingExp: what undoes the input scaling, as a multiplier below one
    rm, rs = quantize_multiplier_smaller_than_one((1 << (31 - s)) / m)
    diff_min = -int(np.floor(((1 << score_bits) - 1) * (1 << (31 - score_bits)) / (1 << s)))
    depth = x.shape[-1]
    return LogSoftmax(x.elements // depth, depth, m, s, rm, rs, diff_min)


def _l2_norm(g: Graph, l: Layer, where: str) -> L2Norm:
    x, y = _same_shape(g, l, where)
    if not x.shape:
        raise UnsupportedOperator(f"{where}: L2 normalization of a scalar")
    if (y.scale, y.zero_point) != (1 / 128, 0):
        raise UnsupportedOperator(f"{where}: int8 L2_NORMALIZATION output must have scale 1/128, zero point 0")
    if l.attrs.activation != "NONE":
        raise UnsupportedOperator(f"{where}: fused activation {l.attrs.activation} on L2_NORMALIZATION")
    depth = x.shape[-1]
    if depth > 33025:  # 255^2 per value: the int32 sum of squares holds 33,025 of them
        raise UnsupportedOperator(f"{where}: L2 normalization over {depth} values (at most 33,025: the sum of "
                                  f"squares is an int32)")
    return L2Norm(x.elements // depth, depth, x.zero_point)


def _sigmoid16(x: Tensor, y: Tensor, tanh: bool, where: str) -> Sigmoid16:
    op = "TANH" if tanh else "LOGISTIC"
    if y.scale != 1.0 / 32768:
        raise UnsupportedOperator(f"{where}: int16 {op} output scale must be 1/32768 (got {y.scale:g})")
    multiplier, shift = sigmoid16_input_rescale(float(np.float32(x.scale)), tanh)
    if multiplier > 0xFFFF:  # x * multiplier must stay an int32, as the reference computes it
        raise UnsupportedOperator(f"{where}: int16 {op} input scale {x.scale:g} is too large for the reference's "
                                  f"rescale (at most {0xFFFF / (3 * 4096):g})")
    return Sigmoid16(x.elements, multiplier, shift, tanh)


def _logistic(g: Graph, l: Layer, where: str) -> Lookup | Sigmoid16:
    x, y = _same_shape(g, l, where)
    if x.dtype == "int16":
        return _sigmoid16(x, y, False, where)
    if y.scale != 1.0 / 256:
        raise UnsupportedOperator(f"{where}: int8 logistic output scale must be 1/256")
    return Lookup(x.elements, sigmoid_table(x.scale, x.zero_point, y.scale, y.zero_point))


def _float_lookup(g: Graph, l: Layer, where: str) -> Lookup | Sigmoid16:
    """TANH, EXP, LOG and RSQRT: LiteRT's int8 kernels are a table of the float function."""
    x, y = _same_shape(g, l, where)
    if x.dtype == "int16":  # TANH (the reader takes no other of these in 16 bits)
        return _sigmoid16(x, y, True, where)
    name = l.op.lower()
    return Lookup(x.elements, float_table(name, x.scale, x.zero_point, y.scale, y.zero_point), name)


def _sqrt(g: Graph, l: Layer, where: str) -> Lookup:
    """SQRT: LiteRT's int8 kernel truncates where the tables of the others round."""
    x, y = _same_shape(g, l, where)
    return Lookup(x.elements, sqrt_table(x.scale, x.zero_point, y.scale, y.zero_point), "sqrt")


def _neg(g: Graph, l: Layer, where: str) -> Lookup:
    """NEG: LiteRT negates the stored int8 value whatever the quantization (-(-128) wraps to -128)."""
    x, _ = _same_shape(g, l, where)
    return Lookup(x.elements, tuple((-v + 128) % 256 - 128 for v in range(-128, 128)), "neg")


def _abs(g: Graph, l: Layer, where: str) -> Lookup:
    x, y = _same_shape(g, l, where)
    if not 0 < float(np.float32(x.scale) / np.float32(y.scale)) < 2.0 ** 30:
        raise UnsupportedOperator(f"{where}: ABS from scale {x.scale:g} to {y.scale:g} needs a rescale the int8 "
                                  f"kernel cannot hold")
    return Lookup(x.elements, abs_table(x.scale, x.zero_point, y.scale, y.zero_point), "abs")


def _resize_nearest(g: Graph, l: Layer, where: str) -> ResizeNearest:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    n, ih, iw, c = _nhwc(x, where)
    yn, oh, ow, yc = _nhwc(y, where)
    a = l.attrs
    if (yn, yc) != (n, c) or (oh, ow) != a.size:
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not the input {list(x.shape)} resized to "
                                  f"{list(a.size)}")
    if x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: input {x.dtype} and output {y.dtype} differ")
    if a.sources is not None:
        rows, cols = a.sources
        if len(rows) != oh or len(cols) != ow or not all(0 <= r < ih for r in rows) or \
                not all(0 <= c_ < iw for c_ in cols):
            raise UnsupportedOperator(f"{where}: source rows and columns do not map {[oh, ow]} onto {[ih, iw]}")
        return ResizeNearest(n, ih, iw, c, tuple(rows), tuple(cols))
    return ResizeNearest(n, ih, iw, c, nearest_indices(oh, ih, a.align_corners, a.half_pixel_centers),
                         nearest_indices(ow, iw, a.align_corners, a.half_pixel_centers))


def _resize_bilinear(g: Graph, l: Layer, where: str) -> ResizeBilinear | ResizeLinear:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    n, ih, iw, c = _nhwc(x, where)
    yn, oh, ow, yc = _nhwc(y, where)
    a = l.attrs
    if (yn, yc) != (n, c) or (oh, ow) != a.size:
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not the input {list(x.shape)} resized to "
                                  f"{list(a.size)}")
    if a.blend is not None:
        if x.dtype != "int8" or y.dtype != "int8" or (len(a.blend[0]), len(a.blend[1])) != (oh, ow):
            raise UnsupportedOperator(f"{where}: a float32 linear Resize takes and gives int8")
        return ResizeLinear(n, ih, iw, c, a.blend[0], a.blend[1], x.scale, x.zero_point, y.scale, y.zero_point)
    if x.dtype != "int8" or (x.scale, x.zero_point) != (y.scale, y.zero_point):
        raise UnsupportedOperator(f"{where}: int8 RESIZE_BILINEAR keeps its input's quantization")
    return ResizeBilinear(n, ih, iw, c, bilinear_steps(oh, ih, a.align_corners, a.half_pixel_centers),
                          bilinear_steps(ow, iw, a.align_corners, a.half_pixel_centers))


def onnx_leaky_relu_table(x_scale: float, x_zp: int, y_scale: float, y_zp: int, alpha: float) -> tuple[int, ...]:
    """QLinearLeakyRelu's table: each input dequantized in float32 (scale times the difference),
    the slope applied below zero, quantized as QuantizeLinear (float32 division, half to even)."""
    f = np.float32
    v = f(x_scale) * (np.arange(-128, 128) - x_zp).astype(f)
    v = np.where(v >= 0, v, f(alpha) * v).astype(f)
    q = np.rint(np.clip(v / f(y_scale), f(-128 - y_zp), f(127 - y_zp))).astype(np.int64) + y_zp
    return tuple(int(t) for t in q)


def _leaky_relu(g: Graph, l: Layer, where: str) -> Lookup | Slopes:
    x, y = _same_shape(g, l, where)
    if l.attrs.onnxruntime:
        return Lookup(x.elements, onnx_leaky_relu_table(x.scale, x.zero_point, y.scale, y.zero_point, l.attrs.alpha),
                      "leaky_relu")
    alpha = np.float32(l.attrs.alpha)
    reals = (np.float32(x.scale) / np.float32(y.scale), np.float32(np.float32(x.scale) * alpha) / np.float32(y.scale))
    if not all(np.isfinite(r) and abs(float(r)) < 2.0 ** 30 for r in reals):
        raise UnsupportedOperator(f"{where}: LEAKY_RELU alpha {l.attrs.alpha} with input scale {x.scale:g} and output "
                                  f"scale {y.scale:g} needs a rescale the kernel cannot hold")
    if x.dtype == "int16":  # LeakyReluPrepare's float32 multipliers, applied per element
        (m, s), (am, ash) = (quantize_multiplier(float(r)) for r in reals)
        return Slopes(x.elements, m, s, am, ash)
    return Lookup(x.elements, leaky_relu_table(x.scale, x.zero_point, y.scale, y.zero_point, l.attrs.alpha),
                  "leaky_relu")


def _int16_multiplier(m32: int) -> int:
    """DownScaleInt32ToInt16Multiplier: round a Q31 multiplier to Q15."""
    return (1 << 15) - 1 if m32 >= (1 << 31) - 1 - (1 << 15) else (m32 + (1 << 15)) >> 16


def _hard_swish(g: Graph, l: Layer, where: str) -> HardSwish | IntHardswish:
    if isinstance(l.attrs, IntegerHardswish):
        return _int_hardswish(g, l, where)
    x, y = _same_shape(g, l, where)
    # HardSwishPrepare computes every scale in float32 (absurd scales overflow it: quantize_multiplier
    # refuses a factor that is not finite)
    with np.errstate(over="ignore"):
        hires = np.float32(1.0 / 128.0) * np.float32(x.scale)
        reluish_scale = np.float32(3.0) / np.float32(32768.0)
        output, reluish = float(hires / np.float32(y.scale)), float(hires / reluish_scale)
    rm, re_ = quantize_multiplier(reluish)  # first: at absurd input scales it is the one float32 overflows
    om, oe = quantize_multiplier(output)
    if oe > 0:
        raise UnsupportedOperator(f"{where}: HARD_SWISH output scale too small for the int8 kernel")
    return HardSwish(x.elements, x.zero_point, y.zero_point, _int16_multiplier(rm), re_,
                     _int16_multiplier(om), oe)


def _requantize_act(g: Graph, l: Layer, where: str) -> Requantize:
    x, y = _same_shape(g, l, where)
    # ReluPrepare divides the scales in float; int8 QUANTIZE divides in double.
    with np.errstate(over="ignore"):  # an overflow is inf, which quantize_multiplier refuses
        real = x.scale / y.scale if l.op == "QUANTIZE" else f32(np.float32(x.scale) / np.float32(y.scale))
    m, s = quantize_multiplier(real)
    act = l.op if l.op in ("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1") else "NONE"
    lo, hi = _act(y, act)
    return Requantize(x.elements, -x.zero_point, y.zero_point, m, s, lo, hi, y.dtype)


def _quantize(g: Graph, l: Layer, where: str) -> Offset | Quantize | Requantize | Lookup:
    x, y = _same_shape(g, l, where)
    if {x.dtype, y.dtype} == {"uint8", "int8"} and x.scale == y.scale and abs(x.zero_point - y.zero_point) == 128:
        return Offset(x.elements, y.zero_point - x.zero_point)
    if x.dtype == "float32":
        if y.dtype not in ("int8", "int16"):
            raise UnsupportedOperator(f"{where}: QUANTIZE from float32 to {y.dtype} (the engine quantizes to int8 "
                                      f"and int16)")
        return Quantize(y.elements, y.scale, y.zero_point, g.source is not None and g.source.format == "onnx-qdq",
                        *dtype_range(y.dtype), y.dtype)
    if (x.dtype, y.dtype) == ("int8", "int8") and g.source is not None and g.source.format == "onnx-qdq":
        # a QuantizeLinear of dequantized int8 values (after data movement): onnxruntime's float32
        # arithmetic, rounding half to even, as a table
        return Lookup(x.elements, float_requant_table(x.scale, x.zero_point, y.scale, y.zero_point), "requantize")
    if "uint8" in (x.dtype, y.dtype):
        raise UnsupportedOperator(f"{where}: QUANTIZE from {x.dtype} to {y.dtype} other than an offset of 128 "
                                  f"(scale {x.scale:g} to {y.scale:g}, zero point {x.zero_point} to {y.zero_point})")
    return _requantize_act(g, l, where)


def _dequantize(g: Graph, l: Layer, where: str) -> Dequantize:
    x, _ = _same_shape(g, l, where)
    return Dequantize(x.elements, x.scale, x.zero_point, x.dtype)


def _copy(g: Graph, l: Layer, where: str) -> Copy:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    if x.nbytes != y.nbytes:
        raise UnsupportedOperator(f"{where}: reshape from {list(x.shape)} to {list(y.shape)} changes the size")
    return Copy(x.nbytes)


def _view(x: Tensor, axes: tuple[int, ...], where: str, what: str) -> tuple[int, int, int]:
    """(outer, reduced, inner) of ``x`` reduced over ``axes``, which must be contiguous."""
    rank = len(x.shape)
    if any(not -rank <= a < rank for a in axes):
        raise UnsupportedOperator(f"{where}: {what} axes {list(axes)} do not index {list(x.shape)}")
    norm = sorted({a % rank for a in axes}) if rank else []
    if not norm or norm != list(range(norm[0], norm[-1] + 1)):
        raise UnsupportedOperator(f"{where}: {what} over axes {list(axes)} (only contiguous axes)")
    outer = math.prod(x.shape[:norm[0]])
    return outer, math.prod(x.shape[a] for a in norm), math.prod(x.shape[norm[-1] + 1:])


def _reduce(g: Graph, l: Layer, where: str) -> Reduce:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    outer, reduced, inner = _view(x, l.attrs.axes, where, l.op)
    index = l.op in ("ARG_MAX", "ARG_MIN")
    if y.elements != outer * inner:
        raise UnsupportedOperator(f"{where}: output {list(y.shape)} is not {list(x.shape)} reduced over {list(l.attrs.axes)}")
    if not index and x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: input {x.dtype} and output {y.dtype} differ")
    return Reduce(outer, reduced, inner, l.op in ("REDUCE_MAX", "ARG_MAX"), index)


def _gather(g: Graph, l: Layer, where: str) -> Gather:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    a = l.attrs
    rank = len(x.shape)
    if not -rank <= a.axis < rank:
        raise UnsupportedOperator(f"{where}: axis {a.axis} does not index {list(x.shape)}")
    axis = a.axis % rank
    if any(not 0 <= i < x.shape[axis] for i in a.indices):
        raise UnsupportedOperator(f"{where}: indices {list(a.indices)} outside the axis's {x.shape[axis]} entries")
    if x.shape[:axis] + a.indices_shape + x.shape[axis + 1:] != y.shape or x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: gathering {list(a.indices_shape)} indices on axis {axis} of "
                                  f"{list(x.shape)} does not give {list(y.shape)} {y.dtype}")
    inner = math.prod(x.shape[axis + 1:]) * DTYPE_BYTES[x.dtype]
    return Gather(math.prod(x.shape[:axis]), x.shape[axis], inner, a.indices)


def _gather_nd(g: Graph, l: Layer, where: str) -> Gather:
    """GATHER_ND with constant indices: each index row names a slice of the input's leading
    ``depth`` axes, so it is a GATHER on the view (1, those axes flattened, the rest)."""
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    a = l.attrs
    depth = a.indices_shape[-1]
    if depth > len(x.shape):
        raise UnsupportedOperator(f"{where}: index rows of {depth} coordinates for a rank-{len(x.shape)} input")
    rows = [a.indices[i:i + depth] for i in range(0, len(a.indices), depth)]
    lead = x.shape[:depth]
    if any(not 0 <= v < d for row in rows for v, d in zip(row, lead)):
        bad = next(row for row in rows if any(not 0 <= v < d for v, d in zip(row, lead)))
        raise UnsupportedOperator(f"{where}: index {list(bad)} outside the input's leading axes {list(lead)}")
    if a.indices_shape[:-1] + x.shape[depth:] != y.shape or x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: indices {list(a.indices_shape)} on {list(x.shape)} do not give "
                                  f"{list(y.shape)} {y.dtype}")
    flat = tuple(int(np.ravel_multi_index(row, lead)) for row in rows)
    return Gather(1, math.prod(lead), math.prod(x.shape[depth:]) * DTYPE_BYTES[x.dtype], flat)


def _pack(g: Graph, l: Layer, where: str) -> Concat:
    """PACK: the inputs, one shape, stacked along a new axis: a concatenation of their bytes."""
    y = g.tensors[l.outputs[0]]
    ins = [g.tensors[i] for i in l.inputs]
    rank = len(y.shape)
    if not -rank <= l.attrs.axis < rank:
        raise UnsupportedOperator(f"{where}: axis {l.attrs.axis} does not index the output's {rank} axes")
    axis = l.attrs.axis % rank
    shape = ins[0].shape
    if any(t.shape != shape for t in ins) or shape[:axis] + (len(ins),) + shape[axis:] != y.shape:
        raise UnsupportedOperator(f"{where}: inputs {[list(t.shape) for t in ins]} do not stack to {list(y.shape)}")
    for t in ins:  # as the reference requires
        if t.dtype != y.dtype or t.quant != y.quant:
            raise UnsupportedOperator(f"{where}: PACK inputs must share the output's type and quantization "
                                      f"('{t.name}' differs)")
    outer = math.prod(shape[:axis])
    return Concat(outer, tuple(t.nbytes // outer for t in ins))


def _mirror_pad(g: Graph, l: Layer, where: str) -> AxisGather:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    p = l.attrs.paddings
    if len(p) != len(x.shape) or tuple(d + a + b for d, (a, b) in zip(x.shape, p)) != y.shape or x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: paddings {list(p)} do not turn {list(x.shape)} into {list(y.shape)}")
    edge = 1 if l.attrs.mirror == "REFLECT" else 0
    tables = []
    for n, (before, after) in zip(x.shape, p):
        if max(before, after) > n - edge:
            raise UnsupportedOperator(f"{where}: {l.attrs.mirror} padding of {max(before, after)} on an axis of {n}")
        tables.append(tuple(-i - 1 + edge if i < 0 else (2 * n - i - 1 - edge if i >= n else i)
                            for i in range(-before, n + after)))
    strides = element_strides(x.shape)
    return AxisGather(tuple(tuple(i * st for i in t) for t, st in zip(tables, strides)))


def _space_batch(g: Graph, l: Layer, where: str) -> AxisGather:
    """SPACE_TO_BATCH_ND (its padding already a PAD before it) and BATCH_TO_SPACE_ND (with crops):
    output batch b * N + n, b = (by, bx) a position in the block, holds the input's rows and
    columns at that position of every block."""
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    (bh, bw), ((ct, cb), (cl, cr)) = l.attrs.block, l.attrs.crops
    n, h, w, c = _nhwc(x, where)
    if x.dtype != y.dtype or x.quant != y.quant:
        raise UnsupportedOperator(f"{where}: input and output must share a type and quantization (the values are moved)")
    sb, sh, sw = h * w * c, w * c, c
    if l.op == "SPACE_TO_BATCH_ND":
        if h % bh or w % bw or y.shape != (n * bh * bw, h // bh, w // bw, c):
            raise UnsupportedOperator(f"{where}: block {[bh, bw]} does not turn {list(x.shape)} into {list(y.shape)}")
        batch = tuple(by * sh + bx * sw + i * sb for by in range(bh) for bx in range(bw) for i in range(n))
        return AxisGather((batch, tuple(r * bh * sh for r in range(h // bh)), tuple(q * bw * sw for q in range(w // bw)),
                           tuple(range(c))), "space_to_batch_nd")
    out_n, out_h, out_w = n // (bh * bw), h * bh - ct - cb, w * bw - cl - cr
    if n % (bh * bw) or y.shape != (out_n, out_h, out_w, c):
        raise UnsupportedOperator(f"{where}: block {[bh, bw]} and crops do not turn {list(x.shape)} into {list(y.shape)}")
    rows = tuple(((r + ct) % bh) * bw * out_n * sb + (r + ct) // bh * sh for r in range(out_h))
    cols = tuple(((q + cl) % bw) * out_n * sb + (q + cl) // bw * sw for q in range(out_w))
    return AxisGather((tuple(i * sb for i in range(out_n)), rows, cols, tuple(range(c))), "batch_to_space_nd")


def _pad(g: Graph, l: Layer, where: str) -> Pad:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    p = l.attrs.paddings
    if len(p) != len(x.shape) or tuple(d + a + b for d, (a, b) in zip(x.shape, p)) != y.shape:
        raise UnsupportedOperator(f"{where}: paddings {list(p)} do not turn {list(x.shape)} into {list(y.shape)}")
    if (x.scale, x.zero_point) != (y.scale, y.zero_point):
        raise UnsupportedOperator(f"{where}: PAD with different input and output quantization")
    lo, hi = dtype_range(y.dtype)
    if l.attrs.value is not None and not lo <= l.attrs.value <= hi:
        raise UnsupportedOperator(f"{where}: padding value {l.attrs.value} is not an {y.dtype}")
    return Pad(x.shape, y.shape, tuple(a for a, _ in p), y.zero_point if l.attrs.value is None else l.attrs.value,
               y.dtype)


def _concat(g: Graph, l: Layer, where: str) -> Concat:
    y = g.tensors[l.outputs[0]]
    ins = [g.tensors[i] for i in l.inputs]
    rank = len(y.shape)
    if not -rank <= l.attrs.axis < rank:
        raise UnsupportedOperator(f"{where}: axis {l.attrs.axis} does not index the output's {rank} dimensions")
    axis = l.attrs.axis % rank
    others = [tuple(d for k, d in enumerate(t.shape) if k != axis) for t in (y, *ins)]
    if any(len(t.shape) != rank for t in ins) or len(set(others)) > 1 or \
            sum(t.shape[axis] for t in ins) != y.shape[axis]:
        raise UnsupportedOperator(f"{where}: inputs {[list(t.shape) for t in ins]} do not concatenate to "
                                  f"{list(y.shape)} on axis {axis}")
    for t in ins:
        if t.quant is None or (t.scale, t.zero_point) != (y.scale, y.zero_point):
            raise UnsupportedOperator(f"{where}: CONCATENATION inputs must share the output's "
                                      f"quantization ('{t.name}' differs)")
    if l.attrs.activation != "NONE":
        raise UnsupportedOperator(f"{where}: fused activation on CONCATENATION")
    outer = int(np.prod(y.shape[:axis], dtype=np.int64))
    return Concat(outer, tuple(t.nbytes // outer for t in ins))


def _transpose(g: Graph, l: Layer, where: str) -> Transpose:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    perm = l.attrs.perm
    if sorted(perm) != list(range(len(x.shape))) or tuple(x.shape[p] for p in perm) != y.shape:
        raise UnsupportedOperator(f"{where}: permutation {list(perm)} does not map {list(x.shape)} to {list(y.shape)}")
    return Transpose(x.shape, perm, y.shape)


def _strided_slice(g: Graph, l: Layer, where: str) -> Strided:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    a = l.attrs
    rank = len(x.shape)
    if len(a.begin) != rank:
        raise UnsupportedOperator(f"{where}: begin {list(a.begin)} does not index the input's {rank} axes")
    if x.dtype != y.dtype:
        raise UnsupportedOperator(f"{where}: input {x.dtype} and output {y.dtype} differ")
    axes = []
    for d in range(rank):
        shrink = bool(a.shrink_axis_mask >> d & 1)
        if shrink and a.strides[d] < 0:
            raise UnsupportedOperator(f"{where}: shrinking axis {d} with a negative stride")
        axes.append(slice_axis(x.shape[d], a.begin[d], a.end[d], a.strides[d], bool(a.begin_mask >> d & 1),
                               bool(a.end_mask >> d & 1), shrink))
        if shrink and not 0 <= axes[-1].start < x.shape[d]:  # the one index it keeps must exist
            raise UnsupportedOperator(f"{where}: shrinking axis {d} of {x.shape[d]} at index {a.begin[d]}")
    kept = tuple(len(r) for d, r in enumerate(axes) if not a.shrink_axis_mask >> d & 1)
    if kept != y.shape:
        raise UnsupportedOperator(f"{where}: the slice gives {list(kept)}, the output is {list(y.shape)}")
    st = element_strides(x.shape)
    return Strided(sum(r.start * s for r, s in zip(axes, st)), tuple(len(r) for r in axes),
                   tuple(r.step * s for r, s in zip(axes, st)))


def _depth_space(g: Graph, l: Layer, where: str) -> Strided:
    """DEPTH_TO_SPACE and SPACE_TO_DEPTH (block b): the output walked as (n, h, w, by, bx, c) or
    (n, h, by, w, bx, c), each a fixed step through the input."""
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    b = l.attrs.block
    n, h, w, c = _nhwc(x, where)
    if l.op == "DEPTH_TO_SPACE":
        oc = c // (b * b)
        if c % (b * b) or y.shape != (n, h * b, w * b, oc):
            raise UnsupportedOperator(f"{where}: block {b} does not turn {list(x.shape)} into {list(y.shape)}")
        # out (n, h, by, w, bx, c) <- in (n, h, w, (by * b + bx) * oc + c)
        return Strided(0, (n, h, b, w, b, oc), (h * w * c, w * c, b * oc, c, oc, 1), "depth_to_space")
    if h % b or w % b or y.shape != (n, h // b, w // b, c * b * b):
        raise UnsupportedOperator(f"{where}: block {b} does not turn {list(x.shape)} into {list(y.shape)}")
    # out (n, h, w, by, bx, c) <- in (n, h * b + by, w * b + bx, c)
    return Strided(0, (n, h // b, w // b, b, b, c), (h * w * c, b * w * c, b * c, w * c, c, 1), "space_to_depth")


def _tile(g: Graph, l: Layer, where: str) -> Strided:
    """TILE: each axis walked as (copy, element), the copy a step of 0."""
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    mult = l.attrs.multiples
    if len(mult) != len(x.shape) or any(m < 1 for m in mult) or \
            tuple(d * m for d, m in zip(x.shape, mult)) != y.shape:
        raise UnsupportedOperator(f"{where}: multiples {list(mult)} do not turn {list(x.shape)} into {list(y.shape)}")
    counts, strides = [], []
    for d, m, s in zip(x.shape, mult, element_strides(x.shape)):
        counts += [m, d]
        strides += [0, s]
    return Strided(0, tuple(counts), tuple(strides), "tile")


def _broadcast_to(g: Graph, l: Layer, where: str) -> Strided:
    x, y = g.tensors[l.inputs[0]], g.tensors[l.outputs[0]]
    rank = len(y.shape)
    shape = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    if len(x.shape) > rank or any(d not in (1, t) for d, t in zip(shape, y.shape)):
        raise UnsupportedOperator(f"{where}: cannot broadcast {list(x.shape)} to {list(y.shape)}")
    return Strided(0, tuple(y.shape), tuple(0 if d == 1 else s for d, s in zip(shape, element_strides(shape))),
                   "broadcast_to")


LOWERINGS = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "FULLY_CONNECTED": _fc, "TRANSPOSE_CONV": _transpose_conv, "BATCH_MATMUL": _batch_matmul,
    "ADD": _add, "SUB": _add, "SQUARED_DIFFERENCE": _squared_difference, "PRELU": _prelu, "MUL": _mul, "MAXIMUM": _min_max, "MINIMUM": _min_max, "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool,
    "MEAN": _mean, "SUM": _sum, "SOFTMAX": _softmax, "LOG_SOFTMAX": _log_softmax, "L2_NORMALIZATION": _l2_norm, "LOGISTIC": _logistic, "TANH": _float_lookup, "EXP": _float_lookup, "LOG": _float_lookup,
    "RSQRT": _float_lookup, "SQRT": _sqrt, "NEG": _neg, "HARD_SWISH": _hard_swish,
    "LEAKY_RELU": _leaky_relu, "RESIZE_NEAREST_NEIGHBOR": _resize_nearest, "RESIZE_BILINEAR": _resize_bilinear, "ABS": _abs,
    "RELU": _requantize_act, "RELU6": _requantize_act, "RELU_N1_TO_1": _requantize_act,
    "RELU_0_TO_1": _requantize_act, "QUANTIZE": _quantize,
    "DEQUANTIZE": _dequantize, "RESHAPE": _copy, "SQUEEZE": _copy, "PAD": _pad,
    "CONCATENATION": _concat, "TRANSPOSE": _transpose, "STRIDED_SLICE": _strided_slice, "SLICE": _strided_slice,
    "GATHER": _gather, "GATHER_ND": _gather_nd, "PACK": _pack, "DEPTH_TO_SPACE": _depth_space, "SPACE_TO_DEPTH": _depth_space,
    "TILE": _tile, "BROADCAST_TO": _broadcast_to, "EXPAND_DIMS": _copy, "PADV2": _pad, "MIRROR_PAD": _mirror_pad, "SPACE_TO_BATCH_ND": _space_batch,
    "BATCH_TO_SPACE_ND": _space_batch, "REDUCE_MAX": _reduce, "REDUCE_MIN": _reduce,
    "ARG_MAX": _reduce, "ARG_MIN": _reduce, "REQUANT_SHIFT": _rescale,
    "INTEGER_SOFTMAX": _int_softmax, "INTEGER_RMS_NORM": _int_rms_norm, "INTEGER_NO_NORM": _int_no_norm, "UNIDIRECTIONAL_SEQUENCE_LSTM": lower_lstm, "SVDF": lower_svdf,
}

Kernel = (Conv | TransposeConv | BatchMatMul | FullyConnected | Add | Mul | MinMax | Prelu | Pool | Mean | Softmax | LogSoftmax | L2Norm | Lookup | HardSwish
          | Slopes | Sigmoid16 | Softmax16 | Requantize | Quantize | Dequantize | TableSoftmax | Copy | Pad | AxisGather | Concat | Gather | Reduce | Transpose | Strided | ResizeNearest | ResizeBilinear | ResizeLinear | IntAdd | IntRescale
          | IntSoftmax | IntRmsNorm | IntNoNorm | IntReduce | IntHardswish | Offset | Lstm | Svdf)


WEIGHTED = (Conv, TransposeConv, FullyConnected)  # kernels whose constant weights and bias are not data inputs


def data_inputs(layer: Layer, kernel: Kernel) -> list[int]:
    """A layer's activation operands, in the order the kernels take them (an LSTM's: its input;
    its weights are constants and its state is not in the arena)."""
    if isinstance(kernel, (Lstm, Svdf)):
        return [layer.inputs[0]]
    return [i for i in layer.inputs if i >= 0 and not (isinstance(kernel, WEIGHTED) and i in (kernel.weights, kernel.bias))]


def _scales_of(graph: Graph, layer: Layer) -> str:
    """The quantized tensors of a layer but its biases, with their scales (the largest of
    per-channel ones), to say which scale made a rescale factor unrepresentable."""
    named = []
    for role, ids in (("input", layer.inputs), ("output", layer.outputs)):
        for i in ids:
            t = graph.tensors[i] if i >= 0 else None
            if t is not None and t.quant is not None and len(t.quant.scale) and t.dtype not in ("int32", "int64"):
                named.append(f"{role} '{t.name}' {max(t.quant.scale):g}")
    return f" (scales: {', '.join(named)})" if named else ""


def lower(graph: Graph, layer: Layer) -> Kernel:
    where = _where(graph, layer)
    try:
        return LOWERINGS[layer.op](graph, layer, where)
    except RescaleError as e:
        raise UnsupportedOperator(f"{where}: {e}{_scales_of(graph, layer)}") from None
    except ValueError as e:  # parameters the integer kernel cannot represent
        raise UnsupportedOperator(f"{where}: {e}") from None


def lower_graph(graph: Graph) -> tuple[Kernel, ...]:
    return tuple(lower(graph, layer) for layer in graph.layers)


def activation_dtype(kernel: Kernel) -> str:
    """The activation type a kernel computes on ("int16" for the 16x8 kernels, "int32" for an integer
    graph's requantization of raw int32 values, else "int8")."""
    return getattr(kernel, "dtype", "int8")


def macs(kernel: Kernel) -> int:
    return getattr(kernel, "macs", 0)

