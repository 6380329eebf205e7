"""The ONNX readers on small graphs built here: requantization chains folded by value, layouts,
and a clear error for everything they do not take."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from deployer import golden
from deployer.reference import run_onnxruntime
from deployer.test_vectors import to_engine_input, to_engine_output
from layer_analyzer import kernels as K
from network_parser.errors import ModelFormatError, UnsupportedOperator
from network_parser.onnx_reader import read_onnx


def save(tmp_path, nodes, inits, in_shape, out_name, out_shape, name="g", opset=11):
    return save_outputs(tmp_path, nodes, inits, in_shape, {out_name: out_shape}, name, opset)


def save_outputs(folder, nodes, inits, in_shape, outs: dict, name="g", opset=11):
    """A graph of ``nodes`` from input "x" to the outputs ``outs`` (name -> shape), saved as name.onnx."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, v) for o, v in outs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    return path


def nemo_conv(x: str, out: str, w: np.ndarray, k, l, m: int, d: int, lo=0.0, hi=255.0, group=1, pads=(1, 1, 1, 1)):
    """Conv -> Mul(k) -> Add(l) -> Cast(int64) -> Mul(m) -> Div(d) -> Cast(float) -> Clip, as NEMO exports it."""
    c = w.shape[0]
    inits = {f"{out}_w": w.astype(np.float32), f"{out}_k": np.asarray(k, np.float32).reshape(1, -1, 1, 1),
             f"{out}_l": np.asarray(l, np.float32).reshape(1, -1, 1, 1), f"{out}_m": np.array([m], np.int64),
             f"{out}_d": np.array([d], np.int64)}
    nodes = [
        helper.make_node("Conv", [x, f"{out}_w"], [f"{out}_acc"], kernel_shape=list(w.shape[2:]), pads=list(pads),
                         group=group),
        helper.make_node("Mul", [f"{out}_k", f"{out}_acc"], [f"{out}_1"]),
        helper.make_node("Add", [f"{out}_1", f"{out}_l"], [f"{out}_2"]),
        helper.make_node("Cast", [f"{out}_2"], [f"{out}_3"], to=TensorProto.INT64),
        helper.make_node("Mul", [f"{out}_3", f"{out}_m"], [f"{out}_4"]),
        helper.make_node("Div", [f"{out}_4", f"{out}_d"], [f"{out}_5"]),
        helper.make_node("Cast", [f"{out}_5"], [f"{out}_6"], to=TensorProto.FLOAT),
        helper.make_node("Clip", [f"{out}_6", f"{out}_lo", f"{out}_hi"], [out]),
    ]
    inits[f"{out}_lo"], inits[f"{out}_hi"] = np.array(lo, np.float32), np.array(hi, np.float32)
    return nodes, inits, c


def test_nemo_chain_folds_into_one_requantization(tmp_path):
    w = np.arange(-36, 36).reshape(4, 2, 3, 3) % 7 - 3
    nodes, inits, _ = nemo_conv("x", "y", w, [3, 5, 7, 9], [10, -20, 30, -40], 11, 2 ** 17 - 1)
    g = read_onnx(save(tmp_path, nodes, inits, [1, 2, 5, 5], "y", [1, 4, 5, 5]), input_type="uint8")
    conv = next(layer for layer in g.layers if layer.op == "CONV_2D")
    rq = conv.attrs.requant
    assert rq.mul == (33, 55, 77, 99) and rq.shift == 17
    assert rq.add == tuple(v * 11 - (128 << 17) for v in (10, -20, 30, -40))  # unsigned output stored - 128
    assert (rq.lo, rq.hi) == (-128, 127)
    assert any("131071 read as a shift by 17" in n for n in g.source.notes)
    assert [layer.op for layer in g.layers] == ["QUANTIZE", "TRANSPOSE", "CONV_2D", "TRANSPOSE", "QUANTIZE"]
    assert g.tensors[g.inputs[0]].dtype == "uint8" and g.tensors[g.outputs[0]].dtype == "uint8"


def test_requantshift_rounds_half_up_and_takes_its_range(tmp_path):
    inits = {"w": np.ones((2, 1, 1, 1), np.float32), "mul": np.array([3, 4], np.float32).reshape(2, 1, 1),
             "add": np.array([1, -1], np.float32).reshape(2, 1, 1)}
    rq_attrs = dict(div=numpy_helper.from_array(np.array(16.0, np.float32)),
                    n_levels_out=numpy_helper.from_array(np.array([256.0], np.float32)),
                    signed=numpy_helper.from_array(np.array([0.0], np.float32)))
    nodes = [helper.make_node("Conv", ["x", "w"], ["acc"], kernel_shape=[1, 1]),
             helper.make_node("RequantShift", ["acc", "mul", "add"], ["y"], **rq_attrs)]
    g = read_onnx(save(tmp_path, nodes, inits, [1, 1, 2, 2], "y", [1, 2, 2, 2]), input_type="int8")
    rq = next(layer for layer in g.layers if layer.op == "CONV_2D").attrs.requant
    assert rq.shift == 4 and rq.mul == (3, 4)
    assert rq.add == (1 + 8 - (128 << 4), -1 + 8 - (128 << 4))  # + 2^(div-1): rounding half up
    assert (rq.lo, rq.hi) == (-128, 127)  # unsigned 0..255, stored - 128


@pytest.mark.parametrize("divisor,message", [(3, "not a power of two"), (6, "not a power of two")])
def test_division_by_other_than_a_power_of_two_is_refused(tmp_path, divisor, message):
    w = np.ones((2, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "y", w, [1, 1], [0, 0], 1, divisor, pads=(0, 0, 0, 0))
    with pytest.raises(UnsupportedOperator, match=message) as e:
        read_onnx(save(tmp_path, nodes, inits, [1, 2, 3, 3], "y", [1, 2, 3, 3]), input_type="uint8")
    assert "node 5 Div" in str(e.value)


def test_non_integer_constants_are_refused_with_the_node(tmp_path):
    w = np.ones((2, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "y", w, [1.5, 1], [0, 0], 1, 4, pads=(0, 0, 0, 0))
    with pytest.raises(UnsupportedOperator, match="node 1 Mul .*non-integer"):
        read_onnx(save(tmp_path, nodes, inits, [1, 2, 3, 3], "y", [1, 2, 3, 3]), input_type="uint8")


def test_grouped_convolution_and_unknown_operators_are_named(tmp_path):
    w = np.ones((4, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "y", w, [1] * 4, [0] * 4, 1, 4, group=2, pads=(0, 0, 0, 0))
    with pytest.raises(UnsupportedOperator, match="grouped convolution \\(group 2"):
        read_onnx(save(tmp_path, nodes, inits, [1, 4, 3, 3], "y", [1, 4, 3, 3]), input_type="uint8")
    nodes = [helper.make_node("Erf", ["x"], ["y"])]
    with pytest.raises(UnsupportedOperator, match="node 0 Erf 'y': operator Erf is not supported"):
        read_onnx(save(tmp_path, nodes, {}, [1, 4], "y", [1, 4], name="erf"))


def test_a_file_that_is_not_onnx(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(ModelFormatError, match="model.onnx"):
        read_onnx(bad)


def test_nemo_add_with_a_second_stage_keeps_both_roundings(tmp_path):
    """(40a + 64b) >> 6, then * 54 >> 6: two floors, as TCN's residual additions."""
    inits = {"ca": np.array(40.0, np.float32), "cb": np.array(64.0, np.float32), "d1": np.array(64.0, np.float32),
             "m2": np.array([54], np.int64), "d2": np.array([64], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["a"]),  # a no-op on unsigned values
             helper.make_node("Mul", ["a", "ca"], ["a1"]), helper.make_node("Mul", ["x", "cb"], ["b1"]),
             helper.make_node("Add", ["a1", "b1"], ["s"]), helper.make_node("Div", ["s", "d1"], ["s1"]),
             helper.make_node("Floor", ["s1"], ["s2"]), helper.make_node("Cast", ["s2"], ["s3"], to=TensorProto.INT64),
             helper.make_node("Mul", ["s3", "m2"], ["s4"]), helper.make_node("Div", ["s4", "d2"], ["s5"]),
             helper.make_node("Cast", ["s5"], ["s6"], to=TensorProto.FLOAT),
             helper.make_node("Clip", ["s6"], ["y"], min=0.0, max=255.0)]
    path = save(tmp_path, nodes, inits, [1, 3, 4, 4], "y", [1, 3, 4, 4], opset=9)
    g = read_onnx(path, input_type="uint8")
    add = next(layer for layer in g.layers if layer.op == "ADD").attrs
    assert (add.a_mul, add.b_mul, add.shift, add.post_mul, add.post_shift) == (40, 64, 6, 54, 6)
    x = np.arange(48).reshape(1, 3, 4, 4) * 5 % 256
    ours, _ = golden.run(g, [to_engine_input(g, 0, x)])
    ref = run_onnxruntime(path, [x.astype(np.float32)])[0]
    assert np.array_equal(ours[0].astype(np.int64), to_engine_output(g, 0, ref).astype(np.int64))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_nemo_convolutions_match_onnxruntime(tmp_path_factory, data):
    """Random geometry and constants: the executor's exact integers equal onnxruntime running the
    graph as written (small constants keep its float32 products exact)."""
    depthwise = data.draw(st.booleans())
    cin = data.draw(st.integers(1, 4))
    cout = cin if depthwise else data.draw(st.integers(1, 5))
    k = data.draw(st.integers(1, 3))
    size = data.draw(st.integers(k, 7))
    pad = data.draw(st.integers(0, k - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    w = rng.integers(-8, 8, (cout, 1 if depthwise else cin, k, k))
    shift = data.draw(st.integers(0, 8))
    nodes, inits, _ = nemo_conv("x", "y", w, rng.integers(1, 16, cout), rng.integers(-2000, 2000, cout),
                                int(rng.integers(1, 8)), 2 ** shift, group=cin if depthwise else 1,
                                pads=(pad,) * 4)
    out = (size + 2 * pad - k) + 1
    path = save(tmp_path_factory.mktemp("nemo"), nodes, inits, [1, cin, size, size], "y", [1, cout, out, out])
    g = read_onnx(path, input_type="uint8")
    x = rng.integers(0, 256, (1, cin, size, size))
    ours, _ = golden.run(g, [to_engine_input(g, 0, x)], K.lower_graph(g))
    ref = run_onnxruntime(path, [x.astype(np.float32)])[0]
    assert np.array_equal(ours[0].astype(np.int64), to_engine_output(g, 0, ref).astype(np.int64))


def test_malformed_nodes_are_format_errors_naming_the_node(tmp_path):
    w = np.ones((2, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "y", w, [1, 1], [0, 0], 1, 4, pads=(0, 0, 0, 0))
    del nodes[0].input[1]  # a Conv without its weights
    with pytest.raises(ModelFormatError, match="node 0 Conv .*Conv needs 2 inputs"):
        read_onnx(save(tmp_path, nodes, inits, [1, 2, 3, 3], "y", [1, 2, 3, 3]), input_type="uint8")
    nodes, inits, _ = nemo_conv("x", "y", w, [1, 1], [0, 0], 1, 4, pads=(0, 0, 0, 0))
    nodes[0].attribute[0].ints[:] = [7, 7]  # a kernel_shape the weights do not have: their shape wins
    g = read_onnx(save(tmp_path, nodes, inits, [1, 2, 3, 3], "y", [1, 2, 3, 3], name="k"), input_type="uint8")
    assert next(layer for layer in g.layers if layer.op == "CONV_2D")


def test_an_add_whose_operands_do_not_broadcast(tmp_path):
    inits = {"w": np.ones((3, 2, 1, 1), np.float32), "lo": np.array(-128.0, np.float32),
             "hi": np.array(127.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["a0"], kernel_shape=[1, 1]),
             helper.make_node("Clip", ["a0", "lo", "hi"], ["a"]),
             helper.make_node("Conv", ["x", "w"], ["b0"], kernel_shape=[1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["b0", "lo", "hi"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    with pytest.raises(UnsupportedOperator, match="node 4 Add .*do not broadcast"):
        read_onnx(save(tmp_path, nodes, inits, [1, 2, 4, 4], "y", [1, 3, 4, 4]), input_type="int8")


def _nemo_chain(src: str, out: str, mul: int, shift: int, inits: dict) -> list:
    """Mul by an integer, Div by 2^shift, Floor, Clip 0..255: NEMO's requantization after a layer."""
    inits[f"{out}_m"], inits[f"{out}_d"] = np.array(mul, np.float32), np.array(2.0 ** shift, np.float32)
    inits[f"{out}_lo"], inits[f"{out}_hi"] = np.array(0.0, np.float32), np.array(255.0, np.float32)
    return [helper.make_node("Mul", [src, f"{out}_m"], [f"{out}_1"]),
            helper.make_node("Div", [f"{out}_1", f"{out}_d"], [f"{out}_2"]),
            helper.make_node("Floor", [f"{out}_2"], [f"{out}_3"]),
            helper.make_node("Clip", [f"{out}_3", f"{out}_lo", f"{out}_hi"], [out])]


def _run_both(path, g, x):
    ours, _ = golden.run(g, [to_engine_input(g, 0, x)])
    refs = run_onnxruntime(path, [x.astype(np.float32)], [g.tensors[o].name for o in g.outputs])
    return ours, [to_engine_output(g, j, r) for j, r in enumerate(refs)]


def test_nemo_classifier_split_by_gather_and_unsqueeze(tmp_path):
    """A Gemm's scores split into one output per class (Gather of a constant index, then Unsqueeze),
    as NEMO exports some classifiers: read as GATHER and zero-copy reshapes, exact against onnxruntime."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.integers(-3, 4, (5, 8)).astype(np.float32), "b": rng.integers(-20, 20, 5).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["acc"], transB=1), *_nemo_chain("acc", "s", 3, 2, inits)]
    outs = []
    for k in (0, 3, 4):
        inits[f"i{k}"] = np.array(k, np.int64)
        nodes += [helper.make_node("Gather", ["s", f"i{k}"], [f"g{k}"], axis=1),
                  helper.make_node("Unsqueeze", [f"g{k}"], [f"out{k}"], axes=[1])]
        outs.append(f"out{k}")
    graph = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 1]) for o in outs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    path = tmp_path / "cls.onnx"
    onnx.save(model, path)
    g = read_onnx(path, input_type="uint8")
    assert [layer.op for layer in g.layers].count("GATHER") == 3
    for seed in range(3):
        x = np.random.default_rng(seed).integers(0, 256, (1, 8))
        ours, refs = _run_both(path, g, x)
        for a, b in zip(ours, refs):
            assert np.array_equal(a.astype(np.int64), b.astype(np.int64))


def test_matmul_over_a_sequence(tmp_path):
    """MatMul of a rank-3 (1, S, D) activation by (D, E) weights, as a transformer's projections: one
    fully connected layer over the S rows, exact against onnxruntime; a Gather on it is refused."""
    rng = np.random.default_rng(1)
    inits = {"w": rng.integers(-4, 5, (6, 5)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["acc"]), *_nemo_chain("acc", "y", 5, 3, inits)]
    path = save(tmp_path, nodes, inits, [1, 4, 6], "y", [1, 4, 5], name="seq")
    g = read_onnx(path, input_type="uint8")
    assert "FULLY_CONNECTED" in [layer.op for layer in g.layers]
    for seed in range(3):
        x = np.random.default_rng(seed).integers(0, 256, (1, 4, 6))
        ours, refs = _run_both(path, g, x)
        assert np.array_equal(ours[0].astype(np.int64), refs[0].astype(np.int64))
    inits["i"] = np.array(1, np.int64)
    nodes.append(helper.make_node("Gather", ["y", "i"], ["z"], axis=1))
    with pytest.raises(UnsupportedOperator, match="Gather on a rank-3 activation"):
        read_onnx(save(tmp_path, nodes, inits, [1, 4, 6], "z", [1, 5], name="seq2"), input_type="uint8")


def test_the_integer_readers_node_types_are_listed():
    """deploy ops lists INTEGER_OPS: exactly the node types the reader has a handler for."""
    from network_parser.onnx_reader import INTEGER_OPS, IntegerGraphReader
    assert set(IntegerGraphReader.handlers(IntegerGraphReader.__new__(IntegerGraphReader))) == set(INTEGER_OPS)


def glue_model(folder, seed: int, perm, slices) -> tuple:
    """An integer graph of the data-movement glue on a NEMO convolution's unsigned (1, 6, 5, 7)
    output: Transpose by ``perm``, Slice by ``slices`` ((axis, start, end, step) each), Split then
    Concat in another order, GlobalMaxPool. Returns its path and its outputs' shapes."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-3, 4, (6, 4, 1, 1))
    nodes, inits, _ = nemo_conv("x", "a", w, [1] * 6, [0] * 6, 3, 4, pads=(0, 0, 0, 0))
    inits.update({"a_lo": np.array(0.0, np.float32), "a_hi": np.array(255.0, np.float32)})
    shape_t = [(1, 6, 5, 7)[p] for p in perm]
    for ax, b, e, step in slices:
        b = 0 if step < 0 and b < -shape_t[ax % 4] else b  # ONNX's clamp of a start before the axis
        shape_t[ax % 4] = len(range(*slice(b, e, step).indices(shape_t[ax % 4])))
    axes, starts, ends, steps = zip(*slices)
    inits.update({"st": np.array(starts, np.int64), "en": np.array(ends, np.int64), "ax": np.array(axes, np.int64),
                  "sp": np.array(steps, np.int64), "parts": np.array([2, 4], np.int64)})
    nodes += [helper.make_node("Transpose", ["a"], ["t"], perm=list(perm)),
              helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["s"]),
              helper.make_node("Split", ["a", "parts"], ["p0", "p1"], axis=1),
              helper.make_node("Concat", ["p1", "p0", "p1"], ["c"], axis=-3),
              helper.make_node("GlobalMaxPool", ["a"], ["g"])]
    outs = {"s": shape_t, "c": [1, 10, 5, 7], "g": [1, 6, 1, 1]}
    return save_outputs(folder, nodes, inits, [1, 4, 5, 7], outs, "glue", 13), list(outs.values())


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 16), perm=st.permutations([1, 2, 3]), data=st.data())
def test_data_movement_glue_in_an_integer_graph(tmp_path_factory, seed, perm, data):
    """Transpose (any permutation keeping the batch axis first), Slice (constant starts, ends, axes
    and steps, negative ones and out-of-range ends as ONNX clamps them), Split then Concat in
    another order, and GlobalMaxPool on a NEMO convolution's unsigned output: exact against
    onnxruntime, each output in the model's layout."""
    perm = [0, *perm]
    shape_t = [(1, 6, 5, 7)[p] for p in perm]
    slices = []
    for ax in data.draw(st.lists(st.integers(-4, 3), min_size=1, max_size=3, unique_by=lambda v: v % 4)):
        dim = shape_t[ax % 4]
        step = data.draw(st.sampled_from([1, 2, -1, -2]) if dim > 1 else st.just(1))
        b, e = data.draw(st.integers(-dim, dim - 1)), data.draw(st.integers(-dim - 2, dim + 2))
        if len(range(*slice(b, e, step).indices(dim))) == 0:
            b, e = (0, dim) if step > 0 else (dim - 1, -dim - 1)
        slices.append((ax, b, e, step))
    path, shapes = glue_model(tmp_path_factory.mktemp("glue"), seed, perm, slices)
    g = read_onnx(path, input_type="uint8")
    assert {"TRANSPOSE", "STRIDED_SLICE", "CONCATENATION", "MAX_POOL_2D"} <= {layer.op for layer in g.layers}
    x = np.random.default_rng(seed).integers(0, 256, (1, 4, 5, 7))
    ours, refs = _run_both(path, g, x)
    assert len(ours) == len(refs) == 3 and [list(r.shape) for r in refs] == shapes
    for a, b in zip(ours, refs):
        assert np.array_equal(a.astype(np.int64), b.astype(np.int64))


def test_glue_refusals_name_the_node(tmp_path):
    """A Concat of a signed and an unsigned value, a Slice keeping nothing, a Split whose sizes do not add up."""
    w = np.ones((2, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "a", w, [1, 1], [0, 0], 1, 4, pads=(0, 0, 0, 0))
    inits.update({"a_lo": np.array(0.0, np.float32), "a_hi": np.array(255.0, np.float32)})
    base = list(nodes)
    cases = [
        ([helper.make_node("Split", ["a", "parts"], ["p0", "p1"], axis=1)], {"parts": np.array([1, 2], np.int64)},
         ModelFormatError, "node 8 Split .*do not split an axis of 2"),
        ([helper.make_node("Slice", ["a", "st", "en"], ["p0"])],
         {"st": np.array([3], np.int64), "en": np.array([1], np.int64)}, UnsupportedOperator, "keeps nothing"),
        ([helper.make_node("Transpose", ["a"], ["p0"], perm=[0, 1, 1, 2])], {}, ModelFormatError, "perm"),
        ([helper.make_node("Transpose", ["a"], ["p0"], perm=[1, 0, 2, 3])], {}, UnsupportedOperator,
         "moving the batch axis"),
        ([helper.make_node("Concat", ["a", "a"], ["p0"], axis=0)], {}, UnsupportedOperator, "along the batch axis"),
        ([helper.make_node("Expand", ["a", "sh"], ["p0"])], {"sh": np.array([1, 1, 1, 3, 3], np.int64)},
         UnsupportedOperator, "Expand of a rank-4 activation to rank 5"),
        ([helper.make_node("Expand", ["a", "sh"], ["p0"])], {"sh": np.array([2, 1, 1, 1], np.int64)},
         UnsupportedOperator, "Expand along the batch axis"),
        ([helper.make_node("Expand", ["a", "sh"], ["p0"])], {"sh": np.array([4, 3], np.int64)},
         ModelFormatError, r"\[1, 2, 3, 3\] does not broadcast to shape \[1, 1, 4, 3\]"),
        ([helper.make_node("Resize", ["a", "roi", "", "sz"], ["p0"], mode="nearest", keep_aspect_ratio_policy="not_larger")],
         {"roi": np.array([], np.float32), "sz": np.array([1, 2, 6, 6], np.int64)}, UnsupportedOperator,
         "keep_aspect_ratio_policy not_larger"),
    ]
    for k, (extra, more, error, message) in enumerate(cases):
        path = save(tmp_path, base + extra, {**inits, **more}, [1, 2, 3, 3], "p0", [1, 1, 3, 3], name=f"bad{k}",
                    opset=13)
        with pytest.raises(error, match=message):
            read_onnx(path, input_type="uint8")


def test_expand_gather_squeeze_in_an_integer_graph(tmp_path):
    """Expand (a constant shape, right-aligned, broadcasting either way), and Gather then Squeeze /
    Unsqueeze of the pooled channels: exact against onnxruntime in the model's layout."""
    w = np.random.default_rng(5).integers(-3, 4, (6, 4, 1, 1))
    nodes, inits, _ = nemo_conv("x", "a", w, [1] * 6, [0] * 6, 3, 4, pads=(0, 0, 0, 0))
    inits.update({"a_lo": np.array(0.0, np.float32), "a_hi": np.array(255.0, np.float32),
                  "s1": np.array([1, 1, 4, 3], np.int64), "s2": np.array([5, 1], np.int64),
                  "s3": np.array([1, 6, 5, 7], np.int64),
                  "ax0": np.array([0], np.int64)})
    nodes += [helper.make_node("GlobalMaxPool", ["a"], ["g"]),
              helper.make_node("Expand", ["g", "s1"], ["e1"]),  # (1, 6, 1, 1) -> (1, 6, 4, 3)
              helper.make_node("Expand", ["a", "s2"], ["e2"]),  # unchanged: (1, 6, 5, 7)
              helper.make_node("Expand", ["g", "s3"], ["e3"]),  # to the conv's own shape
              helper.make_node("Flatten", ["g"], ["f"], axis=1),
              helper.make_node("Gather", ["f", "ax0"], ["g1"], axis=1),  # (1, 1)
              helper.make_node("Squeeze", ["g1", "ax0"], ["sq"]),  # (1,)
              helper.make_node("Unsqueeze", ["sq", "ax0"], ["u"])]  # (1, 1)
    outs = {"e1": [1, 6, 4, 3], "e2": [1, 6, 5, 7], "e3": [1, 6, 5, 7], "u": [1, 1]}
    path = save_outputs(tmp_path, nodes, inits, [1, 4, 5, 7], outs, "expand", 13)
    g = read_onnx(path, input_type="uint8")
    assert [layer.op for layer in g.layers].count("BROADCAST_TO") == 3 and "GATHER" in {layer.op for layer in g.layers}
    x = np.random.default_rng(5).integers(0, 256, (1, 4, 5, 7))
    ours, refs = _run_both(path, g, x)
    assert [list(r.shape) for r in refs] == list(outs.values())
    for a, b in zip(ours, refs):
        assert np.array_equal(a.astype(np.int64), b.astype(np.int64))


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                                   "align_corners"])
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_in_an_integer_graph(tmp_path, coord, rounding):
    """Resize (nearest) by scales (up, down, fractional) and by sizes, every coordinate
    transformation and nearest mode onnxruntime has: exact against it."""
    cases = [("scales", [1, 1, 2, 3]), ("scales", [1, 1, 0.5, 1.7]), ("scales", [1, 1, 1.25, 0.6]),
             ("scales", [1, 1, 1, 2]), ("sizes", [1, 3, 7, 2]), ("sizes", [1, 3, 1, 11]), ("sizes", [1, 3, 5, 4])]
    for k, (kind, value) in enumerate(cases):
        w = np.ones((3, 2, 1, 1))
        nodes, inits, _ = nemo_conv("x", "a", w, [1] * 3, [0] * 3, 1, 2, pads=(0, 0, 0, 0))
        inits.update({"a_lo": np.array(0.0, np.float32), "a_hi": np.array(255.0, np.float32),
                      "roi": np.array([], np.float32)})
        if kind == "scales":
            inits["sc"] = np.array(value, np.float32)
            ins = ["a", "roi", "sc"]
            out = [1, 3, int(np.floor(np.float32(5) * np.float32(value[2]))),
                   int(np.floor(np.float32(6) * np.float32(value[3])))]
        else:
            inits["sz"] = np.array(value, np.int64)
            ins = ["a", "roi", "", "sz"]
            out = value
        nodes.append(helper.make_node("Resize", ins, ["y"], mode="nearest", coordinate_transformation_mode=coord,
                                      nearest_mode=rounding))
        path = save(tmp_path, nodes, inits, [1, 2, 5, 6], "y", out, name=f"resize{k}", opset=13)
        g = read_onnx(path, input_type="uint8")
        assert "RESIZE_NEAREST_NEIGHBOR" in [layer.op for layer in g.layers]
        x = np.random.default_rng(k).integers(0, 256, (1, 2, 5, 6))
        ours, refs = _run_both(path, g, x)
        assert list(refs[0].shape) == [1, 3, *out[2:]]
        assert np.array_equal(ours[0].astype(np.int64), refs[0].astype(np.int64)), (kind, value)


def test_resize_nearest_indices_equal_onnxruntime_on_every_size():
    """The source index of every output index, against onnxruntime itself, for axes of 3, 5 and 7
    resized to 1 to 20 (ties of the rounding modes among them) under every coordinate
    transformation and nearest mode."""
    from fractions import Fraction

    import onnxruntime as ort

    from network_parser.onnx_common import RESIZE_COORDINATES, RESIZE_ROUNDING, nearest_sources
    for length in (3, 5, 7):
        for out in range(1, 21):
            for coord in RESIZE_COORDINATES:
                for rounding in RESIZE_ROUNDING:
                    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="nearest",
                                            coordinate_transformation_mode=coord, nearest_mode=rounding)
                    graph = helper.make_graph(
                        [node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, length])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                        [numpy_helper.from_array(np.array([], np.float32), "roi"),
                         numpy_helper.from_array(np.array([1, 1, 1, out], np.int64), "sizes")])
                    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                    model.ir_version = 8
                    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                    want = session.run(None, {"x": np.arange(length, dtype=np.float32).reshape(1, 1, 1, length)})[0]
                    got = nearest_sources(out, length, np.float32(out) / np.float32(length), coord, rounding,
                                          Fraction(length, out))
                    assert got == want.reshape(-1).astype(int).tolist(), (length, out, coord, rounding)


def test_slice_from_before_the_axis_backwards(tmp_path):
    """A negative-step Slice whose start lies before the axis keeps its first index, as ONNX clamps."""
    path, shapes = glue_model(tmp_path, 2, (0, 1, 2, 3), [(2, -10, -2 ** 62, -1), (3, 50, 2, -1)])
    assert shapes[0] == [1, 6, 1, 4]
    g = read_onnx(path, input_type="uint8")
    ours, refs = _run_both(path, g, np.random.default_rng(2).integers(0, 256, (1, 4, 5, 7)))
    assert list(refs[0].shape) == shapes[0] and np.array_equal(ours[0].astype(np.int64), refs[0].astype(np.int64))


def test_transpose_pairs_fold_and_byte_preserving_transposes_become_reshapes(tmp_path):
    """The integer attention block lays values out its own way around each matrix product; the
    rewrite composes transpose pairs and turns those that move no byte into reshapes (fewer
    layers and buffers), and the engine still equals the executor."""
    import numpy as np

    from deployer import golden
    from deployer.pipeline import Options, deploy
    from deployer.verify import build_engine, random_inputs, run_engine
    from tests.integer_transformer import attention_block
    model = attention_block(tmp_path / "attention.onnx")
    plain, folded = (deploy(model, Options(input_type="int8", fuse=f)) for f in (False, True))
    count = [sum(layer.op == "TRANSPOSE" for layer in d.graph.layers) for d in (plain, folded)]
    assert count[1] < count[0] / 2 and any("transpose(s) folded" in n for n in folded.notes)
    assert folded.memory.sram_bytes <= plain.memory.sram_bytes
    sample = random_inputs(folded.graph, 0)
    ours = run_engine(build_engine(folded), [sample])[0][0]
    assert np.array_equal(ours[0], golden.run(plain.graph, sample, plain.kernels)[0][0])


def _batched_product(tmp_path, after=None, **rq):
    """x[2, 4, 8] @ W[8, 3] -> RequantShift (a batch of 2 inside the graph), then ``after``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).integers(-8, 9, (8, 3)).astype(np.float32), "w")
    mul = numpy_helper.from_array(np.array(rq.get("mul", 7.0), np.float32), "mul")
    add = numpy_helper.from_array(np.array(0.0, np.float32), "add")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("RequantShift", ["p", "mul", "add"], ["y"],
                              div=helper.make_tensor("d", TensorProto.FLOAT, [], [float(rq.get("div", 256))]),
                              n_levels_out=helper.make_tensor("n", TensorProto.FLOAT, [], [256.0]),
                              signed=helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]))]
    out = "y"
    if after is not None:
        f = lambda v: helper.make_tensor("c", TensorProto.FLOAT, [], [float(v)])  # noqa: E731
        nodes.append(helper.make_node(after, ["y"], ["z"], coeffA=f(1), coeffB=f(173), coeffC=f(15599), log2=f(127),
                                      n_levels=f(256)))
        out = "z"
    g = helper.make_graph(nodes, "b", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 4, 3])], [w, mul, add])
    path = tmp_path / "batched.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_a_batch_inside_the_graph_is_read_by_products_only(tmp_path):
    """A batch above 1 stays in the graph's layout: what reads it after the product (an iSoftmax)
    would take its axes wrongly, so it is refused by name; with --input-layout nhwc the product
    still reads the graph's layout (the engine's values equal numpy's)."""
    from deployer import golden
    from deployer.pipeline import Options, deploy
    with pytest.raises(UnsupportedOperator, match="holds a batch above 1"):
        read_onnx(_batched_product(tmp_path, after="iSoftmax"), input_type="int8")
    path = _batched_product(tmp_path)
    x = np.random.default_rng(1).integers(-128, 128, (2, 4, 8))
    w = np.random.default_rng(0).integers(-8, 9, (8, 3))
    want = np.clip((x @ w * 7 + 128) >> 8, -128, 127)
    for layout in ("nchw", "nhwc"):
        dep = deploy(path, Options(input_type="int8", input_layout=layout))
        got = golden.run(dep.graph, [x.astype(np.int8).reshape(dep.graph.tensors[dep.graph.inputs[0]].shape)],
                         dep.kernels)[0][0]
        assert np.array_equal(got.reshape(2, 4, 3), want), layout


@pytest.mark.parametrize("rq", [dict(mul=2.0 ** 33 + 5), dict(div=2.0 ** 70)])
def test_a_product_scaling_beyond_the_kernels_widths_is_refused(tmp_path, rq):
    with pytest.raises(UnsupportedOperator, match="beyond its integer widths|not a power of two up to"):
        read_onnx(_batched_product(tmp_path, **rq), input_type="int8")
