"""L3 streaming (--l3): every shared model squeezed to the smallest flash and SRAM the
deployer reports once weights and activations may live in L3, run bit-exact on the host,
where L3 is an array the engine reaches only through its L3 copy functions."""
from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from network_parser.errors import InfeasibleBudget
from tests.host.test_models import assert_bit_exact
from tests.models import INT8_MODELS, shared_model

K = 1024
L3 = 1 << 26


def reported_need(model, options: Options) -> int | None:
    """The smallest budget the deployer reports for these options, or None when they fit."""
    try:
        deploy(model, options)
    except InfeasibleBudget as e:
        return e.minimum_bytes
    return None


@functools.lru_cache(maxsize=None)
def streaming(rel: str, l1: int = 16 * K, target: str = "host"):
    """The deployment at the smallest reported flash, then the smallest reported SRAM."""
    model = shared_model(rel)
    base = Options(patch="off", target=target, l1=l1, l3=L3, time_limit_s=2.0)
    flash = None if target != "host" else reported_need(model, Options(**{**base.__dict__, "flash": 1}))
    sram = reported_need(model, Options(**{**base.__dict__, "flash": flash, "sram": 1}))
    return deploy(model, Options(**{**base.__dict__, "flash": flash, "sram": sram})), flash, sram


@pytest.mark.parametrize("rel", INT8_MODELS)
def test_l3_streaming_bit_exact(rel):
    dep, flash, sram = streaming(rel)
    assert sram is None or dep.memory.sram_bytes <= sram
    assert flash is None or dep.memory.flash_bytes <= flash
    weighted = [k for k, (g, _) in dep.tilings.items() if g.weight_bytes_per_channel]
    if weighted:  # the smallest flash streams every tiled layer's weights
        assert dep.l3 is not None and set(dep.l3.placement.weights) == set(weighted)
        assert all(f"op{k}_weights[" not in next(v for n, v in dep.files.items() if n.endswith("_engine.c"))
                   for k in weighted)
    assert_bit_exact(shared_model(rel), dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])


@pytest.mark.parametrize("rel", ["mlperf_tiny/vww_96_int8.tflite", "mlperf_tiny/pretrainedResnet_quant.tflite"])
def test_l3_streaming_at_other_l1_budgets(rel):
    """Slabs are whole L1 tiles, so the L1 tiling shapes them: a large and the smallest L1
    (with large tiles, staging an activation can cost more L2 than it frees: then only weights move)."""
    from tests.host.test_tiled import smallest_l1
    for l1 in (64 * K, smallest_l1(shared_model(rel))):
        dep, _, _ = streaming(rel, l1)
        assert dep.l3 is not None and dep.l3.placement.weights
        assert_bit_exact(shared_model(rel), dep, build_engine(dep), [random_inputs(dep.graph, 3)])


def test_l3_output_is_deterministic_and_written_by_the_cli(tmp_path):
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    args = [str(model), "--l1", "16K", "--l3", "1M", "--flash", "20K", "--sram", "15K", "--patch", "off"]
    runner = CliRunner()
    for out in ("a", "b"):
        result = runner.invoke(main, [*args, "-o", str(tmp_path / out)])
        assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "kws_ref_model_l3_weights.bin" in files
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    l3 = manifest["l3"]
    assert l3["bytes"] == manifest["memory"]["l3_bytes"] <= 1 << 20 and l3["weights"]
    assert (tmp_path / "a" / "kws_ref_model_l3_weights.bin").stat().st_size == l3["weight_image_bytes"]
    streamed = [layer["tiling"]["l3"] for layer in manifest["layers"] if layer["tiling"] and layer["tiling"]["l3"]]
    assert streamed and all(s["slabs"] >= 1 and s["l2_bytes"] > 0 for s in streamed)
