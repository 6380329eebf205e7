"""--l3 on language models: the matrices that do not fit --flash stream from external memory a
block of rows at a time, double-buffered, and the engines stay equal to the numpy executor byte
for byte, on the host and on QEMU's Cortex-M boards (the image linked into the board's PSRAM)."""
from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.llm_passes import LanguageFlags, streamed_bytes_per_token
from deployer.manifest import SCHEMA
from deployer.pipeline import Options, deploy
from deployer.verify_llm import expected_bytes
from network_parser.errors import InfeasibleBudget
from tests.host.test_gptneo_engine import build
from tests.unit.test_gptneo import TINY, shared
from tests.unit.test_llama import LLAMA, shared_llama

K = 1024


def model(family):
    return (shared(TINY), TINY) if family == "gpt_neo" else (shared_llama(), LLAMA)


@pytest.mark.parametrize("family", ["gpt_neo", "llama"])
@pytest.mark.parametrize("weights, logits, flash", [("q4_0", "full", None), ("q4_0", "argmax", 60 * K),
                                                    ("int8", "topk:3", None), ("f32", "full", 200 * K)])
def test_streamed_engines_equal_the_executor(family, weights, logits, flash):
    _, folder = model(family)
    dep = deploy(folder / "model.safetensors", Options(l3=4 << 20, flash=flash, language=LanguageFlags(
        weights=weights, kv="int8", logits=logits)))
    streamed = {s.name for s in dep.graph.l3.matrices}
    if flash is None:
        assert streamed == set(dep.graph.matrices())  # no flash budget: every matrix in L3
    else:
        assert streamed and dep.memory.flash_bytes <= flash and streamed != set(dep.graph.matrices())
    assert dep.memory.l3_bytes == dep.graph.l3.bytes and "WBUF" in {lt.name for lt in dep.lives}
    ids = np.load(folder / "ref_input_ids.npy").reshape(-1)[:8]
    got = subprocess.run([str(build(dep))], input=np.asarray(ids, np.int32).tobytes(), capture_output=True,
                         check=True).stdout
    assert got == b"".join(expected_bytes(dep.graph, ids))  # the executor of the same plan (--rope auto computes
    # the angles where --flash is tight)
    if weights == "f32" and flash is not None and family == "llama":
        assert "rope.inv" in dep.graph.weights


def test_the_image_the_manifest_and_the_bytes_streamed(tmp_path):
    shared_llama()
    out = tmp_path / "o"
    r = CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "--l3", "1M", "--flash", "40K", "-o", str(out)])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    jsonschema.validate(manifest, json.loads(SCHEMA.read_text()))
    lm = manifest["language_model"]
    image = (out / "llama_tiny_random_l3_weights.bin").read_bytes()
    assert lm["l3"]["bytes"] == len(image) and lm["l3"]["image"] == "llama_tiny_random_l3_weights.bin"
    c_array = (out / "llama_tiny_random_l3_image.c").read_text()
    assert f"inference_l3_image[{len(image)}]" in c_array and 'section(".l3_image")' in c_array
    dep = deploy(LLAMA / "model.safetensors", Options(l3=1 << 20, flash=40 * K))
    # the streamed matrices are read whole once per token (the tied head is the embedding)
    assert lm["l3"]["streamed_bytes_per_token"] == streamed_bytes_per_token(dep.graph) == \
        sum(dep.graph.weights[m.name].nbytes for m in dep.graph.l3.matrices)
    assert f"L3 {len(image):,} B" in r.output


def test_budgets_that_cannot_hold_say_the_smallest_that_would():
    shared_llama()
    with pytest.raises(InfeasibleBudget, match="with every matrix in L3 .* the smallest --flash that works is"):
        deploy(LLAMA / "model.safetensors", Options(l3=1 << 20, flash=8 * K))
    with pytest.raises(InfeasibleBudget, match="bytes of L3 but --l3 is 4096; the smallest --l3 that works"):
        deploy(LLAMA / "model.safetensors", Options(l3=4 * K, flash=40 * K))


@pytest.mark.parametrize("target", ["cortex-m7", "cortex-m33", "cortex-m55"])  # SMLAD, SMLAD, Helium matvecs
def test_streamed_engine_on_qemu_equals_the_executor(target):
    from backends import BACKENDS
    from deployer import qemu
    if qemu.missing_tools():
        pytest.skip(f"Cortex-M tools missing: {qemu.missing_tools()}")
    _, folder = model("llama")
    dep = deploy(folder / "model.safetensors", Options(target=target, l3=4 << 20, flash=60 * K, language=LanguageFlags(
        weights="q4_0", kv="int4", logits="topk:4")))
    ids = np.load(folder / "ref_input_ids.npy").reshape(-1)[:6]
    elf = qemu.build_elf(SimpleNamespace(backend=BACKENDS[target], files=dep.files))
    got = qemu.run(elf, np.asarray(ids, np.int32).tobytes()).output
    assert got == b"".join(expected_bytes(dep.graph, ids))
    # the image is in the board's PSRAM: the ELF's flash holds the code and the weights left in flash
    assert qemu.elf_memory(elf.path)["flash_bytes"] < dep.memory.weights_bytes + min(16 * K, dep.graph.l3.bytes)


def test_generate_runs_a_streamed_engine(tmp_path):
    from deployer.decoder_executor import Executor
    shared_llama()
    out = tmp_path / "o"
    assert CliRunner().invoke(main, [str(LLAMA / "model.safetensors"), "--l3", "1M", "--flash", "40K",
                                     "-o", str(out)]).exit_code == 0
    r = CliRunner().invoke(main, ["generate", str(out), "hello world", "--max-tokens", "5", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    dep = deploy(LLAMA / "model.safetensors", Options(l3=1 << 20, flash=40 * K))
    ex, ids = Executor(dep.graph), []
    from tokenizers import Tokenizer
    prompt = [1, *Tokenizer.from_file(str(LLAMA / "tokenizer.json")).encode("hello world",
                                                                             add_special_tokens=False).ids]
    for t in prompt:
        logits = ex.step(t)
    for _ in range(len(result["ids"])):
        ids.append(int(np.argmax(logits)))
        logits = ex.step(ids[-1])
    assert result["ids"] == ids
