"""GAP8 / PULP target: every shared int8 model, deployed with --target gap8, built with the host
gcc against a host emulation of the PMSIS cluster API (backends/gap8_emulation: pthreads for the
8 cores, memcpy for the cluster DMA), run bit-exact against the reference, once more under
ThreadSanitizer, and cross-compiled for rv32imc with -Werror so the engine is target-clean."""
from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from deployer import build_cache
from deployer.pipeline import Options, deploy
from backends.gap8 import EMULATION
from deployer.verify import BuildError, build_engine, emulated_engine, files_digest, random_inputs, run_engine, write_files
from network_parser.errors import InfeasibleBudget
from tests.host.test_models import assert_bit_exact
from tests.host.test_tiled import smallest_l1
from tests.models import INT8_MODELS, shared_model

K = 1024
EMU = EMULATION.folder
HOST_FLAGS = (*(f for f in EMULATION.cflags if not f.startswith("-O")), f"-I{EMU}")
EMULATED = EMULATION.cflags
TSAN = (*HOST_FLAGS, "-O1", "-g", "-fsanitize=thread")
CROSS_CC = "riscv64-unknown-elf-gcc"


@functools.lru_cache(maxsize=None)
def gap8(rel: str, l1: int):
    """The gap8 deployment of a shared model at an L1 budget (skips when it does not fit); L2 as
    large as it needs (the L2 budget and L3 streaming are tested on their own below)."""
    try:
        return deploy(shared_model(rel), Options(patch="off", target="gap8", l1=l1, part_budgets=False))
    except InfeasibleBudget as e:
        pytest.skip(f"{rel} needs {e.minimum_bytes} B of L1 (> {l1})")


# Tiles per inference the emulated cluster runs in reasonable time (about 70 us each: two
# barriers over 8 threads on this machine's cores).
EMULATED_TILES = 2_000_000


def emulated(dep, flags=EMULATED, folder: Path | None = None):
    """Build for the emulated cluster; an engine using L3 also gets the start-up that stores its
    weight image (written to ``folder``) in the emulated HyperRAM."""
    return emulated_engine(dep, folder, flags)


@pytest.mark.parametrize("l1", [64 * K, 32 * K, 16 * K, None], ids=["64K", "32K", "16K", "smallest"])
@pytest.mark.parametrize("rel", INT8_MODELS)
def test_gap8_emulated_bit_exact(rel, l1):
    l1 = l1 or smallest_l1(shared_model(rel), "gap8")
    dep = gap8(rel, l1)
    tiles = sum(t.tiles for _, t in dep.tilings.values())
    if tiles > EMULATED_TILES:
        pytest.skip(f"{tiles:,} tiles at {l1} B of L1: each forks barriers over 8 emulated cores, too slow "
                    f"for the suite (the host engine runs this tiling in tests/host/test_tiled.py)")
    assert all(t.l1_bytes <= l1 for _, t in dep.tilings.values())
    assert_bit_exact(shared_model(rel), dep, emulated(dep), [random_inputs(dep.graph, 5)])


@pytest.mark.parametrize("rel", INT8_MODELS)
def test_gap8_smallest_l1_with_whole_input_channels(rel):
    """Where the smallest L1 has too many tiles to emulate, the emulation still runs the model at
    its tightest tiling that keeps all input channels together (the floor before channel splits)."""
    from solver.tiling import minimum_l1
    dep = gap8(rel, smallest_l1(shared_model(rel), "gap8"))
    if sum(t.tiles for _, t in dep.tilings.values()) <= EMULATED_TILES:
        pytest.skip("the smallest L1 itself runs in test_gap8_emulated_bit_exact")
    l1 = max(minimum_l1(g, split_input_channels=False) for g, _ in dep.tilings.values())
    dep = gap8(rel, l1)
    assert all(t.l1_bytes <= l1 for _, t in dep.tilings.values())
    assert_bit_exact(shared_model(rel), dep, emulated(dep), [random_inputs(dep.graph, 5)])


@pytest.mark.parametrize("rel", INT8_MODELS)
def test_gap8_under_thread_sanitizer(rel, monkeypatch):
    """The team fork, barriers and DMA waits leave no data race between the cores."""
    monkeypatch.setenv("TSAN_OPTIONS", "halt_on_error=1")
    dep = gap8(rel, 16 * K)
    assert_bit_exact(shared_model(rel), dep, emulated(dep, TSAN), [random_inputs(dep.graph, 7)])


def test_thread_sanitizer_catches_a_missing_barrier(monkeypatch):
    """The harness is not vacuous: without the barrier after the DMA wait, cores read L1
    while the master's DMA fills it, and TSan (or the comparison) says so."""
    monkeypatch.setenv("TSAN_OPTIONS", "halt_on_error=1")
    rel = "mlperf_tiny/kws_ref_model.tflite"
    dep = gap8(rel, 16 * K)
    engine = next(n for n in dep.files if n.endswith("_engine.c"))
    text = dep.files[engine]
    assert text.count("pi_cl_team_barrier();") >= 2
    broken = dict(dep.files)
    broken[engine] = text.replace("pi_cl_team_barrier();", "/* barrier removed */", 1)
    bad = build_engine(replace(dep, files=broken), cc="gcc", cflags=TSAN, extra_sources=(EMU / "pmsis_emu.c",))
    with pytest.raises(BuildError, match="ThreadSanitizer"):
        run_engine(bad, [random_inputs(dep.graph, 7)])


def cross_compile(dep) -> None:
    """Compile every generated .c file for rv32imc with the backend's flags (-c, -Werror),
    against the declaration-only pmsis.h; cached like the host builds."""
    flags = [*dep.backend.cflags, "-c"]
    digest = files_digest(dep.files)
    digest.update(" ".join([CROSS_CC, *flags]).encode() + (EMU / "pmsis.h").read_bytes())

    def build(folder: Path) -> None:
        write_files(dep.files, folder)
        for name in dep.files:
            if name.endswith(".c"):
                proc = subprocess.run([CROSS_CC, *flags, "-I", str(folder), "-I", str(EMU), str(folder / name),
                                       "-o", str(folder / f"{name}.o")], capture_output=True, text=True)
                assert proc.returncode == 0, f"{CROSS_CC} rejects {name}:\n{proc.stderr[-4000:]}"
        (folder / "ok").touch()

    build_cache.cached(f"rv32-{digest.hexdigest()[:24]}", "ok", build)


@pytest.mark.parametrize("l1", [64 * K, 16 * K], ids=["64K", "16K"])
@pytest.mark.parametrize("rel", INT8_MODELS)
def test_gap8_cross_compiles_for_rv32imc(rel, l1):
    if shutil.which(CROSS_CC) is None:
        pytest.skip(f"{CROSS_CC} is not installed (bash tests/install.sh installs gcc-riscv64-unknown-elf)")
    dep = gap8(rel, l1)
    assert "-march=rv32imc" in dep.backend.cflags and "-Werror" in dep.backend.cflags
    cross_compile(dep)


def test_gap8_defaults_to_its_own_l1():
    """Without --l1 the target's 64 KiB L1 applies; tiled layers fork the cluster and use PMSIS DMA."""
    dep = deploy(shared_model("mlperf_tiny/kws_ref_model.tflite"), Options(patch="off", target="gap8"))
    assert dep.options.l1 == 64 * K and dep.tilings
    engine = next(text for n, text in dep.files.items() if n.endswith("_engine.c"))
    dma = next(text for n, text in dep.files.items() if n.endswith("_dma.h"))
    assert "pi_cl_team_fork(" in engine and "PI_L1 static uint8_t l1[65536]" in engine
    assert '#include "pmsis.h"' in dma and "pi_cl_dma_cmd_2d(" in dma


L3_MODELS = ["mlperf_tiny/kws_ref_model.tflite", "mlperf_tiny/vww_96_int8.tflite",
             "mlperf_tiny/pretrainedResnet_quant.tflite", "tflm/person_detect.tflite", "mcunet/mcunet_vww.tflite"]


@pytest.mark.parametrize("rel", L3_MODELS)
def test_gap8_l3_streaming_bit_exact(rel, tmp_path):
    """At the smallest L2 the deployer reports, weights and activations stream from HyperRAM
    (cluster RAM requests, performed only when waited for) through L2 slabs into L1 tiles."""
    from tests.host.test_l3 import streaming
    dep, _, sram = streaming(rel, 16 * K, "gap8")
    assert dep.l3 is not None and dep.l3.placement.weights and dep.memory.sram_bytes <= sram
    assert_bit_exact(shared_model(rel), dep, emulated(dep, folder=tmp_path),
                     [random_inputs(dep.graph, s) for s in range(2)])


def test_gap8_l3_under_thread_sanitizer_and_a_missing_wait_is_caught(tmp_path, monkeypatch):
    from tests.host.test_l3 import streaming
    monkeypatch.setenv("TSAN_OPTIONS", "halt_on_error=1")
    rel = "mlperf_tiny/vww_96_int8.tflite"
    dep, _, _ = streaming(rel, 16 * K, "gap8")
    assert dep.l3.placement.tensors
    samples = [random_inputs(dep.graph, 7)]
    assert_bit_exact(shared_model(rel), dep, emulated(dep, TSAN, tmp_path), samples)
    engine = next(n for n in dep.files if n.endswith("_engine.c"))
    broken = dict(dep.files)
    broken[engine] = dep.files[engine].replace("l3_wait(&fetch[slot]);", "/* wait removed */")
    assert broken[engine] != dep.files[engine]
    with pytest.raises(AssertionError, match="differ"):
        assert_bit_exact(shared_model(rel), dep, emulated(replace(dep, files=broken), folder=tmp_path), samples)


def test_gap8_l3_engine_cross_compiles():
    if shutil.which(CROSS_CC) is None:
        pytest.skip(f"{CROSS_CC} is not installed (bash tests/install.sh installs gcc-riscv64-unknown-elf)")
    from tests.host.test_l3 import streaming
    dep, _, _ = streaming("mlperf_tiny/vww_96_int8.tflite", 16 * K, "gap8")
    assert dep.l3.placement.tensors and dep.l3.placement.weights
    cross_compile(dep)


def test_gap8_streams_from_its_hyperram_by_default():
    """GAP8 keeps weights in L2; with an L2 budget below them, its 8 MiB L3 takes the rest."""
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    whole = deploy(model, Options(patch="off", target="gap8", l1=16 * K))
    assert whole.l3 is None and whole.memory.sram_bytes > 256 * K
    dep = deploy(model, Options(patch="off", target="gap8", l1=16 * K, sram=128 * K))
    assert dep.options.l3 == 8 * 1024 * K and dep.l3 is not None and dep.memory.sram_bytes <= 128 * K
    assert "inference_l3_init" in next(v for n, v in dep.files.items() if n.endswith("_engine.h"))


@pytest.mark.parametrize("flags", [["--l1", "16K"], ["--l1", "16K", "--sram", "40K"]], ids=["l2", "l3"])
def test_deploy_verify_runs_gap8_engines_on_the_emulated_cluster(flags):
    """`deploy verify --target gap8` builds against the emulation and runs here; with --sram 40K
    the weights and activations that do not fit L2 stream from the emulated L3, whose image the
    engine's start-up loads."""
    import json
    from click.testing import CliRunner
    from deployer.cli import main
    result = CliRunner().invoke(main, ["verify", str(shared_model("mlperf_tiny/kws_ref_model.tflite")), "--target",
                                       "gap8", *flags, "--seeds", "2", "--json", "--per-layer"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["target"] == "gap8" and out["samples"] == 2
    if "--sram" in flags:  # the L3 path really taken: weights and activations in the emulated HyperRAM
        dep = deploy(shared_model("mlperf_tiny/kws_ref_model.tflite"), Options(target="gap8", l1=16 * K, sram=40 * K))
        assert dep.l3 is not None and dep.memory.l3_bytes > 0
    assert all(o["max_abs_diff"] == 0 for o in out["outputs"]) and out["first_divergence"]["layer"] is None


def test_gap8_l2_is_a_budget():
    """GAP8's 512 KiB of L2 is the default --sram: MobileNetV2-224 streams its weights from L3
    to fit it instead of planning megabytes of L2."""
    dep = deploy(shared_model("tflm/mobilenet_v2_quantized_1x3x224x224.tflite"), Options(target="gap8", l1=32 * K))
    assert dep.options.sram == 512 * K and dep.memory.sram_bytes <= 512 * K
    assert dep.l3 is not None and dep.memory.l3_weights_bytes > 0
