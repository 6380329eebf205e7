"""The typed intermediate representation every reader produces.

Frozen records only: passes build new graphs with ``dataclasses.replace``.
Tensors are referenced by their index in ``Graph.tensors``; a layer's
``inputs`` hold only data operands (shape/axes/paddings constants that a
reader understood are folded into the layer's typed attributes).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Union

import numpy as np

def name_text(name: str) -> str:
    """A name taken from the file system as text: bytes that are not UTF-8 (kept by Python as
    surrogate escapes, which no text file can hold) become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


DTYPE_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float32": 4}
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


@dataclass(frozen=True, slots=True)
class Quant:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per channel."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: Quant | None = None
    data: np.ndarray | None = field(default=None, compare=False, repr=False)
    # state kept across inferences (a recurrent layer's hidden and cell state): outside the
    # arena, zero at start and after inference_reset_state()
    variable: bool = False

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def state_fill(self) -> int:
        """The stored value a variable tensor starts from and is reset to: the real value 0
        (an int8 tensor's zero point: TFLite resets int8 variable tensors so)."""
        return self.quant.zero_point[0] if self.dtype == "int8" and self.quant is not None else 0

    @property
    def elements(self) -> int:
        return math.prod(self.shape)  # exact: numpy's int64 product wraps on absurd shapes

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]

    @property
    def scale(self) -> float:
        return self.quant.scale[0]

    @property
    def zero_point(self) -> int:
        return self.quant.zero_point[0]


# ---- typed layer attributes -------------------------------------------------

# ``float_requant``: requantize as onnxruntime's MLAS kernels do for QLinearConv / QLinearMatMul /
# QGemm: y = zp + round_half_even(float32(acc) * ((in_scale * w_scale) / out_scale)), every step
# in float32, clamped before rounding. (TFLite's fixed-point multiplier differs from it by one
# step on some accumulators.)

@dataclass(frozen=True, slots=True)
class IntRequant:
    """Requantization of integer graphs (NEMO/DORY, Quantlab, Deeploy ``RequantShift``), exact in
    integers: stored = clamp(floor((acc * mul[c] + add[c]) / 2^shift), lo, hi).

    ``acc`` is the layer's true integer accumulator; rounding (Deeploy adds 2^(shift-1)) and the
    output's zero point (-128 for unsigned activations stored as int8) are folded into ``add``,
    and ``lo``/``hi`` are in the stored domain. One value in ``mul``/``add`` applies to every channel.
    """
    mul: tuple[int, ...]
    add: tuple[int, ...]
    shift: int
    lo: int
    hi: int



@dataclass(frozen=True, slots=True)
class Conv2D:
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: str  # "SAME" | "VALID" | "EXPLICIT" (then ``pads`` holds it)
    activation: str
    pads: tuple[int, int, int, int] | None = None  # top, bottom, left, right
    requant: IntRequant | None = None  # integer graphs: replaces the scale-derived multipliers
    float_requant: bool = False  # QDQ graphs: onnxruntime's float32 requantization (see FLOAT_REQUANT)
    bias32: bool = False  # the options' quantized_bias_type is INT32 (a 16x8 layer's int32 bias and accumulator)


@dataclass(frozen=True, slots=True)
class DepthwiseConv2D:
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: str
    activation: str
    depth_multiplier: int
    pads: tuple[int, int, int, int] | None = None
    requant: IntRequant | None = None  # integer graphs: replaces the scale-derived multipliers
    float_requant: bool = False


@dataclass(frozen=True, slots=True)
class TransposeConv2D:
    """TRANSPOSE_CONV: each input pixel scatters its kernel-sized window onto the output, ``stride``
    apart; the padding is the one a convolution from the output back to the input would have."""
    stride: tuple[int, int]
    padding: str
    activation: str
    bias32: bool = False  # the options' quantized_bias_type is INT32 (a 16x8 layer's int32 bias and accumulator)


@dataclass(frozen=True, slots=True)
class MatRequant:
    """An integer graph's scaling of a matrix product, element by element (Deeploy's MatMul / Gemm
    then an Add of a constant matrix and a RequantShift whose constants may vary per batch, row or
    column): stored = clamp(floor(((alpha * acc + addend[e]) * mul[e] + add[e]) / 2^shift), lo, hi).
    Each vector is indexed by its (batch, row, column) strides (0 along an axis it is broadcast
    over); rounding and the output's zero point are folded into ``add`` as IntRequant does."""
    alpha: int
    addend: tuple[int, ...]  # () for none
    addend_strides: tuple[int, int, int]
    mul: tuple[int, ...]
    mul_strides: tuple[int, int, int]
    add: tuple[int, ...]
    add_strides: tuple[int, int, int]
    shift: int
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class BatchMatMul:
    """BATCH_MATMUL: out[..., i, j] = sum over k of x[..., i, k] * y[..., k, j] (adj_x / adj_y: that
    operand's last two axes swapped), batch axes broadcast. ``requant``: an integer graph's own
    scaling (MatRequant) instead of the scales' product."""
    adj_x: bool
    adj_y: bool
    requant: MatRequant | None = None


@dataclass(frozen=True, slots=True)
class FullyConnected:
    activation: str
    keep_num_dims: bool
    requant: IntRequant | None = None
    float_requant: bool = False
    bias32: bool = False  # the options' quantized_bias_type is INT32 (a 16x8 layer's int32 bias and accumulator)


@dataclass(frozen=True, slots=True)
class Pool2D:
    filter: tuple[int, int]
    stride: tuple[int, int]
    padding: str
    activation: str
    requant: IntRequant | None = None  # AVERAGE_POOL_2D of integer graphs: requantizes the window's sum
    pads: tuple[int, int, int, int] | None = None  # padding "EXPLICIT": top, bottom, left, right
    # AVERAGE_POOL_2D of QDQ graphs: onnxruntime's float average (QLinearAveragePool), which rounds
    # after adding a zero point: the stored one plus this (onnxruntime on x86-64 runs every 8-bit
    # activation as uint8: 128)
    float_requant: int | None = None


@dataclass(frozen=True, slots=True)
class Elementwise:
    activation: str
    pot_scale_int16: bool = False  # ADD / SUB options: int16 power-of-two scales take a shift-only kernel


@dataclass(frozen=True, slots=True)
class IntegerAdd:
    """ADD of an integer graph over the inputs' true values (NEMO's per-branch scaling, Deeploy's
    Add + RequantShift), in one or two rounding stages (NEMO requantizes a sum once more):
    s = floor((a * a_mul + b * b_mul + add) / 2^shift);
    stored = clamp(floor((s * post_mul + post_add) / 2^post_shift), lo, hi)."""
    a_mul: int
    b_mul: int
    add: int
    shift: int
    lo: int
    hi: int
    post_mul: int = 1
    post_add: int = 0
    post_shift: int = 0


@dataclass(frozen=True, slots=True)
class Rescale:
    """REQUANT_SHIFT: an integer graph's requantization of an activation on its own."""
    requant: IntRequant


@dataclass(frozen=True, slots=True)
class IntegerSoftmax:
    """Deeploy's iSoftmax over ``axis`` (the IR's axis): per row, each difference from the row's
    maximum split into a power of two and a remainder p (``log2``: the input steps in ln 2), the
    remainder's exponential as coeff_a * (p + coeff_b)^2 + coeff_c shifted down by that power, and
    each share of the row's sum scaled to n_levels - 1."""
    axis: int
    coeff_a: int
    coeff_b: int
    coeff_c: int
    log2: int
    n_levels: int


@dataclass(frozen=True, slots=True)
class IntegerRmsNorm:
    """Deeploy's iRMSNorm over ``axis`` (the IR's axis): each value times its weight (one per
    position along the axis), over the integer root mean square of its row, divided by 2^log2_d.
    Inputs: x, the int32 weights."""
    axis: int
    log2_d: int


@dataclass(frozen=True, slots=True)
class IntegerNoNorm:
    """Deeploy's iNoNorm: (x * weight + bias) * mul / 2^log2_d, element by element (the weights and
    the bias broadcast against x). Inputs: x, the int8 weights, the int32 bias."""
    mul: int
    log2_d: int


@dataclass(frozen=True, slots=True)
class IntegerReduce:
    """SUM / MEAN of an integer graph (Deeploy's ReduceSum, ReduceMean): the input's true values
    summed over ``axes`` in int32; MEAN divides the sum by the count, rounding half up by a
    shift when the count is a power of two, else half away from zero (Deeploy's generic
    kernel). The output holds the kept axes in the order ``kept`` lists them (any reshape of
    that order: the layout the output value needs is written directly)."""
    axes: tuple[int, ...]
    kept: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IntegerHardswish:
    """HARD_SWISH of an integer graph (Deeploy's iHardswish) on the input's true values:
    h = x * (clamp(x + three, 0, six) * one_over_six) in int32, then ``requant`` (a following
    RequantShift folded in; without one, an identity clamped to int32: h is the output)."""
    one_over_six: int
    three: int
    six: int
    requant: IntRequant


@dataclass(frozen=True, slots=True)
class Mean:
    axes: tuple[int, ...]
    keep_dims: bool
    float_requant: bool = False  # QDQ GlobalAveragePool: onnxruntime's float32 requantization of the sum


@dataclass(frozen=True, slots=True)
class Softmax:
    beta: float
    onnxruntime: bool = False  # QLinearSoftmax's arithmetic (a float32 exponential table), not TFLite's


@dataclass(frozen=True, slots=True)
class Resize:
    """RESIZE_NEAREST_NEIGHBOR: the output's height and width (the constant size input), and how
    output pixels map to input ones."""
    size: tuple[int, int] = (0, 0)
    align_corners: bool = False
    half_pixel_centers: bool = False
    # the input row and column of every output row and column, when the model's rule is not
    # TFLite's (an ONNX Resize: its coordinate transformation and nearest mode, as its reader computed)
    sources: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # RESIZE_BILINEAR as an ONNX linear Resize runs it in float32 (a QDQ graph's DequantizeLinear,
    # Resize, QuantizeLinear): per output row and column its two inputs and their float32 weights
    # (lower, upper, weight of the upper, weight of the lower), as its reader computed them
    blend: tuple[tuple[tuple[int, int, float, float], ...], tuple[tuple[int, int, float, float], ...]] | None = None


@dataclass(frozen=True, slots=True)
class LeakyRelu:
    alpha: float  # the slope below zero
    onnxruntime: bool = False  # QLinearLeakyRelu's table (float32 dequantize, slope, quantize half to even)


@dataclass(frozen=True, slots=True)
class Pad:
    paddings: tuple[tuple[int, int], ...]
    value: int | None = None  # PADV2: the stored value it pads with (PAD: the output's zero point)
    mirror: str | None = None  # MIRROR_PAD: "REFLECT" (the edge not repeated) or "SYMMETRIC" (repeated)


@dataclass(frozen=True, slots=True)
class Gather:
    """GATHER with constant indices: along ``axis``, the input slices the indices name."""
    axis: int
    indices: tuple[int, ...]
    indices_shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GatherNd:
    """GATHER_ND with constant indices: each index row (the indices' last axis, ``depth`` long)
    names a slice of the input's leading ``depth`` axes."""
    indices: tuple[int, ...]  # the rows, flattened
    indices_shape: tuple[int, ...]  # (..., depth)


@dataclass(frozen=True, slots=True)
class Block:
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH: the side of the square block moved between space and depth."""
    block: int


@dataclass(frozen=True, slots=True)
class SpaceBatch:
    """SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND on NHWC: the block's height and width, and the rows
    and columns cropped from the output ((top, bottom), (left, right); SPACE_TO_BATCH_ND: none, its
    padding read as a PAD before it)."""
    block: tuple[int, int]
    crops: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))


@dataclass(frozen=True, slots=True)
class Tile:
    multiples: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Axis:
    """UNPACK: the axis it splits along (read as one slice per output)."""
    axis: int


@dataclass(frozen=True, slots=True)
class Reduce:
    """REDUCE_MAX / REDUCE_MIN / ARG_MAX / ARG_MIN over constant axes."""
    axes: tuple[int, ...]
    keep_dims: bool = False


@dataclass(frozen=True, slots=True)
class Concat:
    axis: int
    activation: str


@dataclass(frozen=True, slots=True)
class Transpose:
    perm: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StridedSlice:
    """STRIDED_SLICE (and SLICE, as begin, begin + size, stride 1): per axis the constant begin, end
    and stride, with TFLite's masks (bit i: axis i takes its whole extent from its start / to its
    end; shrink: the axis is dropped from the output)."""
    begin: tuple[int, ...]
    end: tuple[int, ...]
    strides: tuple[int, ...]
    begin_mask: int = 0
    end_mask: int = 0
    shrink_axis_mask: int = 0


# UNIDIRECTIONAL_SEQUENCE_LSTM's inputs by position (TFLite's lstm::full layout, which the IR keeps)
LSTM_INPUT_WEIGHTS, LSTM_RECURRENT_WEIGHTS = (1, 2, 3, 4), (5, 6, 7, 8)  # input, forget, cell, output gate
LSTM_PEEPHOLE = {0: 9, 1: 10, 3: 11}  # gate -> its peephole weights (the cell gate has none)
LSTM_BIASES, LSTM_PROJECTION, LSTM_PROJECTION_BIAS = (12, 13, 14, 15), 16, 17
LSTM_HIDDEN, LSTM_CELL = 18, 19
LSTM_LAYER_NORM = (20, 21, 22, 23)


@dataclass(frozen=True, slots=True)
class Lstm:
    """UNIDIRECTIONAL_SEQUENCE_LSTM in TFLite's integer form (int8 input and output, int8 weights,
    int32 biases, int8 hidden and int16 cell state). Inputs at TFLite's positions (-1: omitted):
    x; the input and recurrent weights of the input, forget, cell and output gates (1-8); the
    int16 peephole weights (9-11); the gate biases (12-15); the projection weights and bias
    (16, 17); the output (hidden) and the cell state (18, 19: variable tensors, updated in place);
    with layer normalization, the gates' int16 coefficients (20-23)."""
    cell_clip: float
    proj_clip: float
    time_major: bool
    hidden: Quant  # the effective hidden scale intermediate: the gated tanh's quantization
    # layer normalization: the quantization of each gate's sum before it is normalized
    # (intermediates 0-3; the input gate's too in a CIFG LSTM, which LiteRT reads); None without
    gate_sums: tuple[Quant, ...] | None = None


@dataclass(frozen=True, slots=True)
class Svdf:
    """SVDF in TFLite's integer form. Inputs: x, the int8 feature weights, the int16 time weights,
    the int32 bias (-1: none) and the int16 activation state (a variable tensor, updated in
    place: each filter's last ``memory`` feature values)."""
    rank: int  # (its fused activation is RELU, as LiteRT's integer kernel requires: the output clamp)


@dataclass(frozen=True, slots=True)
class NoAttrs:
    """Ops fully described by their tensors (RESHAPE, RELU, QUANTIZE, ...)."""


Attrs = Union[Conv2D, DepthwiseConv2D, TransposeConv2D, BatchMatMul, FullyConnected, Pool2D, Elementwise, IntegerAdd, Rescale,
              IntegerSoftmax, IntegerRmsNorm, IntegerNoNorm, IntegerReduce, IntegerHardswish,
              Mean, Softmax, Resize, LeakyRelu, Pad, Gather, GatherNd, Block, SpaceBatch, Tile, Axis, Reduce, Concat, Transpose, StridedSlice, Lstm, Svdf, NoAttrs]


@dataclass(frozen=True, slots=True)
class Layer:
    index: int
    op: str  # TFLite builtin name, e.g. "CONV_2D"
    inputs: tuple[int, ...]  # tensor indices; -1 marks an absent optional operand
    outputs: tuple[int, ...]
    attrs: Attrs
    name: str


@dataclass(frozen=True, slots=True)
class Source:
    """What the reader decided for a graph's edges. ``input_perms`` / ``output_perms`` turn an array
    in the model file's own layout into the engine's (``np.transpose(x, perm)`` then a reshape to the
    engine tensor's shape; None: the same layout)."""
    format: str  # "tflite" | "onnx-integer" | "onnx-qdq"
    input_layout: str = "nhwc"
    output_layout: str = "nhwc"
    input_perms: tuple[tuple[int, ...] | None, ...] = ()
    output_perms: tuple[tuple[int, ...] | None, ...] = ()
    notes: tuple[str, ...] = ()  # what the reader decided that a user should know
    input_shapes: tuple[tuple[int, ...], ...] = ()  # in the model file's own layout
    output_shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class FileEdges:
    """The model file's own inputs and outputs (what a reference interpreter runs) when the graph
    is a part of it (--inputs / --outputs / --io int8)."""
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    # tensors the file does not hold (--io uint8's edges): (tensor, the file's tensor, what is added)
    derived: tuple[tuple[int, int, int], ...] = ()
    # an ONNX graph's cut: the file's own edges as the reader laid them out, and each cut edge as
    # the file names it, (tensor, value name, the value's rank in the file: its layout)
    source: "Source | None" = None
    named: tuple[tuple[int, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Graph:
    name: str
    tensors: tuple[Tensor, ...]
    layers: tuple[Layer, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    source: Source | None = None
    file_edges: FileEdges | None = None  # set when the graph is cut from its file

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]

    def activations(self) -> list[int]:
        """Indices of every tensor of the arena (neither constant nor state) a layer reads or
        writes, in first-use order."""
        seen: dict[int, None] = {}
        for t in self.inputs:
            seen.setdefault(t, None)
        for layer in self.layers:
            for t in (*layer.inputs, *layer.outputs):
                if t >= 0 and not self.tensors[t].is_const and not self.tensors[t].variable:
                    seen.setdefault(t, None)
        return list(seen)

    def file_view(self) -> "Graph":
        """The graph with its model file's own inputs, outputs and their layouts (itself when it
        is not cut): what a reference interpreter runs."""
        edges = self.file_edges
        if edges is None:
            return self
        return replace(self, inputs=edges.inputs, outputs=edges.outputs, file_edges=None,
                       source=edges.source if edges.source is not None else self.source)

    def state(self) -> list[int]:
        """Indices of the variable tensors the layers keep across inferences, in first-use order."""
        return list(dict.fromkeys(t for layer in self.layers for t in layer.inputs
                                  if t >= 0 and self.tensors[t].variable))
