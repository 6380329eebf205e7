"""Graph cutting: the part of a model between named tensors, and integer edges.

``--inputs A,B`` / ``--outputs Y,Z`` keep the ops that compute the named outputs from the named
inputs (by default the model's own); ``--io int8`` moves a float edge inward to the int8 tensor
beside it: a float input read only by a QUANTIZE is replaced by that QUANTIZE's int8 output, a
float output written by a DEQUANTIZE by that DEQUANTIZE's int8 input, as a converter does with
``inference_input_type=int8``. The cut is decided on the file's op list before any op is parsed,
so ops outside it (a float post-processing tail, a custom op) are never read."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from .errors import UsageError
from .ir import Layer, NoAttrs, Quant, Tensor


@dataclass(frozen=True, slots=True)
class CutSpec:
    """What the command line asked for."""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    io: str | None = None  # "int8" / "uint8": float edges moved inward to their int8 tensors (uint8: offset by 128)

    def __bool__(self) -> bool:
        return bool(self.inputs or self.outputs or self.io)


@dataclass(frozen=True, slots=True)
class OpEdges:
    """One op of the file as the cut sees it."""
    name: str  # its operator, e.g. "QUANTIZE"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cut:
    """The ops kept (positions in the file) and the graph's new edges."""
    ops: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    notes: tuple[str, ...] = ()


def _find(names: list[str], wanted: str, flag: str, where: str) -> int:
    hits = [i for i, n in enumerate(names) if n == wanted]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise UsageError(f"{flag} {wanted!r}: {len(hits)} tensors of {where} have that name")
    near = difflib.get_close_matches(wanted, names, n=3)
    hint = f" (names like it: {', '.join(repr(n) for n in near)})" if near else ""
    raise UsageError(f"{flag} {wanted!r}: {where} has no tensor of that name{hint}")


def cut_graph(where: str, names: list[str], dtypes: list[str], consts: set[int], ops: list[OpEdges],
              inputs: tuple[int, ...], outputs: tuple[int, ...], spec: CutSpec) -> Cut:
    """The ops between the edges ``spec`` names (tensor ``names`` of file ``where``), then the
    integer edges it asks for."""
    notes = []
    new_in = tuple(_find(names, n, "--inputs", where) for n in spec.inputs) or inputs
    new_out = tuple(_find(names, n, "--outputs", where) for n in spec.outputs) or outputs
    for t in new_in:
        if t in consts:
            raise UsageError(f"--inputs {names[t]!r}: a constant of {where}, not a tensor the model computes")
    writer = {o: k for k, op in enumerate(ops) for o in op.outputs if o >= 0}
    kept, stack, reached = set(), list(new_out), set()
    while stack:  # from the outputs back to the inputs
        t = stack.pop()
        if t in reached or t in consts:
            continue
        reached.add(t)
        if t in new_in:
            continue
        if t not in writer:
            raise UsageError(f"the cut's outputs depend on {names[t]!r}, a model input not among --inputs "
                             f"({', '.join(repr(names[i]) for i in new_in)})")
        k = writer[t]
        kept.add(k)
        stack.extend(i for i in ops[k].inputs if i >= 0)
    for t in new_in if spec.inputs else ():  # the model's own inputs stay, read or not
        if t not in reached:
            raise UsageError(f"--inputs {names[t]!r}: none of the cut's outputs depends on it")
    if spec.io in ("int8", "uint8"):
        new_in, new_out, kept, more = _integer_edges(names, dtypes, ops, new_in, new_out, kept, spec.io)
        notes += more
    if spec.inputs or spec.outputs:
        notes.append(f"the engine runs {len(kept)} of the model's {len(ops)} ops: inputs "
                     f"{', '.join(repr(names[t]) for t in new_in)}, outputs {', '.join(repr(names[t]) for t in new_out)}")
    return Cut(tuple(sorted(kept)), new_in, new_out, tuple(notes))


@dataclass(frozen=True, slots=True)
class FloatTail:
    """Float32 ops after the last DEQUANTIZEs, computing the model's outputs: the application's."""
    ops: tuple[int, ...]  # positions in the file
    outputs: tuple[int, ...]  # the engine's outputs instead: the graph's, the tail's replaced by what it reads


def float_tail(dtypes: list[str], consts: set[int], ops: list[OpEdges], outputs: tuple[int, ...]) -> FloatTail | None:
    """The ops that compute outputs from float32 values only, back to the DEQUANTIZEs that made
    those values from int8 ones (DEQUANTIZE -> LOG_SOFTMAX, as a model quantized after training
    may end), or None when there are none or they reach anything else (a float input, an op of
    another type: the readers' own errors then say what is not supported)."""
    writer = {o: k for k, op in enumerate(ops) for o in op.outputs if o >= 0}
    tail, ends, stack, seen = set(), {}, list(outputs), set()
    while stack:
        t = stack.pop()
        if t in seen or t in consts:
            continue
        seen.add(t)
        k = writer.get(t)
        if k is None or dtypes[t] != "float32":
            return None
        op = ops[k]
        if _dequantizes(op, t, dtypes):
            ends[t] = None
            continue
        if op.name in ("QUANTIZE", "DEQUANTIZE") or any(dtypes[o] != "float32" for o in op.outputs if o >= 0):
            return None
        tail.add(k)
        stack.extend(i for i in op.inputs if i >= 0)
    if not tail:
        return None
    new_out = []
    for t in outputs:  # each tail output replaced by the dequantized values it reads, in file order
        for e in sorted(ends) if writer[t] in tail else (t,):
            if e not in new_out:
                new_out.append(e)
    return FloatTail(tuple(sorted(tail)), tuple(new_out))


def _quantizes(op: OpEdges, t: int, dtypes) -> bool:
    """Is ``op`` a QUANTIZE of float32 tensor ``t`` into one int8 tensor?"""
    return (op.name == "QUANTIZE" and dtypes[t] == "float32" and len(op.outputs) == 1 and op.outputs[0] >= 0
            and dtypes[op.outputs[0]] == "int8")


def _dequantizes(op: OpEdges, t: int, dtypes) -> bool:
    """Is ``op`` a DEQUANTIZE of one int8 tensor into float32 tensor ``t``?"""
    return (op.name == "DEQUANTIZE" and dtypes[t] == "float32" and len(op.inputs) >= 1 and op.inputs[0] >= 0
            and dtypes[op.inputs[0]] == "int8")


def _integer_edges(names, dtypes, ops, inputs, outputs, kept, io):
    readers: dict[int, list[int]] = {}
    for k in sorted(kept):
        for i in ops[k].inputs:
            readers.setdefault(i, []).append(k)
    kept, notes, new_in, new_out = set(kept), [], [], []
    for t in inputs:
        ks = readers.get(t, [])
        if len(ks) == 1 and _quantizes(ops[ks[0]], t, dtypes):
            kept.discard(ks[0])
            new_in.append(ops[ks[0]].outputs[0])
            notes.append(f"--io {io}: the engine takes {io} '{names[new_in[-1]]}' instead of float32 '{names[t]}'")
        else:
            new_in.append(t)
    writer = {o: k for k in kept for o in ops[k].outputs}
    for t in outputs:
        k = writer.get(t)
        if k is not None and _dequantizes(ops[k], t, dtypes):
            kept.discard(k)
            new_out.append(ops[k].inputs[0])
            notes.append(f"--io {io}: the engine gives {io} '{names[new_out[-1]]}' instead of float32 '{names[t]}'")
        else:
            new_out.append(t)
    return tuple(new_in), tuple(new_out), kept, notes


def float_edges(graph) -> list[int]:
    """The graph's float32 inputs that one QUANTIZE reads and float32 outputs a DEQUANTIZE writes:
    what --io int8 moves inward (the same test as the cut's)."""
    dtypes = [t.dtype for t in graph.tensors]
    readers: dict[int, list] = {}
    for layer in graph.layers:
        for t in layer.inputs:
            readers.setdefault(t, []).append(layer)
    writers = {o: layer for layer in graph.layers for o in layer.outputs}

    def edges(layer):
        return OpEdges(layer.op, layer.inputs, layer.outputs)
    ins = [t for t in graph.inputs if len(readers.get(t, [])) == 1 and _quantizes(edges(readers[t][0]), t, dtypes)]
    outs = [t for t in graph.outputs if t in writers and _dequantizes(edges(writers[t]), t, dtypes)]
    return ins + outs


def unsigned_edges(tensors, layers, inputs, outputs, first: int):
    """Each int8 graph input and output behind a uint8 tensor of its own (the same scale, the zero
    point 128 higher) and a QUANTIZE that offsets the values by 128."""
    tensors, layers, derived = list(tensors), list(layers), []

    def twin(t: int) -> int:
        src = tensors[t]
        q = src.quant
        tensors.append(Tensor(f"{src.name}/uint8", src.shape, "uint8", Quant(q.scale, (q.zero_point[0] + 128,), q.axis)))
        derived.append((len(tensors) - 1, t, 128))
        return len(tensors) - 1

    new_in, new_out, head = [], [], []
    for t in inputs:
        if tensors[t].dtype == "int8" and not tensors[t].quant.per_channel:
            u = twin(t)
            head.append(Layer(first + len(head), "QUANTIZE", (u,), (t,), NoAttrs(), tensors[t].name))
            t = u
        new_in.append(t)
    for t in outputs:
        if tensors[t].dtype == "int8" and not tensors[t].quant.per_channel:
            u = twin(t)
            layers.append(Layer(first + len(head) + len(new_out), "QUANTIZE", (t,), (u,), NoAttrs(), tensors[u].name))
            t = u
        new_out.append(t)
    return tuple(tensors), head + layers, tuple(new_in), tuple(new_out), tuple(derived)
