"""Seed inputs for the readers' fuzzers: the small real models of tests/model_files, and models
the project builds itself."""
from __future__ import annotations

from pathlib import Path

from tests.models import find_model

MAX_SEED_BYTES = 160_000  # larger seeds make every execution slow; small ones cover the same code


def _built_tflite() -> dict[str, bytes]:
    from tests.tflite_builder import ModelBuilder

    out = {}
    mb = ModelBuilder(seed=1)
    x = mb.input((1, 8, 8, 3))
    x = mb.conv2d(x, 8, kernel=(3, 3), stride=(2, 2), activation="RELU")
    y = mb.depthwise_conv2d(x, kernel=(3, 3), activation="RELU6")
    x = mb.add(x, y)
    x = mb.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    x = mb.max_pool(x)
    x = mb.mean(x, axes=(1, 2), keep_dims=False)
    x = mb.fully_connected(x, 4)
    mb.output(mb.softmax(x))
    out["built_cnn.tflite"] = mb.to_bytes()
    mb = ModelBuilder(seed=2)
    a = mb.input((1, 4, 4, 6), dtype="float32")
    q = mb.quantize(a)
    b = mb.concat([q, mb.logistic(q)], axis=-1)
    b = mb.transpose(mb.hard_swish(b), (0, 3, 1, 2))
    b = mb.reshape(mb.avg_pool(mb.transpose(b, (0, 2, 3, 1)), filter=(2, 2)), (1, 48))
    mb.output(mb.dequantize(mb.mul(b, b)))
    out["built_mixed.tflite"] = mb.to_bytes()
    from tests.hostile import _newer  # slices, a transposed convolution, gather, split, mirror padding
    out["built_newer.tflite"] = _newer().to_bytes()
    return out


def _built_onnx() -> dict[str, bytes]:
    import tempfile

    from tests.onnx_builder import quantized_model

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, fmt in (("cnn", "qdq"), ("mlp", "qdq"), ("pool", "qoperator")):
            try:
                path = quantized_model(Path(tmp), kind, per_channel=True, fmt=fmt)
            except ImportError:  # no onnxruntime: the shared seeds remain
                continue
            out[f"built_{fmt}_{kind}.onnx"] = Path(path).read_bytes()
    return out


def _built_safetensors() -> dict[str, bytes]:
    """GPT-Neo checkpoints for the one config.json the harness puts beside every input."""
    from tests.gptneo_builder import config, encode, tensors

    return {f"built_gptneo_{i}.safetensors": encode(tensors(config(), seed=i, dtypes=dt), {"format": "pt"})
            for i, dt in enumerate([("F32", "F16", "BF16"), ("F32",), ("BF16",)])}


def seeds(reader: str) -> dict[str, bytes]:
    """name -> bytes, in a stable order."""
    if reader == "safetensors":  # the shared checkpoints are larger than a seed should be
        return _built_safetensors()
    found = {}
    root = find_model(reader)
    if root is not None:
        for p in sorted(root.rglob(f"*.{reader}")):
            if p.stat().st_size <= MAX_SEED_BYTES:
                found[str(p.relative_to(root)).replace("/", "__")] = p.read_bytes()
    found.update(_built_tflite() if reader == "tflite" else _built_onnx())
    return found
