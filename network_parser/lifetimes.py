"""Activation lifetimes in op order, with zero-copy aliases.

A tensor lives from the op that writes it (op 0 for model inputs, which the
caller fills before the run) to the last op that reads it (the last op for
model outputs, which the caller reads after the run).
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Graph

# Ops whose output is the input's bytes reinterpreted: they alias, no copy.
ZERO_COPY_OPS = ("RESHAPE", "SQUEEZE")


@dataclass(frozen=True, slots=True)
class Lifetime:
    tensor: int
    name: str
    size: int
    first_op: int
    last_op: int
    alias_of: int | None  # tensor whose bytes this one reuses


def aliases(graph: Graph) -> dict[int, int]:
    """tensor -> the tensor that owns its bytes, for zero-copy reshapes."""
    owner: dict[int, int] = {}
    for layer in graph.layers:
        if layer.op in ZERO_COPY_OPS:
            src = layer.inputs[0]
            if not graph.tensors[src].is_const:
                owner[layer.outputs[0]] = owner.get(src, src)
    return owner


def lifetimes(graph: Graph) -> list[Lifetime]:
    last = len(graph.layers) - 1
    span: dict[int, list[int]] = {}

    def touch(t: int, k: int):
        s = span.setdefault(t, [k, k])
        s[0], s[1] = min(s[0], k), max(s[1], k)

    for t in graph.inputs:
        touch(t, 0)
    for k, layer in enumerate(graph.layers):
        for t in (*layer.inputs, *layer.outputs):
            if t >= 0 and not graph.tensors[t].is_const:
                touch(t, k)
    for t in graph.outputs:
        touch(t, last)
    owner = aliases(graph)
    # An owner lives as long as everything that aliases it.
    for t, o in owner.items():
        touch(o, span[t][0])
        touch(o, span[t][1])
    result = []
    for t in graph.activations():
        o = owner.get(t)
        first, end = span[o if o is not None else t]
        tensor = graph.tensors[t]
        result.append(Lifetime(t, tensor.name, tensor.nbytes, first, end, o))
    return result
