"""manifest.json against its committed JSON Schema, for every kind of deployment: a plain host
engine, tiles in L1, a patch split, weights and activations in L3, a Cortex-M build with its ELF,
and ONNX graphs. The schema refuses what it does not describe (no additional properties)."""
from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from deployer.manifest import SCHEMA
from deployer.pipeline import Options, deploy
from tests.models import shared_model, shared_onnx

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))

CASES = {
    "host": ("mlperf_tiny/kws_ref_model.tflite", Options()),
    "tiled": ("mlperf_tiny/vww_96_int8.tflite", Options(l1=16 * 1024, patch="off")),
    "patch": ("mlperf_tiny/vww_96_int8.tflite", Options(sram=48 * 1024)),
    "l3": ("synthetic/mobilenetv2_035_96_random.tflite", None),  # at the smallest SRAM, streaming from L3
    "cortex-m7": ("mlperf_tiny/kws_ref_model.tflite", Options(target="cortex-m7")),
    "onnx-integer": ("onnx:dory/TCN_T/TCN.onnx", Options(input_type="uint8")),
    "onnx-deeploy": ("onnx:deeploy/Models/MLPerf/ImageClassification/network.onnx", Options(input_type="uint8")),
}


def manifest(case: str) -> dict:
    rel, options = CASES[case]
    if options is None:
        from tests.host.test_l3 import streaming
        dep = streaming(rel, target="gap8")[0]
        assert dep.l3 is not None
        return json.loads(dep.files["manifest.json"])
    model = shared_onnx(rel[5:]) if rel.startswith("onnx:") else shared_model(rel)
    if case == "cortex-m7":  # as the CLI writes it: with the linked ELF's memory (null without the Arm tools)
        options = replace(options, link_elf=True)
    dep = deploy(model, options)
    return json.loads(dep.files["manifest.json"])


def test_the_schema_is_a_valid_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifest_follows_the_schema(case):
    m = manifest(case)
    errors = sorted(VALIDATOR.iter_errors(m), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    assert sum(m["memory"]["flash_sections"].values()) == m["memory"]["flash_bytes"]


def test_the_schema_catches_drift():
    m = manifest("host")
    m["memory"]["surprise_bytes"] = 1
    del m["solvers"]["arena"]["bound"]
    m["layers"][0]["tiling"] = {"tiles": 0}
    messages = [e.message for e in VALIDATOR.iter_errors(m)]
    assert any("surprise_bytes" in msg for msg in messages)
    assert any("'bound' is a required property" in msg for msg in messages)
    assert len(messages) >= 3


def test_a_network_manifest_is_of_kind_network_and_has_no_language_model_section(tmp_path):
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(0)
    mb.output(mb.conv2d(mb.input((1, 4, 4, 3)), 4))
    mb.save(tmp_path / "m.tflite")
    m = json.loads(deploy(tmp_path / "m.tflite", Options()).files["manifest.json"])
    assert m["kind"] == "network" and not list(VALIDATOR.iter_errors(m))
    assert list(VALIDATOR.iter_errors({**m, "language_model": {}}))
    assert list(VALIDATOR.iter_errors({k: v for k, v in m.items() if k != "layers"}))


def test_manifests_of_the_newer_operators_follow_the_schema(tmp_path):
    """int64 outputs (ARG_MAX), uint8 edges and a graph cut from its file (its source's cut_from)."""
    from network_parser.cut import CutSpec
    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(0)
    x = mb.quantize(mb.input((1, 4, 4, 3), dtype="float32"))
    mb.output(mb.dequantize(mb.conv2d(x, 4)), mb.arg("max", x, 3, "int64"))
    mb.save(tmp_path / "m.tflite")
    for cut in (CutSpec(), CutSpec(io="uint8"), CutSpec(outputs=("arg_max_0/out",))):
        m = json.loads(deploy(tmp_path / "m.tflite", Options(cut=cut)).files["manifest.json"])
        errors = sorted(VALIDATOR.iter_errors(m), key=str)
        assert not errors, errors[0].message
