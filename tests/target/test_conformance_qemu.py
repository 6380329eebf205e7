"""The operator conformance suite's sample on QEMU's Cortex-M boards: one case of every operator
on the M4 and the M7 (DSP variants where the target has them), and the tiled ones in the H743's
DTCM."""
from __future__ import annotations

import pytest

from deployer import qemu
from deployer.ops_table import tflite_table
from tests.conformance import CASES, CASES16, check, exact, first_tiled_case

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")
TILED = sorted(r["operator"] for r in tflite_table() if r["tiled"])


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
@pytest.mark.parametrize("op", sorted(CASES))
def test_operator_bit_exact_on_qemu(op, target):
    result = check(op, 0, target)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
@pytest.mark.parametrize("op", sorted(CASES16))
def test_16x8_operator_bit_exact_on_qemu(op, target):
    result = check(op, 0, target, bits=16)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "AVERAGE_POOL_2D"])
def test_tiled_16x8_operator_bit_exact_in_dtcm(op):
    seed = first_tiled_case(op, "stm32h743", 512, bits=16, min_tiles=2, cases=80)
    result = check(op, seed, "stm32h743", l1=512, bits=16)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("op", TILED)
def test_tiled_operator_bit_exact_in_dtcm(op):
    seed = first_tiled_case(op, "stm32h743", 512, cases=80, min_tiles=1 if op == "PRELU" else 2)
    result = check(op, seed, "stm32h743", l1=512)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_batch_matmul_dsp_forms(tmp_path, target):
    """BATCH_MATMUL on the DSP kernel in both its forms (y's rows or y's columns contiguous), with
    depths, column counts and batches that leave remainders, broadcast batches and operands at
    the edges of their quantization: bit-exact with LiteRT on QEMU."""
    from deployer.pipeline import Options, deploy
    from deployer.verify import random_inputs
    from tests.tflite_builder import ModelBuilder

    cases = [((2, 6, 13), (2, 13, 9), False), ((1, 5, 13), (1, 7, 13), True), ((3, 4, 8), (8, 6), False),
             ((2, 3, 6), (1, 5, 6), True)]
    for n, (xs, ys, adj_y) in enumerate(cases):
        mb = ModelBuilder(n)
        x = mb.input(xs, zero_point=-128 if n % 2 else 127)
        mb.output(mb.batch_matmul(x, mb.input(ys), False, adj_y))
        path = tmp_path / f"bmm{n}.tflite"
        mb.save(path)
        dep = deploy(path, Options(target=target))
        assert dep.layers[-1].variant.name == "batch_matmul_s8_smlad"
        result = qemu.verify_on_qemu(dep, path, [random_inputs(dep.graph, s) for s in range(2)])
        assert exact(result), (xs, ys, result["outputs"])


@pytest.mark.parametrize("target,l1,patch", [("cortex-m4", None, "auto"), ("cortex-m7", None, "3x2@4"),
                                             ("stm32h743", 4096, "auto")])
def test_16x8_models_bit_exact_on_qemu(tmp_path, target, l1, patch):
    """The 16x8 audio front end before an int8 body (the body on the DSP kernels, tiled in the
    H743's DTCM; on the M7 the front end patch by patch) and the model in 16 bits throughout, on QEMU."""
    from deployer.pipeline import Options, deploy
    from deployer.verify import random_inputs
    from tests.host.test_sixteen_bit import all_16_bit_model, audio_front_end_model

    for make in (audio_front_end_model, all_16_bit_model):
        path = make(tmp_path)
        dep = deploy(path, Options(target=target, l1=l1, patch=patch if make is audio_front_end_model else "auto"))
        result = qemu.verify_on_qemu(dep, path, [random_inputs(dep.graph, s) for s in range(3)])
        assert exact(result), (make.__name__, result["outputs"])
