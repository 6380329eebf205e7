"""The typed IR of a decoder-only transformer, one token per run: what the numpy executor
(``deployer/decoder_executor.py``) interprets and the C emitter (``deployer/llm_emit.py``) prints
op by op. One lowering for every family: the checkpoint's block specification
(``network_parser.decoder.DecoderConfig``) picks the norm, the position encoding, the attention's
KV grouping, the MLP and the head.

    graph = lower(read_checkpoint("model.safetensors"))
    graph.ops          # GPT-Neo: Embedding, PositionEmbedding, then per layer LayerNorm, MatMul x3,
                       # Attention, MatMul, Add, LayerNorm, MatMul, Gelu, MatMul, Add; then
                       # LayerNorm, MatMul (logits). LLaMA: RmsNorm, Rope on q and k, SwiGlu.
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

import numpy as np

from .decoder import Checkpoint, DecoderConfig

DTYPE_BYTES = {"float32": 4, "int32": 4, "int16": 2, "int8": 1}


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
class RmsNorm:
    """out = x / sqrt(mean(x^2) + eps) * weight, over the one vector."""
    x: str
    out: str
    weight: str
    eps: float
    _acts = ("x", "out")


@dataclass(frozen=True, slots=True)
class Rope:
    """Rotary position embedding of ``heads`` vectors of ``head_dim`` in x, in place: the pairs
    (i, i + head_dim/2) rotated by the position's angles. Their cosines and sines are read from
    the tables ``cos`` and ``sin`` [positions, head_dim/2] (float32, made once at lowering: the C
    reads the same numbers), or, with ``inv`` (the inverse frequencies [head_dim/2]) instead,
    computed for the position: angle = position * inv[i] in float32, its sine and cosine by the
    engine's own range reduction and polynomials."""
    x: str
    heads: int
    cos: str | None
    sin: str | None
    inv: str | None = None
    _acts = ("x",)


@dataclass(frozen=True, slots=True)
class QuantizeInput:
    """x (``cols`` floats) into int8 blocks of 32 with a float32 scale each (the scratch XQ / XS),
    once for every quantized matvec that follows and reads the same x (q, k, v; gate, up)."""
    x: str
    cols: int
    _acts = ("x",)


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
class HeadSelect:
    """The head's matvec streamed ``block`` rows at a time into a running top-k: ``ids`` the k
    most likely token ids, best first (a tie keeps the lower id first), ``values`` their logits.
    The float logits row of the whole vocabulary never exists (--logits argmax, topk:K)."""
    x: str
    ids: str
    values: str
    weight: str
    rows: int
    cols: int
    k: int
    block: int
    _acts = ("x", "ids", "values")


@dataclass(frozen=True, slots=True)
class Gelu:
    """x = gelu(x), tanh form (GPT-2's gelu_new), in place."""
    x: str
    _acts = ("x",)


@dataclass(frozen=True, slots=True)
class SwiGlu:
    """gate = silu(gate) * up, in place (the LLaMA MLP's gated activation)."""
    gate: str
    up: str
    _acts = ("gate", "up")


@dataclass(frozen=True, slots=True)
class Attention:
    """Causal self-attention over the KV cache of ``layer``: store k and v at the position, then
    per query head softmax(scale * K q) V over the cached positions, the last ``window`` only
    when set (local layers). Query head h reads KV head h // (heads / kv_heads) (grouped
    attention); GPT-Neo: as many KV heads as queries and scale 1."""
    layer: int
    q: str
    k: str
    v: str
    out: str
    heads: int
    window: int | None
    kv_heads: int
    scale: float
    _acts = ("q", "k", "v", "out")


@dataclass(frozen=True, slots=True)
class Add:
    """x += y (the residual connection)."""
    x: str
    y: str
    _acts = ("x", "y")


Op = Union[Embedding, PositionEmbedding, LayerNorm, RmsNorm, Rope, QuantizeInput, MatMul, HeadSelect, Gelu, SwiGlu, Attention, Add]


def op_buffers(op: Op) -> tuple[str, ...]:
    return tuple(getattr(op, f) for f in op._acts)


def op_summary(op: Op) -> str:
    """One line, as the generated C's comments and --dump-ir print it."""
    args = ", ".join(f"{f.name}={getattr(op, f.name)}" for f in fields(op) if getattr(op, f.name) is not None)
    return f"{type(op).__name__}({args})"


def op_macs(op, graph) -> int:
    """An op's multiply-accumulates for one token: a matrix's rows x cols; attention's over a
    full cache (two per cached position and head dimension: the scores and the weighted sum)."""
    if isinstance(op, (MatMul, HeadSelect)):
        return op.rows * op.cols
    if isinstance(op, Attention):
        return 2 * op.heads * graph.config.head_dim * graph.kv.context
    return 0


@dataclass(frozen=True, slots=True)
class KvCache:
    format: str  # "f32" | "int8" | "int4"
    context: int  # positions kept per layer; once full the oldest is dropped
    group: int  # values per float32 scale (0 for f32)


@dataclass(frozen=True)
class StreamedMatrix:
    """A matrix in L3 (--l3): its codes (or floats) at ``codes``, its scales at ``scales`` (L3
    addresses), fetched ``rows`` rows at a time into one half of the stream buffer while the
    other half is multiplied."""
    name: str
    codes: int
    scales: int
    row_bytes: int  # codes and scales of one row
    rows: int


@dataclass(frozen=True)
class L3Weights:
    matrices: tuple[StreamedMatrix, ...]
    bytes: int  # the L3 image
    buffer: int  # the stream buffer: two blocks of the largest fetch

    def get(self, name: str) -> StreamedMatrix | None:
        return next((m for m in self.matrices if m.name == name), None)


@dataclass(frozen=True)
class TransformerGraph:
    name: str
    config: DecoderConfig
    activations: tuple[Activation, ...]
    ops: tuple[Op, ...]
    weights: dict = field(compare=False, repr=False)  # name -> np.ndarray, or a quantized matrix
    kv: KvCache = KvCache("f32", 1, 0)
    weight_format: str = "f32"  # "f32" | "int8" | "q4_0": the matrices' format
    token: str = "TOKEN"
    logits: str = "LOGITS"  # output 0: the float logits, or the selected ids (--logits argmax|topk:K)
    outputs: tuple[str, ...] = ("LOGITS",)  # what the caller reads, in output order
    l3: L3Weights | None = None  # --l3: the matrices streamed from external memory

    def activation(self, name: str) -> Activation:
        return next(a for a in self.activations if a.name == name)

    def matrices(self) -> list[str]:
        """The embedding table and the weights that MatMul ops multiply by (the head among them,
        the embedding itself when tied): what --weights quantizes."""
        return list(dict.fromkeys(["wte", *(op.weight for op in self.ops if isinstance(op, (MatMul, HeadSelect)))]))

    @property
    def head(self) -> str:
        """The matrix of the head: ``wte`` when tied."""
        return next(op.weight for op in self.ops if isinstance(op, HeadSelect)
                    or isinstance(op, MatMul) and op.out == self.logits)

    @property
    def selection(self) -> HeadSelect | None:
        return next((op for op in self.ops if isinstance(op, HeadSelect)), None)


# ---- scratch: buffers an op needs only while it runs, set by the passes' formats ---------------

SCRATCH_BLOCK = 32  # a quantized MatMul's input is quantized in int8 blocks of 32


def scratch(graph: TransformerGraph, op: Op, input_pairs: bool = False) -> tuple[Activation, ...]:
    """``input_pairs``: the matvec's kernel family reads XQ as int16 pairs (KernelFamily.llm_input_pairs)."""
    quantized = graph.weight_format != "f32"
    if isinstance(op, (QuantizeInput, MatMul, HeadSelect)) and quantized:
        cols = max(padded(o.cols) for o in graph.ops if isinstance(o, (MatMul, HeadSelect)))
        blocks = (Activation("XQ", cols, "int16", "int8 codes of a matmul input as int16 pairs") if input_pairs
                  else Activation("XQ", cols, "int8", "int8 blocks of a matmul input"),
                  Activation("XS", cols // SCRATCH_BLOCK, "float32", "their scales"),
                  Activation("XSUM", 2 * cols // SCRATCH_BLOCK, "int32", "their code sums times -8, each beside its scale's bits"))
    else:
        blocks = ()
    stream = ()
    if graph.l3 is not None and isinstance(op, (Embedding, MatMul, HeadSelect)) and \
            graph.l3.get(op.table if isinstance(op, Embedding) else op.weight):
        stream = (Activation("WBUF", graph.l3.buffer, "int8", "two blocks of rows streamed from L3"),)
    if isinstance(op, HeadSelect):
        return (*blocks, *stream, Activation("ROWS", op.block, "float32", "a block of the head's logits"))
    if isinstance(op, (QuantizeInput, MatMul)):
        return (*blocks, *stream)
    if isinstance(op, Embedding):
        return stream
    if isinstance(op, Attention):
        return (Activation("SCORES", graph.kv.context, "float32", "attention scores of one head"),)
    return ()


def lifetimes(graph: TransformerGraph, input_pairs: bool = False) -> list[tuple[Activation, int, int]]:
    """(buffer, first op, last op) for every activation and scratch buffer; the token is live from
    op 0 (the caller writes it), the logits to the last op (the caller reads them). ``input_pairs``:
    as scratch."""
    span: dict[str, list[int]] = {graph.token: [0, 0], **{o: [len(graph.ops) - 1] * 2 for o in graph.outputs}}
    acts = {a.name: a for a in graph.activations}
    for k, op in enumerate(graph.ops):
        for s in scratch(graph, op, input_pairs):
            acts.setdefault(s.name, s)
        for name in (*op_buffers(op), *(s.name for s in scratch(graph, op, input_pairs))):
            s = span.setdefault(name, [k, k])
            s[0], s[1] = min(s[0], k), max(s[1], k)
    return [(acts[n], first, last) for n, (first, last) in span.items()]


def padded(cols: int) -> int:
    """A quantized matrix's stored row length: whole blocks of 32, the last one zero-padded."""
    return -(-cols // SCRATCH_BLOCK) * SCRATCH_BLOCK


def rope_inverse_frequencies(c: DecoderConfig) -> np.ndarray:
    """theta^(-2i/head_dim), computed in float64 and rounded once to float32."""
    return (c.rope_theta ** (-np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim)).astype(np.float32)


def rope_tables(c: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [positions, head_dim/2] of position p times theta^(-2i/head_dim), computed in
    float64 and rounded once to float32."""
    inv = c.rope_theta ** (-np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim)
    angles = np.arange(c.max_positions, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def lower(ckpt: Checkpoint) -> TransformerGraph:
    """The checkpoint as ops over named weights (float32, as read), as its block spec says."""
    c, w = ckpt.config, dict(ckpt.weights)
    d, n, qd, kvd = c.d_model, c.inner, c.q_dim, c.kv_dim
    bias = lambda name, on: name + ".bias" if on else None  # noqa: E731

    def norm(x: str, out: str, p: str) -> Op:
        if c.norm == "rms_norm":
            return RmsNorm(x, out, p + ".weight", c.eps)
        return LayerNorm(x, out, p + ".weight", p + ".bias", c.eps)
    ops: list[Op] = [Embedding("TOKEN", "X", "wte")]
    if c.position == "learned":
        ops.append(PositionEmbedding("X", "wpe"))
    else:
        w["rope.cos"], w["rope.sin"] = rope_tables(c)
    qb, kb, vb, ob = c.attention_bias
    for i in range(c.layers):
        p = f"h.{i}."
        ops += [norm("X", "H", p + "ln_1"),
                MatMul("H", "QV", p + "q_proj", bias(p + "q_proj", qb), qd, d),
                MatMul("H", "KV", p + "k_proj", bias(p + "k_proj", kb), kvd, d),
                MatMul("H", "VV", p + "v_proj", bias(p + "v_proj", vb), kvd, d)]
        if c.position == "rope":
            ops += [Rope("QV", c.heads, "rope.cos", "rope.sin"), Rope("KV", c.kv_heads, "rope.cos", "rope.sin")]
        ops += [Attention(i, "QV", "KV", "VV", "ATT", c.heads, c.window if c.attention[i] == "local" else None,
                          c.kv_heads, c.score_scale),
                MatMul("ATT", "T", p + "out_proj", bias(p + "out_proj", ob), d, qd),
                Add("X", "T"),
                norm("X", "H", p + "ln_2")]
        if c.mlp == "swiglu":
            ops += [MatMul("H", "FF", p + "gate_proj", bias(p + "gate_proj", c.mlp_bias), n, d),
                    MatMul("H", "UP", p + "up_proj", bias(p + "up_proj", c.mlp_bias), n, d),
                    SwiGlu("FF", "UP"),
                    MatMul("FF", "T", p + "down_proj", bias(p + "down_proj", c.mlp_bias), d, n)]
        else:
            ops += [MatMul("H", "FF", p + "c_fc", bias(p + "c_fc", c.mlp_bias), n, d),
                    Gelu("FF"),
                    MatMul("FF", "T", p + "c_proj", bias(p + "c_proj", c.mlp_bias), d, n)]
        ops.append(Add("X", "T"))
    ops += [norm("X", "H", "ln_f"),
            MatMul("H", "LOGITS", "wte" if c.tied else "head", None, c.vocab, d)]
    norm_what = "RMSNorm output" if c.norm == "rms_norm" else "LayerNorm output"
    acts = [Activation("TOKEN", 1, "int32", "the input token id"),
            Activation("X", d, "float32", "the residual stream"),
            Activation("H", d, "float32", norm_what),
            Activation("QV", qd, "float32", "query"), Activation("KV", kvd, "float32", "key"),
            Activation("VV", kvd, "float32", "value"),
            Activation("ATT", qd, "float32", "attention output"),
            Activation("T", d, "float32", "a sublayer's output before the residual add"),
            Activation("FF", n, "float32", "MLP hidden" + (" (the gate)" if c.mlp == "swiglu" else ""))]
    if c.mlp == "swiglu":
        acts.append(Activation("UP", n, "float32", "MLP hidden (the up projection)"))
    acts.append(Activation("LOGITS", c.vocab, "float32", "the output logits"))
    return TransformerGraph(ckpt.name, c, tuple(acts), tuple(ops), w, KvCache("f32", c.max_positions, 0))
