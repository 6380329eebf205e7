"""The operator conformance suite's sample on QEMU's Cortex-M boards: one case of every operator
on the M4 and the M7 (DSP variants where the target has them), and the tiled ones in the H743's
DTCM."""
from __future__ import annotations

import pytest

from deployer import qemu
from deployer.ops_table import tflite_table
from tests.conformance import CASES, check, exact, first_tiled_case

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")
TILED = sorted(r["operator"] for r in tflite_table() if r["tiled"])


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
@pytest.mark.parametrize("op", sorted(CASES))
def test_operator_bit_exact_on_qemu(op, target):
    result = check(op, 0, target)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("op", TILED)
def test_tiled_operator_bit_exact_in_dtcm(op):
    seed = first_tiled_case(op, "stm32h743", 4096)
    result = check(op, seed, "stm32h743", l1=4096)
    assert exact(result), result["outputs"]
