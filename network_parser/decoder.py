"""The block specification of a decoder-only transformer: what each family's reader finds in its
``config.json`` and the one lowering (``transformer_ir.lower``) turns into ops. GPT-Neo and the
LLaMA family (llama, mistral, qwen2) are two settings of the same fields:

    field       GPT-Neo                          LLaMA family
    norm        layer_norm (weight and bias)     rms_norm (weight)
    position    learned table added to x         rope: q and k rotated by the position
    attention   q, k, v of every head; no        grouped: kv_heads <= heads share K/V;
                score scaling; local layers      scores scaled by 1/sqrt(head_dim)
    mlp         gelu_new(fc x + b), proj         down(silu(gate x) * up x)
    head        tied to the embedding            tied or its own matrix
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class DecoderConfig:
    architecture: str  # "gpt_neo" | "llama": the family the checkpoint was read as
    vocab: int
    d_model: int
    heads: int
    layers: int
    inner: int  # the MLP's hidden width
    max_positions: int
    window: int  # local layers' window (GPT-Neo); unused when no layer is local
    attention: tuple[str, ...]  # "global" | "local", per layer
    eps: float = 1e-5
    eos: int | None = None  # the end-of-text token, when config.json names one inside the vocabulary
    kv_heads: int = 0  # heads of K and V (0: as many as the queries')
    head_dim: int = 0  # 0: d_model / heads
    norm: str = "layer_norm"  # "layer_norm" | "rms_norm"
    position: str = "learned"  # "learned" | "rope"
    rope_theta: float = 10000.0
    mlp: str = "gelu_new"  # "gelu_new" | "swiglu"
    score_scale: float = 1.0  # attention scores times this before the softmax
    tied: bool = True  # the head is the embedding table
    attention_bias: tuple[bool, bool, bool, bool] = (False, False, False, True)  # q, k, v, out
    mlp_bias: bool = True
    bos: int | None = None  # the token a prompt starts with, when config.json names one (LLaMA)

    def __post_init__(self):
        object.__setattr__(self, "kv_heads", self.kv_heads or self.heads)
        object.__setattr__(self, "head_dim", self.head_dim or self.d_model // self.heads)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """A position's key (or value) row: every KV head's."""
        return self.kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    def summary(self) -> str:
        """One line for the CLI and the report."""
        kv = f" ({self.kv_heads} KV heads)" if self.kv_heads != self.heads else ""
        family = {"gpt_neo": "GPT-Neo", "llama": "LLaMA-family"}[self.architecture]
        return (f"{family}: {self.layers} layers, d_model {self.d_model}, {self.heads} heads{kv}, MLP {self.inner}, "
                f"vocabulary {self.vocab:,}, {self.max_positions} positions")


@dataclass(frozen=True)
class Checkpoint:
    """A decoder as read: its block specification and its float32 weights under the lowering's
    names (``wte``, ``wpe``, ``head`` when untied, ``h.N.ln_1.weight``, ``h.N.q_proj``, ...)."""
    name: str
    config: DecoderConfig
    weights: dict = field(repr=False)
    source: Path | None = None
