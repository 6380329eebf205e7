"""The LLaMA-family engine cross-compiled with -Werror for the Cortex-M7 and run on QEMU: float32
weights against the `transformers` reference logits, and Q4_0 weights on the SMLAD matvec (the
MLP's 172-wide rows padded to 192; with --kernels plain the engine's own) with an int4 KV cache
equal to the numpy executor's logits; on the Cortex-M55 the Helium matvecs (Q4_0 and int8), equal
to the executor byte for byte (LLaMA, streamed from L3 too, and GPT-Neo with biases and a
vocabulary of 63 that leaves the head 3 rows past its groups of 4), with no float loop turned
into Helium vector code (whose float lanes flush denormals)."""
from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from backends import BACKENDS
from deployer import qemu
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
from deployer.verify_llm import expected_bytes
from tests.unit.test_gptneo import rel_err
from tests.unit.test_llama import LLAMA
from tests.unit.test_llama import run as execute
from tests.unit.test_llama import shared_llama

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()), reason="needs arm-none-eabi-gcc and qemu-system-arm")


def on_m7(dep, ids) -> np.ndarray:
    elf = qemu.build_elf(SimpleNamespace(backend=BACKENDS["cortex-m7"], files=dep.files))
    return np.frombuffer(qemu.run(elf, np.asarray(ids, np.int32).tobytes()).output, np.float32).reshape(len(ids), -1)


def test_f32_engine_on_the_m7_matches_the_reference_logits():
    shared_llama()
    ids = np.load(LLAMA / "ref_input_ids.npy")
    dep = deploy(LLAMA / "model.safetensors", Options(target="cortex-m7", language=LanguageFlags(weights="f32",
                                                                                                 kv="f32")))
    assert rel_err(on_m7(dep, ids), np.load(LLAMA / "ref_logits.npy").reshape(len(ids), -1)) < 1e-4


@pytest.mark.parametrize("kernels", ["auto", "plain"])
def test_q4_0_engine_on_the_m7_equals_the_executor(kernels):
    """The SMLAD family's matvec, and with --kernels plain the engine's own on the same core."""
    ck = shared_llama()
    ids = np.load(LLAMA / "ref_input_ids.npy")[:9]
    dep = deploy(LLAMA / "model.safetensors", Options(target="cortex-m7", kernels=kernels, language=LanguageFlags(
        weights="q4_0", kv="int4", context=6)))
    matvecs = {lp.variant.name for lp in dep.layers if lp.variant.name.startswith(("matvec", "head"))}
    assert matvecs == ({"matvec_q4_0_smlad"} if kernels == "auto" else {"matvec_q4_0"})
    assert ("__smlad" in next(t for n, t in dep.files.items() if n.endswith("_engine.c"))) == (kernels == "auto")
    want = execute(ck, ids, context=6, weights="q4_0", kv="int4", kv_group=dep.graph.kv.group)
    assert np.array_equal(on_m7(dep, ids), want)


def on_qemu(dep, target, ids) -> bytes:
    elf = qemu.build_elf(SimpleNamespace(backend=BACKENDS[target], files=dep.files))
    return qemu.run(elf, np.asarray(ids, np.int32).tobytes()).output


def engine_c(dep) -> str:
    return next(t for n, t in dep.files.items() if n.endswith("_engine.c"))


def test_q4_0_engine_on_the_m55_runs_the_helium_matvec_and_equals_the_executor():
    shared_llama()
    ids = np.load(LLAMA / "ref_input_ids.npy")[:9]
    dep = deploy(LLAMA / "model.safetensors", Options(target="cortex-m55", language=LanguageFlags(weights="q4_0",
                                                                                                  kv="int4", context=6)))
    c = engine_c(dep)
    assert "MVE_Q4_STEP4(" in c and "vmladava.s8" in c and "__smlad" not in c
    assert {lp.variant.name for lp in dep.layers if lp.variant.name.startswith("matvec")} == {"matvec_q4_0_mve"}
    assert on_qemu(dep, "cortex-m55", ids) == b"".join(expected_bytes(dep.graph, ids))


def test_gptneo_q4_0_engine_on_the_m55_with_biases_and_a_ragged_head_equals_the_executor(tmp_path):
    from tests import gptneo_builder as gb
    path = gb.write(tmp_path, gb.config(vocab=63))
    dep = deploy(path, Options(target="cortex-m55", language=LanguageFlags(weights="q4_0", kv="int4", context=5)))
    assert "MVE_Q4_STEP4(" in engine_c(dep)
    ids = np.random.default_rng(0).integers(0, 63, 7).astype(np.int32)
    assert on_qemu(dep, "cortex-m55", ids) == b"".join(expected_bytes(dep.graph, ids))


@pytest.mark.parametrize("case", ["llama", "llama-l3", "gptneo"])
def test_int8_engine_on_the_m55_runs_the_helium_matvec_and_equals_the_executor(case, tmp_path):
    """int8 matrices (a float scale per row) on Helium: LLaMA's MLP rows of 172 padded to 192,
    streamed from L3 in blocks of rows, and GPT-Neo's biases with a head 3 rows past its groups of 4."""
    flags = LanguageFlags(weights="int8", kv="int4", context=6)
    if case == "gptneo":
        from tests import gptneo_builder as gb
        path = gb.write(tmp_path, gb.config(vocab=63))
        ids = np.random.default_rng(1).integers(0, 63, 7).astype(np.int32)
        dep = deploy(path, Options(target="cortex-m55", language=flags))
    else:
        shared_llama()
        path, ids = LLAMA / "model.safetensors", np.load(LLAMA / "ref_input_ids.npy")[:8]
        l3 = dict(l3=4 << 20, flash=60 * 1024) if case == "llama-l3" else {}
        dep = deploy(path, Options(target="cortex-m55", language=flags, **l3))
        assert (dep.graph.l3 is not None) == (case == "llama-l3")
    names = {lp.variant.name for lp in dep.layers if lp.variant.name.startswith(("matvec", "head"))}
    assert names and all(n.endswith("_mve") and "int8" in n for n in names), names
    assert "vmladavaq_s8(vmladavq_s8(" in engine_c(dep)
    assert on_qemu(dep, "cortex-m55", ids) == b"".join(expected_bytes(dep.graph, ids))


@pytest.mark.parametrize("weights", ["f32", "int8", "q4_0"])
def test_m55_engines_keep_float_math_off_helium_vectors(weights):
    """Helium's float lanes flush denormals, the scalar FPU and the executor keep them: the engine
    asks gcc not to vectorize, so its object has no float vector instruction whatever the matvec."""
    shared_llama()
    dep = deploy(LLAMA / "model.safetensors", Options(target="cortex-m55", language=LanguageFlags(
        weights=weights, kv="int8", context=6)))
    elf = qemu.build_elf(SimpleNamespace(backend=BACKENDS["cortex-m55"], files=dep.files))
    text = subprocess.run(["arm-none-eabi-objdump", "-d", "-marmv8.1-m.main", str(elf.path)], capture_output=True,
                          text=True, check=True).stdout
    vector_float = [line for line in text.splitlines() if re.search(r"\bv\w+\.f(16|32)\s+q\d", line)]
    assert not vector_float, vector_float[:5]
