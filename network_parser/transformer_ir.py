"""The typed IR of a decoder-only transformer, one token per run: what the numpy executor
(``deployer/gptneo_golden.py``) interprets and the C emitter (``deployer/llm_emit.py``) prints
op by op.

    graph = lower_gptneo(read_gptneo("model.safetensors"))
    graph.ops          # Embedding, PositionEmbedding, then per layer LayerNorm, MatMul x3, Attention,
                       # MatMul, Add, LayerNorm, MatMul, Gelu, MatMul, Add; then LayerNorm, MatMul (logits)
    lifetimes(graph)   # what the arena planner sees

Activations are per-token buffers named as the C macros that hold them; several ops may write
one buffer (the residual stream ``X`` is added to in place), so a buffer lives from the first op
that touches it to the last. Weights are named tensors (float32 as read; the ``--weights`` pass
replaces the matrices by quantized ones). The KV cache is not an activation: it outlives the
run, so it sits in ``.bss`` beside the arena, described by ``graph.kv``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Union

from .gptneo import GptNeo, GptNeoConfig

DTYPE_BYTES = {"float32": 4, "int32": 4, "int8": 1}


@dataclass(frozen=True, slots=True)
class Activation:
    name: str
    elements: int
    dtype: str
    what: str

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]


# ---- ops: each field that names an activation is listed in ``_acts`` --------------------------

@dataclass(frozen=True, slots=True)
class Embedding:
    """out = table[token]: a row of the token embedding (dequantized when the table is)."""
    token: str
    out: str
    table: str
    _acts = ("token", "out")


@dataclass(frozen=True, slots=True)
class PositionEmbedding:
    """x += table[position]."""
    x: str
    table: str
    _acts = ("x",)


@dataclass(frozen=True, slots=True)
class LayerNorm:
    """out = (x - mean) / sqrt(var + eps) * weight + bias, over the one vector."""
    x: str
    out: str
    weight: str
    bias: str
    eps: float
    _acts = ("x", "out")


@dataclass(frozen=True, slots=True)
class MatMul:
    """out = W x (+ bias), W rows x cols as stored (out x in)."""
    x: str
    out: str
    weight: str
    bias: str | None
    rows: int
    cols: int
    _acts = ("x", "out")


@dataclass(frozen=True, slots=True)
class Gelu:
    """x = gelu(x), tanh form (GPT-2's gelu_new), in place."""
    x: str
    _acts = ("x",)


@dataclass(frozen=True, slots=True)
class Attention:
    """Causal self-attention over the KV cache of ``layer``: store k and v at the position, then
    per head softmax(K q) V over the cached positions, the last ``window`` only when set (local
    layers). GPT-Neo: no 1/sqrt(head_dim) scaling."""
    layer: int
    q: str
    k: str
    v: str
    out: str
    heads: int
    window: int | None
    _acts = ("q", "k", "v", "out")


@dataclass(frozen=True, slots=True)
class Add:
    """x += y (the residual connection)."""
    x: str
    y: str
    _acts = ("x", "y")


Op = Union[Embedding, PositionEmbedding, LayerNorm, MatMul, Gelu, Attention, Add]


def op_buffers(op: Op) -> tuple[str, ...]:
    return tuple(getattr(op, f) for f in op._acts)


def op_summary(op: Op) -> str:
    """One line, as the generated C's comments and --dump-ir print it."""
    args = ", ".join(f"{f.name}={getattr(op, f.name)}" for f in fields(op) if getattr(op, f.name) is not None)
    return f"{type(op).__name__}({args})"


@dataclass(frozen=True, slots=True)
class KvCache:
    format: str  # "f32" | "int8" | "int4"
    context: int  # positions kept per layer; once full the oldest is dropped
    group: int  # values per float32 scale (0 for f32)


@dataclass(frozen=True)
class TransformerGraph:
    name: str
    config: GptNeoConfig
    activations: tuple[Activation, ...]
    ops: tuple[Op, ...]
    weights: dict = field(compare=False, repr=False)  # name -> np.ndarray, or a quantized matrix
    kv: KvCache = KvCache("f32", 1, 0)
    weight_format: str = "f32"  # "f32" | "int8" | "q4_0": the matrices' format
    token: str = "TOKEN"
    logits: str = "LOGITS"

    def activation(self, name: str) -> Activation:
        return next(a for a in self.activations if a.name == name)

    def matrices(self) -> list[str]:
        """The weights that MatMul ops multiply by (the embedding table among them: the head is tied)."""
        return list(dict.fromkeys(op.weight for op in self.ops if isinstance(op, MatMul)))


# ---- scratch: buffers an op needs only while it runs, set by the passes' formats ---------------

SCRATCH_BLOCK = 32  # a quantized MatMul's input is quantized in int8 blocks of 32


def scratch(graph: TransformerGraph, op: Op) -> tuple[Activation, ...]:
    if isinstance(op, MatMul) and graph.weight_format != "f32":
        cols = max(o.cols for o in graph.ops if isinstance(o, MatMul))
        return (Activation("XQ", cols, "int8", "int8 blocks of a matmul input"),
                Activation("XS", cols // SCRATCH_BLOCK, "float32", "their scales"))
    if isinstance(op, Attention):
        return (Activation("SCORES", graph.kv.context, "float32", "attention scores of one head"),)
    return ()


def lifetimes(graph: TransformerGraph) -> list[tuple[Activation, int, int]]:
    """(buffer, first op, last op) for every activation and scratch buffer; the token is live from
    op 0 (the caller writes it), the logits to the last op (the caller reads them)."""
    span: dict[str, list[int]] = {graph.token: [0, 0], graph.logits: [len(graph.ops) - 1] * 2}
    acts = {a.name: a for a in graph.activations}
    for k, op in enumerate(graph.ops):
        for s in scratch(graph, op):
            acts.setdefault(s.name, s)
        for name in (*op_buffers(op), *(s.name for s in scratch(graph, op))):
            s = span.setdefault(name, [k, k])
            s[0], s[1] = min(s[0], k), max(s[1], k)
    return [(acts[n], first, last) for n, (first, last) in span.items()]


def lower_gptneo(model: GptNeo) -> TransformerGraph:
    """The checkpoint as ops over named weights (float32, as read)."""
    c = model.config
    d, n = c.d_model, c.inner
    weights = {"wte": model.wte, "wpe": model.wpe, "ln_f.weight": model.ln_f[0], "ln_f.bias": model.ln_f[1]}
    ops: list[Op] = [Embedding("TOKEN", "X", "wte"), PositionEmbedding("X", "wpe")]
    for i, b in enumerate(model.blocks):
        p = f"h.{i}."
        weights.update({p + "ln_1.weight": b.ln_1[0], p + "ln_1.bias": b.ln_1[1], p + "q_proj": b.q,
                        p + "k_proj": b.k, p + "v_proj": b.v, p + "out_proj": b.out[0], p + "out_proj.bias": b.out[1],
                        p + "ln_2.weight": b.ln_2[0], p + "ln_2.bias": b.ln_2[1], p + "c_fc": b.fc[0],
                        p + "c_fc.bias": b.fc[1], p + "c_proj": b.proj[0], p + "c_proj.bias": b.proj[1]})
        ops += [LayerNorm("X", "H", p + "ln_1.weight", p + "ln_1.bias", c.eps),
                MatMul("H", "QV", p + "q_proj", None, d, d),
                MatMul("H", "KV", p + "k_proj", None, d, d),
                MatMul("H", "VV", p + "v_proj", None, d, d),
                Attention(i, "QV", "KV", "VV", "ATT", c.heads, c.window if c.attention[i] == "local" else None),
                MatMul("ATT", "T", p + "out_proj", p + "out_proj.bias", d, d),
                Add("X", "T"),
                LayerNorm("X", "H", p + "ln_2.weight", p + "ln_2.bias", c.eps),
                MatMul("H", "FF", p + "c_fc", p + "c_fc.bias", n, d),
                Gelu("FF"),
                MatMul("FF", "T", p + "c_proj", p + "c_proj.bias", d, n),
                Add("X", "T")]
    ops += [LayerNorm("X", "H", "ln_f.weight", "ln_f.bias", c.eps),
            MatMul("H", "LOGITS", "wte", None, c.vocab, d)]  # the head, tied to the token embedding
    acts = (Activation("TOKEN", 1, "int32", "the input token id"),
            Activation("X", d, "float32", "the residual stream"),
            Activation("H", d, "float32", "LayerNorm output"),
            Activation("QV", d, "float32", "query"), Activation("KV", d, "float32", "key"),
            Activation("VV", d, "float32", "value"),
            Activation("ATT", d, "float32", "attention output"),
            Activation("T", d, "float32", "a sublayer's output before the residual add"),
            Activation("FF", n, "float32", "MLP hidden"),
            Activation("LOGITS", c.vocab, "float32", "the output logits"))
    return TransformerGraph(model.name, c, acts, tuple(ops), weights, KvCache("f32", c.max_positions, 0))
