"""Recurrent layers with state kept across inferences: both shared LSTM models (TFLite's integer
LSTM, int16 cell state) against LiteRT run as one stream in one interpreter: consecutive
inferences carry the state, inference_reset_state() starts a new stream."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployer import golden
from deployer.pipeline import Options, deploy
from deployer.reference import run_litert_stream
from deployer.verify import build_engine, random_inputs, run_engine, verify
from tests.models import shared_model

LSTMS = ["tflm/trained_lstm_int8.tflite", "tflm/micro_speech_lstm.tflite"]


def _stream(dep, count: int):
    return [random_inputs(dep.graph, seed) for seed in range(count)]


def _assert_stream_exact(model, dep, count: int, reset: int, engine=None):
    """The executor (its state carried) and the engine (the host's unless ``engine``) against
    LiteRT over ``count`` inferences as one stream, reset before inference ``reset``."""
    samples, resets = _stream(dep, count), frozenset({reset})
    ref = run_litert_stream(model, samples, resets)
    outs, _ = run_engine(engine or build_engine(dep), samples, resets)
    state: dict = {}
    for n, (sample, (want, _), ours) in enumerate(zip(samples, ref, outs)):
        if n in resets:
            state = {}
        gold, _ = golden.run(dep.graph, sample, dep.kernels, state)
        assert np.array_equal(gold[0], want[0]), f"inference {n}: executor vs LiteRT"
        assert np.array_equal(ours[0], want[0]), f"inference {n}: engine vs LiteRT"


@pytest.mark.parametrize("rel", LSTMS)
def test_lstm_layer_equals_litert_over_a_stream_and_after_a_reset(rel):
    """The LSTM layer's output, every time step, of the golden executor and the C engine against
    LiteRT's, over four inferences carrying the state, a reset, and two more."""
    model = shared_model(rel)
    dep = deploy(model, Options())
    lstm = next(k for k, layer in enumerate(dep.graph.layers) if layer.op == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    samples, resets = _stream(dep, 6), frozenset({4})
    ref = run_litert_stream(model, samples, resets, preserve=True)
    _, traces = run_engine(build_engine(dep, trace=True), samples, resets)
    state: dict = {}
    for n, (sample, (_, tensors), trace) in enumerate(zip(samples, ref, traces)):
        if n in resets:
            state = {}
        _, gold = golden.run(dep.graph, sample, dep.kernels, state)
        want = tensors[dep.graph.layers[lstm].outputs[0]]
        assert np.array_equal(gold[lstm], want), f"sample {n}: executor vs LiteRT"
        assert np.array_equal(trace[lstm], want), f"sample {n}: engine vs LiteRT"
    # the state did carry: a continued stream differs from a fresh start on the same input
    fresh = run_litert_stream(model, [samples[1]], preserve=True)[0][1][dep.graph.layers[lstm].outputs[0]]
    assert not np.array_equal(fresh, ref[1][1][dep.graph.layers[lstm].outputs[0]])


@pytest.mark.parametrize("rel", LSTMS)
def test_verify_runs_the_stream_and_the_state_stays_out_of_the_arena(rel, tmp_path):
    model = shared_model(rel)
    dep = deploy(model, Options())
    result = verify(dep, model, _stream(dep, 3))
    assert [o["max_abs_diff"] for o in result["outputs"]] == [0] and result["samples"] == 4
    assert "then a reset" in result["reference"]
    state = dep.graph.state()
    assert len(state) == 2 and dep.memory.state_bytes == sum(-(-dep.graph.tensors[t].nbytes // 4) * 4 for t in state)
    assert not set(state) & {lt.tensor for lt in dep.lives}, "state tensors must not be planned in the arena"
    assert dep.memory.sram_bytes == dep.memory.arena_bytes + dep.memory.state_bytes
    manifest = json.loads(dep.files["manifest.json"])
    assert [s["dtype"] for s in manifest["state"]] == ["int8", "int16"]
    api = dep.files["inference_api.h"]
    assert f"#define INFERENCE_STATE_BYTES {dep.memory.state_bytes}" in api and "inference_reset_state(void)" in api


def test_a_model_without_state_has_an_empty_reset():
    dep = deploy(shared_model("mlperf_tiny/kws_ref_model.tflite"), Options())
    assert dep.memory.state_bytes == 0 and "#define INFERENCE_STATE_BYTES 0" in dep.files["inference_api.h"]
    assert "void inference_reset_state(void)" in next(v for k, v in dep.files.items() if k.endswith("_engine.c"))


def lstm_model(folder, seed: int, shape, units: int, time_major: bool, cell_log2: int, clip: float, zp: int,
               stacked: int = 0, cifg: bool = False, peephole: bool = False, projection: int | None = None,
               layer_norm: bool = False, coarse_sums: float = 1.0, wide_coefficients: float = 1.0):
    """``coarse_sums``: the layer-normalized gates' sums quantized that many times coarser (a row
    of a few steps: its variance below one, the reference's floor); ``wide_coefficients``: the
    normalization coefficients' scale that many times larger (the floor grows with it)."""
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=seed)
    y = b.lstm(b.input(shape), units, time_major=time_major, cell_log2=cell_log2, cell_clip=clip, hidden_zero_point=zp,
               cifg=cifg, peephole=peephole, projection=projection, projection_clip=0.5 if projection == 3 else 0.0,
               layer_norm=layer_norm)
    for i in b._ops[-1].intermediates[:4] if layer_norm else ():
        b._tensors[i].scale = (b._tensors[i].scale * coarse_sums).astype(np.float32)
    for t in b._tensors if layer_norm else ():
        if t.name.endswith("_layer_norm"):
            t.scale = (t.scale * wide_coefficients).astype(np.float32)
    if stacked:
        y = b.lstm(y, stacked, time_major=time_major)
    b.output(y)
    path = folder / f"lstm_{seed}.tflite"
    b.save(path)
    return path


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 16), batch=st.integers(1, 2), steps=st.integers(1, 6), n_input=st.integers(1, 11),
       units=st.integers(1, 14), time_major=st.booleans(), cell_log2=st.sampled_from([-15, -12, -11, -10, -9]),
       clip=st.sampled_from([0.0, 1.5, 8.0]), zp=st.sampled_from([-100, -6, -1, 0, 3, 6, 90]), stacked=st.sampled_from([0, 0, 5]),
       cifg=st.booleans(), extra=st.sampled_from(["", "peephole", "projection", "clipped projection"]))
def test_random_lstms_equal_litert_over_a_stream(tmp_path_factory, seed, batch, steps, n_input, units, time_major,
                                                  cell_log2, clip, zp, stacked, cifg, extra):
    """Random integer LSTMs (batch- or time-major, any cell count, cell scale, clip and hidden zero
    point, with or without an input gate (CIFG), with peepholes or a projection (clipped or not),
    one or two layers): the executor and the engine against LiteRT over a stream with a reset.
    The state starts as TFLite resets it: an int8 tensor at its zero point."""
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    projection = {"projection": 6, "clipped projection": 3}.get(extra)
    model = lstm_model(tmp_path_factory.mktemp("lstm"), seed, shape, units, time_major, cell_log2, clip, zp, stacked,
                       cifg, extra == "peephole", projection)
    _assert_stream_exact(model, deploy(model, Options()), 3, reset=2)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 16), batch=st.integers(1, 3), steps=st.integers(1, 5), n_input=st.integers(1, 11),
       units=st.sampled_from([1, 2, 7, 16, 37]), time_major=st.booleans(), cell_log2=st.sampled_from([-12, -11, -10]),
       clip=st.sampled_from([0.0, 2.0, 8.0]), cifg=st.booleans(), extra=st.sampled_from(["", "peephole", "projection"]),
       coarse=st.sampled_from([1.0, 1.0, 30000.0]))
def test_random_layer_normalized_lstms_equal_litert_over_a_stream(tmp_path_factory, seed, batch, steps, n_input, units,
                                                                  time_major, cell_log2, clip, cifg, extra, coarse):
    """Layer-normalized integer LSTMs (LiteRT's integer normalization of each gate's sums over
    the cells: mean, variance, inverse square root, coefficients and bias), with or without CIFG,
    peepholes or a projection; coarse gate sums reach the variance floor. The executor and the
    engine against LiteRT over a stream with a reset."""
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    model = lstm_model(tmp_path_factory.mktemp("lnlstm"), seed, shape, units, time_major, cell_log2, clip, 2, 0,
                       cifg, extra == "peephole", 5 if extra == "projection" else None, layer_norm=True,
                       coarse_sums=coarse)
    _assert_stream_exact(model, deploy(model, Options()), 3, reset=2)


@pytest.mark.parametrize("units,cifg", [(16, False), (7, True)])
def test_layer_normalized_gate_rows_below_unit_variance_take_the_floor(tmp_path, units, cifg):
    """Gate sums quantized so coarsely that a row spans a step or two: its variance is below one
    and LiteRT normalizes by its floor (10000 x the coefficients' scale, truncated: wide
    coefficients make it more than one), bit-exact."""
    model = lstm_model(tmp_path, 3, (2, 4, 6), units, False, -11, 8.0, 2, cifg=cifg, layer_norm=True, coarse_sums=30000.0,
                       wide_coefficients=20.0)
    _assert_stream_exact(model, deploy(model, Options()), 3, reset=2)


@pytest.mark.parametrize("bias", [2 ** 31 - 100, -2 ** 31 + 100])
def test_layer_normalized_gates_round_a_bias_at_the_int32_limits_in_64_bits(tmp_path, bias):
    """A coefficient of 0 and a bias within 512 of an int32 limit: the reference widens the sum
    to 64 bits before it rounds (an int32 rounding would wrap to the other sign)."""
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=7)
    b.output(b.lstm(b.input((1, 3, 5)), 8, layer_norm=True))
    for t in b._tensors:
        if t.name.endswith(("/f_bias", "/f_layer_norm")):
            kind = np.int32 if t.name.endswith("bias") else np.int16
            values = np.frombuffer(b._buffers[t.buffer], kind).copy()
            values[:3] = bias if kind is np.int32 else 0
            b._buffers[t.buffer] = values.tobytes()
    model = tmp_path / "limits.tflite"
    b.save(model)
    _assert_stream_exact(model, deploy(model, Options()), 3, reset=2)


def test_a_layer_norm_scale_beyond_the_reference_range_is_refused(tmp_path):
    from network_parser.errors import UnsupportedOperator
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=1)
    b.output(b.lstm(b.input((1, 3, 5)), 6, layer_norm=True))
    next(t for t in b._tensors if t.name.endswith("/o_layer_norm")).scale = np.array([1e6], np.float32)
    model = tmp_path / "wide.tflite"
    b.save(model)
    with pytest.raises(UnsupportedOperator, match="coefficients' scale 1e\\+06 is beyond the reference's range"):
        deploy(model, Options())


def svdf_kws_model(folder, seed: int = 0):
    """A streaming keyword spotter as TFLite's SVDF examples build it: one frame of 40 features
    per inference, two SVDF layers carrying the history, a classifier."""
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=seed)
    x = b.svdf(b.input((1, 40)), 32, rank=1, memory=10)
    x = b.svdf(x, 16, rank=2, memory=6)
    b.output(b.softmax(b.fully_connected(x, 4)))
    path = folder / f"svdf_kws_{seed}.tflite"
    b.save(path)
    return path


def test_svdf_keyword_spotter_streams_bit_exact(tmp_path):
    model = svdf_kws_model(tmp_path)
    dep = deploy(model, Options())
    assert [layer.op for layer in dep.graph.layers][:2] == ["SVDF", "SVDF"] and len(dep.graph.state()) == 2
    result = verify(dep, model, _stream(dep, 8))
    assert [o["max_abs_diff"] for o in result["outputs"]] == [0] and result["samples"] == 9


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 16), batch=st.integers(1, 2), n_input=st.integers(1, 23), units=st.integers(1, 9),
       rank=st.integers(1, 3), memory=st.integers(1, 9), bias=st.booleans())
def test_random_svdfs_equal_litert_over_a_stream(tmp_path_factory, seed, batch, n_input, units, rank, memory, bias):
    """Random integer SVDFs: the executor and the engine against LiteRT over six frames with a
    reset before the fifth (the state's shift carries each filter's history)."""
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=seed)
    b.output(b.svdf(b.input((batch, n_input)), units, rank=rank, memory=memory, bias=bias))
    model = tmp_path_factory.mktemp("svdf") / "svdf.tflite"
    b.save(model)
    _assert_stream_exact(model, deploy(model, Options()), 6, reset=4)


@pytest.mark.parametrize("kind,message", [("peephole and projection", "both peepholes and a projection"),
                                          ("bidirectional", "TFLite has only float and hybrid kernels")])
def test_unsupported_recurrent_forms_are_refused_by_name(tmp_path, kind, message):
    from network_parser.errors import UnsupportedOperator
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=1)
    y = b.lstm(b.input((1, 4, 6)), 8, projection=5, peephole=True)
    if kind == "bidirectional":  # the same op under BIDIRECTIONAL_SEQUENCE_LSTM's code
        import tflite
        b._ops[-1].code = tflite.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_LSTM
    b.output(y)
    path = tmp_path / f"{kind}.tflite"
    b.save(path)
    with pytest.raises(UnsupportedOperator, match=message):
        deploy(path, Options())


def _builder_lstm(tmp_path, edit=None, **kw):
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=2)
    b.output(b.lstm(b.input((1, 4, 6)), 8, **kw))
    if edit:
        edit(b, b._ops[-1])
    path = tmp_path / "lstm.tflite"
    b.save(path)
    return path


@pytest.mark.parametrize("name,kw,edit,error,message", [
    ("cell scale", dict(cell_log2=-8), None, "UnsupportedOperator", "a power of two from 2"),
    ("partial CIFG", {}, lambda b, op: op.inputs.__setitem__(5, -1), "ModelFormatError", "omitted or given alone"),
    ("partial peepholes", dict(peephole=True), lambda b, op: op.inputs.__setitem__(10, -1), "ModelFormatError",
     "all of the gates' or none"),
    ("layer norm without the cell gate's coefficients", dict(layer_norm=True),
     lambda b, op: op.inputs.__setitem__(22, -1), "ModelFormatError", "layer normalization coefficients"),
    ("layer norm without the gate sums' scales", dict(layer_norm=True),
     lambda b, op: setattr(b._tensors[op.intermediates[2]], "scale", None), "ModelFormatError",
     "intermediates 0-3 quantized"),
    ("an intermediate outside the model", {}, lambda b, op: setattr(op, "intermediates", (*op.intermediates[:4], 9999)),
     "ModelFormatError", "intermediate tensors"),
    ("22 inputs", dict(layer_norm=True), lambda b, op: setattr(op, "inputs", op.inputs[:22]), "ModelFormatError",
     "an LSTM has 20 or 24 inputs"),
])
def test_lstm_forms_the_reference_does_not_run_are_refused(tmp_path, name, kw, edit, error, message):
    from network_parser import errors
    with pytest.raises(getattr(errors, error), match=message):
        deploy(_builder_lstm(tmp_path, edit, **kw), Options())


def test_svdf_without_relu_is_refused(tmp_path):
    from network_parser.errors import UnsupportedOperator
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=1)
    b.output(b.svdf(b.input((1, 8)), 4, activation="NONE"))
    path = tmp_path / "svdf.tflite"
    b.save(path)
    with pytest.raises(UnsupportedOperator, match="takes RELU only"):
        deploy(path, Options())


def test_one_sample_still_streams_through_the_state():
    """One sample runs twice before the reset (a state carried once), then again after it."""
    model = shared_model(LSTMS[0])
    dep = deploy(model, Options())
    result = verify(dep, model, _stream(dep, 1))
    assert result["samples"] == 3 and [o["max_abs_diff"] for o in result["outputs"]] == [0]


def test_a_cut_of_a_model_with_state_streams_the_whole_file():
    """--outputs at the LSTM's output: the engine runs the LSTM alone, against LiteRT's values there
    over the stream through the whole model (its state carried, then reset)."""
    from deployer.verify import verification_samples
    from network_parser.cut import CutSpec
    model = shared_model(LSTMS[0])
    probe = deploy(model, Options())
    name = probe.graph.tensors[probe.graph.layers[0].outputs[0]].name
    dep = deploy(model, Options(cut=CutSpec(outputs=(name,))))
    assert [layer.op for layer in dep.graph.layers] == ["UNIDIRECTIONAL_SEQUENCE_LSTM"]
    samples, expected = verification_samples(dep, model, 3)
    assert expected.resets == frozenset({3})
    result = verify(dep, model, samples, expected=expected)
    assert [o["max_abs_diff"] for o in result["outputs"]] == [0] and result["samples"] == 4


@pytest.mark.parametrize("kind", ["lstm", "svdf"])
def test_recurrent_layers_on_gap8_emulation(tmp_path, kind):
    from deployer.verify import emulated_engine
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=3)
    x = b.input((1, 5, 9) if kind == "lstm" else (2, 12))
    b.output(b.lstm(x, 7) if kind == "lstm" else b.svdf(x, 5, rank=2, memory=3))
    model = tmp_path / f"{kind}.tflite"
    b.save(model)
    dep = deploy(model, Options(target="gap8"))
    _assert_stream_exact(model, dep, 3, reset=2, engine=emulated_engine(dep))


def test_per_layer_comparison_follows_the_stream(monkeypatch):
    """--per-layer on a model with state compares every inference of its stream: a golden executor
    wrong only once a state is carried is caught at the second inference."""
    from deployer import verify as V
    model = shared_model(LSTMS[0])
    dep = deploy(model, Options())
    sample = _stream(dep, 1)[0]
    assert V.first_divergence(dep, model, sample)["layer"] is None
    real = golden._lstm

    def carried_state_off_by_one(k, ins):
        y, h, c = real(k, ins)
        if np.any(ins[18] != dep.graph.tensors[dep.graph.layers[0].inputs[18]].state_fill):
            y = y.copy()
            y.reshape(-1)[0] ^= 1
        return y, h, c
    monkeypatch.setattr(golden, "_lstm", carried_state_off_by_one)
    found = V.first_divergence(dep, model, sample)
    assert found["layer"] == 0 and found["inference"] == 2 and found["c_vs_golden"] > 0


def test_suggest_counts_recurrent_compute_and_the_state():
    from tests.unit.test_cli import run_clirunner
    code, out, err = run_clirunner("suggest", shared_model(LSTMS[1]))
    assert code == 0, err
    assert "recurrent 1 (100% of MACs)" in out and "+ state 240 B kept across inferences" in out


def test_a_stream_litert_refuses_runs_on_tflite_micro():
    """person_detect's per-channel biases carry a quantized dimension LiteRT refuses: the stream
    runs on TFLite Micro's interpreter, and says so."""
    model = shared_model("tflm/person_detect.tflite")
    dep = deploy(model, Options())
    runs = run_litert_stream(model, _stream(dep, 2), frozenset({1}))
    assert runs.interpreter == "tflite-micro" and len(runs) == 2 and runs[0][1] is None


@pytest.mark.parametrize("zero_point", [0, -7, 100])  # 100: the newest value plus it wraps, as TFLite Micro casts
@pytest.mark.parametrize("target", ["host", "gap8"])
def test_svdf_with_int8_time_weights_and_state_equals_tflite_micro(tmp_path, zero_point, target):
    """TFLite Micro's int8 SVDF (LiteRT accepts the file but reads the int8 state as int16): the
    reference for the stream is TFLite Micro; the state's zero point offsets its newest value and
    every time product."""
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=9)
    y = b.svdf(b.input((1, 20)), 6, rank=2, memory=5, state_dtype="int8", state_zero_point=zero_point)
    b.output(b.fully_connected(y, 4))
    model = tmp_path / "svdf8.tflite"
    b.save(model)
    dep = deploy(model, Options(target=target))
    assert dep.graph.tensors[dep.graph.state()[0]].dtype == "int8"
    result = verify(dep, model, _stream(dep, 6))
    assert result["reference"].startswith("tflite-micro") and [o["max_abs_diff"] for o in result["outputs"]] == [0]
