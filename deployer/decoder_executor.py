"""The numpy executor of the transformer IR (``network_parser/transformer_ir.py``): one token at
a time over a KV cache, float32 throughout, op by op in the order the generated C runs them. It
is the reference the C engine is tested against.

    ex = Executor(cache_kv(quantize_weights(lower(read_decoder(path)), "q4_0")[0], "int4", 96))
    logits = ex.step(token_id)       # the token at ex.position, which then advances
    s = Session(model, context=96, weights="q4_0", kv="int4")   # the same, in one call

The block specification says the rest: GPT-Neo's LayerNorm, learned positions, unscaled
scores, local layers over the last ``window`` positions and gelu_new (tanh form); LLaMA's
RMSNorm, rotary embeddings (the lowering's cos/sin tables), 1/sqrt(head_dim) scores, grouped KV
heads and SwiGLU. ``context`` KV slots per layer: once full, the oldest position is dropped (a
sliding window); keys are stored rotated by their own position, so RoPE needs nothing more.
"""
from __future__ import annotations

import numpy as np

from network_parser.decoder import Checkpoint
from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, HeadSelect, LayerNorm, MatMul,
                                           PositionEmbedding, QuantizeInput, RmsNorm, Rope, SwiGlu, TransformerGraph,
                                           lower)

from . import decoder_quant as Q
from .llm_passes import KV_LEVELS, cache_kv, quantize_weights, select_logits

F32 = np.float32


# ---- float32 as the engine computes it: its own expf / tanhf / 1/sqrtf (no libm) and its
# left-to-right sums, operation for operation (the C is built with -ffp-contract=off), so that a
# quantized engine's integer codes equal the executor's (a float that differed in its last bit
# could move an activation or KV code across a rounding boundary) ----------------------------

def seq_sum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sum left to right in float32, as the C's loops do."""
    return np.take(np.cumsum(np.asarray(x, F32), axis=axis, dtype=F32), -1, axis=axis)


def c_exp(x: np.ndarray) -> np.ndarray:
    """The engine's exp_f32: x clamped to [-87, 88], 2^n e^r, n = x / ln 2 rounded half to even
    (by adding 1.5 * 2^23), e^r by a degree-6 Taylor polynomial, times 2^n (exact in this range)."""
    x = np.maximum(np.minimum(np.asarray(x, F32), F32(88)), F32(-87))
    t = (x * F32(1.44269504)).astype(F32)
    nf = ((t + F32(12582912)).astype(F32) - F32(12582912)).astype(F32)
    r = ((x - nf * F32(0.693145752)) - nf * F32(1.42860677e-06)).astype(F32)
    p = F32(0.00138888892)
    for k in (F32(0.00833333377), F32(0.0416666679), F32(0.166666672), F32(0.5), F32(1), F32(1)):
        p = (k + r * p).astype(F32)
    scale = ((nf.astype(np.int32) + 127).astype(np.uint32) << 23).view(F32)
    return (p * scale).astype(F32)


def c_tanh(x: np.ndarray) -> np.ndarray:
    e = c_exp((F32(2) * x).astype(F32))
    t = ((e - F32(1)) / (e + F32(1))).astype(F32)
    return np.where(x > F32(9), F32(1), np.where(x < F32(-9), F32(-1), t)).astype(F32)


def c_sincos(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The engine's sincos_f32: a = k pi/2 + r (pi/2 in three parts, the first two with few enough
    bits that k times them is exact for |k| < 4096), |r| <= pi/4, degree-9 and -8 Taylor
    polynomials, the quadrant from k."""
    a = np.asarray(a, F32)
    t = (a * F32(0.636619747)).astype(F32)
    k = np.trunc(t + np.where(t >= 0, F32(0.5), F32(-0.5))).astype(np.int32)
    kf = k.astype(F32)
    r = (((a - kf * F32(1.5703125)) - kf * F32(0.000483751297)) - kf * F32(7.54979013e-8)).astype(F32)
    r2 = (r * r).astype(F32)
    ps = F32(2.75573188e-06)
    for c in (F32(-0.000198412701), F32(0.00833333377), F32(-0.166666672)):
        ps = (c + r2 * ps).astype(F32)
    s = (r + (r * r2).astype(F32) * ps).astype(F32)
    pc = F32(2.48015876e-05)
    for c in (F32(-0.00138888892), F32(0.0416666679), F32(-0.5)):
        pc = (c + r2 * pc).astype(F32)
    c = (F32(1) + r2 * pc).astype(F32)
    q = k & 3
    sin = np.select([q == 0, q == 1, q == 2], [s, c, -s], -c).astype(F32)
    cos = np.select([q == 0, q == 1, q == 2], [c, -s, -c], s).astype(F32)
    return sin, cos


def c_rsqrt(x: F32) -> F32:
    """The engine's rsqrt_f32: the bit-level first guess and three Newton steps."""
    x = F32(x)
    y = (np.uint32(0x5f3759df) - (np.array(x, F32).view(np.uint32) >> np.uint32(1))).view(F32)[()]
    for _ in range(3):
        y = F32(y * (F32(1.5) - F32(F32(F32(F32(0.5) * x) * y) * y)))
    return y


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    d = F32(len(x))
    mean = F32(seq_sum(x) / d)
    c = (x - mean).astype(F32)
    inv = c_rsqrt(F32(seq_sum(c * c) / d) + F32(eps))
    return ((c * inv).astype(F32) * w + b).astype(F32)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    inv = c_rsqrt(F32(seq_sum(x * x) / F32(len(x))) + F32(eps))
    return ((x * inv).astype(F32) * w).astype(F32)


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return ((gate / (F32(1) + c_exp(-gate))).astype(F32) * up).astype(F32)


def rope(x: np.ndarray, heads: int, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Each head's pairs (i, i + half) rotated: (a cos - b sin, b cos + a sin)."""
    v = x.reshape(heads, 2, -1)
    a, b = v[:, 0], v[:, 1]
    return np.stack([a * cos - b * sin, b * cos + a * sin], axis=1).astype(F32).reshape(-1)


def gelu_new(x: np.ndarray) -> np.ndarray:
    inner = (x + ((F32(0.044715) * x).astype(F32) * x).astype(F32) * x).astype(F32)
    t = c_tanh((F32(0.797884583) * inner).astype(F32))
    return ((F32(0.5) * x).astype(F32) * (F32(1) + t)).astype(F32)


def attend(q: np.ndarray, keys: np.ndarray, vals: np.ndarray, scale: float) -> np.ndarray:
    """One head over its cached positions: softmax(scale * K q) V, as the engine sums."""
    s = seq_sum(keys * q[None, :], axis=1)
    if scale != 1:
        s = (s * F32(scale)).astype(F32)
    e = c_exp((s - s.max()).astype(F32))
    p = (e / seq_sum(e)).astype(F32)
    return seq_sum(p[:, None] * vals, axis=0)


class Executor:
    def __init__(self, graph: TransformerGraph):
        c, kv = graph.config, graph.kv
        self.graph, self.c, self.kv = graph, c, kv
        self.position = 0
        table = graph.weights["wte"]
        self.embed = table if isinstance(table, np.ndarray) else table.dequantize()
        shape = (c.layers, kv.context, c.kv_dim)
        dtype = F32 if kv.format == "f32" else np.int8
        self.keys, self.values = np.zeros(shape, dtype), np.zeros(shape, dtype)
        if kv.group:
            groups = (c.layers, kv.context, c.kv_dim // kv.group)
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

    def _rms_norm(self, op: RmsNorm) -> None:
        self.buffers[op.out] = rms_norm(self.buffers[op.x], self.graph.weights[op.weight], op.eps)

    def _rope(self, op: Rope) -> None:
        w = self.graph.weights
        if op.inv is not None:  # computed: angle = position * inv in float32, the engine's sine and cosine
            sin, cos = c_sincos((F32(self.position) * w[op.inv]).astype(F32))
        else:
            cos, sin = w[op.cos][self.position], w[op.sin][self.position]
        self.buffers[op.x] = rope(self.buffers[op.x], op.heads, cos, sin)

    def _swiglu(self, op: SwiGlu) -> None:
        self.buffers[op.gate] = silu_mul(self.buffers[op.gate], self.buffers[op.up])

    def _matmul(self, op: MatMul) -> None:
        y = Q.matvec(self.graph.weights[op.weight], self.buffers[op.x])
        self.buffers[op.out] = y if op.bias is None else (y + self.graph.weights[op.bias]).astype(F32)

    def _quantize_input(self, op: QuantizeInput) -> None:
        pass  # Q.matvec quantizes its input itself: the same blocks the engine makes once

    def _head_select(self, op: HeadSelect) -> None:
        y = Q.matvec(self.graph.weights[op.weight], self.buffers[op.x])  # the rows do not depend on the blocks
        best = np.argsort(-y, kind="stable")[:op.k]  # ties: the lower id first, as the engine keeps them
        self.buffers[op.ids], self.buffers[op.values] = best.astype(np.int32), y[best]

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
        group = op.heads // op.kv_heads
        for hd in range(op.heads):
            att[hd] = attend(qh[hd], keys[:, hd // group], vals[:, hd // group], op.scale)
        self.buffers[op.out] = att.reshape(-1)

    RUN = {Embedding: _embedding, PositionEmbedding: _position, LayerNorm: _layer_norm, RmsNorm: _rms_norm,
           Rope: _rope, QuantizeInput: _quantize_input, MatMul: _matmul, HeadSelect: _head_select, Gelu: _gelu, SwiGlu: _swiglu, Add: _add, Attention: _attention}

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
        return (keys.reshape(len(slots), c.kv_heads, c.head_dim), vals.reshape(len(slots), c.kv_heads, c.head_dim))

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

    def outputs(self) -> list[np.ndarray]:
        """Every output of the last step, in the engine's order."""
        return [self.buffers[name] for name in self.graph.outputs]


def Session(model, context: int | None = None, weights: str = "f32", kv: str = "f32",
            kv_group: int | None = None, logits: str = "full") -> Executor:
    """The executor of ``model`` (a Checkpoint, or a reader's record with ``as_checkpoint``) after
    the --weights, --kv-cache and --logits passes (``context``
    clipped to the model's positions). ``step`` returns output 0: the logits, or the selected ids."""
    graph = quantize_weights(lower(model if isinstance(model, Checkpoint) else model.as_checkpoint()), weights)[0]
    context = min(context or model.config.max_positions, model.config.max_positions)
    return Executor(select_logits(cache_kv(graph, kv, context, kv_group), logits))
