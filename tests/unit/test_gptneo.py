"""GPT-Neo from .safetensors: the container reader (mixed F32/F16/BF16; every malformation a
ModelFormatError naming the tensor), the model checked against config.json, and the numpy
reference against the shared models' reference logits (float32 path: relative error < 1e-4,
the float32 rounding of a different summation order) and its quantized paths."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deployer import decoder_quant as Q
from deployer.decoder_executor import Session
from network_parser.errors import ModelFormatError, UnsupportedOperator
from network_parser.gptneo import read_gptneo
from network_parser.safetensors_reader import read_safetensors
from tests import gptneo_builder as gb
from tests.models import SAFETENSORS

ST = SAFETENSORS
TINY, TALK, TOKENIZER = ST / "gptneo_tiny_random", ST / "tinytalk_gptneo_3m", ST / "gpt2_tokenizer"


def shared(folder):
    if not (folder / "model.safetensors").exists():
        pytest.skip(f"model {folder} is not present (neither in tests/model_files nor ../shared)")
    return read_gptneo(folder / "model.safetensors")


def rel_err(a, b) -> float:
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


# ---- the container -----------------------------------------------------------------------

def test_reader_matches_the_safetensors_package_and_widens_bf16(tmp_path):
    from safetensors import safe_open
    path = gb.write(tmp_path)
    ours, dtypes, meta = read_safetensors(path)
    assert set(dtypes.values()) == {"F32", "F16", "BF16"} and meta == {"format": "pt"}
    with safe_open(str(path), framework="np") as f:  # its numpy API reads no bfloat16 tensor
        assert set(f.keys()) == set(ours) and f.metadata() == meta
        for name, arr in ours.items():
            if dtypes[name] != "BF16":
                assert np.array_equal(f.get_tensor(name).astype(np.float32), arr), name
    src = gb.tensors(gb.config())
    for name, (dtype, arr) in src.items():
        if dtype == "BF16":
            assert np.array_equal(ours[name], Q.from_bf16(Q.to_bf16(arr)))


def _header(tensors: dict) -> bytes:
    text = json.dumps(tensors).encode()
    return len(text).to_bytes(8, "little") + text


BAD = [
    (b"", "not a safetensors file"),
    (b"\xff" * 8 + b"{}", "not a safetensors file (header of"),
    (b"\x04\x00\x00\x00\x00\x00\x00\x00{abc", "the safetensors header is not JSON"),
    (_header([1, 2]), "not a JSON object"),
    ((200_002).to_bytes(8, "little") + b"[" * 100_001 + b"]" * 100_001, "not JSON (RecursionError"),
    (_header({"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}) + bytes(4), "tensor 'w': dtype 'Q9'"),
    (_header({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}) + bytes(4), "tensor 'w': shape [-1]"),
    (_header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}) + bytes(4), "tensor 'w': data_offsets"),
    (_header({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}) + bytes(8), "tensor 'w': 8 bytes"),
    (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}) + bytes(12), "'a' and 'b' overlap"),
    (_header({"w": {"dtype": "F32", "shape": [1]}}), "tensor 'w': needs dtype, shape and data_offsets"),
]


@pytest.mark.parametrize("data, message", BAD, ids=[m for _, m in BAD])
def test_malformed_containers_are_named(tmp_path, data, message):
    path = tmp_path / "x.safetensors"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError, match=None) as e:
        read_safetensors(path)
    assert message in str(e.value)


# ---- the model against its config ---------------------------------------------------------

def _model_with(tmp_path, cfg=None, drop=None, reshape=None, extra=None, bad_config=None):
    cfg = cfg or gb.config()
    ts = gb.tensors(cfg)
    if drop:
        del ts[drop]
    if reshape:
        name, shape = reshape
        ts[name] = (ts[name][0], np.zeros(shape, np.float32))
    if extra:
        ts[extra] = ("F32", np.zeros(3, np.float32))
    path = gb.write(tmp_path, cfg, data=gb.encode(ts))
    if bad_config is not None:
        (tmp_path / "config.json").write_text(bad_config)
    return path


@pytest.mark.parametrize("kind, args, error, message", [
    ("missing tensor", dict(drop="transformer.h.1.mlp.c_fc.bias"), ModelFormatError,
     "tensor 'transformer.h.1.mlp.c_fc.bias' is missing"),
    ("wrong shape", dict(reshape=("transformer.h.0.attn.attention.q_proj.weight", (32, 31))), ModelFormatError,
     "tensor 'transformer.h.0.attn.attention.q_proj.weight' is [32, 31], config.json implies [32, 32]"),
    ("unknown tensor", dict(extra="transformer.h.0.adapter"), ModelFormatError, "transformer.h.0.adapter"),
    ("not gpt_neo", dict(bad_config='{"model_type": "llama"}'), UnsupportedOperator, "only gpt_neo"),
    ("config not JSON", dict(bad_config="{"), ModelFormatError, "config.json: not JSON"),
    ("heads do not divide", dict(cfg={**gb.config(), "num_heads": 5}), ModelFormatError,
     "hidden_size 32 is not a multiple of num_heads 5"),
    ("attention layers", dict(cfg={**gb.config(), "attention_layers": ["global"]}), ModelFormatError,
     "attention_layers must list"),
])
def test_config_mismatches_are_named(tmp_path, kind, args, error, message):
    path = _model_with(tmp_path, **args)
    with pytest.raises(error) as e:
        read_gptneo(path)
    assert message in str(e.value)


def test_missing_config_is_named(tmp_path):
    path = gb.write(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ModelFormatError, match="needs its config.json beside it"):
        read_gptneo(path)


# ---- the reference executor -----------------------------------------------------------------

def test_tiny_random_logits_at_every_position():
    m = shared(TINY)
    ids = np.load(TINY / "ref_input_ids.npy")
    ref = np.load(TINY / "ref_logits.npy")
    s = Session(m)
    assert rel_err(np.stack([s.step(int(t)) for t in ids]), ref) < 1e-4


def tokenizer():
    from deployer.tokenizer import Gpt2Tokenizer
    if not (TOKENIZER / "vocab.json").exists():
        pytest.skip(f"{TOKENIZER} is not present on this machine")
    return Gpt2Tokenizer(TOKENIZER)


def talk_ids(text: str) -> list[int]:
    to_pruned = {g: i for i, g in enumerate(json.loads((TALK / "pruned_to_gpt2_ids.json").read_text()))}
    return [to_pruned[g] for g in tokenizer().encode(text)]


@pytest.mark.parametrize("text, ref", [("Once upon a time", "ref_logits_last_4tok.npy"),
                                       ("User: hey, how are you?\nBot:", "ref_logits_last_11tok.npy")])
def test_tinytalk_last_logits(text, ref):
    m = shared(TALK)
    ids = talk_ids(text)
    s = Session(m)
    for t in ids:
        logits = s.step(t)
    assert rel_err(logits, np.load(TALK / ref)) < 1e-4


def greedy(m, prompt, n, **kw):
    s = Session(m, **kw)
    for t in prompt:
        logits = s.step(t)
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = s.step(out[-1])
    return out


def test_tinytalk_q4_0_int8_kv_decodes_like_f32():
    m = shared(TALK)
    prompt = talk_ids("Once upon a time")
    ref = greedy(m, prompt, 30)
    g2p = json.loads((TALK / "pruned_to_gpt2_ids.json").read_text())
    assert tokenizer().decode([g2p[t] for t in ref]).startswith(", there was a little girl named Lily. She was "
                                                                 "very brave and loved to explore")
    assert greedy(m, prompt, 30, weights="q4_0", kv="int8") == ref


def test_tinytalk_int4_kv_teacher_forced_agreement():
    """Top-1 agreement with f32 over 96 teacher-forced tokens (the f32 model's own continuation
    of the prompt) with Q4_0 weights and an int4 KV cache of 96 positions."""
    m = shared(TALK)
    prompt = talk_ids("Once upon a time")
    seq = prompt + greedy(m, prompt, 96 - len(prompt))
    f32, int4 = Session(m, context=96), Session(m, context=96, weights="q4_0", kv="int4")
    agree = np.mean([np.argmax(f32.step(t)) == np.argmax(int4.step(t)) for t in seq])
    print(f"int4 KV top-1 agreement over {len(seq)} tokens: {agree:.3f}")
    assert agree >= 0.85


def test_q4_0_recovers_tinytalks_original_blocks_exactly():
    """tinytalk shipped as Q4_0 with bfloat16 scales, stored dequantized: re-quantizing loses nothing."""
    m = shared(TALK)
    for w in (m.wte, m.blocks[0].q, m.blocks[5].fc[0], m.blocks[7].proj[0]):
        assert Q.error_stats(w, Q.quantize_q4_0(w).dequantize())[0] == 0


def test_quantizers_on_random_weights():
    w = np.random.default_rng(1).normal(0, 0.05, (64, 96)).astype(np.float32)
    q4, q8 = Q.quantize_q4_0(w), Q.quantize_int8_rows(w)
    assert q4.codes.min() >= 0 and q4.codes.max() <= 15 and q4.nbytes == 64 * 96 // 2 + 64 * 3 * 2
    (r4, s4), (r8, s8) = Q.error_stats(w, q4.dequantize()), Q.error_stats(w, q8.dequantize())
    assert 15 < s4 < 30 and 35 < s8 < 50 and r8 < r4
    x = np.random.default_rng(2).normal(0, 1, 96).astype(np.float32)
    for wq in (q4, q8):  # the block-quantized matvec is close to the dequantized matrix times x
        assert rel_err(Q.matvec(wq, x), wq.dequantize() @ x) < 0.02


def test_bf16_rounds_to_nearest_even():
    above = np.nextafter(np.float32(1.00390625), np.float32(2))
    x = np.array([1.0, 1.00390625, 1.01171875, above, -2.5], np.float32)  # two halfway cases, one just above
    assert Q.to_bf16(x).tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020]
    assert Q.from_bf16(Q.to_bf16(x)).tolist() == [1.0, 1.0, 1.015625, 1.0078125, -2.5]


def _full_sequence(m, ids, visible):
    """Every position at once with an explicit mask (query p sees key j when visible(layer, p, j))."""
    from deployer.decoder_executor import gelu_new, layer_norm

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()
    c = m.config
    x = np.stack([m.wte[t] + m.wpe[p] for p, t in enumerate(ids)]).astype(np.float32)
    for i, b in enumerate(m.blocks):
        h = np.stack([layer_norm(r, *b.ln_1, c.eps) for r in x])
        q, k, v = h @ b.q.T, h @ b.k.T, h @ b.v.T
        att = np.zeros_like(q)
        for p in range(len(ids)):
            js = [j for j in range(p + 1) if visible(i, p, j)]
            for hd in range(c.heads):
                sl = slice(hd * c.head_dim, (hd + 1) * c.head_dim)
                att[p, sl] = softmax(k[js, sl] @ q[p, sl]) @ v[js, sl]
        x = x + att @ b.out[0].T + b.out[1]
        h = np.stack([layer_norm(r, *b.ln_2, c.eps) for r in x])
        x = x + gelu_new(h @ b.fc[0].T + b.fc[1]) @ b.proj[0].T + b.proj[1]
    return np.stack([m.wte @ layer_norm(r, *m.ln_f, c.eps) for r in x])


def test_sliding_kv_window_drops_the_oldest_positions(tmp_path):
    m = read_gptneo(gb.write(tmp_path, gb.config(window=4, positions=16)))
    ids = list(np.random.default_rng(3).integers(0, 64, 14))
    context = 6

    def visible(layer, p, j):
        span = min(context, m.config.window) if m.config.attention[layer] == "local" else context
        return p - j < span
    s = Session(m, context=context)
    ours = np.stack([s.step(int(t)) for t in ids])
    assert rel_err(ours, _full_sequence(m, ids, visible)) < 1e-5
    full = _full_sequence(m, ids, lambda layer, p, j: m.config.attention[layer] == "global" or p - j < 4)
    assert rel_err(np.stack([Session(m).step(int(t)) for t in ids[:1]]), full[:1]) < 1e-5
    with pytest.raises(ValueError, match="positions"):
        s2 = Session(m)
        for t in range(17):
            s2.step(1)


@pytest.mark.parametrize("weights, kv, prune", [("q4_0", "int4", False), ("int8", "int8", True), ("f32", "f32", False)])
def test_language_model_manifest_follows_the_one_schema(tmp_path, weights, kv, prune):
    """A language model's manifest follows the schema a network's does (deployer/manifest.schema.json):
    the shared part (budgets, planner, memory, the arena tensor by tensor) and its own section."""
    import jsonschema

    from deployer.llm_passes import LanguageFlags
    from deployer.pipeline import Options, deploy

    schema = json.loads((Path(__file__).resolve().parents[2] / "deployer" / "manifest.schema.json").read_text())
    path = gb.write(tmp_path)
    keep = None
    if prune:
        keep = tmp_path / "keep.json"
        keep.write_text("[1, 5, 9, 40]")
    dep = deploy(path, Options(language=LanguageFlags(weights=weights, kv=kv, prune_vocab=keep)))
    manifest = json.loads(dep.files["manifest.json"])
    jsonschema.validate(manifest, schema)
    assert manifest["kind"] == "language_model" and "layers" not in manifest
    assert (manifest["language_model"]["pruned_vocabulary"] is not None) == prune
    assert manifest["memory"]["state_bytes"] > 0 and manifest["arena"]["bytes"] == dep.arena.peak
    # a network's part in a language model's manifest (or the section missing) is refused
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**manifest, "layers": []}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in manifest.items() if k != "language_model"}, schema)


def test_a_language_model_refuses_an_external_input_buffer(tmp_path):
    from deployer.pipeline import Options, plan_deployment
    from network_parser.errors import UsageError
    with pytest.raises(UsageError, match="--input-memory external: a language model"):
        plan_deployment(ST / "gptneo_tiny_random" / "model.safetensors", Options(input_memory="external"))
