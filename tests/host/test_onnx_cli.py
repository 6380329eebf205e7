"""`deploy` and `deploy verify` on ONNX models: the model's own test vectors, --expected,
onnxruntime, layouts recorded in the manifest, and errors without a traceback."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from deployer.cli import main
from tests.host.test_onnx_qdq import model as qdq_model
from tests.models import shared_onnx


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def test_verify_uses_the_dory_dumps():
    res = run("verify", shared_onnx("dory/TCN_T/TCN.onnx"), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["reference"] == "the model's out_layerN.txt (DORY)"
    assert out["outputs"][0]["max_abs_diff"] == 0 and out["outputs"][0]["elements"] == 5


def test_verify_with_expected_files_catches_a_wrong_output(tmp_path):
    folder = shared_onnx("deeploy/Models/miniMobileNet")
    with np.load(folder / "inputs.npz") as zin, np.load(folder / "outputs.npz") as zout:
        x, y = zin[zin.files[0]], zout[zout.files[0]]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    y_bad = y.copy()
    y_bad.flat[3] += 1
    np.save(tmp_path / "y_bad.npy", y_bad)
    model = folder / "network.onnx"
    ok = run("verify", model, "--input", tmp_path / "x.npy", "--expected", tmp_path / "y.npy", "--input-type", "uint8")
    assert ok.exit_code == 0 and "bit-exact" in ok.output, ok.output
    bad = run("verify", model, "--input", tmp_path / "x.npy", "--expected", tmp_path / "y_bad.npy",
              "--input-type", "uint8")
    assert bad.exit_code == 1 and "MISMATCH" in bad.output and "--expected files" in bad.output


def test_verify_qdq_against_onnxruntime():
    res = run("verify", qdq_model("cnn", True, "uint8"), "--seeds", "2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["reference"] == "onnxruntime" and out["samples"] == 2
    assert out["outputs"][0]["max_abs_diff"] == 0


def test_layouts_and_notes_in_the_manifest(tmp_path):
    model = shared_onnx("dory/Residual_connection_test_1/model_int.onnx")
    res = run(model, "-o", tmp_path / "out", "--input-layout", "nhwc")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    src = manifest["source"]
    assert src["format"] == "onnx-integer" and src["input_layout"] == "nhwc" and src["output_layout"] == "nchw"
    assert src["model_input_shapes"] == [[1, 1, 200, 200]]
    assert manifest["inputs"][0]["shape"] == [1, 200, 200, 1] and manifest["inputs"][0]["dtype"] == "uint8"
    assert any("Sigmoid" in n for n in src["notes"])  # the float op left to the application


def test_unreadable_onnx_is_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a protobuf at all" * 3)
    res = run(bad, "-o", tmp_path / "out")
    assert res.exit_code == 1 and "ModelFormatError" in res.output and "broken.onnx" in res.output
    assert not (tmp_path / "out").exists()


def test_dory_dumps_that_stop_before_the_graphs_output(tmp_path):
    """DORY's last layer is the FC (out_layer7.txt: 'fc', 2 values); the graph goes on to pick one
    score (Gather, Unsqueeze). The dumps give the input; the output is checked against onnxruntime."""
    import shutil

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = shared_onnx("dory/Residual_connection_test_1")
    for p in folder.glob("*.txt"):
        shutil.copy(p, tmp_path / p.name)
    m = onnx.load(folder / "model_int.onnx")
    g = m.graph
    fc = g.node[-1].input[0]  # the MatMul's output, which the Sigmoid read
    g.node.remove(g.node[-1])
    g.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "pick"))
    g.node.extend([helper.make_node("Gather", [fc, "pick"], ["score"], axis=1),
                   helper.make_node("Unsqueeze", ["score"], ["out"], axes=[1])])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1]))
    onnx.save(m, tmp_path / "model_int.onnx")
    res = run("verify", tmp_path / "model_int.onnx", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["reference"] == "onnxruntime" and out["outputs"][0]["max_abs_diff"] == 0
    assert "out_layer7.txt holds DORY's last layer ('fc', 2 values)" in res.stderr
