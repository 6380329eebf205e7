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

from .cut import CutSpec, OpEdges, cut_graph
from .errors import UsageError
from .ir import FileEdges, Graph, Source


def cut_onnx(graph: Graph, where: str, values: dict, integer_edges: dict[str, str], spec: CutSpec) -> Graph:
    """``graph`` (the whole file, read) cut as ``spec`` asks. ``values``: the reader's ONNX value
    name -> Value; ``integer_edges``: a float graph edge's name -> its quantized value's name."""
    if spec.io == "uint8":
        raise UsageError(f"{where}: --io uint8 cuts .tflite models only (an ONNX graph's quantized edges keep "
                         f"their own type: --io int8 takes them as they are stored)")
    file_in = [graph.tensors[t].name for t in graph.inputs]
    file_out = [graph.tensors[t].name for t in graph.outputs]
    ins = list(spec.inputs) or ([integer_edges.get(n, n) for n in file_in] if spec.io else file_in)
    outs = list(spec.outputs) or ([integer_edges.get(n, n) for n in file_out] if spec.io else file_out)
    named, edge_names = [], {}
    for flag, given in (("--inputs", ins), ("--outputs", outs)):
        for name in given:
            if name in (file_in if flag == "--inputs" else file_out):  # the file's own edge
                edge_names[name] = name
                continue
            v = values.get(name)
            if v is None:
                near = difflib.get_close_matches(name, [n for n, w in values.items() if n == graph.tensors[w.tensor].name], n=3)
                hint = f" (names like it: {', '.join(map(repr, near))})" if near else ""
                raise UsageError(f"{flag} {name!r}: not an activation the engine stores ({where}: a constant, a float "
                                 f"an op computes before its QuantizeLinear, or a name the graph lacks){hint}")
            if v.flat_chw is not None or v.rank not in (2, 3, 4) or graph.tensors[v.tensor].dtype != "int8":
                raise UsageError(f"{flag} {name!r}: a rank-{v.rank} value the engine stores in another order than "
                                 f"the file (flattened from C, H, W); cut before or after it")
            edge_names[name] = graph.tensors[v.tensor].name
            named.append((v.tensor, _stored_name(values, v.tensor, graph.tensors[v.tensor].name), v.rank))
    ir_spec = CutSpec(tuple(edge_names[n] for n in ins), tuple(edge_names[n] for n in outs))
    names = [t.name for t in graph.tensors]
    edges = [OpEdges(layer.op, layer.inputs, layer.outputs) for layer in graph.layers]
    c = cut_graph(where, names, [t.dtype for t in graph.tensors], {i for i, t in enumerate(graph.tensors) if t.is_const},
                  edges, graph.inputs, graph.outputs, ir_spec)
    notes = [f"the engine runs {len(c.ops)} of the {len(graph.layers)} layers read from the graph: inputs "
             f"{', '.join(map(repr, ins or file_in))}, outputs {', '.join(map(repr, outs or file_out))} (a cut's "
             f"quantized edges channels last)"]
    layers = tuple(graph.layers[k] for k in c.ops)
    keep = {t for t, _, _ in named}
    named = tuple(e for e in dict.fromkeys(named) if e[0] in keep and (e[0] in c.inputs or e[0] in c.outputs))
    source = Source(graph.source.format, "nhwc", "nhwc", notes=tuple(graph.source.notes) + tuple(notes))
    return replace(graph, layers=layers, inputs=c.inputs, outputs=c.outputs, source=source,
                   file_edges=FileEdges(graph.inputs, graph.outputs, source=graph.source, named=named))


def _stored_name(values: dict, t: int, tensor_name: str) -> str:
    """The name of the quantized value IR tensor ``t`` holds (a DequantizeLinear's float output
    names the same tensor): the tensor's own name when it is a value's, else the first value read
    into it (a QuantizeLinear's output comes before the DequantizeLinear reading it)."""
    names = [n for n, v in values.items() if v.tensor == t]
    return tensor_name if tensor_name in names else names[0]
