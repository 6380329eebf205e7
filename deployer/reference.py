"""Reference interpreters: LiteRT's reference kernels, and TFLite Micro where LiteRT refuses a file."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def run_litert(model: Path, inputs: list[np.ndarray], preserve: bool = False):
    """Outputs of LiteRT's BUILTIN_REF kernels, one thread; with ``preserve`` also every tensor."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(model), num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=preserve)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], np.asarray(x).reshape(d["shape"]).astype(d["dtype"]))
    it.invoke()
    outs = [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
    if not preserve:
        return outs, None
    tensors = {}
    for d in it.get_tensor_details():
        try:
            tensors[d["index"]] = it.get_tensor(d["index"]).copy()
        except ValueError:
            pass
    return outs, tensors


def run_tflm(model: Path, inputs: list[np.ndarray]):
    """Outputs of the TFLite Micro interpreter (its reference kernels)."""
    import tflite
    from tflite_micro import runtime

    buf = Path(model).read_bytes()
    n_outputs = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0).OutputsLength()
    # Its default arena (10x the file size) is too small for small files with large activations.
    it = runtime.Interpreter.from_file(str(model), arena_size=max(10 * len(buf), 4 << 20))
    for i, x in enumerate(inputs):
        d = it.get_input_details(i)
        it.set_input(np.asarray(x).reshape(d["shape"]).astype(d["dtype"]), i)
    it.invoke()
    return [it.get_output(i).copy() for i in range(n_outputs)], None


def run_reference(model: Path, inputs: list[np.ndarray], preserve: bool = False):
    """(name, outputs, tensors-or-None): LiteRT, or TFLite Micro for files LiteRT refuses."""
    try:
        outs, tensors = run_litert(model, inputs, preserve)
        return "litert-builtin-ref", outs, tensors
    except (ValueError, RuntimeError) as e:
        if "quantized_dimension" not in str(e):
            raise
    outs, tensors = run_tflm(model, inputs)
    return "tflite-micro", outs, tensors
