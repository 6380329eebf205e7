"""Every planner on every shared model passes the checker and keeps the engine bit-exact;
every in-place rule keeps the engine bit-exact."""
from __future__ import annotations

import pytest

from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from tests.tflite_builder import ModelBuilder
from tests.host.test_models import assert_bit_exact
from tests.models import INT8_MODELS, shared_model

GREEDY = ["first-fit", "best-fit", "bidirectional"]


@pytest.mark.parametrize("planner", GREEDY)
@pytest.mark.parametrize("rel", INT8_MODELS)
def test_every_planner_bit_exact(rel, planner):
    model = shared_model(rel)
    dep = deploy(model, Options(planner=planner))  # deploy() checks the plan before emitting
    assert dep.arena.peak >= dep.arena.lower_bound
    assert_bit_exact(model, dep, build_engine(dep), [random_inputs(dep.graph, 3)])


def _model(rule: str, path):
    mb = ModelBuilder(seed=len(rule))
    if rule == "depthwise-in-place":
        x = mb.conv2d(mb.input((1, 9, 7, 2)), 5, kernel=(1, 1))
        x = mb.depthwise_conv2d(x, kernel=(3, 3), stride=(2, 2), dilation=(1, 1), activation="RELU6")
        x = mb.depthwise_conv2d(x, kernel=(3, 3), dilation=(2, 2), padding="SAME")
        mb.output(mb.depthwise_conv2d(mb.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]]), kernel=(3, 3), padding="VALID"))
    elif rule == "elementwise-in-place":
        x = mb.conv2d(mb.input((1, 5, 5, 4)), 4, kernel=(1, 1))
        y = mb.add(mb.conv2d(x, 4, kernel=(1, 1)), x)
        y = mb.mul(y, mb.avg_pool(y, filter=(5, 5), stride=(1, 1)))
        mb.output(mb.softmax(mb.logistic(mb.hard_swish(mb.relu6(mb.relu(y))))))
    elif rule == "convert-in-place":
        x = mb.quantize(mb.input((1, 6, 6, 3), dtype="float32"))
        mb.output(mb.dequantize(mb.conv2d(x, 5)))
    elif rule == "fuse-pad-into-conv":
        x = mb.pad(mb.input((1, 8, 8, 3)), [[0, 0], [0, 1], [0, 1], [0, 0]])
        x = mb.conv2d(x, 4, kernel=(3, 3), stride=(2, 2), padding="VALID")
        mb.output(mb.conv2d(mb.pad(x, [[0, 0], [2, 1], [1, 0], [0, 0]]), 3, kernel=(3, 3), padding="SAME"))
    mb.save(path)
    return path


@pytest.mark.parametrize("rule", ["depthwise-in-place", "elementwise-in-place", "convert-in-place",
                                  "fuse-pad-into-conv"])
def test_rule_keeps_engine_bit_exact(tmp_path, rule):
    model = _model(rule, tmp_path / f"{rule}.tflite")
    dep = deploy(model, Options())
    applied = {r.rule for r in dep.reuses} | ({"fuse-pad-into-conv"} if dep.notes else set())
    assert rule in applied
    samples = [random_inputs(dep.graph, s) for s in range(3)]
    for sanitize in (False, True):
        assert_bit_exact(model, dep, build_engine(dep, sanitize=sanitize), samples)
