"""In-place rules: which layer outputs may reuse the bytes of an input, and at what scratch cost.

Each rule is a small named function ``(graph, position, dies_here, lanes) -> Reuse | None``;
``RULES`` is tried in order for every layer. ``dies_here(t)`` says whether the
bytes of tensor t (with everything already aliased to them) are read for the
last time by this layer, so overwriting them loses nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .ir import DTYPE_BYTES, Graph

# Same-shape ops whose kernels read element i before writing element i.
UNARY_ELEMENTWISE = ("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "HARD_SWISH", "LEAKY_RELU", "ABS", "TANH", "EXP", "LOG", "RSQRT", "SQRT", "NEG",
                     "QUANTIZE", "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION",
                     # a row's maximum, sum or mean square is taken before any of it is written
                     "INTEGER_SOFTMAX", "INTEGER_RMS_NORM", "INTEGER_NO_NORM")
ZERO_COPY = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
ELEMENTWISE = ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "PRELU", *UNARY_ELEMENTWISE)
CONVERTS = ("QUANTIZE", "DEQUANTIZE")


@dataclass(frozen=True, slots=True)
class Reuse:
    rule: str
    layer: int  # position in graph.layers
    output: int  # tensor that takes over ...
    input: int  # ... this tensor's bytes
    scratch_bytes: int = 0  # temporary buffer the in-place kernel needs during the layer


def zero_copy_reshape(graph: Graph, k: int, dies_here, lanes: int = 1) -> Reuse | None:
    """RESHAPE/SQUEEZE only reinterpret bytes: the output is the input (always legal: nobody writes either)."""
    layer = graph.layers[k]
    src = layer.inputs[0]
    if layer.op in ZERO_COPY and not graph.tensors[src].is_const:
        return Reuse("zero-copy-reshape", k, layer.outputs[0], src)
    return None


def elementwise_in_place(graph: Graph, k: int, dies_here, lanes: int = 1) -> Reuse | None:
    """ADD/SUB/MUL (and unary elementwise ops) write onto a full-shape input of the output's type
    (int8, or int16) that dies here: element i is read before it is written."""
    layer = graph.layers[k]
    if layer.op not in ELEMENTWISE:
        return None
    out = graph.tensors[layer.outputs[0]]
    for src in layer.inputs:
        t = graph.tensors[src] if src >= 0 else None
        if t is not None and not t.is_const and t.shape == out.shape and t.dtype == out.dtype and t.dtype in ("int8", "int16") \
                and dies_here(src):
            return Reuse("elementwise-in-place", k, layer.outputs[0], src)
    return None


def depthwise_in_place(graph: Graph, k: int, dies_here, lanes: int = 1) -> Reuse | None:
    """Depthwise conv over an input that dies here (MCUNetV2, any stride): each channel (or group
    of ``lanes`` channels, for kernels computing that many at once when the channels divide
    evenly; none for a kernel that writes over its input row by row itself: ``lanes`` 0) is
    computed into a scratch plane, then written over those channels of the input
    (output pixel p, channel c sits at byte p*C + c, which held input channel c: already
    consumed, and no other output channel reads it). The output must not outgrow the input."""
    layer = graph.layers[k]
    if layer.op != "DEPTHWISE_CONV_2D":
        return None
    src, a = layer.inputs[0], layer.attrs
    x, y = graph.tensors[src], graph.tensors[layer.outputs[0]]
    if (a.depth_multiplier != 1 or len(x.shape) != 4 or x.shape[0] != 1 or x.shape[3] < 2
            or y.shape[3] != x.shape[3] or y.nbytes > x.nbytes or not dies_here(src)):
        return None
    group = 0 if lanes == 0 else lanes if y.shape[3] % lanes == 0 else 1  # 0: the kernel needs no plane
    return Reuse("depthwise-in-place", k, layer.outputs[0], src,
                 scratch_bytes=y.shape[1] * y.shape[2] * group * DTYPE_BYTES[y.dtype])


def convert_in_place(graph: Graph, k: int, dies_here, lanes: int = 1) -> Reuse | None:
    """QUANTIZE to a type no wider (float32 -> int8 / int16, int16 -> int8, uint8 <-> int8) and DEQUANTIZE over an
    input that dies here: the kernels walk so that every element is read before its bytes are
    overwritten (QUANTIZE forwards: output element i sits in bytes input element i already left;
    DEQUANTIZE backwards). A widening QUANTIZE (int8 -> int16) walks forwards too: not in place."""
    layer = graph.layers[k]
    src = layer.inputs[0]
    x, y = graph.tensors[src], graph.tensors[layer.outputs[0]]
    narrower = DTYPE_BYTES[y.dtype] <= DTYPE_BYTES[x.dtype]
    if layer.op in CONVERTS and x.dtype != y.dtype and (narrower or layer.op == "DEQUANTIZE") \
            and not x.is_const and dies_here(src):
        return Reuse("convert-in-place", k, layer.outputs[0], src)
    return None


RULES: list[tuple[str, Callable]] = [
    ("zero-copy-reshape", zero_copy_reshape),
    ("elementwise-in-place", elementwise_in_place),
    ("depthwise-in-place", depthwise_in_place),
    ("convert-in-place", convert_in_place),
]


def plan_in_place(graph: Graph, enabled: bool = True, keep: set[int] = frozenset(),
                  lanes: int | dict[int, int] = 1, planeless: set[int] = frozenset(),
                  readonly: frozenset = frozenset()) -> tuple[Reuse, ...]:
    """Apply the rules layer by layer; only zero-copy reshapes when ``enabled`` is False.
    Layers in ``keep`` never overwrite their input (run tile by tile from L1 in an order where a
    later tile's halo would read rows an earlier tile already replaced). ``lanes``: the channels
    each layer's kernel computes at once (per layer, or one count for all); ``planeless``: layers
    that need no scratch plane to write over their input (tiles: their L1 output is the plane);
    ``readonly``: tensors nothing may write over or alias (an input the application keeps)."""
    n = len(graph.layers)
    last_read: dict[int, int] = {}
    for k, layer in enumerate(graph.layers):
        for t in layer.inputs:
            if t >= 0:
                last_read[t] = k
    for t in graph.outputs:
        last_read[t] = n  # read by the caller after the run
    owner: dict[int, int] = {}
    group_last: dict[int, int] = {}  # owner -> last op reading any member

    def root(t: int) -> int:
        while t in owner:
            t = owner[t]
        return t

    def last_of(t: int) -> int:
        r = root(t)
        return group_last.get(r, last_read.get(r, -1))

    reuses = []
    rules = RULES if enabled else RULES[:1]
    for k in range(n):
        if k in keep:
            continue

        def dies_here(t: int, k=k) -> bool:
            return last_of(t) == k
        for _, rule in rules:
            r = rule(graph, k, dies_here, lanes.get(k, 1) if isinstance(lanes, dict) else lanes)
            if r is not None and root(r.input) in readonly:
                r = None
            if r is not None and k in planeless:
                r = Reuse(r.rule, r.layer, r.output, r.input)
            if r is not None:
                src_root = root(r.input)
                group_last[src_root] = max(last_of(r.input), last_read.get(r.output, k))
                owner[r.output] = src_root
                reuses.append(r)
                break
    return tuple(reuses)


def in_place_rules(op: str) -> tuple[str, ...]:
    """The in-place rules that may let an op's output take over an input's bytes (``deploy ops``)."""
    return tuple(rule for rule, ops in (("zero-copy-reshape", ZERO_COPY), ("elementwise-in-place", ELEMENTWISE),
                                        ("depthwise-in-place", ("DEPTHWISE_CONV_2D",)), ("convert-in-place", CONVERTS))
                 if op in ops)
