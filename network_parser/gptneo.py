"""GPT-Neo from ``model.safetensors`` + ``config.json`` (the Hugging Face layout) into one typed
record: the configuration and every weight, checked against it.

    transformer.wte / wpe                          token and position embeddings
    transformer.h.N.ln_1, .attn.attention.{q,k,v}_proj (no bias), .out_proj (bias)
    transformer.h.N.ln_2, .mlp.c_fc, .mlp.c_proj   (weights [out, in], biases)
    transformer.ln_f                               final LayerNorm; the head is tied to wte
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .decoder import Checkpoint, DecoderConfig
from .errors import ModelFormatError, UnsupportedOperator
from .ir import name_text
from .safetensors_reader import read_safetensors, take_float
from .side_files import CONFIG_BYTES, brief, is_id, read_json_object


@dataclass(frozen=True)
class Block:
    ln_1: tuple[np.ndarray, np.ndarray]  # (weight, bias)
    q: np.ndarray  # [d, d] as stored: out x in
    k: np.ndarray
    v: np.ndarray
    out: tuple[np.ndarray, np.ndarray]
    ln_2: tuple[np.ndarray, np.ndarray]
    fc: tuple[np.ndarray, np.ndarray]  # [inner, d], [inner]
    proj: tuple[np.ndarray, np.ndarray]  # [d, inner], [d]


@dataclass(frozen=True)
class GptNeo:
    name: str
    config: DecoderConfig
    wte: np.ndarray  # [vocab, d], also the output head
    wpe: np.ndarray  # [positions, d]
    blocks: tuple[Block, ...]
    ln_f: tuple[np.ndarray, np.ndarray]
    dtypes: dict = field(default_factory=dict, repr=False)  # tensor name -> stored dtype
    source: Path | None = None

    def as_checkpoint(self) -> Checkpoint:
        return as_checkpoint(self)


def _config(path: Path) -> DecoderConfig:
    cfg_path = path.with_name("config.json")
    if not cfg_path.exists() and not cfg_path.is_symlink():
        raise ModelFormatError(f"{path}: a GPT-Neo model needs its config.json beside it ({cfg_path} is missing)")
    cfg = read_json_object(cfg_path, what="the model's configuration", max_bytes=CONFIG_BYTES)
    if cfg.get("model_type") != "gpt_neo":
        raise UnsupportedOperator(f"{cfg_path}: model_type {brief(cfg.get('model_type'))}; only gpt_neo is supported")
    if cfg.get("activation_function", "gelu_new") != "gelu_new":
        raise UnsupportedOperator(f"{cfg_path}: activation {brief(cfg.get('activation_function'))}; only gelu_new")

    def integer(key, default=None):
        value = cfg.get(key, default)
        if not is_id(value) or value <= 0:
            raise ModelFormatError(f"{cfg_path}: {key} must be a positive integer, got {brief(value)}")
        return value
    d, heads, layers = integer("hidden_size"), integer("num_heads"), integer("num_layers")
    if d % heads:
        raise ModelFormatError(f"{cfg_path}: hidden_size {d} is not a multiple of num_heads {heads}")
    inner = integer("intermediate_size") if cfg.get("intermediate_size") is not None else 4 * d
    attention = cfg.get("attention_layers")
    if not isinstance(attention, list) or len(attention) != layers or \
            not all(a in ("global", "local") for a in attention):
        raise ModelFormatError(f"{cfg_path}: attention_layers must list 'global' or 'local' for each of the "
                               f"{layers} layers, got {brief(attention)}")
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise ModelFormatError(f"{cfg_path}: layer_norm_epsilon {brief(eps)} must be in (0, 1)")
    if cfg.get("tie_word_embeddings", True) is not True:
        raise UnsupportedOperator(f"{cfg_path}: an untied output head is not supported")
    vocab = integer("vocab_size")
    eos = cfg.get("eos_token_id")
    eos = eos if is_id(eos) and 0 <= eos < vocab else None
    return DecoderConfig("gpt_neo", vocab, d, heads, layers, int(inner), integer("max_position_embeddings"),
                         integer("window_size", 256), tuple(attention), float(eps), eos)


def read_gptneo(path: str | Path) -> GptNeo:
    path = Path(path)
    tensors, dtypes, _ = read_safetensors(path)
    c = _config(path)
    names = set(tensors)

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        full = name if name in tensors else f"transformer.{name}"  # some exports drop the prefix
        if full not in tensors and name.startswith("transformer."):
            full = name[len("transformer."):]
        return take_float(tensors, dtypes, names, path, full if full in tensors else name, shape,
                          f"config.json: {c.layers} layers, d_model {c.d_model}")

    d, n = c.d_model, c.inner
    ln = lambda p: (get(f"{p}.weight", (d,)), get(f"{p}.bias", (d,)))  # noqa: E731
    blocks = []
    for i in range(c.layers):
        p = f"transformer.h.{i}"
        a = f"{p}.attn.attention"
        blocks.append(Block(ln(f"{p}.ln_1"), get(f"{a}.q_proj.weight", (d, d)), get(f"{a}.k_proj.weight", (d, d)),
                            get(f"{a}.v_proj.weight", (d, d)),
                            (get(f"{a}.out_proj.weight", (d, d)), get(f"{a}.out_proj.bias", (d,))), ln(f"{p}.ln_2"),
                            (get(f"{p}.mlp.c_fc.weight", (n, d)), get(f"{p}.mlp.c_fc.bias", (n,))),
                            (get(f"{p}.mlp.c_proj.weight", (d, n)), get(f"{p}.mlp.c_proj.bias", (d,)))))
    wte = get("transformer.wte.weight", (c.vocab, d))
    wpe = get("transformer.wpe.weight", (c.max_positions, d))
    ln_f = ln("transformer.ln_f")
    if "lm_head.weight" in names:  # a tied head stored anyway: it must be the embedding
        if not np.array_equal(tensors["lm_head.weight"], wte):
            raise UnsupportedOperator(f"{path.name}: lm_head.weight differs from wte (an untied head)")
        names.discard("lm_head.weight")
    names = {x for x in names if not x.endswith((".attn.attention.bias", ".attn.attention.masked_bias"))}
    if names:
        raise ModelFormatError(f"{path.name}: tensors that GPT-Neo does not have: {', '.join(sorted(names)[:5])}")
    return GptNeo(name_text(path.parent.name), c, wte, wpe, tuple(blocks), ln_f, dtypes, path)


def as_checkpoint(model: GptNeo) -> Checkpoint:
    """The GPT-Neo record under the one lowering's weight names."""
    weights = {"wte": model.wte, "wpe": model.wpe, "ln_f.weight": model.ln_f[0], "ln_f.bias": model.ln_f[1]}
    for i, b in enumerate(model.blocks):
        p = f"h.{i}."
        weights.update({p + "ln_1.weight": b.ln_1[0], p + "ln_1.bias": b.ln_1[1], p + "q_proj": b.q,
                        p + "k_proj": b.k, p + "v_proj": b.v, p + "out_proj": b.out[0], p + "out_proj.bias": b.out[1],
                        p + "ln_2.weight": b.ln_2[0], p + "ln_2.bias": b.ln_2[1], p + "c_fc": b.fc[0],
                        p + "c_fc.bias": b.fc[1], p + "c_proj": b.proj[0], p + "c_proj.bias": b.proj[1]})
    return Checkpoint(model.name, model.config, weights, model.source)
