"""The operator conformance suite's sample on the host: two cases of every operator (the full
sweep: python bench/conformance.py)."""
from __future__ import annotations

import pytest

from network_parser.tflite_reader import supported_operators
from deployer.ops_table import tflite_table
from tests.conformance import CASES, CASES16, check, exact, first_tiled_case


def test_every_operator_has_cases():
    assert set(CASES) == set(supported_operators())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("op", sorted(CASES))
def test_operator_bit_exact_on_host(op, seed):
    result = check(op, seed)
    assert exact(result), result["outputs"]


def test_every_16x8_operator_has_cases():
    assert set(CASES16) == {op for op, (ins, _, _) in supported_operators().items() if "int16" in ins}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("op", sorted(CASES16))
def test_16x8_operator_bit_exact_on_host(op, seed):
    """The operators with int16 activations (int8 weights, int64 biases) against LiteRT's 16x8 kernels."""
    result = check(op, seed, bits=16)
    assert exact(result), result["outputs"]


TILED16 = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "AVERAGE_POOL_2D", "MAX_POOL_2D")


@pytest.mark.parametrize("op", TILED16)
def test_tiled_16x8_operator_bit_exact_on_host(op):
    """The 16-bit layers that tile (2-byte elements in L1), on the first case the planner cuts into
    two or more tiles of at most 512 B."""
    seed = first_tiled_case(op, "host", 512, bits=16, min_tiles=2, cases=80)
    result = check(op, seed, l1=512, bits=16)
    assert exact(result), result["outputs"]


TILED = sorted(r["operator"] for r in tflite_table() if r["tiled"])


@pytest.mark.parametrize("op", TILED)
def test_tiled_operator_bit_exact_on_host(op):
    """The operators that tile, on the first case whose layer the planner cuts into two or more L1
    tiles of at most 256 B (a broadcast or batched case runs whole; PRELU's cases: one tile)."""
    seed = first_tiled_case(op, "host", 256, cases=80, min_tiles=1 if op == "PRELU" else 2)
    result = check(op, seed, l1=256)
    assert exact(result), result["outputs"]
