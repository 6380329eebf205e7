"""The LLaMA-family C engine (RMSNorm, rotary tables, grouped KV heads, SwiGLU, padded Q4_0 rows):
built with gcc -Werror (and under ASan/UBSan), its logits against the `transformers` reference
with float32 weights, and equal to the numpy executor's, element for element, in every quantized
format: the executor computes float32 as the engine does (its expf and 1/sqrtf, left-to-right
sums), so the integer codes and the floats agree exactly. `deploy generate` with the model's own
tokenizer.json decodes the executor's greedy tokens."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
from network_parser.decoders import read_decoder
from tests import llama_builder as lb
from tests.host.test_gptneo_engine import build, run
from tests.unit.test_gptneo import rel_err
from tests.unit.test_llama import LLAMA
from tests.unit.test_llama import run as execute
from tests.unit.test_llama import shared_llama


def test_f32_engine_matches_the_reference_logits_at_every_position():
    shared_llama()
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(weights="f32", kv="f32")))
    ids = np.load(LLAMA / "ref_input_ids.npy")
    ref = np.load(LLAMA / "ref_logits.npy").reshape(len(ids), -1)
    assert rel_err(run(build(dep), ids), ref) < 1e-4  # measured 9.0e-7
    assert rel_err(run(build(dep, sanitize=True), ids), ref) < 1e-4


@pytest.mark.parametrize("weights, kv, context", [("q4_0", "int8", None), ("q4_0", "int4", 6), ("int8", "int8", 5),
                                                  ("f32", "int4", None)])
def test_quantized_engines_equal_the_numpy_executor(weights, kv, context):
    ck = shared_llama()
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(weights=weights, kv=kv, context=context)))
    ids = np.load(LLAMA / "ref_input_ids.npy")
    want = execute(ck, ids, context=context, weights=weights, kv=kv, kv_group=dep.graph.kv.group)
    assert np.array_equal(run(build(dep), ids), want)


@pytest.mark.parametrize("cfg", [lb.config(tied=False, head_dim=12, kv_heads=1, inner=40),
                                 lb.config(model_type="qwen2", tied=False, inner=100)],
                         ids=["head_dim-one-kv-head-untied", "qwen2-biases"])
def test_other_configurations_equal_the_executor(cfg, tmp_path):
    path = lb.write(tmp_path, cfg)
    dep = deploy(path, Options(language=LanguageFlags(weights="q4_0", kv="int4")))
    ids = np.random.default_rng(2).integers(0, cfg["vocab_size"], 9)
    want = execute(read_decoder(path), ids, weights="q4_0", kv="int4", kv_group=dep.graph.kv.group)
    assert np.array_equal(run(build(dep, sanitize=True), ids), want)


def test_manifest_records_the_block_specification_and_padded_rows(tmp_path):
    shared_llama()
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "-o", str(out), "--weights", "q4_0"])
    assert result.exit_code == 0, result.output
    assert "LLaMA-family: 3 layers, d_model 64, 8 heads (4 KV heads), MLP 172" in result.output
    lm = json.loads((out / "manifest.json").read_text())["language_model"]
    assert lm["architecture"] == "llama" and lm["bos_token_id"] == 1 and lm["tokenizer"] == "tokenizer/"
    assert lm["config"]["kv_heads"] == 4 and lm["config"]["position"] == "rope"
    assert {r["matrix"] for r in lm["padded_rows"]} == {f"h.{i}.down_proj" for i in range(3)}
    assert all(r["cols"] == 172 and r["stored"] == 192 for r in lm["padded_rows"])
    assert (out / "tokenizer" / "tokenizer.json").read_bytes() == (LLAMA / "tokenizer.json").read_bytes()


def test_generate_with_the_models_tokenizer_json_decodes_the_executors_tokens(tmp_path):
    ck = shared_llama()
    out = tmp_path / "out"
    assert CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "-o", str(out)]).exit_code == 0
    result = CliRunner().invoke(main, ["generate", str(out), "hello world", "--max-tokens", "6", "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    from tokenizers import Tokenizer
    prompt = [1, *Tokenizer.from_file(str(LLAMA / "tokenizer.json")).encode("hello world",
                                                                             add_special_tokens=False).ids]
    assert got["prompt_tokens"] == len(prompt)
    from deployer.decoder_executor import Session
    s = Session(ck, weights="q4_0", kv="int8")
    for t in prompt:
        logits = s.step(t)
    want = []
    for _ in range(6):
        want.append(int(np.argmax(logits)))
        if want[-1] == ck.config.eos:
            break
        logits = s.step(want[-1])
    assert got["ids"] == want


def test_each_op_is_a_layer_with_its_kernel_and_kernels_chooses_the_family(tmp_path):
    """The plan's layers are the ops, each with the kernel that runs it; --kernels picks the
    matvec's family as it does a network's (plain: the engine's own), named in the manifest, the
    report and deploy --json."""
    shared_llama()
    model = LLAMA / "model.safetensors"
    summaries = {}
    for kernels in ("auto", "plain", "smlad"):
        out = tmp_path / kernels
        r = CliRunner().invoke(main, [str(model), "--target", "cortex-m4", "--kernels", kernels, "-o", str(out),
                                      "--json"])
        assert r.exit_code == 0, r.output
        summaries[kernels] = json.loads(r.output)
        lm = json.loads((out / "manifest.json").read_text())["language_model"]
        assert len(lm["kernels"]) == len(lm["ops"]) == summaries[kernels]["layers"]
        matvec = "matvec_q4_0" if kernels == "plain" else "matvec_q4_0_smlad"
        assert [k for k, op in zip(lm["kernels"], lm["ops"]) if op.startswith("MatMul")] == [matvec] * 22
        assert "rms_norm_f32" in lm["kernels"] and "attention_kv_int8" in lm["kernels"]
        assert f"<td class=\"text\">{matvec}</td>" in (out / "report.html").read_text()
    dep = deploy(model, Options(target="cortex-m4"))
    assert summaries["auto"]["macs"] == lm["macs"] == dep.macs == sum(
        op.rows * op.cols for op in dep.graph.ops if hasattr(op, "rows")) + 2 * 8 * 8 * dep.graph.kv.context * 3
    assert summaries["auto"]["kind"] == "language_model"
    r = CliRunner().invoke(main, [str(model), "--kernels", "smlad", "-o", str(tmp_path / "host")])
    assert r.exit_code == 2 and "--kernels smlad: target 'host' has only the plain kernels" in r.output


@pytest.mark.parametrize("flags, named", [(["--l1", "32K"], "--l1"), (["--no-in-place", "--patch", "off"],
                                                                       "--patch, --no-in-place"),
                                          (["--auto-optimize"], "--auto-optimize"), (["--tiler", "greedy"], "--tiler")])
def test_flags_that_do_not_apply_to_a_language_model_are_refused_by_name(flags, named, tmp_path):
    shared_llama()
    r = CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), *flags, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and f"{named}: not a flag for language models" in r.output
    assert not (tmp_path / "o").exists()


def test_language_model_flags_are_refused_for_a_network(tmp_path):
    from tests.models import shared_model
    r = CliRunner().invoke(main, [str(shared_model("mlperf_tiny/kws_ref_model.tflite")), "--logits", "argmax",
                                  "--kv-cache", "int4", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--kv-cache, --logits: only for language models" in r.output


def test_computed_rotary_angles_match_the_reference_and_equal_the_executor():
    """--rope compute: head_dim/2 inverse frequencies in flash instead of two tables of positions x
    head_dim/2; the engine's sine and cosine (range reduction and polynomials, within 1e-7 of
    float64 on these angles) are the executor's bit for bit."""
    from deployer.decoder_executor import c_sincos
    from network_parser.transformer_ir import rope_inverse_frequencies
    ck = shared_llama()
    angles = (np.arange(4096, dtype=np.float32)[:, None] * rope_inverse_frequencies(ck.config)[None]).astype(np.float32)
    s, c = c_sincos(angles)
    assert np.abs(s - np.sin(angles.astype(np.float64))).max() < 2e-7
    assert np.abs(c - np.cos(angles.astype(np.float64))).max() < 2e-7
    ids = np.load(LLAMA / "ref_input_ids.npy")
    ref = np.load(LLAMA / "ref_logits.npy").reshape(len(ids), -1)
    tables = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(weights="f32", kv="f32")))
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(weights="f32", kv="f32", rope="compute")))
    assert "rope.inv" in dep.graph.weights and "rope.cos" not in dep.graph.weights
    assert tables.memory.weights_bytes - dep.memory.weights_bytes == 2 * 128 * 4 * 4 - 4 * 4
    assert rel_err(run(build(dep), ids), ref) < 1e-4
    q = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(weights="q4_0", kv="int4", rope="compute")))
    from deployer.decoder_executor import Executor
    want = Executor(q.graph)  # the plan's own graph, its angles computed
    assert np.array_equal(run(build(q), ids), np.stack([want.step(int(t)) for t in ids]))


def test_auto_computes_the_rotary_angles_when_flash_cannot_hold_the_tables():
    shared_llama()
    tables = deploy(LLAMA / "model.safetensors", Options())
    assert "rope.cos" in tables.graph.weights  # no flash budget: the tables
    tight = deploy(LLAMA / "model.safetensors", Options(flash=tables.memory.flash_bytes - 1))
    assert "rope.inv" in tight.graph.weights and tight.memory.flash_bytes < tables.memory.flash_bytes


@pytest.mark.parametrize("family", ["gpt_neo", "llama"])
def test_deploy_verify_runs_a_language_model_against_the_executor(family, tmp_path):
    from tests.unit.test_gptneo import TINY
    folder = TINY if family == "gpt_neo" else LLAMA
    if not (folder / "model.safetensors").exists():
        pytest.skip(f"{folder} is not present")
    r = CliRunner().invoke(main, ["verify", str(folder / "model.safetensors"), "--kv-cache", "int4", "--context", "6",
                                  "--logits", "topk:3", "--seeds", "2", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["exact"] and result["samples"] == 2 and result["tokens"] == 8  # past the context of 6: it slides
    assert [o["name"] for o in result["outputs"]] == ["NEXT_IDS", "NEXT_LOGITS"]
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"])
    r = CliRunner().invoke(main, ["verify", str(folder / "model.safetensors"), "--per-layer"])
    assert r.exit_code == 2 and "--per-layer: not a flag for language models" in r.output


def test_deploy_verify_on_qemu_counts_a_tokens_instructions():
    from deployer import qemu
    if qemu.missing_tools():
        pytest.skip(f"Cortex-M tools missing: {qemu.missing_tools()}")
    shared_llama()
    r = CliRunner().invoke(main, ["verify", str(LLAMA / "model.safetensors"), "--target", "cortex-m7", "--qemu",
                                  "--seeds", "1", "--l3", "1M", "--flash", "40K", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["exact"] and result["qemu_machine"] == "mps2-an500" and result["macs"] == 168704
    assert result["instructions"] > result["macs"] and result["estimated_cycles"] > 0
