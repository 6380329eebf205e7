"""Graph rewrites that change which tensors exist. Each is a named function
``(graph) -> (graph, notes)``; ``REWRITES`` lists them in the order they run."""
from __future__ import annotations

from dataclasses import replace

from . import conv_geometry as geo

from .ir import Graph, Layer, NoAttrs, Transpose

CONV_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def consumers(graph: Graph) -> dict[int, list[int]]:
    """tensor -> positions of the layers that read it."""
    result: dict[int, list[int]] = {}
    for k, layer in enumerate(graph.layers):
        for t in layer.inputs:
            if t >= 0:
                result.setdefault(t, []).append(k)
    return result


def _fused_pads(pad: Layer, conv: Layer, graph: Graph) -> tuple[int, int, int, int] | None:
    """The conv's explicit (top, bottom, left, right) padding once the PAD before it is folded in."""
    (n0, n1), (h0, h1), (w0, w1), (c0, c1) = pad.attrs.paddings
    if (n0, n1, c0, c1) != (0, 0, 0, 0):
        return None
    padded = graph.tensors[pad.outputs[0]].shape
    weights = graph.tensors[conv.inputs[1]].shape
    a = conv.attrs
    if a.pads is not None:
        own = a.pads
    else:
        own = tuple(f(padded[d], weights[d], a.stride[d - 1], a.dilation[d - 1], a.padding)
                    for d in (1, 2) for f in (geo.pad_before, geo.pad_after))
    return own[0] + h0, own[1] + h1, own[2] + w0, own[3] + w1


def fuse_pad_into_conv(graph: Graph) -> tuple[Graph, list[str]]:
    """PAD whose only reader is a convolution: the convolution pads implicitly, so the padded
    tensor never exists. Exact because PAD fills with the zero point, which the kernel's
    input offset turns into 0, the same as a skipped tap."""
    readers = consumers(graph)
    drop: set[int] = set()
    layers = list(graph.layers)
    notes = []
    for k, pad in enumerate(graph.layers):
        padded = pad.outputs[0] if pad.op == "PAD" else None
        if padded is None or padded in graph.outputs or len(readers.get(padded, [])) != 1:
            continue
        c = readers[padded][0]
        conv = graph.layers[c]
        if conv.op not in CONV_OPS or conv.inputs[0] != padded:
            continue
        src, dst = graph.tensors[pad.inputs[0]], graph.tensors[padded]
        if src.quant != dst.quant or src.dtype != "int8":
            continue
        pads = _fused_pads(pad, conv, graph)
        if pads is None:
            continue
        layers[c] = replace(conv, inputs=(pad.inputs[0], *conv.inputs[1:]),
                            attrs=replace(conv.attrs, padding="EXPLICIT", pads=pads))
        drop.add(k)
        notes.append(f"op {pad.index} PAD fused into op {conv.index} {conv.op} "
                     f"(saves the {dst.nbytes}-byte padded tensor '{dst.name}')")
    return replace(graph, layers=tuple(l for k, l in enumerate(layers) if k not in drop)), notes


def _well_formed(layer: Layer, graph: Graph) -> bool:
    """A TRANSPOSE whose permutation and output shape agree with its input."""
    if not isinstance(layer.attrs, Transpose) or not layer.inputs or not layer.outputs:
        return False
    perm, shape = layer.attrs.perm, graph.tensors[layer.inputs[0]].shape
    return sorted(perm) == list(range(len(shape))) and graph.tensors[layer.outputs[0]].shape == \
        tuple(shape[p] for p in perm)


def _moves_data(perm: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a transpose moves bytes: its axes longer than 1 change their order."""
    kept = [p for p in perm if shape[p] > 1]
    return kept != sorted(kept)


def fold_transposes(graph: Graph) -> tuple[Graph, list[str]]:
    """A TRANSPOSE of a TRANSPOSE that only it reads becomes one TRANSPOSE of the first one's input
    (the two permutations composed), and a TRANSPOSE that keeps every axis longer than 1 in its
    order a RESHAPE (no byte moves): readers that lay a value out their own way (the integer
    readers' matrix products, graph edges) leave such pairs behind. Exact: only bytes move."""
    layers, notes, folded = list(graph.layers), [], 0
    while True:
        readers = consumers(Graph(graph.name, graph.tensors, tuple(layers), graph.inputs, graph.outputs))
        writer = {t: k for k, layer in enumerate(layers) for t in layer.outputs}
        change = None
        for k, layer in enumerate(layers):
            if layer.op != "TRANSPOSE" or not _well_formed(layer, graph):
                continue  # (a malformed one: the lowering says what is wrong with it)
            src = layer.inputs[0]
            first = layers[writer[src]] if src in writer else None
            if first is not None and first.op == "TRANSPOSE" and _well_formed(first, graph) and readers.get(src) == [k] \
                    and src not in graph.outputs:
                p1, p2 = first.attrs.perm, layer.attrs.perm
                merged = replace(layer, inputs=(first.inputs[0], *layer.inputs[1:]),
                                 attrs=Transpose(tuple(p1[i] for i in p2)))
                change = (writer[src], k, merged)
                break
            if not _moves_data(layer.attrs.perm, graph.tensors[src].shape):
                change = (None, k, replace(layer, op="RESHAPE", inputs=(src,), attrs=NoAttrs()))
                break
        if change is None:
            break
        drop, k, new = change
        layers[k] = new
        if drop is not None:
            del layers[drop]
        folded += 1
    if folded:
        notes.append(f"{folded} transpose(s) folded: pairs composed, and those that move no byte made reshapes")
    return replace(graph, layers=tuple(layers)), notes


REWRITES = [("fuse-pad-into-conv", fuse_pad_into_conv), ("fold-transposes", fold_transposes)]


def apply_rewrites(graph: Graph, enabled: bool = True) -> tuple[Graph, list[str]]:
    notes: list[str] = []
    if enabled:
        for _, rewrite in REWRITES:
            graph, more = rewrite(graph)
            notes += more
    return graph, notes
