"""deploy ops: the support table is made from the code's own tables, and every decision a real
deployment takes is one the table allows."""
from __future__ import annotations

import json

import pytest

from deployer.ops_table import ops_json, ops_text, tflite_table
from deployer.pipeline import Options, deploy
from network_parser.tflite_reader import supported_operators
from tests.model_zoo import audio_unet, detection_fpn
from tests.unit.test_cli import kitchen_sink_model, run_clirunner


def test_every_operator_the_reader_takes_is_listed():
    rows = {r["operator"]: r for r in tflite_table()}
    assert set(rows) == set(supported_operators()) and len(rows) >= 51
    assert rows["CONV_2D"]["tiled"] and rows["CONV_2D"]["dsp"]["cortex-m7"] == ["smlad conv/fc", "smlald 16x8 conv/fc"]
    assert rows["SPLIT"]["read_as"] == "STRIDED_SLICE" and rows["ARG_MAX"]["outputs"] == ["int32", "int64"]
    assert rows["RESHAPE"]["in_place"] == ["zero-copy-reshape"] and rows["TRANSPOSE_CONV"]["tiled"]
    assert rows["RESIZE_NEAREST_NEIGHBOR"]["tiled"] and rows["RESIZE_BILINEAR"]["tiled"] and not rows["SOFTMAX"]["tiled"]
    assert "gap8" not in rows["CONV_2D"]["dsp"] and "host" not in rows["ADD"]["dsp"]


@pytest.mark.parametrize("target, l1", [("stm32h743", 32 * 1024), ("host", 8 * 1024)])
def test_deployments_stay_within_the_table(tmp_path, target, l1):
    """Each layer tiled, run in place or by a DSP variant is an op the table says may be (the DSP
    column is the one a rule's own check could contradict)."""
    rows = {r["operator"]: r for r in tflite_table()}
    models = [kitchen_sink_model(tmp_path / "k.tflite")]
    for build in (audio_unet, detection_fpn):
        models.append(tmp_path / f"{build.__name__}.tflite")
        build().save(models[-1])
    seen = set()
    for model in models:
        plan = deploy(model, Options(target=target, l1=l1))
        reuse = {r.layer: r.rule for r in plan.reuses}
        for k, (layer, lp) in enumerate(zip(plan.graph.layers, plan.layers)):
            row = rows[layer.op]
            if lp.tiling is not None:
                assert row["tiled"], layer.op
                seen.add("tiled")
            if k in reuse:
                assert reuse[k] in row["in_place"], (layer.op, reuse[k])
                seen.add("in place")
            if lp.variant.dsp:
                assert target in row["dsp"] and lp.variant.name, layer.op
                seen.add("dsp")
    assert {"tiled", "in place"} | ({"dsp"} if target == "stm32h743" else set()) <= seen


def test_cli_ops():
    code, out, _ = run_clirunner("ops")
    assert code == 0 and out.strip() == ops_text().strip() and "TRANSPOSE_CONV" in out
    code, out, _ = run_clirunner("ops", "--json")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(ops_json()))


def test_refused_operators_say_why(tmp_path):
    """An operator refused on purpose names its reason in the reader's error and in deploy ops;
    none of them is also one the reader takes."""
    from network_parser.errors import UnsupportedOperator
    from network_parser.tflite_reader import REFUSED, read_tflite
    from tests.tflite_builder import ModelBuilder, Op

    assert not set(REFUSED) & set(supported_operators())
    assert all(f"  {op}: {why}" in ops_text() for op, why in REFUSED.items())
    assert ops_json()["tflite_refused"]["SQUARE"] == REFUSED["SQUARE"]
    mb = ModelBuilder(0)
    x = mb.input((1, 8))
    mb.output(mb._emit(mb._name("square"), Op.SQUARE, 1, [x], [x], lambda v: v * v, (1, 8)))
    mb.save(tmp_path / "square.tflite")
    with pytest.raises(UnsupportedOperator, match=r"op 0 SQUARE \(output 'square_0/out'\): operator SQUARE is not "
                                                  r"supported: LiteRT's reference kernel is float32 only"):
        read_tflite(tmp_path / "square.tflite")
