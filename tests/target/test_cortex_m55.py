"""The Cortex-M55 (Armv8.1-M with Helium) on QEMU's mps3-an547: the Helium kernel family runs the
convolutions, depthwise and fully connected layers (the SMLAD family, which the core also has,
the layers Helium leaves), bit-exact against the reference whole, tile by tile in L1, region by
region in patch stages and with each family chosen alone; fewer instructions than the SMLAD
kernels on the same core."""
from __future__ import annotations

import pytest

from deployer import qemu
from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs
from network_parser.errors import UsageError
from tests.models import shared_model

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")
KWS = "mlperf_tiny/kws_ref_model.tflite"


def run(rel: str, **options) -> tuple[int, object]:
    model = shared_model(rel)
    dep = deploy(model, Options(target="cortex-m55", **options))
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, 0), random_inputs(dep.graph, 1)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
    return result["instructions"], dep


@pytest.mark.parametrize("rel", [KWS, "mlperf_tiny/pretrainedResnet_quant.tflite", "mlperf_tiny/ad01_int8.tflite"])
def test_helium_kernels_are_bit_exact(rel):
    _, dep = run(rel)
    names = [lp.variant.name for lp in dep.layers]
    assert any(n.endswith("_mve") for n in names), names
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert "#include <arm_mve.h>" in engine


def test_helium_tiles_and_each_family_alone():
    whole, _ = run(KWS)
    tiled, dep = run(KWS, l1=32 * 1024)
    assert dep.tilings and any(dep.layers[k].variant.name.endswith("_mve") for k in dep.tilings)
    assert tiled <= 1.15 * whole
    smlad, dep = run(KWS, kernels="smlad")
    assert not any(lp.variant.name.endswith("_mve") for lp in dep.layers)
    assert whole < smlad  # Helium's 16 MACs per instruction against SMLAD's 2
    _, dep = run(KWS, kernels="mve")
    assert not any("smlad" in lp.variant.name for lp in dep.layers)


def test_patch_stages_run_the_helium_kernels():
    """vww_96 in 32 KiB of SRAM needs the patch split: its stages' convolutions run the Helium
    variants region by region (the 16-lane depthwise among them)."""
    _, dep = run("mlperf_tiny/vww_96_int8.tflite", sram=32 * 1024)
    staged = {dep.layers[k].variant.name for p in dep.patches for k in p.layers
              if type(dep.layers[k].kernel).__name__ == "Conv"}
    assert dep.patches and staged and all("_mve" in n for n in staged), staged
    assert "depthwise_conv_s8_16ch_mve" in staged


def test_a_patch_stage_runs_its_residual_adds_on_helium():
    """mcunet_vww (int8 at its edges) with ops 0..13 in 3 x 3 patches: the stage's two residual ADDs
    run the Helium kernel region by region, bit-exact, in fewer instructions than the portable one."""
    from network_parser.cut import CutSpec
    from deployer.verify import verification_samples
    model = shared_model("mcunet/mcunet_vww.tflite")
    dep = deploy(model, Options(target="cortex-m55", cut=CutSpec(io="int8"), patch="3x3@13"))
    staged = {k: dep.layers[k].variant.name for p in dep.patches for k in p.layers
              if type(dep.layers[k].kernel).__name__ == "Add"}
    assert staged == {9: "elementwise_add_s8_mve", 13: "elementwise_add_s8_mve"}, staged
    samples, expected = verification_samples(dep, model, 1)
    result = qemu.verify_on_qemu(dep, model, samples, expected)
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
    assert result["instructions"] < 9_000_000  # 9,742,380 with the stage's ADDs on the portable kernel


def test_a_family_the_target_lacks_is_refused_by_name():
    with pytest.raises(UsageError, match="--kernels mve: target 'cortex-m4'.*cortex-m55"):
        deploy(shared_model(KWS), Options(target="cortex-m4", kernels="mve"))


def test_code_beyond_the_itcm_runs_from_the_boards_flash():
    """mcunet_vww's 527 KB of code and weights outgrow the AN547's 512 KiB ITCM: the harness links
    them into its 8 MiB QSPI flash, the vector table alone at 0 (where the board's reset reads it)."""
    model = shared_model("mcunet/mcunet_vww.tflite")
    dep = deploy(model, Options(target="cortex-m55"))
    link = dep.files["qemu/link.ld"]
    assert "VECTORS (rx) : ORIGIN = 0x00000000" in link and "FLASH (rx) : ORIGIN = 0x28000000" in link
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, 0)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
    assert result["flash_bytes"] > 512 * 1024


def test_alif_e7_hp_banks_on_qemu(tmp_path):
    """Two 557,056 B branches live together outgrow the E7 HP's 1 MiB DTCM: SRAM0 joins, and the
    harness maps all three banks at their real sizes (7.5 MiB) in the board's DDR."""
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(7)
    x = mb.input((1, 128, 136, 32))
    a = mb.depthwise_conv2d(mb.depthwise_conv2d(x, activation="RELU"))
    b = mb.conv2d(x, 32, (1, 1))
    mb.output(mb.fully_connected(mb.reshape(mb.mean(mb.add(a, b)), (1, 32)), 4))
    model = tmp_path / "two_wide_branches.tflite"
    mb.save(model)
    dep = deploy(model, Options(target="alif-e7-hp"))
    used = dict(zip((m.name for m in dep.banks.memories), dep.banks.used))
    assert used["DTCM"] > 0 and used["SRAM0"] > 0
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, 0)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
