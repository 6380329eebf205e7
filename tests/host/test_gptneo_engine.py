"""The GPT-Neo C engine: built with gcc -Werror (and once under ASan/UBSan), its logits against
the shared reference and the numpy executor, greedy decoding through `deploy generate`.

Tolerances: the f32 engine sums in a different order than numpy's BLAS and computes expf,
tanhf and 1/sqrtf itself: relative error < 1e-4 against the reference logits (measured
3.8e-7). The quantized engines share the executor's integer codes and block sums and run the
IR's ops in the same order, so only the float parts (polynomial expf/tanhf, summation order in
LayerNorm and attention) differ: < 1e-5 relative to numpy (measured 1.7e-7 to 3.8e-7), the same
top token at every position. (A float difference at a rounding boundary would move one
activation or KV code by a step, about 1e-4: that would fail this test and be looked at.)"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.decoder_executor import Session
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
from deployer.verify import SANITIZE_FLAGS, compile_files, write_files
from tests.host.test_engine_build import stack_frames
from tests.unit.test_gptneo import TALK, TINY, TOKENIZER, greedy, rel_err, shared, talk_ids

HARNESS = Path(__file__).resolve().parents[2] / "deployer" / "harness" / "verify_main.c"
FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")


def build(dep, sanitize=False) -> Path:
    flags = [f for f in FLAGS if not f.startswith("-O")] + list(SANITIZE_FLAGS) if sanitize else list(FLAGS)
    return compile_files(dep.files, "gcc", tuple(flags), HARNESS)


def run(exe: Path, ids) -> np.ndarray:
    out = subprocess.run([str(exe)], input=np.asarray(ids, np.int32).tobytes(), capture_output=True, check=True)
    return np.frombuffer(out.stdout, np.float32).reshape(len(ids), -1)


def test_f32_engine_matches_the_reference_logits_at_every_position():
    shared(TINY)
    dep = deploy(TINY / "model.safetensors", Options(language=LanguageFlags(weights="f32", kv="f32")))
    ids = np.load(TINY / "ref_input_ids.npy")
    assert rel_err(run(build(dep), ids), np.load(TINY / "ref_logits.npy")) < 1e-4


@pytest.mark.parametrize("weights, kv, context", [("q4_0", "int8", None), ("q4_0", "int4", 6), ("int8", "int8", 5),
                                                  ("f32", "int4", None)])
def test_quantized_engines_match_the_numpy_executor(weights, kv, context):
    m = shared(TINY)
    dep = deploy(TINY / "model.safetensors", Options(language=LanguageFlags(weights=weights, kv=kv, context=context)))
    ids = np.load(TINY / "ref_input_ids.npy")
    got = run(build(dep), ids)
    s = Session(m, context=context, weights=weights, kv=kv, kv_group=dep.graph.kv.group)
    want = np.stack([s.step(int(t)) for t in ids])
    assert rel_err(got, want) < 1e-5
    assert (got.argmax(axis=1) == want.argmax(axis=1)).all()


def test_engine_under_sanitizers():
    """The transformer engine family once under AddressSanitizer and UBSan (KV window sliding)."""
    shared(TINY)
    dep = deploy(TINY / "model.safetensors", Options(language=LanguageFlags(weights="q4_0", kv="int4", context=5)))
    ids = list(np.load(TINY / "ref_input_ids.npy"))
    assert run(build(dep, sanitize=True), ids).shape == (len(ids), 512)


def guarded_tiny():
    shared(TINY)
    return deploy(TINY / "model.safetensors", Options(debug_guards=True, language=LanguageFlags(weights="q4_0", kv="int4", context=5)))


def test_debug_guards_keep_the_logits_bit_exact():
    """--debug-guards: canaries around every arena buffer, checked after each op; the logits are
    the unguarded engine's, bit for bit (plain and under ASan/UBSan)."""
    dep = guarded_tiny()
    plain = deploy(TINY / "model.safetensors", Options(language=LanguageFlags(weights="q4_0", kv="int4", context=5)))
    manifest = json.loads(dep.files["manifest.json"])
    assert manifest["arena"]["guard_bytes"] == 16 and manifest["arena"]["bytes"] > plain.memory.arena_bytes
    ids = list(np.load(TINY / "ref_input_ids.npy"))
    want = run(build(plain), ids)
    assert np.array_equal(run(build(dep), ids).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(run(build(dep, sanitize=True), ids).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("op_kind, statement", [("Gelu", "FF[{n}] += 1.0f;"), ("Add", "((uint8_t *)X)[-1] ^= 1u;")])
def test_debug_guards_catch_and_name_a_stray_write(op_kind, statement):
    """A byte written just past (or before) an op's buffer: inference_run() stops after that op
    and names the buffer."""
    dep = guarded_tiny()
    graph = dep.graph
    k, op = next((k, op) for k, op in enumerate(graph.ops) if type(op).__name__ == op_kind)
    name = next(n for n in dep.files if n.endswith("_engine.c"))
    line = next(ln for ln in dep.files[name].splitlines() if f"/* {k}: {op_kind}(" in ln)
    bad = dep.files[name].replace(line, line + "\n    " + statement.format(n=graph.activation(op.x).elements), 1)
    exe = build(replace(dep, files={**dep.files, name: bad}))
    r = subprocess.run([str(exe)], input=np.asarray([1, 2], np.int32).tobytes(), capture_output=True)
    assert r.returncode == 6 and f"guard: after op {k}: {op.x}" in r.stderr.decode(), r.stderr


def test_tinytalk_generate_matches_the_f32_reference(tmp_path):
    """deploy + deploy generate: q4_0 weights and an int8 KV cache continue "Once upon a time"
    with the same 30 tokens as the float32 reference."""
    m = shared(TALK)
    if not (TOKENIZER / "vocab.json").exists():
        pytest.skip(f"{TOKENIZER} is not present on this machine")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(TALK / "model.safetensors"), "--weights", "q4_0", "--kv-cache", "int8",
                                  "-o", str(out), "--tokenizer", str(TOKENIZER)])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "language_model" and manifest["language_model"]["quantization"][0]["rmse"] == 0
    r = CliRunner().invoke(main, ["generate", str(out), "Once upon a time", "--max-tokens", "30", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["ids"] == greedy(m, talk_ids("Once upon a time"), 30)
    assert result["text"].startswith(", there was a little girl named Lily.")


def test_generate_refuses_folders_it_cannot_run(tmp_path):
    r = CliRunner().invoke(main, ["generate", str(tmp_path), "hello"])
    assert r.exit_code == 2 and "not a deploy output" in r.stderr
    (tmp_path / "manifest.json").write_text(json.dumps({"manifest_version": 1, "model": "x"}))
    r = CliRunner().invoke(main, ["generate", str(tmp_path), "hello"])  # no marker: not what deploy wrote
    assert r.exit_code == 2 and "not a deploy output as deploy wrote it" in r.stderr
    from deployer.output import MARKER, marker_text
    (tmp_path / MARKER).write_text(marker_text({"manifest.json": (tmp_path / "manifest.json").read_text()}))
    r = CliRunner().invoke(main, ["generate", str(tmp_path), "hello"])
    assert r.exit_code == 2 and "deploy generate runs language models" in r.stderr
    (tmp_path / "extra.c").write_text("int main(void) { return 0; }\n")  # added since: never compiled
    r = CliRunner().invoke(main, ["generate", str(tmp_path), "hello"])
    assert r.exit_code == 2 and "not a deploy output as deploy wrote it" in r.stderr


def test_pruned_vocabulary_keeps_the_greedy_continuation(tmp_path):
    """--prune-vocab with the prompt's and the f32 continuation's tokens: the argmax over the
    kept rows is the same token, so generation is unchanged; the head and embedding shrink."""
    m = shared(TALK)
    if not (TOKENIZER / "vocab.json").exists():
        pytest.skip(f"{TOKENIZER} is not present on this machine")
    prompt = talk_ids("Once upon a time")
    ref = greedy(m, prompt, 20)
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps(sorted(set(prompt + ref)) + [m.config.eos]))
    full, pruned = tmp_path / "full", tmp_path / "pruned"
    for out, extra in ((full, []), (pruned, ["--prune-vocab", str(keep)])):
        r = CliRunner().invoke(main, [str(TALK / "model.safetensors"), "--kv-cache", "int8", "-o", str(out),
                                      "--tokenizer", str(TOKENIZER), *extra])
        assert r.exit_code == 0, r.output
    a, b = (json.loads((f / "manifest.json").read_text()) for f in (full, pruned))
    assert b["language_model"]["pruned_vocabulary"] == {"kept": len(set(prompt + ref + [m.config.eos])), "of": m.config.vocab}
    assert b["memory"]["flash_bytes"] < a["memory"]["flash_bytes"] - 1_000_000
    results = [json.loads(CliRunner().invoke(main, ["generate", str(f), "Once upon a time", "--max-tokens", "20",
                                                     "--json"]).stdout) for f in (full, pruned)]
    assert results[0]["text"] == results[1]["text"]


def test_prune_vocab_errors_are_named(tmp_path):
    shared(TINY)
    keep = tmp_path / "keep.json"
    for content, message in (("[1, 2, 99999]", "token 99999 is outside the vocabulary of 512"),
                             ("{}", "expected a non-empty JSON list"), ("[", "not JSON")):
        keep.write_text(content)
        r = CliRunner().invoke(main, [str(TINY / "model.safetensors"), "-o", str(tmp_path / "o"), "--prune-vocab",
                                      str(keep)])
        assert r.exit_code == 2 and message in r.stderr, r.stderr


# ---- the output folder as a firmware project takes it ---------------------------------------

STUB = Path(__file__).resolve().parent / "freertos_stub"
M7_FLAGS = ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16")


@pytest.mark.parametrize("cc, target, weights, guards", [
    ("gcc", "host", "q4_0", False), ("gcc", "host", "int8", False), ("gcc", "host", "f32", True),
    ("arm-none-eabi-gcc", "cortex-m7", "q4_0", False)])
def test_engine_references_no_library_symbol_and_its_stack_estimate_holds(cc, target, weights, guards, tmp_path):
    """Compiled freestanding, the engine object has no undefined symbol (no libc, no libm, its
    expf/tanhf/1/sqrtf are its own); INFERENCE_ENGINE_STACK_BYTES covers inference_run's frame
    plus its deepest call chain as the compiler lays the frames out."""
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    shared(TINY)
    dep = deploy(TINY / "model.safetensors", Options(target=target, debug_guards=guards, rtos="freertos", language=LanguageFlags(weights=weights, kv="int4")))
    flags = [*FLAGS, "-ffreestanding", *(M7_FLAGS if target != "host" else ())]
    frames = stack_frames(dep.files, cc, flags, tmp_path)
    nm = "arm-none-eabi-nm" if target != "host" else "nm"
    assert subprocess.run([nm, "-u", str(tmp_path / "e.o")], capture_output=True, text=True,
                          check=True).stdout.strip() == ""

    def chain(*names):  # callees a compiler may have inlined are absent: they count 0
        return sum(max((v for k, v in frames.items() if k.startswith(n)), default=0) for n in names)
    need = frames["inference_run"] + max(chain("attention", "store_kv", "quantize_blocks", "exp_f32"),
                                         chain("matvec", "quantize_blocks"), chain("gelu", "tanh_f32", "exp_f32"),
                                         chain("layer_norm", "rsqrt_f32"), chain("embedding"), chain("guard_check"))
    estimate = int(re.search(r"INFERENCE_ENGINE_STACK_BYTES (\d+)", dep.files["inference_task.h"]).group(1))
    assert need <= estimate, (need, estimate, frames)


def test_freertos_glue_compiles_for_the_language_model(tmp_path):
    shared(TINY)
    dep = deploy(TINY / "model.safetensors", Options(rtos="freertos"))
    write_files(dep.files, tmp_path)
    assert "xTaskCreate" in dep.files["inference_task.c"]
    subprocess.run(["gcc", *FLAGS, "-pedantic", "-I", str(STUB), "-I", str(tmp_path), "-c",
                    str(tmp_path / "inference_task.c"), "-o", str(tmp_path / "task.o")], check=True)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_drop_in_library_generates_a_token(tmp_path):
    """add_subdirectory(out) + target_link_libraries(app PRIVATE <lib>): an app feeding two
    tokens through the bare-metal glue gets the numpy executor's next token."""
    m = shared(TINY)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(TINY / "model.safetensors"), "--weights", "q4_0", "--kv-cache", "int8", "-q",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    lib = json.loads((out / "manifest.json").read_text())["library"]
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.c").write_text(
        "#include <stdint.h>\n#include <stdio.h>\n#include \"inference_api.h\"\n#include \"inference_task.h\"\n"
        "int main(void) {\n"
        "    const int32_t prompt[2] = {5, 17};\n"
        "    int best = 0;\n"
        "    if (inference_init() != 0) return 1;\n"
        "    for (int t = 0; t < 2; ++t) {\n"
        "        *(int32_t *)inference_get_input(0) = prompt[t];\n"
        "        inference_task_input_ready();\n"
        "        if (inference_task_step() != 1) return 2;\n"
        "    }\n"
        "    const float *logits = (const float *)inference_get_output(0);\n"
        "    for (int i = 1; i < INFERENCE_VOCAB; ++i) best = logits[i] > logits[best] ? i : best;\n"
        "    printf(\"%d\\n\", best);\n"
        "    return inference_position() == 2 ? 0 : 3;\n"
        "}\n")
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        f"add_subdirectory({out} engine)\nadd_executable(app main.c)\ntarget_link_libraries(app PRIVATE {lib})\n")
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(app), "-B", str(build), "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror -ffp-contract=off"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    s = Session(m, weights="q4_0", kv="int8")
    s.step(5)
    want = int(s.step(17).argmax())
    got = subprocess.run([str(build / "app")], capture_output=True, text=True, check=True).stdout
    assert int(got) == want
