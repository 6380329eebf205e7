"""Recurrent layers with state kept across inferences: TFLite's integer LSTM lowered to the
constants its step needs, computed as LiteRT's kernel prepares them (float32 effective scales,
each gate's zero points folded into its bias)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from network_parser.errors import UnsupportedOperator
from network_parser.ir import Graph, Layer

from .requant import quantize_multiplier

GATES = "ifco"  # input, forget, cell, output: the order of the weights and biases


@dataclass(frozen=True, slots=True)
class Lstm:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM invocation: every time step of the input sequence, the
    hidden (int8) and cell (int16, scale 2^-cell_shift) state carried from step to step and to
    the next invocation. Per step and gate: the input's and the hidden state's products with
    the gate's weights, each plus its folded bias, rescaled to Q3.12 and summed saturating to
    int16; gemmlowp's int16 logistic (tanh for the cell gate); the cell state forget * cell +
    input * cell gate, clipped; the hidden state output * tanh(cell), rescaled to int8."""
    batch: int
    steps: int
    n_input: int
    n_cell: int
    time_major: bool
    input_scales: tuple[tuple[int, int], ...]  # (multiplier, shift) per gate: input x weights -> Q3.12
    recurrent_scales: tuple[tuple[int, int], ...]  # hidden state x weights -> Q3.12
    input_bias: tuple[tuple[int, ...], ...]  # per gate: bias - input zero point * row sums
    recurrent_bias: tuple[tuple[int, ...], ...]  # per gate: - hidden zero point * row sums
    cell_shift: int  # the cell state's scale is 2^-cell_shift
    cell_clip: int  # 0: none
    hidden_scale: tuple[int, int]  # output gate x tanh(cell) (Q0.15 x Q0.15) -> the hidden state
    hidden_zero_point: int

    @property
    def macs(self) -> int:
        return self.batch * self.steps * 4 * self.n_cell * (self.n_input + self.n_cell)


def lower_lstm(g: Graph, layer: Layer, where: str) -> Lstm:
    t = [g.tensors[i] for i in layer.inputs]
    x, weights, biases, h, c = t[0], t[1:9], t[9:13], t[13], t[14]
    y = g.tensors[layer.outputs[0]]
    a = layer.attrs
    if len(x.shape) != 3:
        raise UnsupportedOperator(f"{where}: LSTM input of shape {list(x.shape)} (a batch of sequences is 3-D)")
    steps, batch = (x.shape[0], x.shape[1]) if a.time_major else (x.shape[1], x.shape[0])
    n_input = x.shape[2]
    n_cell = weights[0].shape[0]
    shapes_ok = (all(w.shape == (n_cell, n_input) for w in weights[:4]) and all(w.shape == (n_cell, n_cell) for w in weights[4:])
                 and all(b.shape == (n_cell,) for b in biases) and h.elements == batch * n_cell and c.elements == batch * n_cell
                 and y.elements == batch * steps * n_cell)
    if not shapes_ok:
        raise UnsupportedOperator(f"{where}: LSTM shapes do not agree (input {list(x.shape)}, weights "
                                  f"{[list(w.shape) for w in weights]}, state {list(h.shape)} / {list(c.shape)}, output "
                                  f"{list(y.shape)})")
    log2 = math.log2(c.scale)
    if log2 != round(log2):
        raise UnsupportedOperator(f"{where}: the cell state's scale {c.scale:g} is not a power of two (the integer "
                                  f"LSTM's cell arithmetic needs one)")
    if (y.scale, y.zero_point) != (h.scale, h.zero_point):
        raise UnsupportedOperator(f"{where}: the LSTM's output must share the hidden state's quantization")
    f32 = np.float32
    gate_scale = f32(2.0) ** f32(-12)  # Q3.12: the gate activations' input
    input_scales = tuple(quantize_multiplier(float(f32(w.scale) * f32(x.scale) / gate_scale)) for w in weights[:4])
    recurrent_scales = tuple(quantize_multiplier(float(f32(w.scale) * f32(h.scale) / gate_scale)) for w in weights[4:])
    input_bias = tuple(tuple(int(v) for v in b.data.astype(np.int64) - x.zero_point * w.data.astype(np.int64).sum(1))
                       for w, b in zip(weights[:4], biases))
    recurrent_bias = tuple(tuple(int(v) for v in -h.zero_point * w.data.astype(np.int64).sum(1)) for w in weights[4:])
    clip = int(min(max(f32(a.cell_clip) / f32(c.scale), f32(-32768.0)), f32(32767.0))) if a.cell_clip > 0 else 0
    hidden = float(f32(2.0) ** f32(-15) / f32(a.hidden.scale[0]) * f32(2.0) ** f32(-15))
    return Lstm(batch, steps, n_input, n_cell, a.time_major, input_scales, recurrent_scales, input_bias, recurrent_bias,
                -int(round(log2)), clip, quantize_multiplier(hidden), a.hidden.zero_point[0])


@dataclass(frozen=True, slots=True)
class Svdf:
    """One SVDF invocation (one frame): the state (each filter's last ``memory`` int16 feature
    values, oldest first) shifts left by one value; each filter's product with the input,
    rescaled to the state's scale and saturated to int16, becomes its newest value; each filter's
    time weights dotted with its history, the ``rank`` filters of a unit summed, the bias added,
    rescaled to int8 (the output's range is the RELU)."""
    batch: int
    n_input: int
    filters: int
    memory: int
    rank: int
    input_zero_point: int
    feature_scale: tuple[int, int]  # (multiplier, shift): input x feature weights -> the state
    output_scale: tuple[int, int]  # state x time weights -> the output
    output_zero_point: int

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
                quantize_multiplier(output), y.zero_point)
