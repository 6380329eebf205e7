"""Cortex-M4 and M7 targets: shared models deployed with the SMLAD kernels, cross-compiled with
arm-none-eabi-gcc (-Werror) through the engine's own qemu/ folder, run on QEMU's mps2-an386 (M4)
and mps2-an500 (M7) boards, bit-exact against the reference interpreter; the ELF's memory
within the budgets; the kernels alone on random shapes against the numpy executor."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from deployer import qemu
from deployer.pipeline import Options, deploy
from deployer.verify import parse_output, random_inputs, samples_payload
from network_parser.errors import InfeasibleBudget
from tests.host.test_models import assert_outputs_match
from tests.models import shared_model

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")

K = 1024
MODELS = [
    "mlperf_tiny/kws_ref_model.tflite",
    "mlperf_tiny/vww_96_int8.tflite",
    "mlperf_tiny/pretrainedResnet_quant.tflite",
    "mlperf_tiny/ad01_int8.tflite",
    "tflm/person_detect.tflite",
    "synthetic/mobilenetv2_035_96_random.tflite",
]
CORES = ["cortex-m4", "cortex-m7"]


def run_on_qemu(dep, samples) -> list[list[np.ndarray]]:
    """Every sample through the engine in one run on the core's QEMU board: outputs per sample."""
    data = qemu.run(qemu.build_elf(dep), samples_payload(dep.graph, samples)).output
    return parse_output(dep.graph, data, len(samples), False)[0]


def assert_bit_exact_on_qemu(model, dep, samples) -> None:
    assert_outputs_match(model, samples, run_on_qemu(dep, samples), f" on {dep.backend.name}")


@functools.lru_cache(maxsize=None)
def cortexm(rel: str, target: str, sram: int | None = None, flash: int | None = None):
    return deploy(shared_model(rel), Options(target=target, sram=sram, flash=flash))


@pytest.mark.parametrize("target", CORES)
@pytest.mark.parametrize("rel", MODELS)
def test_bit_exact_on_qemu(rel, target):
    dep = cortexm(rel, target)
    assert "smlad" in dep.files[next(n for n in dep.files if n.endswith("_engine.c"))].lower()
    assert_bit_exact_on_qemu(shared_model(rel), dep, [random_inputs(dep.graph, seed) for seed in range(2)])


@pytest.mark.parametrize("rel", MODELS[:3])
def test_elf_memory_within_budgets(rel):
    """--sram 256K --flash 1M: the linked ELF (engine + QEMU harness + stack) fits both."""
    dep = cortexm(rel, "cortex-m7", 256 * K, 1024 * K)
    mem = qemu.elf_memory(qemu.build_elf(dep).path)
    assert 0 < mem["flash_bytes"] <= 1024 * K and 0 < mem["sram_bytes"] <= 256 * K, mem
    assert mem["sections"][".bss"] >= dep.memory.arena_bytes


def test_layers_keep_int8_weights_when_packed_ones_exceed_flash():
    """person_detect's packed weights need about 480 KB; with --flash 320K the layers whose
    packing costs most keep the plain kernels, the plan fits and still runs bit-exact."""
    rel = "tflm/person_detect.tflite"
    full, tight = cortexm(rel, "cortex-m4"), cortexm(rel, "cortex-m4", None, 320 * K)
    assert full.memory.flash_bytes > 320 * K >= tight.memory.flash_bytes
    assert any("keep the plain kernels" in n for n in tight.notes)
    elf = qemu.elf_memory(qemu.build_elf(tight).path)["flash_bytes"]  # the QEMU harness included
    assert abs(elf - tight.memory.flash_bytes) < 0.05 * elf, (elf, tight.memory.flash_bytes)
    assert_bit_exact_on_qemu(shared_model(rel), tight, [random_inputs(tight.graph, 3)])


def test_stm32h743_stages_tiles_in_dtcm():
    """With --l1 the stm32h743 preset tiles layers into its DTCM (the linker's .dtcm section)."""
    rel = "mlperf_tiny/kws_ref_model.tflite"
    dep = deploy(shared_model(rel), Options(target="stm32h743", l1=32 * K))
    assert dep.tilings and dep.options.sram == 512 * K and dep.options.flash == 2048 * K
    assert '__attribute__((section(".dtcm"))) static uint8_t l1[32768]' in \
        dep.files[next(n for n in dep.files if n.endswith("_engine.c"))]
    assert_bit_exact_on_qemu(shared_model(rel), dep, [random_inputs(dep.graph, 1)])


def test_the_l1_buffer_of_a_core_without_tcm_counts_to_sram():
    """On a Cortex-M without TCM the tiles' L1 buffer is a static array in SRAM: the plan's SRAM
    is the arena plus it, and the linked ELF's .bss holds both; on the stm32h743 it is in the
    DTCM, not in SRAM."""
    rel = "mlperf_tiny/kws_ref_model.tflite"
    dep = deploy(shared_model(rel), Options(target="cortex-m7", l1=16 * K, patch="off"))
    assert dep.tilings and dep.memory.scratch_bytes == 16 * K
    assert dep.memory.sram_bytes == dep.memory.arena_bytes + 16 * K
    bss = qemu.elf_memory(qemu.build_elf(dep).path)["sections"][".bss"]
    assert dep.memory.sram_bytes <= bss < dep.memory.sram_bytes + 1024, (bss, dep.memory)
    with pytest.raises(InfeasibleBudget, match="bytes of SRAM"):
        deploy(shared_model(rel), Options(target="cortex-m7", l1=16 * K, patch="off",
                                          sram=dep.memory.arena_bytes + 8 * K))
    tcm = deploy(shared_model(rel), Options(target="stm32h743", l1=16 * K, patch="off"))
    assert tcm.memory.scratch_bytes == 0 and tcm.memory.sram_bytes == tcm.memory.arena_bytes


@pytest.mark.parametrize("target, l1", [("cortex-m4", None), ("stm32h743", 16 * K)], ids=["m4", "h743-tiled-dtcm"])
def test_guarded_engine_on_qemu(target, l1):
    """--debug-guards engines (canaries, DMA bounds checks) cross-compile with -Werror and run
    bit-exact on the board: the SMLAD kernels and the DTCM tile schedule write inside their buffers."""
    rel = MODELS[0]
    dep = deploy(shared_model(rel), Options(target=target, l1=l1, debug_guards=True))
    assert "guard_check(" in dep.files[next(n for n in dep.files if n.endswith("_engine.c"))]
    assert_bit_exact_on_qemu(shared_model(rel), dep, [random_inputs(dep.graph, seed) for seed in range(2)])


@pytest.mark.parametrize("which", ["tiny_random", "odd_vocabulary"])
def test_gptneo_engine_on_the_m7(which, tmp_path):
    """The language-model engine (q4_0 weights on the SMLAD matvec, two rows at a time; int4 KV
    sliding at 5 positions) cross-compiled with -Werror for the Cortex-M7 and run on QEMU: the
    numpy executor's logits to 1e-5; a vocabulary of 63 leaves the head an odd last row."""
    from types import SimpleNamespace

    from backends import BACKENDS
    from deployer.decoder_executor import Session
    from deployer.llm_passes import LanguageFlags
    from network_parser.gptneo import read_gptneo
    from tests import gptneo_builder as gb
    from tests.unit.test_gptneo import TINY, rel_err
    from tests.unit.test_gptneo import shared as shared_llm

    path = TINY / "model.safetensors" if which == "tiny_random" else gb.write(tmp_path, gb.config(vocab=63))
    m = shared_llm(TINY) if which == "tiny_random" else read_gptneo(path)
    dep = deploy(path, Options(target="cortex-m7", language=LanguageFlags(weights="q4_0", kv="int4", context=5)))
    assert "__smlad" in next(t for n, t in dep.files.items() if n.endswith("_engine.c"))
    ids = np.random.default_rng(0).integers(0, m.config.vocab, 7).astype(np.int32)
    out = qemu.run(qemu.build_elf(SimpleNamespace(backend=BACKENDS["cortex-m7"], files=dep.files)), ids.tobytes()).output
    s = Session(m, context=5, weights="q4_0", kv="int4", kv_group=dep.graph.kv.group)
    assert rel_err(np.frombuffer(out, np.float32).reshape(len(ids), -1), np.stack([s.step(int(t)) for t in ids])) < 1e-5


@pytest.mark.parametrize("rel, options", [
    ("mlperf_tiny/vww_96_int8.tflite", dict(target="cortex-m7", sram=32 * K)),  # needs the patch split
    ("mlperf_tiny/pretrainedResnet_quant.tflite", dict(target="stm32h743", l1=16 * K)),  # tiles in DTCM
    ("mlperf_tiny/vww_96_int8.tflite", dict(target="stm32h743", l1=32 * K, sram=32 * K)),  # both
    # the fully connected layer tiled on a core whose double arithmetic is software: its tiles'
    # kernels read the layer's integer estimates of the double scales too
    ("mlperf_tiny/kws_ref_model.tflite", dict(target="cortex-m4", l1=32 * K, patch="off")),
], ids=["patch-stage", "tiles", "tiles-and-patch-stage", "tiled-fc-soft-double"])
def test_dsp_kernels_run_on_tiles_and_patch_regions(rel, options):
    """Tiled layers and the patch stage run the SMLAD variants (one static kernel per window shape,
    called through tables), not the portable kernels, and stay bit-exact on QEMU."""
    dep = deploy(shared_model(rel), Options(**options))
    engine = dep.files[next(n for n in dep.files if n.endswith("_engine.c"))]
    if "l1" in options:
        assert dep.tilings and all(dep.layers[k].variant.dsp for k in dep.tilings
                                   if dep.layers[k].kernel.__class__.__name__ in ("Conv", "FullyConnected"))
        assert "kernel_args_t" in engine
    if "sram" in options and options["sram"] < 64 * K:
        assert dep.patches and all(dep.layers[k].variant.dsp for p in dep.patches for k in p.layers
                                   if dep.layers[k].kernel.__class__.__name__ == "Conv")
        assert "_window[" in engine  # the region kernels' offsets: the stage runs the SMLAD variants
    assert_bit_exact_on_qemu(shared_model(rel), dep, [random_inputs(dep.graph, seed) for seed in range(2)])


@pytest.mark.parametrize("target, l1", [("cortex-m4", None), ("cortex-m7", None), ("stm32h743", 32 * K)])
@pytest.mark.parametrize("which", ["audio_unet", "detection_fpn", "inception_cells"])
def test_zoo_models_on_qemu(tmp_path, which, target, l1):
    """The U-Net (TRANSPOSE_CONV, STRIDED_SLICE, LEAKY_RELU, SUB, LOG_SOFTMAX), the FPN
    (RESIZE_NEAREST_NEIGHBOR) and the Inception cells (the last two in their least-peak operator
    order) on the M4 and M7, and tiled in the H743's DTCM."""
    from tests import model_zoo
    model = tmp_path / f"{which}.tflite"
    getattr(model_zoo, which)().save(model)
    dep = deploy(model, Options(target=target, l1=l1))
    assert_bit_exact_on_qemu(model, dep, [random_inputs(dep.graph, seed) for seed in range(2)])


@pytest.mark.parametrize("kernel, stride, padding", [((3, 3), (2, 2), "VALID"), ((4, 3), (3, 2), "SAME"),
                                                     ((2, 2), (2, 2), "SAME"), ((3, 2), (1, 2), "SAME")])
@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m7"])
def test_transpose_conv_tiles_run_the_smlad_kernel(tmp_path, kernel, stride, padding, core):
    """TRANSPOSE_CONV tile by tile on the DSP variant: each tile a transposed convolution of its
    own whose padding places its first output (tiles of every phase against the stride)."""
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(seed=sum(kernel) + sum(stride))
    x = mb.conv2d(mb.input((1, 7, 6, 3)), 8, kernel=(1, 1))
    mb.output(mb.conv2d(mb.transpose_conv(x, 6, kernel=kernel, stride=stride, padding=padding), 3, kernel=(1, 1)))
    model = tmp_path / "transpose_conv.tflite"
    mb.save(model)
    dep = deploy(model, Options(target=core, l1=700, patch="off", tiler="greedy"))
    (k, (g, t)), = [(k, v) for k, v in dep.tilings.items() if v[0].kind == "transpose_conv"]
    assert dep.layers[k].variant.name == "transpose_conv_s8_smlad" and t.tiles > 1
    assert_bit_exact_on_qemu(model, dep, [random_inputs(dep.graph, seed) for seed in range(2)])


@pytest.mark.parametrize("target", [*CORES, "cortex-m55"])
def test_fused_stages_over_the_application_input_on_qemu(target):
    """mcunet_vww at msf-CNN's 17,904 B point: several stages running the target's kernels (SMLAD;
    Helium on the M55) patch by patch, outputs over the inputs they consume, the input read where
    the application keeps it."""
    from network_parser.cut import CutSpec
    from deployer.verify import verification_samples
    model = shared_model("mcunet/mcunet_vww.tflite")
    dep = deploy(model, Options(target=target, cut=CutSpec(io="int8"), input_memory="external", sram=17_904,
                                max_overhead=0.345))
    assert dep.memory.sram_bytes <= 17_904 and len(dep.patches) >= 2
    family = "_mve" if target == "cortex-m55" else "_smlad"
    assert any(family in dep.layers[k].variant.name for p in dep.patches for k in p.layers)
    samples, expected = verification_samples(dep, model, 2)
    for got, want in zip(run_on_qemu(dep, samples), expected.outputs):
        for a, b in zip(got, want):
            assert np.array_equal(a, b.reshape(a.shape)), f"mcunet_vww on {target}"


@pytest.mark.parametrize("rel", ["Kernels/Integer/Concat", "Kernels/Integer/GEMM/Regular_RQPerRow",
                                 "Kernels/Integer/MatMul/Regular_RQ", "Kernels/Integer/MatMul/Batch",
                                 "Kernels/Integer/GEMM/Batch_RQ", "Kernels/Integer/Attention",
                                 "Kernels/Integer/RMSNorm", "Kernels/Integer/Softmax/Large",
                                 "Kernels/Integer/iNoNorm", "Models/MLPerf/KeywordSpotting"])
def test_deeploy_networks_on_the_m7(rel):
    """Deeploy's integer tests (16-bit values, products per row and batch, a whole network) on
    QEMU's M7 against their own expected outputs."""
    from deployer.cli import _input_type
    from deployer.test_vectors import find_vectors, to_engine_input, to_engine_output
    from tests.models import shared_onnx
    model = shared_onnx(f"deeploy/{rel}/network.onnx")
    dep = deploy(model, Options(target="cortex-m7", input_type=_input_type(model, None)))
    vec = find_vectors(model, dep.graph)
    outs = run_on_qemu(dep, [[to_engine_input(dep.graph, i, x) for i, x in enumerate(vec.inputs)]])[0]
    for j, (ours, want) in enumerate(zip(outs, vec.outputs)):
        assert np.array_equal(ours.astype(np.int64), to_engine_output(dep.graph, j, want).astype(np.int64)), (rel, j)


def test_an_integer_llama_block_on_the_m7(tmp_path):
    """The builder's LLaMA-style integer decoder block (integer RMSNorm, attention, softmax) on
    QEMU's M7, equal to the golden executor."""
    from deployer import golden
    from tests.integer_transformer import llama_block
    model = llama_block(tmp_path / "llama_block.onnx")
    dep = deploy(model, Options(target="cortex-m7", input_type="int8"))
    samples = [random_inputs(dep.graph, s) for s in range(2)]
    for sample, ours in zip(samples, run_on_qemu(dep, samples)):
        assert np.array_equal(ours[0], golden.run(dep.graph, sample, dep.kernels)[0][0])
