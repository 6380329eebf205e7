"""Structure-aware fuzzing (hypothesis): a valid model with random fields made wrong, shapes,
quantization, op wiring, op codes, options, through read -> plan -> emit. Byte mutation
(tests/fuzz) rarely gets a flatbuffer this far; here every input is well formed."""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import tflite_builder as tb
from tests.fuzz.harness import exercise
from tests.hostile import _cnn, _mixed, _newer

# CI runs 300 fixed examples; FUZZ_EXAMPLES=3000 FUZZ_RANDOM=1 explores further
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 300))
RANDOM = bool(os.environ.get("FUZZ_RANDOM"))
N_TENSORS, N_OPS = 30, 16  # indices are taken modulo the base model's own counts
DIM = st.one_of(st.integers(-2, 9), st.sampled_from([0, 1, 16, 255, 65535, 1 << 20, (1 << 31) - 1]))
SCALE = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([0.0, -1.0, 1e-30, 1e30]))
CODES = sorted({v for k, v in vars(tb.Op).items() if not k.startswith("_")})

tamper = st.one_of(
    st.tuples(st.just("shape"), st.integers(0, N_TENSORS - 1), st.lists(DIM, min_size=0, max_size=5)),
    st.tuples(st.just("scale"), st.integers(0, N_TENSORS - 1), st.lists(SCALE, min_size=0, max_size=9)),
    st.tuples(st.just("zero_point"), st.integers(0, N_TENSORS - 1), st.integers(-(1 << 40), 1 << 40)),
    st.tuples(st.just("qdim"), st.integers(0, N_TENSORS - 1), st.integers(-5, 5)),
    st.tuples(st.just("dtype"), st.integers(0, N_TENSORS - 1), st.sampled_from(["int8", "int32", "float32"])),
    st.tuples(st.just("inputs"), st.integers(0, N_OPS - 1), st.lists(st.integers(-2, 30), max_size=4)),
    st.tuples(st.just("outputs"), st.integers(0, N_OPS - 1), st.lists(st.integers(-2, 30), max_size=2)),
    st.tuples(st.just("code"), st.integers(0, N_OPS - 1), st.sampled_from(CODES)),
    st.tuples(st.just("options"), st.integers(0, N_OPS - 1), st.none()),
    st.tuples(st.just("graph_outputs"), st.just(0), st.lists(st.integers(-2, 30), min_size=1, max_size=2)),
    st.tuples(st.just("const"), st.integers(0, N_TENSORS - 1), st.integers(-(1 << 31), (1 << 31) - 1)),
)


def apply(mb, what, index, value) -> None:
    t = mb._tensors[index % len(mb._tensors)] if what in ("shape", "scale", "zero_point", "qdim", "dtype") else None
    op = mb._ops[index % len(mb._ops)] if what in ("inputs", "outputs", "code", "options") else None
    if what == "shape":
        t.shape = tuple(value)
    elif what == "scale":
        t.scale = np.asarray(value, np.float32) if value else None
        t.zero_point = np.zeros(len(value), np.int64) if value else None
    elif what == "zero_point" and t.scale is not None:
        t.zero_point = np.full(len(t.scale), value, np.int64)
    elif what == "qdim":
        t.qdim = value
    elif what == "dtype":
        t.dtype = value
    elif what == "inputs":
        op.inputs = value
    elif what == "outputs":
        op.outputs = value
    elif what == "code":
        op.code = value
    elif what == "options":
        op.options = None
    elif what == "graph_outputs":
        mb._outputs = value
    elif what == "const":  # a constant's values (begin/end, indices, axes, paddings, output shape, ...)
        c = mb._tensors[index % len(mb._tensors)]
        if c.buffer and c.dtype == "int32":
            arr = np.frombuffer(mb._buffers[c.buffer], np.int32).copy()
            if arr.size:
                arr[value % arr.size] = np.int32(value // 7 if value % 3 else value % 11 - 5)
                mb._buffers[c.buffer] = arr.tobytes()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([_cnn, _mixed, _newer]), st.lists(tamper, min_size=1, max_size=3))
def test_tampered_models_raise_only_documented_errors(base, changes):
    mb = base()
    for change in changes:
        apply(mb, *change)
    try:
        data = mb.to_bytes()
    except Exception:  # noqa: BLE001 - the builder cannot serialize this change (e.g. a dim over int32)
        return
    # a DeployError is returned as its kind; anything else (in the deployer, or in the golden
    # executor running what the deployer accepted) fails the test
    exercise("tflite", data, golden=True)
