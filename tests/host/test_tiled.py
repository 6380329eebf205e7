"""Tiled engines (--l1): every shared model, cut into double-buffered L1 tiles, stays bit-exact."""
from __future__ import annotations

import pytest

from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from network_parser.errors import InfeasibleBudget
from solver.tiling import minimum_l1
from tests.host.test_models import assert_bit_exact
from tests.models import INT8_MODELS, shared_model

K = 1024


def smallest_l1(model, target: str = "host") -> int:
    """The largest of the layers' minimum L1 footprints: the smallest --l1 the model accepts."""
    # the L1 alone: a part's L2 budget (GAP8's 512K) is another test's concern
    dep = deploy(model, Options(patch="off", target=target, l1=1 << 30, part_budgets=False))
    return max((minimum_l1(g) for g, _ in dep.tilings.values()), default=16)


@pytest.mark.parametrize("l1, tiler", [("64K", "greedy"), ("32K", "cpsat"), ("16K", "cpsat"), ("16K", "greedy"),
                                       ("smallest", "cpsat")])
@pytest.mark.parametrize("rel", INT8_MODELS)
def test_tiled_engine_bit_exact(rel, l1, tiler):
    model = shared_model(rel)
    budget = smallest_l1(model) if l1 == "smallest" else int(l1[:-1]) * K
    try:
        dep = deploy(model, Options(patch="off", l1=budget, tiler=tiler, tile_objective="cycles" if l1 == "32K" else "l1"))
    except InfeasibleBudget as e:
        assert l1 != "smallest" and e.minimum_bytes > budget
        pytest.skip(f"{rel} needs {e.minimum_bytes} B of L1 (> {budget})")
    assert all(t.l1_bytes <= budget for _, t in dep.tilings.values())
    assert_bit_exact(model, dep, build_engine(dep), [random_inputs(dep.graph, 5)])


def test_tiled_output_is_deterministic():
    model = shared_model("mcunet/mcunet_vww.tflite")
    first, second = (deploy(model, Options(patch="off", l1=16 * K)).files for _ in range(2))
    assert first == second


def test_infeasible_l1_names_layer_and_minimum(tmp_path):
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    need = smallest_l1(model)
    with pytest.raises(InfeasibleBudget, match=f"smallest --l1 that works is {need}") as e:
        deploy(model, Options(patch="off", l1=need - 1))
    assert e.value.minimum_bytes == need and "op " in str(e.value)
    deploy(model, Options(patch="off", l1=need))  # and that budget does work
