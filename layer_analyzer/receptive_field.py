"""Receptive fields of a patch stage: for an output region of the stage, the region of every
tensor inside it, the per-patch buffer sizes and the MACs a patch grid recomputes.

A patch stage is a run of ops ``start..end`` from the network's first spatial op on, all
of them spatial (convolutions, depthwise convolutions, pooling, same-shape ADD/MUL, and the
NCHW -> NHWC transpose or float quantize a model may open with). Its only output is the one
tensor those ops produce that a later op (or the caller) reads; its inputs are full tensors
(model inputs, or outputs of the ops before it, which run whole).
The stage output is cut into a grid of ``R x C`` patches (``ceil(H/R)`` rows each, the last
row of patches smaller); each patch runs every stage op on just the region it needs.

Regions are separable: the rows a patch needs depend only on its patch row, the columns
only on its patch column. So a grid is analysed per axis (``AxisPlan``) and a pair of axis
plans gives every buffer size (max rows x max cols x a pixel's bytes) and the MACs (sum of rows x
sum of cols x MACs per output pixel).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from network_parser.ir import DTYPE_BYTES

from . import kernels as K


@dataclass(frozen=True, slots=True)
class Window:
    """One axis of a layer: output index o reads inputs ``o*stride - pad + i*dil``, i < k."""
    k: int = 1
    stride: int = 1
    dil: int = 1
    pad: int = 0
    in_size: int = 1

    def need(self, lo: int, hi: int) -> tuple[int, int]:
        """The input interval [lo, hi) that output rows [lo, hi) read, clipped to the input."""
        a = lo * self.stride - self.pad
        b = (hi - 1) * self.stride - self.pad + (self.k - 1) * self.dil + 1
        return max(a, 0), min(b, self.in_size)


@dataclass(frozen=True, slots=True)
class SpatialLayer:
    layer: int
    inputs: tuple[int, ...]  # activation operands
    output: int
    rows: Window
    cols: Window
    out_h: int
    out_w: int
    channels: int  # of the output
    macs_per_pixel: int


# the kernel records that can run patch by patch (spatial_layer decides per layer)
SPATIAL = (K.Transpose, K.Quantize, K.Conv, K.Pool, K.Add, K.Mul, K.IntAdd, K.MinMax)


def spatial_layer(kernel, k: int, inputs: tuple[int, ...], output: int, out_shape: tuple) -> SpatialLayer | None:
    """The spatial view of a lowered kernel, or None when it cannot run patch by patch."""
    if not isinstance(kernel, SPATIAL):
        return None
    if getattr(kernel, "float_avg", None) is not None:
        return None  # onnxruntime's float average pooling runs whole
    if K.activation_dtype(kernel) == "int8" and (getattr(kernel, "act_max", 0) > 127 or getattr(kernel, "act_min", 0) < -128):
        return None  # an integer graph's raw int32 output: patch buffers hold the layers' own types
    match kernel:
        case K.Transpose(perm=(0, 2, 3, 1)) if len(kernel.in_shape) == 4 and kernel.in_shape[0] == 1:
            _, c, h, w = kernel.in_shape  # NCHW -> NHWC: a patch reads its rows and columns of every plane
            return SpatialLayer(k, inputs, output, Window(in_size=h), Window(in_size=w), h, w, c, 0)
        case K.Quantize() if len(out_shape) == 4 and out_shape[0] == 1:
            _, h, w, c = out_shape
            return SpatialLayer(k, inputs, output, Window(in_size=h), Window(in_size=w), h, w, c, 0)
        case K.Conv(batch=1) if not kernel.depthwise or kernel.depth_multiplier == 1:
            rows = Window(kernel.k_h, kernel.stride_h, kernel.dil_h, kernel.pad_t, kernel.in_h)
            cols = Window(kernel.k_w, kernel.stride_w, kernel.dil_w, kernel.pad_l, kernel.in_w)
            return SpatialLayer(k, inputs, output, rows, cols, kernel.out_h, kernel.out_w, kernel.out_c,
                                K.macs(kernel) // (kernel.out_h * kernel.out_w))
        case K.Pool(batch=1):
            rows = Window(kernel.f_h, kernel.stride_h, 1, kernel.pad_t, kernel.in_h)
            cols = Window(kernel.f_w, kernel.stride_w, 1, kernel.pad_l, kernel.in_w)
            return SpatialLayer(k, inputs, output, rows, cols, kernel.out_h, kernel.out_w, kernel.channels,
                                kernel.f_h * kernel.f_w * kernel.channels)
        case K.Add() | K.Mul() | K.IntAdd() | K.MinMax() if kernel.view.dense and kernel.view.shape[0] == 1 \
                and len(inputs) == 2:
            _, h, w, c = kernel.view.shape
            return SpatialLayer(k, inputs, output, Window(in_size=h), Window(in_size=w), h, w, c, c)
    return None


@dataclass(frozen=True, slots=True)
class Stage:
    """Ops start..end, their tensors and how long each lives inside one patch."""
    start: int
    end: int
    layers: tuple[SpatialLayer, ...]
    inputs: tuple[int, ...]  # full tensors the stage reads (model inputs, outputs of the ops before it)
    output: int  # the one full tensor the stage writes
    pixel_bytes: dict  # tensor -> bytes of one of its pixels (channels x element size)
    span: dict  # patch tensor -> (first op, last op) inside the stage

    @property
    def out_h(self) -> int:
        return self.layers[-1].out_h  # the stage ends with the op writing its output

    @property
    def out_w(self) -> int:
        return self.layers[-1].out_w

    @property
    def patch_tensors(self) -> tuple[int, ...]:
        """Tensors held per patch (everything the stage produces; the output's patch is then
        copied into the full tensor)."""
        return tuple(s.output for s in self.layers)


@dataclass(frozen=True, slots=True)
class AxisPlan:
    """One axis of a patch grid: per patch index, every tensor's interval on that axis."""
    parts: int  # patches along the axis
    size: int  # stage-output extent of a patch (the last may be smaller)
    intervals: tuple  # per patch: {tensor: (lo, hi)}

    def largest(self, t: int) -> int:
        return max(hi - lo for iv in self.intervals for lo, hi in [iv[t]])

    def total(self, t: int) -> int:
        return sum(iv[t][1] - iv[t][0] for iv in self.intervals)


@dataclass(frozen=True, slots=True)
class StageEnd:
    """A stage before it is built: what the split search ranks it by."""
    end: int
    input_count: int  # full tensors the stage reads: the first this many of Stages.inputs
    input_bytes: int  # ... and their bytes
    output: int
    length: int  # its ops


@dataclass(frozen=True)
class Spatial:
    """What every stage search of one network shares: each op's spatial view (None where it
    cannot run patch by patch) and the ops reading each tensor, in order."""
    views: tuple
    readers: dict

    @classmethod
    def of(cls, graph, kernels, data_inputs) -> Spatial:
        readers: dict[int, list[int]] = {}
        for k, layer in enumerate(graph.layers):
            for t in layer.inputs:
                readers.setdefault(t, []).append(k)
        views = tuple(spatial_layer(kern, k, tuple(data_inputs(layer, kern)), layer.outputs[0],
                                    graph.tensors[layer.outputs[0]].shape) if len(layer.outputs) == 1 else None
                      for k, (layer, kern) in enumerate(zip(graph.layers, kernels)))
        return cls(views, readers)


class Stages:
    """Every run of ops from op ``start`` (by default the network's first spatial op) that can run
    patch by patch, found in one pass over the ops (O(ops + edges)); a ``Stage`` and its
    per-tensor tables are built only for the ends asked for, in O(its ops): a network of n ops
    has n stage ends but their stages hold ~n^2 / 2 tensors together. ``data_inputs(layer,
    kernel)`` gives a layer's activation operands; ``spatial``: the network's views, when a
    search builds the stages of many starts."""

    def __init__(self, graph, kernels, data_inputs, start: int | None = None, spatial: Spatial | None = None):
        self.graph = graph
        spatial = spatial or Spatial.of(graph, kernels, data_inputs)
        self.readers = spatial.readers  # tensor -> the ops reading it, in order
        outputs = set(graph.outputs)
        views = spatial.views
        # the stage starts at the first op that can run patch by patch; the ops before it run whole
        self.start = next((k for k, v in enumerate(views) if v is not None), len(views)) if start is None else start
        before = {t for layer in graph.layers[:self.start] for t in layer.outputs} | set(graph.inputs)
        self.spatial: list[SpatialLayer] = []
        self.ends: list[StageEnd] = []
        produced: set[int] = set()
        inputs: list[int] = []  # full inputs so far, in first-read order
        seen: set[int] = set()
        input_bytes = 0
        # produced tensors still read after the current op (or read by the caller); a stage
        # ends where that is exactly the op's own output
        leaving: set[int] = set()
        last_read = {t: r[-1] for t, r in self.readers.items()}
        closing: dict[int, list[int]] = {}  # op -> produced tensors it reads last
        for k in range(self.start, len(views)):
            view = views[k]
            if view is None or any(t not in produced and t not in before for t in view.inputs):
                break
            self.spatial.append(view)
            for t in view.inputs:
                if t not in produced and t not in seen:
                    seen.add(t)
                    inputs.append(t)
                    input_bytes += graph.tensors[t].nbytes
            produced.add(view.output)
            if view.output in outputs or last_read.get(view.output, -1) > k:
                leaving.add(view.output)
                if view.output not in outputs:
                    closing.setdefault(last_read[view.output], []).append(view.output)
            for t in closing.pop(k, ()):
                leaving.discard(t)
            if len(leaving) == 1 and view.output in leaving:
                self.ends.append(StageEnd(k, len(inputs), input_bytes, view.output, k - self.start + 1))
        self.inputs = inputs
        self._at = {e.end: e for e in self.ends}

    def stage(self, end: int) -> Stage:
        """The stage ending at op ``end`` (one of ``ends``)."""
        info = self._at[end]
        layers = tuple(self.spatial[:end - self.start + 1])
        pixel_bytes = {s.output: self.graph.tensors[s.output].shape[-1] * DTYPE_BYTES[self.graph.tensors[s.output].dtype]
                       for s in layers}
        span = {}
        for s in layers:
            readers = self.readers.get(s.output, [])
            last = readers[bisect_right(readers, end) - 1] if readers and readers[0] <= end else end
            span[s.output] = (s.layer, max(last, s.layer))
        return Stage(self.start, end, layers, tuple(sorted(self.inputs[:info.input_count])), info.output, pixel_bytes,
                     span)


def stages(graph, kernels, data_inputs) -> list[Stage]:
    """Every prefix of the network that can run patch by patch, shortest first.
    ``data_inputs(layer, kernel)`` gives a layer's activation operands."""
    found = Stages(graph, kernels, data_inputs)
    return [found.stage(e.end) for e in found.ends]


def axis_plan(stage: Stage, parts: int, axis: str) -> AxisPlan:
    """Cut the stage output into ``parts`` patches along ``axis`` ("rows" or "cols") and walk
    the stage backwards: each tensor's interval is the union of what its readers need."""
    extent = stage.out_h if axis == "rows" else stage.out_w
    size = -(-extent // parts)
    parts = -(-extent // size)
    intervals = []
    for p in range(parts):
        need = {stage.output: (p * size, min((p + 1) * size, extent))}
        for s in reversed(stage.layers):
            lo, hi = need[s.output]
            window = s.rows if axis == "rows" else s.cols
            a, b = window.need(lo, hi)
            for t in s.inputs:
                old = need.get(t)
                need[t] = (a, b) if old is None else (min(old[0], a), max(old[1], b))
        intervals.append(need)
    return AxisPlan(parts, size, tuple(intervals))


def axis_extents(stage: Stage, axis: str, max_parts: int, intervals=()) -> dict[int, tuple]:
    """What ``axis_plan`` gives for every number of patches up to ``max_parts`` along ``axis``
    (those that differ), in one backward walk over the stage: parts -> (every patch tensor's
    largest extent, its total extent over the patches, the stage-output extent of a patch), and
    for each tensor of ``intervals`` its (lo, hi) arrays over the patches. The walk carries
    every patch of every count at once as arrays (the same arithmetic as ``Window.need``), so a
    stage of n ops costs n steps, not n times the patches."""
    extent = stage.out_h if axis == "rows" else stage.out_w
    counts: list[tuple[int, int]] = []  # (parts, rows or columns per patch)
    for asked in range(1, min(max_parts, extent) + 1):
        size = -(-extent // asked)
        parts = -(-extent // size)
        if all(parts != p for p, _ in counts):
            counts.append((parts, size))
    if not counts:
        return {}
    lo0 = np.concatenate([np.arange(parts, dtype=np.int64) * size for parts, size in counts])
    hi0 = np.concatenate([np.minimum((np.arange(parts, dtype=np.int64) + 1) * size, extent) for parts, size in counts])
    need = {stage.output: (lo0, hi0)}
    for s in reversed(stage.layers):
        lo, hi = need[s.output]
        w = s.rows if axis == "rows" else s.cols
        a = np.maximum(lo * w.stride - w.pad, 0)
        b = np.minimum((hi - 1) * w.stride - w.pad + (w.k - 1) * w.dil + 1, w.in_size)
        for t in s.inputs:
            old = need.get(t)
            need[t] = (a, b) if old is None else (np.minimum(old[0], a), np.maximum(old[1], b))
    patch = stage.patch_tensors
    widths = np.stack([need[t][1] - need[t][0] for t in patch])
    starts = np.cumsum([0] + [parts for parts, _ in counts[:-1]])
    largest = np.maximum.reduceat(widths, starts, axis=1).tolist()
    total = np.add.reduceat(widths, starts, axis=1).tolist()
    out = {}
    for n, (parts, size) in enumerate(counts):
        entry = ({t: largest[i][n] for i, t in enumerate(patch)}, {t: total[i][n] for i, t in enumerate(patch)}, size)
        if intervals:
            at = slice(starts[n], starts[n] + parts)
            entry = (*entry, {t: (need[t][0][at], need[t][1][at]) for t in intervals})
        out[parts] = entry
    return out


def patch_buffers(stage: Stage, rows: AxisPlan, cols: AxisPlan) -> dict[int, int]:
    """Bytes of every per-patch buffer: the largest region of the tensor over the patches."""
    return {t: rows.largest(t) * cols.largest(t) * stage.pixel_bytes[t] for t in stage.patch_tensors}


def patch_macs(stage: Stage, rows: AxisPlan, cols: AxisPlan) -> int:
    """MACs of the stage run patch by patch (overlapping halos computed once per patch)."""
    return sum(rows.total(s.output) * cols.total(s.output) * s.macs_per_pixel for s in stage.layers)


def stage_macs(stage: Stage) -> int:
    return sum(s.out_h * s.out_w * s.macs_per_pixel for s in stage.layers)
