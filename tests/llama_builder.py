"""Small random LLaMA-family checkpoints (llama, mistral, qwen2 configurations) written as
.safetensors + config.json, for the reader's and the engine's tests: grouped KV heads, an
explicit head_dim, untied heads, attention and MLP biases, MLP widths that are not whole
blocks of 32."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.gptneo_builder import encode


def config(vocab=96, d=32, heads=4, kv_heads=2, layers=2, inner=44, positions=16, head_dim=None, tied=True,
           model_type="llama", **extra) -> dict:
    cfg = {"model_type": model_type, "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": d,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": layers,
           "intermediate_size": inner, "max_position_embeddings": positions, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": tied, "bos_token_id": 1,
           "eos_token_id": 2}
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    return {**cfg, **extra}


def tensors(cfg: dict, seed: int = 0) -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    d, n, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kvh = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or d // heads
    qwen = cfg["model_type"] == "qwen2"
    attn_bias, mlp_bias = cfg.get("attention_bias", False), cfg.get("mlp_bias", False)
    out: dict[str, tuple[str, np.ndarray]] = {}
    mat = lambda name, shape: out.__setitem__(name, ("BF16", rng.normal(0, 0.2, shape)))  # noqa: E731
    vec = lambda name, size, mean=0.0: out.__setitem__(name, ("F32", mean + rng.normal(0, 0.1, size)))  # noqa: E731
    mat("model.embed_tokens.weight", (v, d))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        vec(p + "input_layernorm.weight", d, 1.0)
        vec(p + "post_attention_layernorm.weight", d, 1.0)
        for name, rows, cols, bias in (("self_attn.q_proj", heads * hd, d, attn_bias or qwen),
                                       ("self_attn.k_proj", kvh * hd, d, attn_bias or qwen),
                                       ("self_attn.v_proj", kvh * hd, d, attn_bias or qwen),
                                       ("self_attn.o_proj", d, heads * hd, attn_bias and not qwen),
                                       ("mlp.gate_proj", n, d, mlp_bias), ("mlp.up_proj", n, d, mlp_bias),
                                       ("mlp.down_proj", d, n, mlp_bias)):
            mat(p + name + ".weight", (rows, cols))
            if bias:
                vec(p + name + ".bias", rows)
    vec("model.norm.weight", d, 1.0)
    if not cfg.get("tie_word_embeddings", False):
        mat("lm_head.weight", (v, d))
    return out


def write(folder: Path, cfg: dict | None = None, seed: int = 0, tamper=None) -> Path:
    """folder/model.safetensors and folder/config.json; ``tamper(tensors)`` edits the tensors first."""
    cfg = cfg or config()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    ts = tensors(cfg, seed)
    if tamper is not None:
        tamper(ts)
    path = folder / "model.safetensors"
    path.write_bytes(encode(ts, {"format": "pt"}))
    return path
