"""LLaMA-family decoders (model_type llama, mistral, qwen2) from ``model.safetensors`` +
``config.json`` (the Hugging Face layout) into the block specification and weights the one
lowering takes (``transformer_ir.lower``).

    model.embed_tokens.weight                       [vocab, d]
    model.layers.N.input_layernorm.weight           RMSNorm before attention
    model.layers.N.self_attn.{q,k,v,o}_proj.weight  q [heads*hd, d], k/v [kv_heads*hd, d], o [d, heads*hd]
    model.layers.N.post_attention_layernorm.weight  RMSNorm before the MLP
    model.layers.N.mlp.{gate,up,down}_proj.weight   SwiGLU: down(silu(gate x) * up x)
    model.norm.weight, lm_head.weight (absent or equal to the embedding when tied)

What the graph cannot express is refused with the field named: scaled rotary embeddings, sliding
windows, mixtures of experts, activations other than SiLU.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .decoder import Checkpoint, DecoderConfig
from .errors import ModelFormatError, UnsupportedOperator
from .ir import name_text
from .safetensors_reader import read_safetensors, take_float
from .side_files import CONFIG_BYTES, brief, is_id, read_json_object

FAMILY = ("llama", "mistral", "qwen2")
_MOE = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


def read_config(path: Path) -> DecoderConfig:
    cfg_path = path.with_name("config.json")
    if not cfg_path.exists() and not cfg_path.is_symlink():
        raise ModelFormatError(f"{path}: a LLaMA-family model needs its config.json beside it ({cfg_path} is missing)")
    cfg = read_json_object(cfg_path, what="the model's configuration", max_bytes=CONFIG_BYTES)
    kind = cfg.get("model_type")

    def refuse(key: str, why: str):
        raise UnsupportedOperator(f"{cfg_path}: {key} {brief(cfg.get(key))}: {why}")

    def integer(key, default=None):
        value = cfg.get(key, default)
        if not is_id(value) or value <= 0:
            raise ModelFormatError(f"{cfg_path}: {key} must be a positive integer, got {brief(value)}")
        return value

    def number(value, key: str) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ModelFormatError(f"{cfg_path}: {key} must be a positive number, got {brief(value)}")
        return float(value)

    for key in _MOE:
        if cfg.get(key):
            refuse(key, "mixtures of experts are not supported")
    if cfg.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "only silu (SwiGLU) is supported")
    if cfg.get("sliding_window") is not None and (kind == "mistral" or cfg.get("use_sliding_window")):
        refuse("sliding_window", "sliding-window attention is not implemented for this family")
    rope = cfg.get("rope_scaling") or None
    params = cfg.get("rope_parameters")  # transformers 5 moves rope_theta here
    params = params if isinstance(params, dict) else {}
    if rope is not None and (not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) != "default"):
        refuse("rope_scaling", "scaled rotary embeddings are not supported")
    if params.get("rope_type", "default") != "default":
        raise UnsupportedOperator(f"{cfg_path}: rope_parameters.rope_type {brief(params.get('rope_type'))}: "
                                  f"scaled rotary embeddings are not supported")
    theta = number(params.get("rope_theta", cfg.get("rope_theta", 10000.0)), "rope_theta")
    d, heads, layers = integer("hidden_size"), integer("num_attention_heads"), integer("num_hidden_layers")
    kv_heads = integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ModelFormatError(f"{cfg_path}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
                               f"{kv_heads}")
    head_dim = integer("head_dim") if cfg.get("head_dim") is not None else d // heads
    if cfg.get("head_dim") is None and d % heads:
        raise ModelFormatError(f"{cfg_path}: hidden_size {d} is not a multiple of num_attention_heads {heads}")
    if head_dim % 2:
        raise ModelFormatError(f"{cfg_path}: head_dim {head_dim} is odd: rotary embeddings rotate pairs")
    eps = number(cfg.get("rms_norm_eps", 1e-6), "rms_norm_eps")
    for key in ("attention_bias", "mlp_bias", "tie_word_embeddings"):
        if not isinstance(cfg.get(key, False), bool):
            raise ModelFormatError(f"{cfg_path}: {key} must be true or false, got {brief(cfg.get(key))}")
    qkv = kind == "qwen2" or cfg.get("attention_bias", False)  # qwen2: q, k, v always have a bias
    vocab = integer("vocab_size")
    eos, bos = cfg.get("eos_token_id"), cfg.get("bos_token_id")
    eos = eos if is_id(eos) and 0 <= eos < vocab else None
    bos = bos if is_id(bos) and 0 <= bos < vocab else None
    positions = integer("max_position_embeddings")
    return DecoderConfig("llama", vocab, d, heads, layers, integer("intermediate_size"), positions, positions,
                         ("global",) * layers, eps, eos, kv_heads=kv_heads, head_dim=head_dim, norm="rms_norm",
                         position="rope", rope_theta=theta, mlp="swiglu", score_scale=1 / math.sqrt(head_dim),
                         tied=cfg.get("tie_word_embeddings", False),
                         attention_bias=(qkv, qkv, qkv, kind != "qwen2" and cfg.get("attention_bias", False)),
                         mlp_bias=cfg.get("mlp_bias", False), bos=bos)


def model_type(path: Path) -> object:
    """config.json's model_type beside ``path`` (None when there is no config.json)."""
    cfg_path = Path(path).with_name("config.json")
    if not cfg_path.exists() and not cfg_path.is_symlink():
        return None
    return read_json_object(cfg_path, what="the model's configuration", max_bytes=CONFIG_BYTES).get("model_type")


def read_llama(path: str | Path) -> Checkpoint:
    path = Path(path)
    tensors, dtypes, _ = read_safetensors(path)
    c = read_config(path)
    names = set(tensors)
    d, n, qd, kvd = c.d_model, c.inner, c.q_dim, c.kv_dim

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        return take_float(tensors, dtypes, names, path, name, shape, f"config.json: {c.layers} layers, hidden_size {d}")

    w = {"wte": get("model.embed_tokens.weight", (c.vocab, d)), "ln_f.weight": get("model.norm.weight", (d,))}
    qb, kb, vb, ob = c.attention_bias
    for i in range(c.layers):
        src, p = f"model.layers.{i}.", f"h.{i}."
        w[p + "ln_1.weight"] = get(src + "input_layernorm.weight", (d,))
        w[p + "ln_2.weight"] = get(src + "post_attention_layernorm.weight", (d,))
        for ours, theirs, rows, cols, has_bias in (("q_proj", "self_attn.q_proj", qd, d, qb),
                                                    ("k_proj", "self_attn.k_proj", kvd, d, kb),
                                                    ("v_proj", "self_attn.v_proj", kvd, d, vb),
                                                    ("out_proj", "self_attn.o_proj", d, qd, ob),
                                                    ("gate_proj", "mlp.gate_proj", n, d, c.mlp_bias),
                                                    ("up_proj", "mlp.up_proj", n, d, c.mlp_bias),
                                                    ("down_proj", "mlp.down_proj", d, n, c.mlp_bias)):
            w[p + ours] = get(src + theirs + ".weight", (rows, cols))
            if has_bias:
                w[p + ours + ".bias"] = get(src + theirs + ".bias", (rows,))
    if c.tied:
        if "lm_head.weight" in names:  # a tied head stored anyway: it must be the embedding
            if not np.array_equal(tensors["lm_head.weight"], w["wte"]):
                raise UnsupportedOperator(f"{path.name}: lm_head.weight differs from the embedding although "
                                          f"config.json says tie_word_embeddings")
            names.discard("lm_head.weight")
    else:
        w["head"] = get("lm_head.weight", (c.vocab, d))
    names = {x for x in names if not x.endswith(".rotary_emb.inv_freq")}  # older exports store it
    if names:
        raise ModelFormatError(f"{path.name}: tensors that a {c.layers}-layer LLaMA does not have: "
                               f"{', '.join(sorted(names)[:5])}")
    return Checkpoint(name_text(path.parent.name), c, w, path)
