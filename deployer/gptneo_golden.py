"""The numpy reference of the GPT-Neo engine: one token at a time over a KV cache, float32
throughout, the same order of operations as the generated C.

    s = Session(model, context=96)
    logits = s.step(token_id)        # the token at position s.position, which then advances

GPT-Neo semantics: LayerNorm (eps from config.json), no 1/sqrt(head_dim) scaling of the
attention scores, local layers see the last ``window`` positions, gelu_new (tanh form), the
output head tied to the token embedding. ``context`` KV slots per layer: once full, the
oldest position is dropped (a sliding window).
"""
from __future__ import annotations

import numpy as np

from network_parser.gptneo import GptNeo

from . import gptneo_quant as Q

F32 = np.float32
KV_LEVELS = {"int8": 127, "int4": 7}


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(dtype=F32)
    var = ((x - mean) ** 2).mean(dtype=F32)
    return ((x - mean) / np.sqrt(var + F32(eps))).astype(F32) * w + b


def gelu_new(x: np.ndarray) -> np.ndarray:
    return (F32(0.5) * x * (F32(1) + np.tanh(F32(0.7978845608028654) * (x + F32(0.044715) * x * x * x)))).astype(F32)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum(dtype=F32)).astype(F32)


def kv_group_default(c, kv: str) -> int:
    """Values per KV scale: one head for int8 (its greedy decoding of tinytalk matches f32's,
    which 32 values per scale does not); 32 values for int4, whose scales must stay small
    beside its codes: tinytalk at 96 positions keeps 24.6 KB of scales instead of 98 KB per
    head (measured top-1 agreement with f32: 0.93 per head, 0.90 per 32, 0.82 per position)."""
    return c.head_dim if kv == "int8" else min(Q.BLOCK, c.d_model)


class Session:
    """``weights``: "f32" | "int8" | "q4_0" (the matrices: q, k, v, out, fc, proj and the tied
    head; embeddings are gathered from the same quantized table); ``kv``: "f32" | "int8" |
    "int4" (codes, and one float32 scale per ``kv_group`` values of a position)."""

    def __init__(self, model: GptNeo, context: int | None = None, weights: str = "f32", kv: str = "f32",
                 kv_group: int | None = None):
        c = model.config
        self.model, self.c, self.kv = model, c, kv
        self.kv_group = kv_group or kv_group_default(c, kv)
        self.context = min(context or c.max_positions, c.max_positions)
        self.position = 0
        quant = {"f32": lambda w: w, "int8": Q.quantize_int8_rows, "q4_0": Q.quantize_q4_0}[weights]
        self.mats = [dict(q=quant(b.q), k=quant(b.k), v=quant(b.v), out=quant(b.out[0]), fc=quant(b.fc[0]),
                          proj=quant(b.proj[0])) for b in model.blocks]
        self.head = quant(model.wte)
        self.embed = model.wte if weights == "f32" else self.head.dequantize()
        shape = (c.layers, self.context, c.d_model)
        if kv == "f32":
            self.keys, self.values = np.zeros(shape, F32), np.zeros(shape, F32)
        else:
            self.keys, self.values = np.zeros(shape, np.int8), np.zeros(shape, np.int8)
            if c.d_model % self.kv_group:
                raise ValueError(f"KV scale groups of {self.kv_group} do not divide d_model {c.d_model}")
            self.key_scales = np.zeros((c.layers, self.context, c.d_model // self.kv_group), F32)
            self.value_scales = np.zeros((c.layers, self.context, c.d_model // self.kv_group), F32)

    def _store(self, layer: int, slot: int, k: np.ndarray, v: np.ndarray) -> None:
        if self.kv == "f32":
            self.keys[layer, slot], self.values[layer, slot] = k, v
            return
        levels = KV_LEVELS[self.kv]
        kq, ks = Q.quantize_blocks(k, levels, self.kv_group)
        vq, vs = Q.quantize_blocks(v, levels, self.kv_group)
        self.keys[layer, slot], self.key_scales[layer, slot] = kq.reshape(-1), ks
        self.values[layer, slot], self.value_scales[layer, slot] = vq.reshape(-1), vs

    def _cached(self, layer: int, slots: list[int]) -> tuple[np.ndarray, np.ndarray]:
        c = self.c
        keys, vals = self.keys[layer, slots].astype(F32), self.values[layer, slots].astype(F32)
        if self.kv != "f32":  # one scale per group of values
            keys = (keys * np.repeat(self.key_scales[layer, slots], self.kv_group, axis=1)).astype(F32)
            vals = (vals * np.repeat(self.value_scales[layer, slots], self.kv_group, axis=1)).astype(F32)
        return (keys.reshape(len(slots), c.heads, c.head_dim), vals.reshape(len(slots), c.heads, c.head_dim))

    def step(self, token: int) -> np.ndarray:
        m, c = self.model, self.c
        if not 0 <= token < c.vocab:
            raise ValueError(f"token {token} outside the vocabulary of {c.vocab}")
        if self.position >= c.max_positions:
            raise ValueError(f"position {self.position}: the model has {c.max_positions} positions")
        p = self.position
        slot = p % self.context
        x = (self.embed[token] + m.wpe[p]).astype(F32)
        first = max(0, p - self.context + 1)  # the oldest position still cached
        for i, (blk, w) in enumerate(zip(m.blocks, self.mats)):
            h = layer_norm(x, *blk.ln_1, c.eps)
            q, k, v = Q.matvec(w["q"], h), Q.matvec(w["k"], h), Q.matvec(w["v"], h)
            self._store(i, slot, k, v)
            lo = max(first, p - c.window + 1) if c.attention[i] == "local" else first
            keys, vals = self._cached(i, [j % self.context for j in range(lo, p + 1)])
            qh = q.reshape(c.heads, c.head_dim)
            att = np.empty((c.heads, c.head_dim), F32)
            for hd in range(c.heads):
                att[hd] = softmax((keys[:, hd] @ qh[hd]).astype(F32)) @ vals[:, hd]
            x = (x + Q.matvec(w["out"], att.reshape(-1)) + blk.out[1]).astype(F32)
            h = layer_norm(x, *blk.ln_2, c.eps)
            x = (x + Q.matvec(w["proj"], gelu_new(Q.matvec(w["fc"], h) + blk.fc[1])) + blk.proj[1]).astype(F32)
        self.position += 1
        return Q.matvec(self.head, layer_norm(x, *m.ln_f, c.eps))
