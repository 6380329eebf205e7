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


class Session:
    def __init__(self, model: GptNeo, context: int | None = None):
        c = model.config
        self.model, self.c = model, c
        self.context = min(context or c.max_positions, c.max_positions)
        self.keys = np.zeros((c.layers, self.context, c.d_model), F32)
        self.values = np.zeros((c.layers, self.context, c.d_model), F32)
        self.position = 0

    def step(self, token: int) -> np.ndarray:
        m, c = self.model, self.c
        if not 0 <= token < c.vocab:
            raise ValueError(f"token {token} outside the vocabulary of {c.vocab}")
        if self.position >= c.max_positions:
            raise ValueError(f"position {self.position}: the model has {c.max_positions} positions")
        p = self.position
        slot = p % self.context
        x = (m.wte[token] + m.wpe[p]).astype(F32)
        first = max(0, p - self.context + 1)  # the oldest position still cached
        for i, blk in enumerate(m.blocks):
            h = layer_norm(x, *blk.ln_1, c.eps)
            q, k, v = blk.q @ h, blk.k @ h, blk.v @ h
            self.keys[i, slot], self.values[i, slot] = k, v
            lo = max(first, p - c.window + 1) if c.attention[i] == "local" else first
            slots = [j % self.context for j in range(lo, p + 1)]
            keys = self.keys[i, slots].reshape(len(slots), c.heads, c.head_dim)
            vals = self.values[i, slots].reshape(len(slots), c.heads, c.head_dim)
            qh = q.reshape(c.heads, c.head_dim)
            att = np.empty(c.d_model, F32).reshape(c.heads, c.head_dim)
            for hd in range(c.heads):
                w = softmax((keys[:, hd] @ qh[hd]).astype(F32))
                att[hd] = w @ vals[:, hd]
            x = (x + blk.out[0] @ att.reshape(-1) + blk.out[1]).astype(F32)
            h = layer_norm(x, *blk.ln_2, c.eps)
            x = (x + blk.proj[0] @ gelu_new(blk.fc[0] @ h + blk.fc[1]) + blk.proj[1]).astype(F32)
        self.position += 1
        return (m.wte @ layer_norm(x, *m.ln_f, c.eps)).astype(F32)
