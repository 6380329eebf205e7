"""The Cortex-M33 (Armv8-M Mainline with the DSP extension) on QEMU's mps2-an505, booting in the
Secure state: the SMLAD family runs there unchanged, bit-exact, in the M4's instructions (within
2 %); and ad01, all fully connected layers requantized in double by the reference, no longer
pays for software double arithmetic on the single-precision FPUs of the M4F and M33."""
from __future__ import annotations

import pytest

from deployer import qemu
from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs
from tests.models import shared_model

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")


def instructions(rel: str, target: str) -> int:
    model = shared_model(rel)
    dep = deploy(model, Options(target=target))
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, 0)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), (target, result["outputs"])
    return result["instructions"]


@pytest.mark.parametrize("rel", ["mlperf_tiny/kws_ref_model.tflite", "mlperf_tiny/ad01_int8.tflite"])
def test_m33_runs_the_m4s_kernels(rel):
    m33, m4 = instructions(rel, "cortex-m33"), instructions(rel, "cortex-m4")
    assert abs(m33 - m4) <= 0.02 * m4


def test_ad01_on_the_m4_is_near_the_m7():
    rel = "mlperf_tiny/ad01_int8.tflite"
    assert instructions(rel, "cortex-m4") <= 1.10 * instructions(rel, "cortex-m7")  # was 2.9x: software doubles


@pytest.mark.parametrize("part", ["stm32u585", "nrf5340", "rp2350"])
def test_m33_parts_on_qemu(part, tmp_path):
    """The parts' presets on the M33's board: their SRAM and flash are the budgets, each has a
    clock for milliseconds, and the engines are bit-exact."""
    from backends import BACKENDS
    rel = "mlperf_tiny/vww_96_int8.tflite" if part == "rp2350" else "mlperf_tiny/kws_ref_model.tflite"
    model = shared_model(rel)
    backend = BACKENDS[part]
    assert backend.cpu == "cortex-m33" and backend.part and backend.clock_mhz
    dep = deploy(model, Options(target=part))
    assert dep.memory.sram_bytes <= backend.sram_bytes and dep.memory.flash_bytes <= backend.flash_bytes
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, 0)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
