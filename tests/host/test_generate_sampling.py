"""The edges of `deploy generate`: seeded sampling (--temperature, --top-k, --seed) done by the C
harness and reproduced by ``generate.Sampler`` from the numpy executor's logits, --stop ids, and
why generation stopped ("eos", "stop", "max_tokens", "positions").

The LLaMA engine's logits equal the executor's bit for bit, so every sampled id must be the
reference's exactly, and lie within the top-k of the executor's logits at its step; the model's
random weights give flat distributions, on which different seeds take different paths."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.decoder_executor import Session
from deployer.generate import Sampler
from deployer.tokenizer import open_tokenizer
from tests.unit.test_llama import LLAMA, shared_llama

PROMPT = "hello world"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """The LLaMA model deployed three ways (q4_0 weights, int8 KV cache): float logits, the 5 most
    likely ids with their logits, the most likely id."""
    ck = shared_llama()
    root = tmp_path_factory.mktemp("generate")
    folders = {}
    for logits in ("full", "topk:5", "argmax"):
        folders[logits] = root / logits.replace(":", "")
        r = CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "--logits", logits, "-q", "-o",
                                      str(folders[logits])])
        assert r.exit_code == 0, r.output
    return ck, folders


def generate(folder, *flags, tokens=8, prompt=PROMPT) -> dict:
    r = CliRunner().invoke(main, ["generate", str(folder), prompt, "--max-tokens", str(tokens), "--json", *flags])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def refused(folder, *flags) -> str:
    r = CliRunner().invoke(main, ["generate", str(folder), PROMPT, *flags])
    assert r.exit_code == 2, r.output
    return r.stderr


def prompt_ids(folder) -> list[int]:
    """The prompt as deploy generate feeds it: the model's BOS, then its tokenizer's ids."""
    return [1, *open_tokenizer(folder / "tokenizer").encode(PROMPT)]


def replay(ck, folder, ids, logits="full") -> list[list[np.ndarray]]:
    """The executor's outputs before each generated id (the candidates it was picked from)."""
    s = Session(ck, weights="q4_0", kv="int8", logits=logits)
    for t in prompt_ids(folder):
        s.step(t)
    steps = []
    for k, t in enumerate(ids):
        steps.append([o.copy() for o in s.outputs()])
        if k + 1 < len(ids):
            s.step(t)
    return steps


def sampling(temperature, top_k, seed) -> list[str]:
    return ["--temperature", str(temperature), "--top-k", str(top_k), "--seed", str(seed)]


def test_greedy_is_unchanged_by_default(engines):
    ck, f = engines
    default = generate(f["full"])
    assert default["sampling"] is None and default["stop_reason"] == "max_tokens" and default["tokens"] == 8
    assert generate(f["full"], "--temperature", "0", "--seed", "9")["ids"] == default["ids"]  # a seed changes nothing
    for k, (t, (logits,)) in enumerate(zip(default["ids"], replay(ck, f["full"], default["ids"]))):
        assert t == int(np.argmax(logits)), k
    # the engines that select their ids themselves pick the same tokens
    assert generate(f["topk:5"])["ids"] == generate(f["argmax"])["ids"] == default["ids"]


def test_a_seed_reproduces_its_tokens_and_other_seeds_differ(engines):
    _, f = engines
    one = generate(f["full"], *sampling(1.0, 0, 1))
    assert one["sampling"] == {"temperature": 1.0, "top_k": 0, "seed": 1}
    assert generate(f["full"], *sampling(1.0, 0, 1))["ids"] == one["ids"]
    assert generate(f["full"], *sampling(1.0, 0, 2))["ids"] != one["ids"]
    assert generate(f["full"], *sampling(1.0, 0, 2**32 + 1))["ids"] != one["ids"]  # the seed's high half counts
    assert one["ids"] != generate(f["full"])["ids"]


@pytest.mark.parametrize("mode, temperature, top_k, seed", [("full", 1.0, 0, 5), ("full", 0.7, 5, 11),
                                                             ("topk:5", 1.3, 0, 11), ("topk:5", 0.5, 3, 4)])
def test_sampled_ids_are_the_references_and_within_the_top_k(engines, mode, temperature, top_k, seed):
    ck, f = engines
    got = generate(f[mode], *sampling(temperature, top_k, seed), tokens=12)
    assert got["tokens"] == 12 and got["stop_reason"] == "max_tokens"
    keep = top_k or (5 if mode == "topk:5" else ck.config.vocab)
    sampler = Sampler(temperature, top_k, seed)
    for k, (t, outs) in enumerate(zip(got["ids"], replay(ck, f[mode], got["ids"], logits=mode))):
        if mode == "full":
            assert t in np.argsort(-outs[0], kind="stable")[:keep], k
            assert sampler.pick(outs[0]) == t, k
        else:  # the engine's ids, best first, and their logits
            assert t in outs[0][:keep], k
            assert sampler.pick(outs[1], outs[0]) == t, k


def test_the_top_k_of_full_logits_samples_as_a_topk_engine_does(engines):
    """--top-k 5 over the float logits keeps the tokens a topk:5 engine gives, with the same
    logits: the same seed draws the same ids."""
    _, f = engines
    flags = sampling(0.8, 5, 7)
    assert generate(f["full"], *flags, tokens=12)["ids"] == generate(f["topk:5"], *flags, tokens=12)["ids"]


def test_the_sampler_draws_in_proportion_to_the_softmax():
    logits = np.array([2.0, 1.0, 0.5, -1.0, -30.0], np.float32)
    for temperature, top_k in ((1.0, 0), (0.5, 0), (2.0, 3)):
        s = Sampler(temperature, top_k, seed=3)
        counts = np.bincount([s.pick(logits) for _ in range(20000)], minlength=len(logits))
        p = np.exp(logits[:top_k or None] / temperature)
        p = np.concatenate([p / p.sum(), np.zeros(len(logits) - len(p))])
        assert np.abs(counts / 20000 - p).max() < 0.012, (temperature, top_k, counts)
    assert Sampler(1.0, seed=5).pick([0.0, 0.0, 0.0], ids=[9, 4, 7]) in (9, 4, 7)


def test_engines_that_cannot_sample_refuse_by_name(engines):
    _, f = engines
    err = refused(f["argmax"], "--temperature", "0.8")
    assert "--temperature 0.8" in err and "--logits argmax" in err
    err = refused(f["topk:5"], *sampling(0.8, 6, 0))
    assert "--top-k 6" in err and "--logits topk:5" in err and "--top-k 5 at most" in err
    assert "--top-k 513" in refused(f["full"], *sampling(0.8, 513, 0))
    assert "give a --temperature above 0" in refused(f["full"], "--top-k", "5")
    for bad in ("-1", "nan", "1e39"):
        assert f"--temperature {float(bad)}" in refused(f["full"], "--temperature", bad)
    assert "--stop 512" in refused(f["full"], "--stop", "512")


def test_stop_ids_end_generation_and_stay_out_of_the_text(engines):
    _, f = engines
    free = generate(f["full"], *sampling(1.0, 0, 1), tokens=8)
    i = next(i for i in range(2, 8) if free["ids"][i] not in free["ids"][:i])
    unused = next(t for t in range(512) if t not in free["ids"])
    got = generate(f["full"], *sampling(1.0, 0, 1), "--stop", str(unused), "--stop", str(free["ids"][i]), tokens=8)
    assert got["stop_reason"] == "stop" and got["ids"] == free["ids"][:i + 1] and got["tokens"] == i + 1
    assert got["text"] == generate(f["full"], *sampling(1.0, 0, 1), tokens=i)["text"]  # without the stop token
    never = generate(f["full"], *sampling(1.0, 0, 1), "--stop", str(unused), tokens=8)
    assert never["ids"] == free["ids"] and never["stop_reason"] == "max_tokens"


def test_the_models_end_of_text_id_ends_generation(engines, tmp_path):
    """The model with its eos_token_id set to a token greedy decoding reaches: generation ends there."""
    _, f = engines
    greedy = generate(f["full"])["ids"]
    i = next(i for i in range(1, len(greedy)) if greedy[i] not in greedy[:i])
    model = tmp_path / "model"
    model.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        shutil.copy(LLAMA / name, model / name)
    config = json.loads((LLAMA / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "eos_token_id": greedy[i]}))
    r = CliRunner().invoke(main, [str(model / "model.safetensors"), "-q", "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    got = generate(tmp_path / "out")
    assert got["stop_reason"] == "eos" and got["ids"] == greedy[:i + 1]
    assert got["text"] == generate(tmp_path / "out", tokens=i)["text"]
    both = generate(tmp_path / "out", "--stop", str(greedy[i]))  # a stop id that is the end-of-text id: eos
    assert both["stop_reason"] == "eos" and both["ids"] == greedy[:i + 1]


def test_generation_ends_when_the_positions_run_out(engines):
    ck, f = engines
    n = len(prompt_ids(f["full"]))
    left = ck.config.max_positions - n
    got = generate(f["full"], *sampling(1.0, 0, 3), tokens=10 * ck.config.max_positions)
    assert got["stop_reason"] == "positions" and got["tokens"] == left and got["prompt_tokens"] == n
    exact = generate(f["full"], *sampling(1.0, 0, 3), tokens=left)  # the count asked is reached as they run out
    assert exact["stop_reason"] == "max_tokens" and exact["ids"] == got["ids"]


def test_tinytalk_samples_within_the_executors_top_k(tmp_path):
    """GPT-Neo with a pruned vocabulary (token_ids.json): the sampled engine ids lie within the
    top-k of the executor's logits (equal to the engine's within 1e-5 relative, not bit for bit);
    the seed reproduces them and the text is their GPT-2 tokens'."""
    from tests.unit.test_gptneo import TALK, TOKENIZER, shared, talk_ids
    m = shared(TALK)
    if not (TOKENIZER / "vocab.json").exists():
        pytest.skip(f"{TOKENIZER} is not present on this machine")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(TALK / "model.safetensors"), "--weights", "q4_0", "--kv-cache", "int8", "-q",
                                  "-o", str(out), "--tokenizer", str(TOKENIZER)])
    assert r.exit_code == 0, r.output
    got = generate(out, *sampling(0.8, 10, 1), tokens=12, prompt="Once upon a time")
    assert generate(out, *sampling(0.8, 10, 1), tokens=12, prompt="Once upon a time")["ids"] == got["ids"]
    s = Session(m, weights="q4_0", kv="int8")
    for t in talk_ids("Once upon a time"):
        logits = s.step(t)
    for k, t in enumerate(got["ids"]):
        assert t in np.argsort(-logits, kind="stable")[:10], k
        logits = s.step(t)
    to_gpt2 = json.loads((out / "token_ids.json").read_text())
    text_ids = got["ids"][:-1] if got["stop_reason"] in ("eos", "stop") else got["ids"]
    assert got["text"] == open_tokenizer(TOKENIZER).decode([to_gpt2[t] for t in text_ids])
