"""Render a planned network into C files with jinja2 (compute here, lay out in templates)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from backends import Backend
from layer_analyzer import kernels as K
from network_parser.ir import Graph, Tensor
from network_parser.lifetimes import Lifetime

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t",
          "float32": "float"}
DTYPE_SHORT = {"int8": "s8", "uint8": "u8", "int16": "s16", "int32": "s32", "float32": "f32"}


# ---- C literal filters (the only place numbers become C text) ---------------

def c_int(v: int) -> str:
    v = int(v)
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def c_float(v: float) -> str:
    """A float32 literal that reads back to exactly the same float."""
    return f"{np.float32(v).item():.9g}f"


def c_double(v: float) -> str:
    return f"{float(v):.17g}"


def c_array(values, per_line: int = 16) -> str:
    flat = np.asarray(values).reshape(-1)
    fmt = c_float if flat.dtype.kind == "f" else c_int
    items = [fmt(v) for v in flat.tolist()]
    return ",\n".join("    " + ", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def environment(backend: Backend) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES / backend.template_dir)),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False)
    env.filters.update(c_int=c_int, c_float=c_float, c_double=c_double, c_array=c_array)
    return env


# ---- naming -------------------------------------------------------------------

def c_identifier(name: str) -> str:
    ident = re.sub(r"\W+", "_", name).strip("_").lower() or "model"
    return f"m_{ident}" if ident[0].isdigit() else ident


def _short(name: str) -> str:
    base = name.split(";")[0].rstrip("/").split("/")[-1] or name
    return c_identifier(base)[:24].upper().strip("_")


def shape_text(t: Tensor) -> str:
    return "x".join(str(d) for d in t.shape) or "scalar"


def _pad4(seq, fill):
    seq = tuple(seq)
    return (fill,) * (4 - len(seq)) + seq


@dataclass(frozen=True, slots=True)
class Rendered:
    files: dict[str, str]  # file name -> text


def render(graph: Graph, kernels, lives: list[Lifetime], offsets: dict[int, int], arena_bytes: int,
           planner: str, backend: Backend) -> Rendered:
    ident = c_identifier(graph.name)
    guard = ident.upper()
    macro = {lt.tensor: f"T{lt.tensor}_{_short(lt.name)}" for lt in lives}
    life = {lt.tensor: lt for lt in lives}

    tensors = []
    for lt in sorted(lives, key=lambda lt: (offsets[lt.tensor], lt.tensor)):
        t = graph.tensors[lt.tensor]
        note = f", alias of {graph.tensors[lt.alias_of].name}" if lt.alias_of is not None else ""
        tensors.append(dict(macro=macro[lt.tensor], offset=offsets[lt.tensor],
                            comment=f"{shape_text(t)} {DTYPE_SHORT.get(t.dtype, t.dtype)}, "
                                    f"live ops {lt.first_op}..{lt.last_op}{note}"))

    constants: list[dict] = []
    const_names: dict[int, str] = {}

    def const(name: str, ctype: str, values, aligned: bool = False) -> str:
        arr = np.asarray(values).reshape(-1)
        constants.append(dict(name=name, ctype=ctype, count=max(arr.size, 1), aligned=aligned,
                              data=c_array(arr if arr.size else np.zeros(1, np.int32))))
        return name

    def tensor_const(t: int, label: str) -> str:
        if t not in const_names:
            tt = graph.tensors[t]
            const_names[t] = const(label, CTYPES[tt.dtype], tt.data, aligned=True)
        return const_names[t]

    def ptr(t: int, k: int, role: str, writable: bool) -> str:
        tt = graph.tensors[t]
        if tt.is_const:
            return tensor_const(t, f"op{k}_{role}")
        qual = "" if writable else "const "
        return f"({qual}{CTYPES[tt.dtype]} *)(arena + {macro[t]})"

    layers = []
    for k, (layer, kern) in enumerate(zip(graph.layers, kernels)):
        out_t = graph.tensors[layer.outputs[0]]
        L = dict(index=k, kind=type(kern).__name__, k=kern,
                 func=f"op{k}_{layer.op.lower()}",
                 title=f"{layer.op} '{layer.name}' -> {shape_text(out_t)}",
                 y=ptr(layer.outputs[0], k, "out", True), out_bytes=out_t.nbytes,
                 alias=None, b=None)
        data = [i for i in layer.inputs if i >= 0]
        if isinstance(kern, (K.Conv, K.FullyConnected)):
            L["x"] = ptr(data[0], k, "in", False)
            L["w"] = tensor_const(kern.weights, f"op{k}_weights")
            if kern.bias >= 0:
                L["b"] = tensor_const(kern.bias, f"op{k}_bias")
            L["mult"] = const(f"op{k}_multiplier", "int32_t", kern.multiplier)
            L["shift"] = const(f"op{k}_shift", "int8_t", kern.shift)
            L["channel"] = "u" if len(kern.multiplier) > 1 else "0"
        elif isinstance(kern, K.Concat):
            L["concat_parts"] = [(ptr(i, k, f"in{j}", False), c) for j, (i, c)
                                 in enumerate(zip(data, kern.chunks))]
        else:
            L["x"] = ptr(data[0], k, "in", False)
            if len(data) > 1:
                L["x2"] = ptr(data[1], k, "in2", False)
        if isinstance(kern, K.Copy) and life[layer.outputs[0]].alias_of is not None:
            L["alias"] = f"'{out_t.name}' shares the bytes of '{graph.tensors[data[0]].name}'"
        if isinstance(kern, K.Pad):
            L.update(in4=_pad4(kern.in_shape, 1), out4=_pad4(kern.out_shape, 1),
                     before4=_pad4(kern.before, 0))
        if isinstance(kern, K.Transpose):
            in_strides = [int(np.prod(kern.in_shape[d + 1:], dtype=np.int64)) for d in range(len(kern.in_shape))]
            L.update(out4=_pad4(kern.out_shape, 1), perm_strides4=_pad4([in_strides[p] for p in kern.perm], 0))
        layers.append(L)

    def io(ts):
        return [dict(macro=macro[t], bytes=graph.tensors[t].nbytes,
                     comment=f"'{graph.tensors[t].name}' {shape_text(graph.tensors[t])} "
                             f"{DTYPE_SHORT.get(graph.tensors[t].dtype)}") for t in ts]

    ctx = dict(model=graph.name, ident=ident, guard=guard, target=backend.name,
               arena_bytes=max(arena_bytes, 16), planner=planner, tensors=tensors,
               constants=constants, layers=layers, inputs=io(graph.inputs), outputs=io(graph.outputs),
               macs=sum(K.macs(kk) for kk in kernels))
    env = environment(backend)
    files = {
        f"{ident}_engine.c": env.get_template("engine.c.j2").render(ctx),
        f"{ident}_engine.h": env.get_template("engine.h.j2").render(ctx),
        f"{ident}_fixedpoint.h": env.get_template("fixedpoint.h.j2").render(ctx),
        "inference_api.h": env.get_template("inference_api.h.j2").render(ctx),
        "inference_task.c": env.get_template("inference_task.c.j2").render(ctx),
        "CMakeLists.txt": env.get_template("CMakeLists.txt.j2").render(ctx),
    }
    return Rendered(files)


def constant_bytes(graph: Graph, kernels) -> int:
    """Bytes of .rodata the engine holds: weights, biases, requantization arrays."""
    seen: set[int] = set()
    total = 0
    for layer, kern in zip(graph.layers, kernels):
        for t in layer.inputs:
            if t >= 0 and graph.tensors[t].is_const and t not in seen:
                seen.add(t)
                total += graph.tensors[t].nbytes
        if isinstance(kern, (K.Conv, K.FullyConnected)):
            total += 5 * len(kern.multiplier)
    return total
