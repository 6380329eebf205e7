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
