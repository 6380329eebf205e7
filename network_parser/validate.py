"""Checks every reader's graph passes before anything is planned or allocated for it.

A 32-bit microcontroller addresses 4 GiB in all, and the generated C indexes tensors with
``int``: a tensor of 2 GiB or more cannot be deployed, whatever the budgets. Checking the
declared sizes here, in integers, means an absurd shape (1x65535x65535x3) fails in
microseconds instead of after a planner or a test harness has tried to allocate it.
"""
from __future__ import annotations

from .errors import ModelFormatError
from .ir import DTYPE_BYTES, Graph

MAX_TENSOR_BYTES = (1 << 31) - 1


def check_graph(graph: Graph, where: str) -> None:
    """``where``: the model file, to name in the error."""
    if not graph.layers:
        raise ModelFormatError(f"{where}: the model has no operators")
    if not graph.inputs or not graph.outputs:
        raise ModelFormatError(f"{where}: the model declares no {'input' if not graph.inputs else 'output'}")
    for kind, ends in (("input", graph.inputs), ("output", graph.outputs)):
        for i in ends:
            if graph.tensors[i].is_const:
                raise ModelFormatError(f"{where}: graph {kind} {i} '{graph.tensors[i].name}' is a constant tensor")
    used = set(graph.inputs) | set(graph.outputs)
    for layer in graph.layers:
        used.update(t for t in (*layer.inputs, *layer.outputs) if t >= 0)
    for i in sorted(used):
        t = graph.tensors[i]
        if t.dtype not in DTYPE_BYTES:
            continue  # the reader or the lowering names unsupported types with the op using them
        shape = "x".join(map(str, t.shape)) or "scalar"
        if any(d < 0 for d in t.shape):
            raise ModelFormatError(f"{where}: tensor {i} '{t.name}' has a negative dimension ({shape})")
        if not t.is_const and t.elements == 0:
            raise ModelFormatError(f"{where}: tensor {i} '{t.name}' ({shape}) has no elements: a zero-size "
                                   f"dimension")
        if t.nbytes > MAX_TENSOR_BYTES:
            raise ModelFormatError(f"{where}: tensor {i} '{t.name}' ({shape} {t.dtype}) is {t.nbytes:,} bytes; "
                                   f"a 32-bit target's engine holds at most {MAX_TENSOR_BYTES:,} per tensor")
