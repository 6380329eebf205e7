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
    from tflite_micro import runtime

    it = runtime.Interpreter.from_file(str(model))
    for i, x in enumerate(inputs):
        d = it.get_input_details(i)
        it.set_input(np.asarray(x).reshape(d["shape"]).astype(d["dtype"]), i)
    it.invoke()
    n = len(it.get_output_details(i) for i in range(0)) if False else None
    outs = []
    i = 0
    while True:
        try:
            outs.append(it.get_output(i).copy())
        except (IndexError, RuntimeError, ValueError):
            break
        i += 1
    return outs, None


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
