"""Generate, compile and run the engine for every shared int8 model; compare bit-exactly
with the reference interpreter (LiteRT reference kernels; TFLite Micro for person_detect)."""
from __future__ import annotations

import numpy as np
import pytest

from deployer import sample_inputs as si
from deployer.pipeline import Options, deploy
from deployer.reference import run_reference
from deployer.verify import build_engine, random_inputs, run_engine
from tests.models import INT8_MODELS, TFLITE, shared_model


def real_inputs(rel: str, graph) -> list[list[np.ndarray]]:
    """The real inputs shipped with the models, for the model whose input they fit."""
    shape = graph.tensors[graph.inputs[0]].shape
    samples = []
    if rel.endswith("kws_ref_model.tflite"):
        samples = [r.astype(np.int8) for r in si.c_array_rows(TFLITE / "mlperf_tiny/kws_input_data.cc")]
    elif rel.endswith("pretrainedResnet_quant.tflite"):
        samples = [si.uint8_to_int8(r) for r in si.c_array_rows(TFLITE / "mlperf_tiny/ic_inputs.cc")]
    elif rel.endswith("person_detect.tflite") or rel.endswith("vww_96_int8.tflite"):
        for name in ("person.bmp", "no_person.bmp"):
            img = si.uint8_to_int8(si.read_gray_bmp(TFLITE / "tflm" / name))
            samples.append(np.repeat(img[:, :, None], shape[-1], axis=2))
    return [[s.reshape(shape)] for s in samples]


def assert_outputs_match(model, samples, outs, where: str = "") -> None:
    """Every output of every sample equals the reference interpreter's, element by element."""
    for n, (sample, ours) in enumerate(zip(samples, outs)):
        name, ref, _ = run_reference(model, sample)
        for i, (a, b) in enumerate(zip(ours, ref)):
            diff = np.abs(a.astype(np.float64) - b.reshape(a.shape).astype(np.float64))
            assert diff.max() == 0, (f"{model.name}{where} output {i} sample {n}: {int((diff > 0).sum())} of "
                                     f"{diff.size} elements differ from {name} (max {diff.max()})")


def assert_bit_exact(model, dep, engine, samples):
    assert_outputs_match(model, samples, run_engine(engine, samples)[0])


@pytest.mark.parametrize("rel", INT8_MODELS)
def test_model_bit_exact(rel):
    model = shared_model(rel)
    dep = deploy(model, Options())
    samples = [random_inputs(dep.graph, seed) for seed in range(3)] + real_inputs(rel, dep.graph)
    assert_bit_exact(model, dep, build_engine(dep), samples)


@pytest.mark.parametrize("rel", INT8_MODELS)
def test_model_under_sanitizers(rel):
    """One run of every generated engine with AddressSanitizer and UBSan."""
    model = shared_model(rel)
    dep = deploy(model, Options())
    assert_bit_exact(model, dep, build_engine(dep, sanitize=True), [random_inputs(dep.graph, 7)])


def test_real_inputs_are_found():
    """The shipped inputs parse into the shapes the models expect."""
    shared_model("mlperf_tiny/kws_ref_model.tflite")
    from network_parser.tflite_reader import read_tflite
    for rel, count in (("mlperf_tiny/kws_ref_model.tflite", 1), ("tflm/person_detect.tflite", 2),
                       ("mlperf_tiny/pretrainedResnet_quant.tflite", 1)):
        g = read_tflite(shared_model(rel))
        assert len(real_inputs(rel, g)) >= count
