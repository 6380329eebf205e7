"""--debug-guards: every engine family runs bit-exact with its canaries and DMA bounds checks,
under AddressSanitizer and UBSan (and the emulated 8-core cluster under ThreadSanitizer); a
write past a buffer and a copy out of bounds are caught and named."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from deployer.pipeline import GUARD_BYTES, Options, deploy
from deployer.verify import BuildError, build_engine, random_inputs, run_engine
from tests.host.test_models import assert_bit_exact
from tests.models import shared_model
from tests.target.test_gap8 import HOST_FLAGS, TSAN, emulated

KWS = "mlperf_tiny/kws_ref_model.tflite"
VWW = "mlperf_tiny/vww_96_int8.tflite"
ASAN = (*HOST_FLAGS, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")

# (name, model, options): one of each engine family the host can run
FAMILIES = [
    ("cnn", KWS, dict()),
    ("cnn-in-place", "synthetic/mobilenetv2_035_96_random.tflite", dict(patch="off")),
    ("tiled-dma", KWS, dict(l1=16 * 1024)),
    ("tiled-l3", KWS, dict(l1=16 * 1024, l3=8 << 20, flash=16 * 1024, patch="off")),  # weights streamed
    ("patched", VWW, dict(patch="4x4@3")),
]


def guarded(rel: str, **options):
    return deploy(shared_model(rel), Options(debug_guards=True, **options))


@pytest.mark.parametrize("name, rel, options", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_guarded_engine_is_bit_exact_under_sanitizers(name, rel, options):
    dep = guarded(rel, **options)
    plain = deploy(shared_model(rel), Options(**options))
    buffers = len({lt.owner for lt in dep.lives})
    assert plain.arena.peak < dep.arena.peak <= plain.arena.peak + buffers * (2 * GUARD_BYTES + 16)
    engine = next(t for n, t in dep.files.items() if n.endswith("_engine.c"))
    assert "guard_check(" in engine and "INFERENCE_GUARD_FAILED" in dep.files["inference_api.h"]
    assert "guard_" not in next(t for n, t in plain.files.items() if n.endswith("_engine.c"))
    assert (json.loads(dep.files["manifest.json"])["arena"]["guard_bytes"],
            json.loads(plain.files["manifest.json"])["arena"]["guard_bytes"]) == (GUARD_BYTES, 0)
    if dep.tilings:
        assert "guard_dma(" in next(t for n, t in dep.files.items() if n.endswith("_dma.h"))
    samples = [random_inputs(dep.graph, s) for s in range(2)]
    for sanitize in (False, True):
        assert_bit_exact(shared_model(rel), dep, build_engine(dep, sanitize=sanitize), samples)


@pytest.mark.parametrize("flags", ["asan", "tsan"])
def test_guarded_gap8_cluster_under_sanitizers(flags, monkeypatch):
    """The GAP8 engine (8 emulated cores, cluster DMA) with its guards, under ASan/UBSan and TSan."""
    monkeypatch.setenv("TSAN_OPTIONS", "halt_on_error=1")
    dep = guarded(KWS, target="gap8", l1=16 * 1024, patch="off")
    assert "guard_dma(" in next(t for n, t in dep.files.items() if n.endswith("_dma.h"))
    assert_bit_exact(shared_model(KWS), dep, emulated(dep, ASAN if flags == "asan" else TSAN),
                     [random_inputs(dep.graph, 3)])


def _engine_name(dep) -> str:
    return next(n for n in dep.files if n.endswith("_engine.c"))


def _macro(text: str, tensor: int) -> str:
    return re.search(rf"^#define (T{tensor}_\w+) \d+", text, re.M).group(1)


def _inject(dep, op: int, statement) -> tuple[dict, str]:
    """The engine's files with ``statement(macro, size)`` run first in op ``op``'s function,
    where ``macro`` names the buffer holding the op's output and ``size`` is its bytes."""
    name = _engine_name(dep)
    text = dep.files[name]
    owner = next(lt for lt in dep.lives if lt.tensor == dep.graph.layers[op].outputs[0]).owner
    macro = _macro(text, owner)
    size = max(lt.size for lt in dep.lives if lt.owner == owner)
    func = re.search(rf"^static void (op{op}_\w+)\(void\)\s*\{{", text, re.M)
    bad = text[:func.end()] + f"\n    {statement(macro, size)} /* injected */" + text[func.end():]
    return {**dep.files, name: bad}, macro


def test_a_write_past_a_buffer_is_caught_and_named():
    """One byte written just past op 3's output: the engine stops after op 3 and names the buffer.
    (Outputs over inputs off: with it, the bytes past a buffer may be its partner's, no canary.)"""
    dep = guarded(KWS, overlap=False)
    files, macro = _inject(dep, 3, lambda macro, size: f"arena[{macro} + {size}] ^= 1u;")
    with pytest.raises(BuildError, match=rf"status 6: guard: after op 3: {macro}"):
        run_engine(build_engine(replace(dep, files=files)), [random_inputs(dep.graph, 0)])


def test_a_write_before_a_buffer_is_caught():
    # outputs over inputs off: with it, op 2's output starts inside its input (no canary between)
    dep = guarded(KWS, overlap=False)
    files, macro = _inject(dep, 2, lambda macro, size: f"arena[{macro} - 1] ^= 1u;")
    with pytest.raises(BuildError, match=rf"guard: after op 2: {macro}"):
        run_engine(build_engine(replace(dep, files=files)), [random_inputs(dep.graph, 0)])


def test_a_copy_out_of_bounds_is_refused_and_named():
    """A DMA copy made one plane longer than its tile: refused before it runs, reported after its layer."""
    dep = guarded(KWS, l1=16 * 1024)
    dma = next(n for n in dep.files if n.endswith("_dma.h"))
    text = dep.files[dma]
    hook = "static inline void dma_copy_3d(uint8_t *dst, const uint8_t *src, int32_t n2, int32_t n1, int32_t n0,\n" \
           "                               int32_t dst_s2, int32_t dst_s1, int32_t src_s2, int32_t src_s1)\n{\n"
    assert hook in text
    bad = text.replace(hook, hook + "    n2 += 4096; /* injected: far more planes than the tile has */\n")
    engine = build_engine(replace(dep, files={**dep.files, dma: bad}), sanitize=True)
    with pytest.raises(BuildError, match=r"status 6: guard: after op \d+: a DMA copy out of bounds"):
        run_engine(engine, [random_inputs(dep.graph, 0)])
