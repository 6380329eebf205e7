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
plans gives every buffer size (max rows x max cols x channels) and the MACs (sum of rows x
sum of cols x MACs per output pixel).
"""
from __future__ import annotations

from dataclasses import dataclass

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


def spatial_layer(kernel, k: int, inputs: tuple[int, ...], output: int, out_shape: tuple) -> SpatialLayer | None:
    """The spatial view of a lowered kernel, or None when it cannot run patch by patch."""
    if getattr(kernel, "float_avg", None) is not None:
        return None  # onnxruntime's float average pooling runs whole
    if getattr(kernel, "act_max", 0) > 127 or getattr(kernel, "act_min", 0) < -128:
        return None  # an integer graph's raw int32 output: patch buffers hold int8
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
        case K.Add() | K.Mul() | K.IntAdd() if kernel.view.dense and kernel.view.shape[0] == 1 and len(inputs) == 2:
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
    channels: dict  # tensor -> channels
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


def stages(graph, kernels, data_inputs) -> list[Stage]:
    """Every prefix of the network that can run patch by patch, shortest first.
    ``data_inputs(layer, kernel)`` gives a layer's activation operands."""
    result, spatial = [], []
    produced: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for k, layer in enumerate(graph.layers):
        for t in layer.inputs:
            readers.setdefault(t, []).append(k)
    outputs = set(graph.outputs)
    views = [spatial_layer(kern, k, tuple(data_inputs(layer, kern)), layer.outputs[0],
                           graph.tensors[layer.outputs[0]].shape) if len(layer.outputs) == 1 else None
             for k, (layer, kern) in enumerate(zip(graph.layers, kernels))]
    # the stage starts at the first op that can run patch by patch; the ops before it run whole
    first = next((k for k, v in enumerate(views) if v is not None), len(views))
    before = {t for layer in graph.layers[:first] for t in layer.outputs} | set(graph.inputs)
    for k in range(first, len(views)):
        view = views[k]
        if view is None or any(t not in produced and t not in before for t in view.inputs):
            break
        spatial.append(view)
        produced[view.output] = k
        leaving = [t for t in produced if t in outputs or any(r > k for r in readers.get(t, ()))]
        if len(leaving) != 1 or leaving[0] != view.output:
            continue
        full_inputs = tuple(sorted({t for s in spatial for t in s.inputs if t not in produced}))
        channels = {t: graph.tensors[t].shape[-1] for t in produced}
        span = {}
        for s in spatial:
            last = max((r for r in readers.get(s.output, ()) if r <= k), default=k)
            span[s.output] = (s.layer, max(last, s.layer))
        result.append(Stage(first, k, tuple(spatial), full_inputs, view.output, channels, span))
    return result


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


def patch_buffers(stage: Stage, rows: AxisPlan, cols: AxisPlan) -> dict[int, int]:
    """Bytes of every per-patch buffer: the largest region of the tensor over the patches."""
    return {t: rows.largest(t) * cols.largest(t) * stage.channels[t] for t in stage.patch_tensors}


def patch_macs(stage: Stage, rows: AxisPlan, cols: AxisPlan) -> int:
    """MACs of the stage run patch by patch (overlapping halos computed once per patch)."""
    return sum(rows.total(s.output) * cols.total(s.output) * s.macs_per_pixel for s in stage.layers)


def stage_macs(stage: Stage) -> int:
    return sum(s.out_h * s.out_w * s.macs_per_pixel for s in stage.layers)
