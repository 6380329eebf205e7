"""Deeploy's integer kernel tests whose values need int32 activations (Sub, ReduceSum,
iHardswish) or requantize 16- and 32-bit values (ReduceMean, iHardswish's RequantShift,
TrueIntegerDiv between two RequantShifts): the host engine and the numpy executor reproduce each
test's outputs.npz exactly, and small graphs built here pin the arithmetic Deeploy's generic
kernels follow where those tests do not reach (a mean's rounding of ties, kept axes, unsigned
values) and what is refused."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from deployer import golden
from deployer.pipeline import Options, deploy
from deployer.test_vectors import find_vectors, to_engine_input, to_engine_output
from deployer.verify import build_engine, run_engine
from network_parser.errors import UnsupportedOperator
from network_parser.onnx_reader import read_onnx
from tests.host.test_onnx import engine_matches_vectors, onnx_options
from tests.models import shared_onnx
from tests.unit.test_onnx_reader import save

# each test and the type its engine hands the output out as
NETS = {"Sub": "int32", "ReduceSum": "int32", "ReduceMean": "int8", "Hardswish/Regular": "int32",
        "Hardswish/Regular_RQ": "int8", "TrueIntegerDiv": "int8"}


@pytest.mark.parametrize("rel", list(NETS))
def test_engine_and_executor_match_deeploys_outputs(rel):
    model = shared_onnx(f"deeploy/Kernels/Integer/{rel}") / "network.onnx"
    dep = engine_matches_vectors(model, onnx_options(model))
    g = dep.graph
    out = g.tensors[g.outputs[0]]
    assert out.dtype == NETS[rel]
    assert out.nbytes == out.elements * {"int8": 1, "int32": 4}[NETS[rel]]  # inference_output_bytes()
    vec = find_vectors(model, g)
    ours, _ = golden.run(g, [to_engine_input(g, i, x) for i, x in enumerate(vec.inputs)], dep.kernels)
    assert np.array_equal(ours[0].astype(np.int64), to_engine_output(g, 0, vec.outputs[0]).astype(np.int64))


def test_int32_layers_run_portable_and_whole():
    """No DSP variant takes an int32 layer, and the tiler leaves them whole (tiles hold 8- and
    16-bit values)."""
    for rel, target in (("Sub", "cortex-m7"), ("Hardswish/Regular", "cortex-m7"), ("Sub", "gap8"),
                        ("Hardswish/Regular", "gap8")):
        model = shared_onnx(f"deeploy/Kernels/Integer/{rel}") / "network.onnx"
        dep = deploy(model, onnx_options(model, target=target, l1=32 * 1024 if target == "gap8" else None))
        assert not dep.tilings
        assert not any(lp.variant.dsp for lp in dep.layers)


def _engine(path, x: np.ndarray, input_type: str = "int8") -> np.ndarray:
    dep = deploy(path, Options(input_type=input_type))
    g = dep.graph
    outs, _ = run_engine(build_engine(dep), [[to_engine_input(g, 0, x)]])
    ours, _ = golden.run(g, [to_engine_input(g, 0, x)], dep.kernels)
    assert np.array_equal(outs[0][0].astype(np.int64), ours[0].astype(np.int64))
    return outs[0][0], g


def _rqs(x: str, out: str, mul: int, add: int, div: int, levels: int = 256, signed: int = 1) -> tuple[list, dict]:
    attrs = dict(div=numpy_helper.from_array(np.array(float(div), np.float32)),
                 n_levels_out=numpy_helper.from_array(np.array([float(levels)], np.float32)),
                 signed=numpy_helper.from_array(np.array([float(signed)], np.float32)))
    inits = {f"{out}_mul": np.array(mul, np.float32), f"{out}_add": np.array(add, np.float32)}
    return [helper.make_node("RequantShift", [x, f"{out}_mul", f"{out}_add"], [out], **attrs)], inits


def _half_away(s: np.ndarray, n: int) -> np.ndarray:
    return np.where(s >= 0, (s + n // 2) // n, -((-s + n // 2) // n))


def test_mean_of_a_count_not_a_power_of_two_rounds_ties_away_from_zero(tmp_path):
    """Six channels (keepdims 1): Deeploy's generic kernel divides, half away from zero."""
    x = np.tile(np.array([3, 0, 0, 0, 0, 0, -3, 0, 0, 0, 0, 0, 9, 1, 1, -128, 127, 5], np.int64), 4)
    x = x.reshape(1, 4, 3, 6).transpose(0, 3, 1, 2)  # N, C=6, H, W
    path = save(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)], {},
                [1, 6, 4, 3], "y", [1, 1, 4, 3])
    y, g = _engine(path, x)
    assert g.tensors[g.outputs[0]].dtype == "int8"
    want = _half_away(x.sum(axis=1, keepdims=True), 6)
    assert 1 in want and -1 in want  # the ties 3 / 6 and -3 / 6
    assert np.array_equal(to_engine_output(g, 0, want), y.astype(np.int64))


def test_mean_of_a_power_of_two_count_rounds_ties_up(tmp_path):
    """Over H and W (4 x 2 = 8 values, to rank 2): Deeploy's shift, ties rounded up (-4 / 8 -> 0)."""
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 3, 4, 2))
    x[0, 0] = [[-4, 0], [0, 0], [0, 0], [0, 0]]
    x[0, 1] = [[4, 0], [0, 0], [0, 0], [0, 0]]
    path = save(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)], {},
                [1, 3, 4, 2], "y", [1, 3])
    y, g = _engine(path, x)
    want = (x.sum(axis=(2, 3)) + 4) >> 3
    assert want[0, 0] == 0 and want[0, 1] == 1
    assert np.array_equal(want, y.astype(np.int64))


def test_sum_over_axes_given_as_an_input_of_unsigned_values(tmp_path):
    """ReduceSum (opset 13: axes an input) over W of unsigned values (stored as value - 128): the
    int32 sum of the true values, the model's layout after dropping the axis (N, C, H)."""
    x = np.random.default_rng(3).integers(0, 256, (1, 5, 3, 7))
    path = save(tmp_path, [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                {"axes": np.array([3], np.int64)}, [1, 5, 3, 7], "y", [1, 5, 3], opset=13)
    y, g = _engine(path, x, "uint8")
    assert g.tensors[g.outputs[0]].dtype == "int32"
    assert np.array_equal(to_engine_output(g, 0, x.sum(axis=3)), y.astype(np.int64))


def test_hardswish_requantized_to_unsigned(tmp_path):
    """iHardswish with a RequantShift to 0..255 after it: one layer, its output handed out as uint8."""
    nodes = [helper.make_node("iHardswish", ["x"], ["h"], one_over_six=33, six=1530, three=765)]
    rqs, inits = _rqs("h", "y", 3, 1000, 2 ** 15, signed=0)
    x = np.arange(-128, 128).reshape(1, 1, 16, 16)
    path = save(tmp_path, nodes + rqs, inits, [1, 1, 16, 16], "y", [1, 1, 16, 16])
    y, g = _engine(path, x)
    assert [layer.op for layer in g.layers if layer.op not in ("TRANSPOSE", "RESHAPE")] == ["HARD_SWISH", "QUANTIZE"]
    h = x * (np.clip(x + 765, 0, 1530) * 33)
    want = np.clip((h * 3 + 1000 + 2 ** 14) >> 15, 0, 255)
    assert np.array_equal(to_engine_output(g, 0, want), y.astype(np.int64))


def test_what_is_refused(tmp_path):
    div = helper.make_node("TrueIntegerDiv", ["x"], ["y"], Delta=16384, eps=1, eta=200000, y=2)
    with pytest.raises(UnsupportedOperator, match="merged into a RequantShift"):
        read_onnx(save(tmp_path, [div], {}, [1, 4, 8], "y", [1, 4, 8], name="div"), input_type="int8")
    rqs, inits = _rqs("y", "z", 4, 3, 2 ** 16)  # a non-zero addend: Deeploy does not merge it
    with pytest.raises(UnsupportedOperator, match="zero addend"):
        read_onnx(save(tmp_path, [div, *rqs], inits, [1, 4, 8], "z", [1, 4, 8], name="div_add"), input_type="int8")
    sub = helper.make_node("Sub", ["x", "c"], ["y"])
    with pytest.raises(UnsupportedOperator, match="constant operand"):
        read_onnx(save(tmp_path, [sub], {"c": np.array(3.0, np.float32)}, [1, 4, 8], "y", [1, 4, 8], name="sub"),
                  input_type="int8")
    hs = helper.make_node("iHardswish", ["x"], ["y"], one_over_six=33, six=1530, three=765)
    with pytest.raises(UnsupportedOperator, match="signed int8"):
        read_onnx(save(tmp_path, [hs], {}, [1, 4, 8], "y", [1, 4, 8], name="hs"), input_type="uint8")
    big = helper.make_node("iHardswish", ["x"], ["y"], one_over_six=1 << 20, six=1530, three=765)
    with pytest.raises(UnsupportedOperator, match="past int32"):
        read_onnx(save(tmp_path, [big], {}, [1, 4, 8], "y", [1, 4, 8], name="big"), input_type="int8")


@pytest.mark.parametrize("shape,axes,keep", [((1, 5, 3, 4), [1], 0), ((1, 5, 3, 4), [2], 0), ((1, 5, 3, 4), [3], 1),
                                             ((1, 5, 3, 4), [1, 3], 0), ((1, 5, 3, 4), [0, 1], 1),
                                             ((1, 6, 7), [1], 0), ((1, 6, 7), [2], 0), ((1, 6, 7), [-1], 1),
                                             ((2, 9), [1], 0), ((2, 9), [0], 1)])
def test_sums_in_every_layout(tmp_path, shape, axes, keep):
    """The executor's ReduceSum over any axes equals numpy's, the output in the model's layout
    whatever axes the IR's channels-last layout moved or dropped."""
    out = np.sum(np.zeros(shape), axis=tuple(axes), keepdims=bool(keep)).shape
    path = save(tmp_path, [helper.make_node("ReduceSum", ["x"], ["y"], axes=axes, keepdims=keep)], {}, list(shape),
                "y", list(out))
    g = read_onnx(path, input_type="int8")
    x = np.random.default_rng(len(shape) + sum(axes)).integers(-128, 128, shape)
    ours, _ = golden.run(g, [to_engine_input(g, 0, x)])
    assert np.array_equal(ours[0].astype(np.int64), to_engine_output(g, 0, x.sum(axis=tuple(axes), keepdims=bool(keep))))
