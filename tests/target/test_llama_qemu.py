"""The LLaMA-family engine cross-compiled with -Werror for the Cortex-M7 and run on QEMU: float32
weights against the `transformers` reference logits, and Q4_0 weights on the SMLAD matvec (the
MLP's 172-wide rows padded to 192; with --kernels plain the engine's own) with an int4 KV cache
equal to the numpy executor's logits."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from backends import BACKENDS
from deployer import qemu
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
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
