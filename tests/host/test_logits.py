"""--logits argmax|topk:K on both decoder families: the head streams its rows into a running top-k,
so SRAM no longer holds the vocabulary's float logits; the engine's ids (and top-k logits) equal
the executor's byte for byte, deploy generate decodes the same tokens as with full logits, and
the budgets the float row used to break now fit."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.decoder_executor import Session
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
from tests import gptneo_builder as gb
from tests.host.test_gptneo_engine import build
from tests.unit.test_gptneo import TALK, TINY, TOKENIZER, greedy, shared, talk_ids
from tests.unit.test_llama import LLAMA, shared_llama

K = 1024


def engine_bytes(dep, ids) -> bytes:
    return subprocess.run([str(build(dep))], input=np.asarray(ids, np.int32).tobytes(), capture_output=True,
                          check=True).stdout


def executor_bytes(model, ids, **kw) -> bytes:
    s = Session(model, **kw)
    return b"".join(s.step(int(t)).tobytes() + b"".join(o.tobytes() for o in s.outputs()[1:]) for t in ids)


@pytest.mark.parametrize("family", ["gpt_neo", "llama"])
@pytest.mark.parametrize("weights, logits", [("q4_0", "argmax"), ("q4_0", "topk:5"), ("f32", "topk:3"),
                                             ("int8", "topk:70")])
def test_selected_ids_and_logits_equal_the_executor(family, weights, logits):
    model, folder = (shared(TINY), TINY) if family == "gpt_neo" else (shared_llama(), LLAMA)
    dep = deploy(folder / "model.safetensors", Options(language=LanguageFlags(weights=weights, kv="int8",
                                                                              logits=logits)))
    assert "LOGITS" not in {lt.name for lt in dep.lives}  # no float row of the vocabulary
    ids = np.load(folder / "ref_input_ids.npy").reshape(-1)[:10]
    want = executor_bytes(model, ids, weights=weights, kv="int8", kv_group=dep.graph.kv.group, logits=logits)
    assert engine_bytes(dep, ids) == want
    k = 1 if logits == "argmax" else int(logits[5:])
    assert len(want) == len(ids) * (4 * k if k == 1 else 8 * k)


def test_topk_ids_are_the_full_logits_best_in_order():
    m = shared(TINY)
    ids = np.load(TINY / "ref_input_ids.npy")[:6]
    full, top = Session(m, weights="q4_0", kv="int8"), Session(m, weights="q4_0", kv="int8", logits="topk:8")
    for t in ids:
        logits, best = full.step(int(t)), top.step(int(t))
        assert best.tolist() == np.argsort(-logits, kind="stable")[:8].tolist()
        assert np.array_equal(top.outputs()[1], logits[best])


def test_tinytalk_argmax_fits_128k_and_decodes_what_full_decodes(tmp_path):
    """Q4_0 weights, int8 KV of 40 positions: full logits need 180 KB of SRAM (56 KB of it the
    float row); argmax fits 128 KiB and deploy generate continues the prompt with the same 30
    tokens as full logits and as the float32 reference."""
    m = shared(TALK)
    if not (TOKENIZER / "vocab.json").exists():
        pytest.skip(f"{TOKENIZER} is not present on this machine")
    got = {}
    for logits in ("full", "argmax"):
        out = tmp_path / logits
        flags = ["--weights", "q4_0", "--kv-cache", "int8", "--context", "40", "--logits", logits]
        if logits == "argmax":
            flags += ["--sram", "128K"]
        r = CliRunner().invoke(main, [str(TALK / "model.safetensors"), *flags, "-o", str(out), "--tokenizer",
                                      str(TOKENIZER)])
        assert r.exit_code == 0, r.output
        assert json.loads((out / "manifest.json").read_text())["language_model"]["logits"] == logits
        r = CliRunner().invoke(main, ["generate", str(out), "Once upon a time", "--max-tokens", "30", "--json"])
        assert r.exit_code == 0, r.output
        got[logits] = json.loads(r.stdout)["ids"]
    assert got["argmax"] == got["full"] == greedy(m, talk_ids("Once upon a time"), 30)


def test_a_full_gpt2_vocabulary_at_te_comps_shape_fits_below_249_kb(tmp_path):
    """8 layers, d_model 128, 16 heads, 50,257 tokens, Q4_0, int4 KV of 96 positions: 325,008 B of
    SRAM with full logits (201,028 of them the float row), 129,472 B with argmax."""
    path = gb.write(tmp_path, gb.config(vocab=50257, d=128, heads=16, layers=8, inner=512, positions=128, window=128))
    flags = dict(weights="q4_0", kv="int4", context=96)
    full = deploy(path, Options(language=LanguageFlags(**flags)))
    arg = deploy(path, Options(sram=249 * 1000, language=LanguageFlags(**flags, logits="argmax")))
    assert full.memory.sram_bytes > 300 * K and arg.memory.sram_bytes < 249 * 1000
    assert full.memory.arena_bytes > 50257 * 4 and arg.memory.arena_bytes < 8 * K  # the rest: one layer's buffers


@pytest.mark.parametrize("value, match", [("top5", "expected full, argmax or topk:K"), ("topk:0", "expected full"),
                                          ("topk:513", "the vocabulary has 512 tokens")])
def test_malformed_logits_flags_are_usage_errors(value, match, tmp_path):
    shared_llama()
    r = CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "--logits", value, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and match in r.output and not (tmp_path / "o").exists()
