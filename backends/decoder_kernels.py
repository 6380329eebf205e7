"""A language model's kernels: which kernel runs each op of the transformer IR
(network_parser.transformer_ir), as a network's layers take theirs from backends.variants.

The engine's own functions (templates/llm/engine.c.j2: norms, rotary embeddings, attention over
the KV cache, the portable matvecs) run every op; a kernel family with a language-model matvec
(``KernelFamily.llm_formats``: its templates' llm.c.j2) takes the matrices of the formats it
knows (the matvecs, streamed or not, and the head's running selection), Q4_0 codes laid out its
own way (``llm_q4_pack``). One family lays out every matrix: the codes are packed once for the engine.
"""
from __future__ import annotations

from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, HeadSelect, LayerNorm, MatMul,
                                           PositionEmbedding, QuantizeInput, RmsNorm, Rope, SwiGlu)

from .family import KernelFamily
from .variants import Variant

ENGINE = "llm/engine.c.j2"  # the engine's own functions


def decoder_family(families: tuple[KernelFamily, ...], kernels: str, weight_format: str) -> KernelFamily | None:
    """The family whose matvec runs the matrices: the first of the target's with one for the
    weights' format ("auto"), the one --kernels names if it has one, none for "plain"."""
    if kernels == "plain":
        return None
    chosen = [f for f in families if kernels in ("auto", f.name)]
    return next((f for f in chosen if weight_format in f.llm_formats), None)


def _portable_name(op, graph, streamed: bool) -> str:
    fmt, kv = graph.weight_format, graph.kv.format
    match op:
        case Embedding():
            return "embedding_l3" if streamed else f"embedding_{fmt}"
        case PositionEmbedding():
            return "add_position_f32"
        case LayerNorm():
            return "layer_norm_f32"
        case RmsNorm():
            return "rms_norm_f32"
        case Rope():
            return "rope_compute_f32" if op.inv is not None else "rope_table_f32"
        case QuantizeInput():
            return "quantize_q8_blocks"
        case MatMul():
            return f"matvec_{fmt}" + ("_l3" if streamed else "")
        case HeadSelect():
            return f"head_{'argmax' if op.k == 1 else 'topk'}_{fmt}" + ("_l3" if streamed else "")
        case Attention():
            return f"attention_kv_{kv}"
        case Gelu():
            return "gelu_f32"
        case SwiGlu():
            return "swiglu_f32"
        case Add():
            return "add_f32"
    raise TypeError(f"no kernel for {type(op).__name__}")


def choose_decoder(op, graph, family: KernelFamily | None, streamed: bool = False) -> Variant:
    """The kernel that runs ``op`` of ``graph`` (a TransformerGraph after its passes; ``streamed``:
    its matrix streams from L3)."""
    name = _portable_name(op, graph, streamed)
    if family is not None and isinstance(op, (MatMul, HeadSelect)):
        return Variant(f"{name}_{family.name}", family.llm_template, "matvec", dsp=True, layout=family)
    return Variant(name, ENGINE, type(op).__name__)


def matrix_family(layers) -> KernelFamily | None:
    """The family whose matvec the plan's layers chose for the matrices (None: the engine's own)."""
    return next((lp.variant.layout for lp in layers if isinstance(lp.variant.layout, KernelFamily)), None)
