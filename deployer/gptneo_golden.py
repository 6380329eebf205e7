"""The numpy executor of the transformer IR (``network_parser/transformer_ir.py``): one token at
a time over a KV cache, float32 throughout, op by op in the order the generated C runs them. It
is the reference the C engine is tested against.

    ex = Executor(cache_kv(quantize_weights(lower_gptneo(model), "q4_0")[0], "int4", 96))
    logits = ex.step(token_id)       # the token at ex.position, which then advances
    s = Session(model, context=96, weights="q4_0", kv="int4")   # the same, in one call

GPT-Neo semantics: LayerNorm (eps from config.json), no 1/sqrt(head_dim) scaling of the
attention scores, local layers see the last ``window`` positions, gelu_new (tanh form), the
output head tied to the token embedding. ``context`` KV slots per layer: once full, the
oldest position is dropped (a sliding window).
"""
from __future__ import annotations

import numpy as np

from network_parser.gptneo import GptNeo
from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, LayerNorm, MatMul, PositionEmbedding,
                                           TransformerGraph, lower_gptneo)

from . import gptneo_quant as Q
from .llm_passes import KV_LEVELS, cache_kv, quantize_weights

F32 = np.float32


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(dtype=F32)
    var = ((x - mean) ** 2).mean(dtype=F32)
    return ((x - mean) / np.sqrt(var + F32(eps))).astype(F32) * w + b


def gelu_new(x: np.ndarray) -> np.ndarray:
    return (F32(0.5) * x * (F32(1) + np.tanh(F32(0.7978845608028654) * (x + F32(0.044715) * x * x * x)))).astype(F32)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum(dtype=F32)).astype(F32)


class Executor:
    def __init__(self, graph: TransformerGraph):
        c, kv = graph.config, graph.kv
        self.graph, self.c, self.kv = graph, c, kv
        self.position = 0
        table = graph.weights["wte"]
        self.embed = table if isinstance(table, np.ndarray) else table.dequantize()
        shape = (c.layers, kv.context, c.d_model)
        dtype = F32 if kv.format == "f32" else np.int8
        self.keys, self.values = np.zeros(shape, dtype), np.zeros(shape, dtype)
        if kv.group:
            groups = (c.layers, kv.context, c.d_model // kv.group)
            self.key_scales, self.value_scales = np.zeros(groups, F32), np.zeros(groups, F32)
        self.buffers: dict[str, np.ndarray] = {}

    # ---- one function per op kind --------------------------------------------------------------

    def _embedding(self, op: Embedding) -> None:
        self.buffers[op.out] = self.embed[int(self.buffers[op.token][0])].astype(F32)

    def _position(self, op: PositionEmbedding) -> None:
        self.buffers[op.x] = (self.buffers[op.x] + self.graph.weights[op.table][self.position]).astype(F32)

    def _layer_norm(self, op: LayerNorm) -> None:
        w = self.graph.weights
        self.buffers[op.out] = layer_norm(self.buffers[op.x], w[op.weight], w[op.bias], op.eps)

    def _matmul(self, op: MatMul) -> None:
        y = Q.matvec(self.graph.weights[op.weight], self.buffers[op.x])
        self.buffers[op.out] = y if op.bias is None else (y + self.graph.weights[op.bias]).astype(F32)

    def _gelu(self, op: Gelu) -> None:
        self.buffers[op.x] = gelu_new(self.buffers[op.x])

    def _add(self, op: Add) -> None:
        self.buffers[op.x] = (self.buffers[op.x] + self.buffers[op.y]).astype(F32)

    def _attention(self, op: Attention) -> None:
        c, p, ctx = self.c, self.position, self.kv.context
        self._store(op.layer, p % ctx, self.buffers[op.k], self.buffers[op.v])
        first = max(0, p - ctx + 1)  # the oldest position still cached
        lo = max(first, p - op.window + 1) if op.window else first
        keys, vals = self._cached(op.layer, [j % ctx for j in range(lo, p + 1)])
        qh = self.buffers[op.q].reshape(op.heads, c.head_dim)
        att = np.empty((op.heads, c.head_dim), F32)
        for hd in range(op.heads):
            att[hd] = softmax((keys[:, hd] @ qh[hd]).astype(F32)) @ vals[:, hd]
        self.buffers[op.out] = att.reshape(-1)

    RUN = {Embedding: _embedding, PositionEmbedding: _position, LayerNorm: _layer_norm, MatMul: _matmul,
           Gelu: _gelu, Add: _add, Attention: _attention}

    # ---- the KV cache -------------------------------------------------------------------------

    def _store(self, layer: int, slot: int, k: np.ndarray, v: np.ndarray) -> None:
        if self.kv.format == "f32":
            self.keys[layer, slot], self.values[layer, slot] = k, v
            return
        levels = KV_LEVELS[self.kv.format]
        kq, ks = Q.quantize_blocks(k, levels, self.kv.group)
        vq, vs = Q.quantize_blocks(v, levels, self.kv.group)
        self.keys[layer, slot], self.key_scales[layer, slot] = kq.reshape(-1), ks
        self.values[layer, slot], self.value_scales[layer, slot] = vq.reshape(-1), vs

    def _cached(self, layer: int, slots: list[int]) -> tuple[np.ndarray, np.ndarray]:
        c = self.c
        keys, vals = self.keys[layer, slots].astype(F32), self.values[layer, slots].astype(F32)
        if self.kv.group:  # one scale per group of values
            keys = (keys * np.repeat(self.key_scales[layer, slots], self.kv.group, axis=1)).astype(F32)
            vals = (vals * np.repeat(self.value_scales[layer, slots], self.kv.group, axis=1)).astype(F32)
        return (keys.reshape(len(slots), c.heads, c.head_dim), vals.reshape(len(slots), c.heads, c.head_dim))

    def step(self, token: int) -> np.ndarray:
        g, c = self.graph, self.c
        if not 0 <= token < c.vocab:
            raise ValueError(f"token {token} outside the vocabulary of {c.vocab}")
        if self.position >= c.max_positions:
            raise ValueError(f"position {self.position}: the model has {c.max_positions} positions")
        self.buffers = {g.token: np.array([token], np.int32)}
        for op in g.ops:
            self.RUN[type(op)](self, op)
        self.position += 1
        return self.buffers[g.logits]


def Session(model: GptNeo, context: int | None = None, weights: str = "f32", kv: str = "f32",
            kv_group: int | None = None) -> Executor:
    """The executor of ``model`` after the --weights and --kv-cache passes (``context`` clipped
    to the model's positions)."""
    graph = quantize_weights(lower_gptneo(model), weights)[0]
    context = min(context or model.config.max_positions, model.config.max_positions)
    return Executor(cache_kv(graph, kv, context, kv_group))
