"""The readers' fuzz smoke test: a short atheris (libFuzzer) campaign per reader, seeded with
the real models, over read -> plan -> emit. Every input must parse or raise one of our
documented errors; the longer campaign is bench/robustness_report.py."""
from __future__ import annotations

import pytest

from tests.fuzz.campaign import campaign

pytest.importorskip("atheris", reason="atheris (the test extra) is not installed")

SECONDS = {"tflite": 40, "onnx": 30, "safetensors": 20}


@pytest.mark.parametrize("reader", sorted(SECONDS))
def test_fuzz_smoke(reader, tmp_path):
    result = campaign(reader, SECONDS[reader], tmp_path)
    print(f"{reader}: {result['executions']:,} executions from {result['seeds']} seeds: {result['outcomes']}")
    assert result["findings"] == {}, result["findings"]
    assert result["executions"] >= 1000
    assert result["outcomes"].get("ok", 0) > 0  # the mutants reached the planner and the emitter
