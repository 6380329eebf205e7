"""LLaMA-family checkpoints on the one decoder path: the reader's block specification and its
refusals, the executor against the `transformers` reference logits and against an independent
float64 forward (rotate-half RoPE, grouped KV heads, SwiGLU, biases, untied heads), Q4_0 rows
padded to whole blocks."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from deployer import decoder_quant as Q
from deployer.decoder_executor import Session
from deployer.llm_passes import prune_vocabulary, quantize_weights
from network_parser.decoders import read_decoder
from network_parser.errors import ModelFormatError, UnsupportedOperator
from network_parser.safetensors_reader import read_safetensors
from network_parser.transformer_ir import Rope, RmsNorm, SwiGlu, lower
from tests import llama_builder as lb
from tests.unit.test_gptneo import ST, rel_err

LLAMA = ST / "llama_tiny_random"


def shared_llama():
    if not (LLAMA / "model.safetensors").exists():
        pytest.skip(f"model {LLAMA} is not present")
    return read_decoder(LLAMA / "model.safetensors")


def reference_forward(path, ids) -> np.ndarray:
    """Every position at once in float64 from the file's tensors under Hugging Face's LLaMA
    semantics (rotate_half RoPE, repeat_kv, causal mask, SwiGLU), written apart from our ops."""
    cfg = json.loads(path.with_name("config.json").read_text())
    t = {k: v.astype(np.float64) for k, v in read_safetensors(path)[0].items()}
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kvh, hd = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or d // heads
    theta = cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)
    eps, n = cfg["rms_norm_eps"], len(ids)
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * np.concatenate([inv, inv])[None]
    cos, sin = np.cos(ang), np.sin(ang)

    def rot(x):  # [n, h, hd]
        half = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
        return x * cos[:, None] + half * sin[:, None]

    def norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def lin(x, name):
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y
    x = t["model.embed_tokens.weight"][ids]
    mask = np.tril(np.ones((n, n), bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, t[p + "input_layernorm.weight"])
        q = rot(lin(h, p + "self_attn.q_proj").reshape(n, heads, hd))
        k = rot(lin(h, p + "self_attn.k_proj").reshape(n, kvh, hd)).repeat(heads // kvh, axis=1)
        v = lin(h, p + "self_attn.v_proj").reshape(n, kvh, hd).repeat(heads // kvh, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        s = np.where(mask[None], s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + lin(np.einsum("hqk,khd->qhd", a, v).reshape(n, heads * hd), p + "self_attn.o_proj")
        h = norm(x, t[p + "post_attention_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return norm(x, t["model.norm.weight"]) @ head.T


def run(ckpt, ids, **kw) -> np.ndarray:
    s = Session(ckpt, **kw)
    return np.stack([s.step(int(i)) for i in ids])


def test_shared_llama_matches_the_transformers_logits_at_every_position():
    ck = shared_llama()
    c = ck.config
    assert (c.architecture, c.kv_heads, c.head_dim, c.norm, c.position, c.mlp, c.tied) == \
        ("llama", 4, 8, "rms_norm", "rope", "swiglu", True)
    assert c.rope_theta == 10000.0 and c.group == 2 and c.bos == 1 and c.eos == 2  # theta from rope_parameters
    ids = np.load(LLAMA / "ref_input_ids.npy")
    ref = np.load(LLAMA / "ref_logits.npy").reshape(len(ids), -1)
    assert rel_err(run(ck, ids), ref) < 1e-4  # measured 6.6e-7
    assert rel_err(reference_forward(LLAMA / "model.safetensors", ids), ref) < 1e-5


def test_lowering_follows_the_block_specification():
    g = lower(shared_llama())
    kinds = [type(op).__name__ for op in g.ops]
    assert "LayerNorm" not in kinds and "PositionEmbedding" not in kinds and "Gelu" not in kinds
    assert kinds.count("RmsNorm") == 2 * 3 + 1 and kinds.count("Rope") == 2 * 3 and kinds.count("SwiGlu") == 3
    ropes = [op for op in g.ops if isinstance(op, Rope)]
    assert [(op.x, op.heads) for op in ropes[:2]] == [("QV", 8), ("KV", 4)]
    assert g.weights["rope.cos"].shape == (128, 4) and g.activation("KV").elements == 32
    assert all(isinstance(op, RmsNorm) for op in g.ops if type(op).__name__.endswith("Norm"))
    assert any(isinstance(op, SwiGlu) for op in g.ops) and g.head == "wte"


@pytest.mark.parametrize("cfg", [
    lb.config(),
    lb.config(tied=False, head_dim=12, heads=4, kv_heads=1, inner=40),  # head_dim * heads != d, one KV head
    lb.config(model_type="qwen2", tied=False),  # q, k, v biases
    lb.config(attention_bias=True, mlp_bias=True, kv_heads=4),
    lb.config(model_type="mistral", sliding_window=None, rope_theta=500.0),
], ids=["grouped", "head_dim-one-kv-head-untied", "qwen2-biases", "all-biases", "mistral"])
def test_configurations_match_an_independent_float64_forward(cfg, tmp_path):
    path = lb.write(tmp_path, cfg)
    ck = read_decoder(path)
    ids = np.random.default_rng(1).integers(0, cfg["vocab_size"], 10)
    assert rel_err(run(ck, ids), reference_forward(path, ids)) < 1e-5


def bad(tmp_path, **extra):
    return lb.write(tmp_path, lb.config(**extra))


@pytest.mark.parametrize("extra, error, match", [
    (dict(num_local_experts=8), UnsupportedOperator, "num_local_experts 8: mixtures of experts"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), UnsupportedOperator, "rope_scaling .* scaled rotary"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), UnsupportedOperator, "rope_parameters.rope_type"),
    (dict(model_type="mistral", sliding_window=8), UnsupportedOperator, "sliding_window 8"),
    (dict(hidden_act="gelu"), UnsupportedOperator, "hidden_act 'gelu'"),
    (dict(kv_heads=3), ModelFormatError, "not a multiple of num_key_value_heads 3"),
    (dict(head_dim=7), ModelFormatError, "head_dim 7 is odd"),
    (dict(rms_norm_eps=-1), ModelFormatError, "rms_norm_eps must be a positive number"),
    (dict(model_type="bert"), UnsupportedOperator, "model_type 'bert'; supported: gpt_neo, llama"),
])
def test_what_the_graph_cannot_express_is_refused_with_the_field(extra, error, match, tmp_path):
    with pytest.raises(error, match=match):
        read_decoder(bad(tmp_path, **extra))


def test_tensor_errors_name_the_tensor(tmp_path):
    drop = lambda ts: ts.pop("model.layers.1.mlp.up_proj.weight")  # noqa: E731
    with pytest.raises(ModelFormatError, match="tensor 'model.layers.1.mlp.up_proj.weight' is missing"):
        read_decoder(lb.write(tmp_path / "a", tamper=drop))
    extra = lambda ts: ts.update({"model.layers.0.adapter": ("F32", np.zeros(2))})  # noqa: E731
    with pytest.raises(ModelFormatError, match="does not have: model.layers.0.adapter"):
        read_decoder(lb.write(tmp_path / "b", tamper=extra))
    head = lambda ts: ts.update({"lm_head.weight": ("F32", np.ones((96, 32)))})  # noqa: E731
    with pytest.raises(UnsupportedOperator, match="lm_head.weight differs from the embedding"):
        read_decoder(lb.write(tmp_path / "c", tamper=head))
    with pytest.raises(ModelFormatError, match="needs its config.json beside it"):
        path = lb.write(tmp_path / "d")
        path.with_name("config.json").unlink()
        read_decoder(path)


def test_q4_0_rows_that_are_not_whole_blocks_are_zero_padded(tmp_path):
    g, report = quantize_weights(lower(shared_llama()), "q4_0")
    down, up = g.weights["h.0.down_proj"], g.weights["h.0.up_proj"]
    assert (down.cols, down.codes.shape, down.scales.shape) == (172, (64, 192), (64, 6))
    assert (down.codes[:, 172:] == 8).all() and down.dequantize().shape == (64, 172)
    assert up.codes.shape == (172, 64) and down.nbytes == Q.matrix_bytes("q4_0", 64, 172) == 64 * 6 * 18
    x = np.random.default_rng(0).normal(size=172).astype(np.float32)
    # the padded block's integer sum sees zeros: the same as the float dot of the dequantized rows
    assert np.allclose(Q.matvec(down, x), down.dequantize() @ x, rtol=0.05, atol=0.05)
    assert len(report) == len(g.matrices())


def test_prune_vocab_prunes_an_untied_head_too(tmp_path):
    ck = read_decoder(lb.write(tmp_path, lb.config(tied=False)))
    g, kept = prune_vocabulary(lower(ck), [5, 1, 2, 40])
    assert kept == [1, 2, 5, 40] and g.config.bos == 0 and g.config.eos == 1
    assert g.weights["wte"].shape == (4, 32) and g.weights["head"].shape == (4, 32)
    assert np.array_equal(g.weights["head"], ck.weights["head"][kept])
