"""The Cortex-M55 (Armv8.1-M with Helium) on QEMU's mps3-an547: the Helium kernel family runs the
convolutions, depthwise and fully connected layers (the SMLAD family, which the core also has,
the layers Helium leaves), bit-exact against the reference whole, tile by tile in L1 and with
each family chosen alone; fewer instructions than the SMLAD kernels on the same core."""
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


def test_a_family_the_target_lacks_is_refused_by_name():
    with pytest.raises(UsageError, match="--kernels mve: target 'cortex-m4'.*cortex-m55"):
        deploy(shared_model(KWS), Options(target="cortex-m4", kernels="mve"))
