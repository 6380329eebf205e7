"""Graph cutting (--inputs / --outputs) and integer edges (--io int8): the part of a model between
named tensors, decided before any op outside it is read, verified against the reference's values
at the cut."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tflite

from deployer.pipeline import Options, deploy, plan_deployment
from deployer.suggest import suggest
from deployer.verify import build_engine, run_engine, verification_samples, verify
from network_parser.cut import CutSpec
from network_parser.errors import InfeasibleBudget, UnsupportedOperator, UsageError
from tests.cli_output import one_error
from tests.tflite_builder import ModelBuilder
from tests.unit.test_cli import run_clirunner


def float_edged(path, seed=4):
    """A float32 224x224x3 input quantized first, a small int8 body, a dequantized float output:
    what converters give without inference_input_type=int8."""
    mb = ModelBuilder(seed)
    x = mb.quantize(mb.input((1, 224, 224, 3), dtype="float32"))
    x = mb.conv2d(x, 8, kernel=(3, 3), stride=(4, 4), activation="RELU")
    x = mb.depthwise_conv2d(x, stride=(2, 2), activation="RELU")
    x = mb.mean(mb.conv2d(x, 16, kernel=(1, 1)), axes=(1, 2), keep_dims=False)
    mb.output(mb.dequantize(mb.fully_connected(x, 5)))
    mb.save(path)
    return path


def with_tail(path, seed=5):
    """A supported body, then a RELU relabelled GELU (an op LiteRT runs and the deployer refuses) at the end."""
    mb = ModelBuilder(seed)
    x = mb.conv2d(mb.input((1, 8, 8, 3)), 4, activation="RELU")
    body = mb.avg_pool(x)
    mb.output(mb.relu(body))
    mb._ops[-1].code, mb._ops[-1].version = tflite.BuiltinOperator.GELU, 1
    mb.save(path)
    return path, mb


def assert_cut_exact(path, dep):
    samples, expected = verification_samples(dep, path, 2)
    result = verify(dep, path, samples, expected=expected)
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result
    assert "read at the cut" in result["reference"]


def test_io_int8_takes_and_gives_the_int8_tensors(tmp_path):
    path = float_edged(tmp_path / "f.tflite")
    whole = deploy(path, Options())
    cut = deploy(path, Options(cut=CutSpec(io="int8")))
    assert [whole.graph.tensors[t].dtype for t in (*whole.graph.inputs, *whole.graph.outputs)] == ["float32"] * 2
    assert [cut.graph.tensors[t].dtype for t in (*cut.graph.inputs, *cut.graph.outputs)] == ["int8"] * 2
    assert [layer.op for layer in cut.graph.layers][0] == "CONV_2D" and cut.graph.layers[-1].op == "FULLY_CONNECTED"
    # the float input (602,112 B) set the floor; its int8 tensor is a quarter of it
    assert whole.memory.sram_bytes >= 224 * 224 * 3 * 4 > 2 * cut.memory.sram_bytes
    assert_cut_exact(path, cut)
    manifest = json.loads(cut.files["manifest.json"])
    assert manifest["source"]["cut_from"] == {"inputs": ["input_0"], "outputs": ["dequantize_0/out"]}
    assert any("--io int8" in n for n in manifest["source"]["notes"])


def test_outputs_cut_away_an_op_the_deployer_refuses(tmp_path):
    path, mb = with_tail(tmp_path / "tail.tflite")
    with pytest.raises(UnsupportedOperator, match="GELU"):
        plan_deployment(path, Options())
    dep = deploy(path, Options(cut=CutSpec(outputs=("avg_pool_0/out",))))
    assert [layer.op for layer in dep.graph.layers] == ["CONV_2D", "AVERAGE_POOL_2D"]
    # the reference runs the whole file, GELU included; the values at the cut are its own
    assert_cut_exact(path, dep)


def test_inputs_and_outputs_inside_the_model(tmp_path):
    path = float_edged(tmp_path / "f.tflite")
    dep = deploy(path, Options(cut=CutSpec(inputs=("conv2d_0/out",), outputs=("conv2d_1/out",))))
    assert [layer.op for layer in dep.graph.layers] == ["DEPTHWISE_CONV_2D", "CONV_2D"]
    assert_cut_exact(path, dep)
    engine = build_engine(dep)
    samples, expected = verification_samples(dep, path, 1)
    outs, _ = run_engine(engine, samples)
    assert np.array_equal(outs[0][0], expected.outputs[0][0].reshape(outs[0][0].shape))


@pytest.mark.parametrize("cut, message", [
    (CutSpec(outputs=("conv2d_O/out",)), "--outputs 'conv2d_O/out': f.tflite has no tensor of that name (names like "
                                         "it: 'conv2d_1/out', 'conv2d_0/out'"),
    (CutSpec(inputs=("input_0", "conv2d_1/out"), outputs=("conv2d_0/out",)), "--inputs 'conv2d_1/out': none of the "
                                                                               "cut's outputs depends on it"),
    (CutSpec(inputs=("conv2d_0/out",), outputs=("mean_0/out",), io=None), None),
    (CutSpec(inputs=("depthwise_conv2d_0/out",), outputs=("conv2d_0/out",)), "depend on 'input_0', a model input"),
    (CutSpec(inputs=("conv2d_0/weights",)), "a constant of f.tflite"),
])
def test_cut_errors_name_the_tensor(tmp_path, cut, message):
    path = float_edged(tmp_path / "f.tflite")
    if message is None:
        assert plan_deployment(path, Options(cut=cut)).graph.layers[0].op == "DEPTHWISE_CONV_2D"
        return
    with pytest.raises(UsageError) as e:
        plan_deployment(path, Options(cut=cut))
    assert message in str(e.value)


def test_a_cut_missing_an_input_names_it(tmp_path):
    mb = ModelBuilder(1)
    a, b = mb.input((1, 4, 4, 2)), mb.input((1, 4, 4, 2))
    mb.output(mb.add(mb.relu(a), b))
    mb.save(tmp_path / "two.tflite")
    with pytest.raises(UsageError, match="depend on 'input_1', a model input not among --inputs"):
        plan_deployment(tmp_path / "two.tflite", Options(cut=CutSpec(inputs=("relu_0/out",))))
    dep = deploy(tmp_path / "two.tflite", Options(cut=CutSpec(inputs=("relu_0/out", "input_1"))))
    assert [layer.op for layer in dep.graph.layers] == ["ADD"]
    assert_cut_exact(tmp_path / "two.tflite", dep)


def test_io_int8_on_an_integer_model_changes_nothing(tmp_path):
    mb = ModelBuilder(2)
    mb.output(mb.relu(mb.input((1, 8))))
    mb.save(tmp_path / "i.tflite")
    a, b = (deploy(tmp_path / "i.tflite", Options(cut=c)) for c in (CutSpec(), CutSpec(io="int8")))
    assert a.graph.layers == b.graph.layers and a.graph.inputs == b.graph.inputs


def test_suggest_names_the_floor_and_recommends_int8_io(tmp_path):
    path = float_edged(tmp_path / "f.tflite")
    s = suggest(path, Options(sram=256 * 1024))
    rec = next(r for r in s.recommendations if r.name == "int8 I/O")
    assert rec.flags == ("--io int8",) and rec.priority == "HIGH" and rec.saving > 400_000 and not rec.changes
    with pytest.raises(InfeasibleBudget) as e:  # deploy's own error names the float input at the peak
        deploy(path, Options(sram=256 * 1024))
    assert "its peak: op 0 QUANTIZE" in str(e.value) and "'input_0' 602,112 B (a float edge: see --io int8)" in str(e.value)
    assert deploy(path, Options(sram=256 * 1024, cut=CutSpec(io="int8")))


def test_cli_cut_flags(tmp_path):
    path = float_edged(tmp_path / "f.tflite")
    code, out, err = run_clirunner("verify", path, "--io", "int8", "--outputs", "mean_0/out", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["outputs"][0]["max_abs_diff"] == 0 and result["outputs"][0]["elements"] == 16
    code, _, err = run_clirunner(path, "--outputs", "mean_0/out,", "-o", tmp_path / "out")
    assert code == 2 and "--outputs takes tensor names separated by commas" in one_error(err)
    code, _, err = run_clirunner("verify", path, "--io", "int8", "--input", tmp_path / "x.npy", "--expected",
                                 tmp_path / "y.npy")
    assert code == 2 and "--expected cannot check a cut graph" in one_error(err)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32))
    code, out, err = run_clirunner("verify", path, "--io", "int8", "--input", tmp_path / "x.npy")
    assert code == 0 and "bit-exact" in out, err


def test_io_uint8_offsets_the_int8_edges(tmp_path):
    """--io uint8: the engine takes and gives uint8 (the int8 tensors' values + 128, zero points + 128),
    checked against the reference's int8 values at the cut, offset alike."""
    path = float_edged(tmp_path / "f.tflite")
    dep = deploy(path, Options(cut=CutSpec(io="uint8")))
    ends = [dep.graph.tensors[t] for t in (*dep.graph.inputs, *dep.graph.outputs)]
    int8 = deploy(path, Options(cut=CutSpec(io="int8"))).graph
    twins = [int8.tensors[t] for t in (*int8.inputs, *int8.outputs)]
    assert [t.dtype for t in ends] == ["uint8", "uint8"]
    assert [t.zero_point for t in ends] == [t.zero_point + 128 for t in twins]
    assert dep.graph.layers[0].op == "QUANTIZE" and dep.graph.layers[-1].op == "QUANTIZE"
    assert_cut_exact(path, dep)
    code, out, err = run_clirunner("verify", path, "--io", "uint8")
    assert code == 0 and "bit-exact" in out, err


def post_trained(path, ops=("LOG_SOFTMAX",), two_heads=False, seed=6):
    """An int8 body whose output is dequantized and then post-processed in float (LOG_SOFTMAX
    after DEQUANTIZE, as an MNIST model quantized after training ends); ``two_heads``: a second
    dequantized output the application reads as it is."""
    mb = ModelBuilder(seed)
    x = mb.conv2d(mb.input((1, 12, 12, 1)), 4, kernel=(3, 3), stride=(2, 2), activation="RELU")
    x = mb.fully_connected(mb.reshape(x, (1, -1)), 10)
    y = mb.dequantize(x)
    for op in ops:
        y = mb.float_op(y, op)
    mb.output(y, *([mb.dequantize(mb.fully_connected(x, 3))] if two_heads else []))
    mb.save(path)
    return path


@pytest.mark.parametrize("ops, two_heads", [(("LOG_SOFTMAX",), False), (("RELU", "SOFTMAX"), True)])
def test_a_float_tail_is_left_to_the_application(tmp_path, ops, two_heads):
    """The engine ends at the DEQUANTIZE the tail reads (float32, as the file has it there), a
    note names the ops left out, and the values at that edge are the reference's own."""
    path = post_trained(tmp_path / "mnist.tflite", ops, two_heads)
    dep = deploy(path, Options())
    names = [dep.graph.tensors[t].name for t in dep.graph.outputs]
    assert names == ["dequantize_0/out", "dequantize_1/out"][:1 + two_heads]
    assert [layer.op for layer in dep.graph.layers][-1] == "DEQUANTIZE"
    assert any("left to the application" in n and all(op in n for op in ops) for n in dep.notes)
    assert_cut_exact(path, dep)
    # --io int8 then moves the edge on to the int8 values, and --outputs names any other edge
    assert dep.graph.tensors[deploy(path, Options(cut=CutSpec(io="int8"))).graph.outputs[0]].dtype == "int8"
    with pytest.raises(UnsupportedOperator, match="float"):
        deploy(path, Options(cut=CutSpec(outputs=(f"{ops[-1].lower()}_0/out",))))
