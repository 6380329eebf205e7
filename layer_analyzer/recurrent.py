"""Recurrent layers with state kept across inferences: TFLite's integer LSTM and SVDF lowered to
the constants their steps need, computed as LiteRT's kernels prepare them (float32 effective
scales; an LSTM gate's zero points folded into its bias)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from network_parser.errors import UnsupportedOperator
from network_parser.ir import (LSTM_BIASES, LSTM_CELL, LSTM_HIDDEN, LSTM_INPUT_WEIGHTS, LSTM_LAYER_NORM, LSTM_PEEPHOLE,
                               LSTM_PROJECTION, LSTM_PROJECTION_BIAS, LSTM_RECURRENT_WEIGHTS, Graph, Layer)

from .requant import quantize_multiplier


@dataclass(frozen=True, slots=True)
class Lstm:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM invocation: every time step of the input sequence, the
    hidden (int8) and cell (int16, scale 2^-cell_shift) state carried from step to step and to
    the next invocation. Per step and gate: the input's and the hidden state's products with
    the gate's weights, each plus its folded bias, rescaled to Q3.12 and summed saturating to
    int16 (with peepholes, the cell state times the gate's peephole weight too); gemmlowp's int16
    logistic (tanh for the cell gate); the cell state forget * cell + input * cell gate (CIFG:
    (1 - forget) for the input gate), clipped; the gated tanh of the cell state rescaled to int8:
    the hidden state, or (with a projection) its product with the projection weights. With layer
    normalization each gate's sums are in their own scale and normalized over the cells (its
    coefficients and bias applied after) before the activation."""
    batch: int
    steps: int
    n_input: int
    n_cell: int
    n_output: int  # the hidden state's size: n_cell, or the projection's
    time_major: bool
    cifg: bool
    input_scales: tuple[tuple[int, int] | None, ...]  # (multiplier, shift) per gate: input x weights -> Q3.12
    recurrent_scales: tuple[tuple[int, int] | None, ...]  # hidden state x weights -> Q3.12
    input_bias: tuple[tuple[int, ...], ...]  # per gate: bias - input zero point * row sums (CIFG: zeros)
    recurrent_bias: tuple[tuple[int, ...], ...]  # per gate: - hidden zero point * row sums
    peephole_scales: tuple[tuple[int, int] | None, ...] | None  # per gate: cell x peephole weight -> Q3.12
    cell_shift: int  # the cell state's scale is 2^-cell_shift
    cell_clip: int  # 0: none
    hidden_scale: tuple[int, int]  # output gate x tanh(cell) (Q0.15 x Q0.15) -> the gated hidden value
    hidden_zero_point: int
    projection_scale: tuple[int, int] | None = None  # gated hidden x projection weights -> the hidden state
    projection_bias: tuple[int, ...] | None = None  # bias + hidden zero point * row sums (see lower_lstm)
    projection_clip: int = 0  # 0: none
    output_zero_point: int = 0  # the hidden state's (and the output's), with a projection
    # layer normalization, per gate (None: a CIFG LSTM's input gate): the coefficients' scale as
    # (multiplier, shift) and the variance below which a row counts as constant (then the gate's
    # sums, in their own scale, are normalized over the cells; the raw bias joins after)
    layer_norm: tuple[tuple[int, int, int] | None, ...] | None = None

    @property
    def macs(self) -> int:
        gates = 3 if self.cifg else 4
        per_step = gates * self.n_cell * (self.n_input + self.n_output)
        if self.projection_scale is not None:
            per_step += self.n_cell * self.n_output
        return self.batch * self.steps * per_step


def lower_lstm(g: Graph, layer: Layer, where: str) -> Lstm:
    ins = layer.inputs
    t = {i: g.tensors[v] for i, v in enumerate(ins) if v >= 0}
    x, h, c, y = t[0], t[LSTM_HIDDEN], t[LSTM_CELL], g.tensors[layer.outputs[0]]
    a = layer.attrs
    cifg = LSTM_INPUT_WEIGHTS[0] not in t
    if len(x.shape) != 3:
        raise UnsupportedOperator(f"{where}: LSTM input of shape {list(x.shape)} (a batch of sequences is 3-D)")
    steps, batch = (x.shape[0], x.shape[1]) if a.time_major else (x.shape[1], x.shape[0])
    n_input = x.shape[2]
    n_cell = t[LSTM_INPUT_WEIGHTS[1]].shape[0]
    projection = t.get(LSTM_PROJECTION)
    n_output = projection.shape[0] if projection is not None else n_cell
    gates = [g_ for g_ in range(4) if not (cifg and g_ == 0)]
    shapes_ok = (all(t[LSTM_INPUT_WEIGHTS[g_]].shape == (n_cell, n_input) for g_ in gates)
                 and all(t[LSTM_RECURRENT_WEIGHTS[g_]].shape == (n_cell, n_output) for g_ in gates)
                 and all(t[LSTM_BIASES[g_]].shape == (n_cell,) for g_ in gates)
                 and all(t[i].shape == (n_cell,) for i in LSTM_PEEPHOLE.values() if i in t)
                 and (projection is None or projection.shape == (n_output, n_cell))
                 and (LSTM_PROJECTION_BIAS not in t or t[LSTM_PROJECTION_BIAS].shape == (n_output,))
                 and h.elements == batch * n_output and c.elements == batch * n_cell
                 and y.elements == batch * steps * n_output)
    if not shapes_ok:
        raise UnsupportedOperator(f"{where}: LSTM shapes do not agree (input {list(x.shape)}, weights "
                                  f"{[list(t[i].shape) for i in (*LSTM_INPUT_WEIGHTS, *LSTM_RECURRENT_WEIGHTS) if i in t]}"
                                  f", state {list(h.shape)} / {list(c.shape)}, output {list(y.shape)})")
    peephole = LSTM_PEEPHOLE[1] in t  # the reader took all the gates' or none
    log2 = math.log2(c.scale)
    if log2 != round(log2) or not -15 <= log2 <= -9:
        raise UnsupportedOperator(f"{where}: the cell state's scale {c.scale:g} (LiteRT's integer LSTM takes a power of "
                                  f"two from 2^-15 to 2^-9: its tanh of the cell takes 0 to 6 integer bits)")
    if (y.scale, y.zero_point) != (h.scale, h.zero_point):
        raise UnsupportedOperator(f"{where}: the LSTM's output must share the hidden state's quantization")
    f32 = np.float32
    norm = a.gate_sums is not None
    if norm and not all(t[LSTM_LAYER_NORM[g_]].shape == (n_cell,) for g_ in gates):
        raise UnsupportedOperator(f"{where}: layer normalization coefficients must hold {n_cell} values a gate")
    # each gate's sums: Q3.12, the gate activations' input; with layer normalization, the scale of
    # its intermediate (normalized into Q3.12 after)
    gate_scale = [f32(a.gate_sums[g_].scale[0]) if norm else f32(2.0) ** f32(-12) for g_ in range(4)]
    zeros = tuple(0 for _ in range(n_cell))

    def per_gate(fn):
        return tuple(fn(g_) if g_ in gates else None for g_ in range(4))
    input_scales = per_gate(lambda g_: quantize_multiplier(float(f32(t[LSTM_INPUT_WEIGHTS[g_]].scale) * f32(x.scale)
                                                                 / gate_scale[g_])))
    recurrent_scales = per_gate(lambda g_: quantize_multiplier(float(f32(t[LSTM_RECURRENT_WEIGHTS[g_]].scale)
                                                                     * f32(h.scale) / gate_scale[g_])))
    # the gate's bias joins its sums, or (layer normalization) the normalized values
    input_bias = tuple(zeros if g_ not in gates else
                       tuple(int(v) for v in (0 if norm else t[LSTM_BIASES[g_]].data.astype(np.int64))
                             - x.zero_point * t[LSTM_INPUT_WEIGHTS[g_]].data.astype(np.int64).sum(1)) for g_ in range(4))
    layer_norm = None
    if norm:  # LiteRT's Prepare: the coefficients' scale decomposed, the variance floor in float32
        def normalization(g_):
            s_ln = t[LSTM_LAYER_NORM[g_]].scale
            if f32(10000.0) * f32(s_ln) >= 2.0 ** 31:  # (LiteRT's int32 floor would wrap; its rescale overflow)
                raise UnsupportedOperator(f"{where}: layer normalization coefficients' scale {s_ln:g} is beyond the "
                                          f"reference's range (below {2.0 ** 31 / 10000:g})")
            return (*quantize_multiplier(s_ln), max(1, int(f32(10000.0) * f32(s_ln))))
        layer_norm = per_gate(normalization)
    recurrent_bias = tuple(zeros if g_ not in gates else
                           tuple(int(v) for v in -h.zero_point * t[LSTM_RECURRENT_WEIGHTS[g_]].data.astype(np.int64).sum(1))
                           for g_ in range(4))
    cell_pot = f32(2.0) ** f32(round(log2))
    peephole_scales = None
    if peephole:
        peephole_scales = tuple(quantize_multiplier(float(cell_pot * f32(t[LSTM_PEEPHOLE[g_]].scale) / gate_scale[g_]))
                                if g_ in LSTM_PEEPHOLE and LSTM_PEEPHOLE[g_] in t else None for g_ in range(4))
    clip = int(min(max(f32(a.cell_clip) / f32(c.scale), f32(-32768.0)), f32(32767.0))) if a.cell_clip > 0 else 0
    hidden = float(f32(2.0) ** f32(-15) / f32(a.hidden.scale[0]) * f32(2.0) ** f32(-15))
    projection_scale = projection_bias = None
    projection_clip = 0
    if projection is not None:
        projection_scale = quantize_multiplier(float(f32(projection.scale) * f32(a.hidden.scale[0]) / f32(h.scale)))
        bias = t[LSTM_PROJECTION_BIAS].data.astype(np.int64) if LSTM_PROJECTION_BIAS in t else 0
        # LiteRT stores the gated values less the hidden zero point (saturated) and folds the zero
        # point back in with the projection's bias: measured against its outputs, value by value
        projection_bias = tuple(int(v) for v in bias + a.hidden.zero_point[0] * projection.data.astype(np.int64).sum(1))
        if a.proj_clip > 0:
            projection_clip = int(min(max(f32(a.proj_clip) / f32(y.scale), f32(-128.0)), f32(127.0)))
    return Lstm(batch, steps, n_input, n_cell, n_output, a.time_major, cifg, input_scales, recurrent_scales, input_bias,
                recurrent_bias, peephole_scales, -int(round(log2)), clip, quantize_multiplier(hidden),
                a.hidden.zero_point[0], projection_scale, projection_bias, projection_clip, h.zero_point, layer_norm)


@dataclass(frozen=True, slots=True)
class Svdf:
    """One SVDF invocation (one frame): the state (each filter's last ``memory`` int16 feature
    values, oldest first) shifts left by one value; each filter's product with the input,
    rescaled to the state's scale and saturated to int16, becomes its newest value; each filter's
    time weights dotted with its history, the ``rank`` filters of a unit summed, the bias added,
    rescaled to int8 (clamped to its range: with the output zero point at -128, the RELU)."""
    batch: int
    n_input: int
    filters: int
    memory: int
    rank: int
    input_zero_point: int
    feature_scale: tuple[int, int]  # (multiplier, shift): input x feature weights -> the state
    output_scale: tuple[int, int]  # state x time weights -> the output
    output_zero_point: int
    state_bits: int = 16  # 8: TFLite Micro's int8 time weights and state
    state_zero_point: int = 0  # an int8 state's (the int16 one is symmetric)

    @property
    def units(self) -> int:
        return self.filters // self.rank

    @property
    def macs(self) -> int:
        return self.batch * self.filters * (self.n_input + self.memory)


def lower_svdf(g: Graph, layer: Layer, where: str) -> Svdf:
    x, wf, wt = (g.tensors[i] for i in layer.inputs[:3])
    state, y = g.tensors[layer.inputs[4]], g.tensors[layer.outputs[0]]
    rank = layer.attrs.rank
    if len(x.shape) != 2 or len(wf.shape) != 2 or len(wt.shape) != 2:
        raise UnsupportedOperator(f"{where}: SVDF shapes input {list(x.shape)}, weights {list(wf.shape)} / "
                                  f"{list(wt.shape)} (2-D each)")
    batch, n_input = x.shape
    filters, memory = wt.shape
    if (wf.shape != (filters, n_input) or rank < 1 or filters % rank or state.elements != batch * filters * memory
            or y.shape != (batch, filters // rank)
            or (layer.inputs[3] >= 0 and g.tensors[layer.inputs[3]].shape != (filters // rank,))):
        raise UnsupportedOperator(f"{where}: SVDF shapes do not agree (input {list(x.shape)}, rank {rank}, feature "
                                  f"weights {list(wf.shape)}, time weights {list(wt.shape)}, state {list(state.shape)}, "
                                  f"output {list(y.shape)})")
    f32 = np.float32
    # LiteRT's Prepare: each effective scale a float32 product and quotient, then decomposed
    feature = float(f32(x.scale) * f32(wf.scale) / f32(state.scale))
    output = float(f32(state.scale) * f32(wt.scale) / f32(y.scale))
    return Svdf(batch, n_input, filters, memory, rank, x.zero_point, quantize_multiplier(feature),
                quantize_multiplier(output), y.zero_point, 8 if state.dtype == "int8" else 16, state.zero_point)
