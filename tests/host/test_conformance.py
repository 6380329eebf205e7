"""The operator conformance suite's sample on the host: two cases of every operator (the full
sweep: python bench/conformance.py)."""
from __future__ import annotations

import pytest

from network_parser.tflite_reader import supported_operators
from tests.conformance import CASES, check, exact


def test_every_operator_has_cases():
    assert set(CASES) == set(supported_operators())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("op", sorted(CASES))
def test_operator_bit_exact_on_host(op, seed):
    result = check(op, seed)
    assert exact(result), result["outputs"]


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL",
                                "AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_tiled_operator_bit_exact_on_host(op):
    """The operators that tile, cut into L1 tiles of at most 2 KiB (case 2: its own shapes)."""
    result = check(op, 2, l1=2048)
    assert exact(result), result["outputs"]
