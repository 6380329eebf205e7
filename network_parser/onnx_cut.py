"""Graph cutting for quantized ONNX graphs (QDQ and QOperator): the IR read from the whole file,
cut between ONNX values named on the command line (``--inputs`` / ``--outputs``), and ``--io
int8`` / ``uint8`` as the cut at the graph's quantized edges: each float input's QuantizeLinear
output, each float output's DequantizeLinear input.

The cut's edges are the IR's tensors for those values, in its layout (channels last). A name is
any activation the reader maps onto an IR tensor: a quantized value, or a DequantizeLinear's
float output (the same tensor, whose stored integers the reference is asked for)."""
from __future__ import annotations

import difflib
from dataclasses import replace

from .cut import CutSpec, OpEdges, cut_graph, unsigned_edges
from .errors import UsageError
from .ir import FileEdges, Graph, Source


def cut_onnx(graph: Graph, where: str, values: dict, integer_edges: dict[str, str], spec: CutSpec) -> Graph:
    """``graph`` (the whole file, read) cut as ``spec`` asks. ``values``: the reader's ONNX value
    name -> Value; ``integer_edges``: a float graph edge's name -> its quantized value's name."""
    file_in = [graph.tensors[t].name for t in graph.inputs]
    file_out = [graph.tensors[t].name for t in graph.outputs]
    ins = list(spec.inputs) or ([integer_edges.get(n, n) for n in file_in] if spec.io else file_in)
    outs = list(spec.outputs) or ([integer_edges.get(n, n) for n in file_out] if spec.io else file_out)
    named: dict[int, tuple[str, int]] = {}  # IR tensor -> (the value's stored name, its rank)
    chosen: dict[str, list[int]] = {}
    for flag, given, own, own_t in (("--inputs", ins, file_in, graph.inputs), ("--outputs", outs, file_out, graph.outputs)):
        seen: dict[int, str] = {}
        for name in given:
            if name in own:  # the file's own edge
                t = own_t[own.index(name)]
            else:
                t = _value_tensor(graph, where, values, flag, name, file_in + file_out)
                named[t] = (_stored_name(values, t, graph.tensors[t].name), values[name].rank)
            if t in seen:
                raise UsageError(f"{flag} {name!r}: the same value as {seen[t]!r}")
            seen[t] = name
        chosen[flag] = list(seen)
    both = set(chosen["--inputs"]) & set(chosen["--outputs"])
    if both:
        raise UsageError(f"'{graph.tensors[min(both)].name}' is both an input and an output of the cut")
    ir_spec = CutSpec(tuple(graph.tensors[t].name for t in chosen["--inputs"]),
                      tuple(graph.tensors[t].name for t in chosen["--outputs"]))
    names = [t.name for t in graph.tensors]
    edges = [OpEdges(layer.op, layer.inputs, layer.outputs) for layer in graph.layers]
    c = cut_graph(where, names, [t.dtype for t in graph.tensors], {i for i, t in enumerate(graph.tensors) if t.is_const},
                  edges, graph.inputs, graph.outputs, ir_spec)
    tensors, layers, inputs, outputs, derived = graph.tensors, tuple(graph.layers[k] for k in c.ops), c.inputs, c.outputs, ()
    if spec.io == "uint8":  # the quantized edges as uint8: the stored int8 values plus 128
        tensors, layers, inputs, outputs, derived = unsigned_edges(tensors, layers, inputs, outputs, len(graph.layers))
    notes = [f"the engine runs {len(c.ops)} of the {len(graph.layers)} layers read from the graph: inputs "
             f"{', '.join(map(repr, ins))}, outputs {', '.join(map(repr, outs))} (a cut's quantized edges channels "
             f"last{', offset to uint8' if spec.io == 'uint8' else ''})"]
    return replace(graph, tensors=tensors, layers=layers, inputs=inputs, outputs=outputs,
                   source=_edge_source(graph, tensors, inputs, outputs, notes),
                   file_edges=FileEdges(graph.inputs, graph.outputs, derived, graph.source,
                                        tuple((t, *named[t]) for t in (*c.inputs, *c.outputs) if t in named)))


def _value_tensor(graph: Graph, where: str, values: dict, flag: str, name: str, file_edges: list[str]) -> int:
    """The IR tensor of the activation ``name`` names, checked to be one a cut can end at."""
    def cuttable(v) -> bool:
        return v.flat_chw is None and v.rank in (2, 3, 4) and graph.tensors[v.tensor].dtype == "int8"
    v = values.get(name)
    if v is None:
        near = difflib.get_close_matches(name, [n for n, w in values.items() if cuttable(w)] + file_edges, n=3)
        hint = f" (names like it: {', '.join(map(repr, near))})" if near else ""
        raise UsageError(f"{flag} {name!r}: not an activation the engine stores ({where}: a constant, a float an op "
                         f"computes before its QuantizeLinear, or a name the graph lacks){hint}")
    if v.flat_chw is not None:
        raise UsageError(f"{flag} {name!r}: a value flattened from C, H, W, which the engine stores in H, W, C order; "
                         f"cut before or after it")
    if v.rank not in (2, 3, 4):
        raise UsageError(f"{flag} {name!r}: a rank-{v.rank} value (a cut's edges are of rank 2 to 4)")
    if graph.tensors[v.tensor].dtype != "int8":
        raise UsageError(f"{flag} {name!r}: a {graph.tensors[v.tensor].dtype} value (a cut's edges are quantized "
                         f"activations)")
    return v.tensor


def _edge_source(graph: Graph, tensors, inputs, outputs, notes: list[str]) -> Source:
    """The cut's edges as the engine takes and gives them: a file edge kept as the reader laid it
    out (its permutation and the model's shape), a cut edge in the IR's layout."""
    src = graph.source

    def side(edges, file_edges, perms, shapes):
        keep = [file_edges.index(t) if t in file_edges else None for t in edges]
        return (tuple(perms[k] if k is not None and perms else None for k in keep),
                tuple(shapes[k] if k is not None else tensors[t].shape for k, t in zip(keep, edges)))
    in_perms, in_shapes = side(inputs, graph.inputs, src.input_perms, src.input_shapes)
    out_perms, out_shapes = side(outputs, graph.outputs, src.output_perms, src.output_shapes)
    in_layout = src.input_layout if all(t in graph.inputs for t in inputs) else "nhwc"
    out_layout = src.output_layout if all(t in graph.outputs for t in outputs) else "nhwc"
    return Source(src.format, in_layout, out_layout, in_perms, out_perms, tuple(src.notes) + tuple(notes), in_shapes,
                  out_shapes)


def _stored_name(values: dict, t: int, tensor_name: str) -> str:
    """The name of the quantized value IR tensor ``t`` holds (a DequantizeLinear's float output
    names the same tensor): the tensor's own name when it is a value's, else the first value read
    into it (a QuantizeLinear's output comes before the DequantizeLinear reading it)."""
    names = [n for n, v in values.items() if v.tensor == t]
    return tensor_name if tensor_name in names else names[0]
