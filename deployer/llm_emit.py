"""A language model's plan to C: the quantized tables (the reference's own codes), the activation
arena's buffers, the KV cache in .bss, and the engine's files (the task glue and CMakeLists.txt
are a network's: templates/host).

    files = render_engine(plan)   # <model>_engine.c, inference_api.h, the task glue, CMakeLists.txt
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from backends.decoder_kernels import matrix_family
from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, HeadSelect, LayerNorm, MatMul,
                                           PositionEmbedding, QuantizeInput, RmsNorm, Rope, SwiGlu, TransformerGraph, lifetimes, op_summary, padded)

from . import decoder_quant as Q
from . import language_model, llm_passes
from .emit import (c_array, c_identifier, core_flags, environment, guard_bytes, guard_canaries, qemu_files,
                   stack_need, template_environment)
from .llm_passes import KV_LEVELS


def _pack_q4(codes: np.ndarray) -> np.ndarray:
    """Two codes per byte, block by block: byte j holds element j (low nibble) and j + 16 (high)."""
    rows, cols = codes.shape  # padded to whole blocks
    b = codes.reshape(rows, cols // Q.BLOCK, 2, 16)
    return (b[:, :, 0, :] | (b[:, :, 1, :] << 4)).astype(np.uint8).reshape(-1)


def c_weight(name: str) -> str:
    """'h.3.c_fc.bias' -> 'H3_C_FC_B', 'ln_f.weight' -> 'LN_F_W', 'wte' -> 'WTE', 'rope.cos' -> 'ROPE_COS'."""
    name = re.sub(r"^h\.(\d+)\.", r"h\1_", name)
    name = re.sub(r"\.weight$", "_w", re.sub(r"\.bias$", "_b", name))
    return name.replace(".", "_").upper()


CTYPES = {"float32": "float", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t"}
NULL = "(const float *)0"


def _stored(w, pack_q4=None) -> tuple[np.ndarray, np.ndarray | None]:
    """A weight as the engine stores it: its codes (Q4_0: two per byte, in the order of the kernel
    family's matvec when it has one; or its floats) and its scales (None for floats)."""
    if isinstance(w, np.ndarray):
        return w.astype(np.float32).reshape(-1), None
    if isinstance(w, Q.Q4Matrix):
        return (pack_q4 or _pack_q4)(w.codes), w.scales.reshape(-1).astype(np.uint16)
    return w.codes.reshape(-1), w.scales.astype(np.float32)


CTYPE_OF = {np.dtype(np.float32): "float", np.dtype(np.uint8): "uint8_t", np.dtype(np.int8): "int8_t",
            np.dtype(np.uint16): "uint16_t"}


def _constants(graph: TransformerGraph, pack_q4=None) -> list[dict]:
    """Every weight in flash as C arrays: codes (or floats) and scales; the matrices streamed from
    L3 are in the L3 image instead."""
    out = []
    for name, w in graph.weights.items():
        if graph.l3 is not None and graph.l3.get(name):
            continue
        codes, scales = _stored(w, pack_q4)
        out.append(dict(name=c_weight(name), ctype=CTYPE_OF[codes.dtype], count=codes.size, data=c_array(codes)))
        if scales is not None:
            out.append(dict(name=c_weight(name) + "_S", ctype=CTYPE_OF[scales.dtype], count=scales.size,
                            data=c_array(scales)))
    return out


def l3_image(graph: TransformerGraph, pack_q4=None) -> bytes:
    """The L3 image: each streamed matrix's codes and scales at their addresses (little-endian,
    as the engine reads them)."""
    image = bytearray(graph.l3.bytes)
    for m in graph.l3.matrices:
        codes, scales = _stored(graph.weights[m.name], pack_q4)
        raw = codes.astype(codes.dtype.newbyteorder("<")).tobytes()
        image[m.codes:m.codes + len(raw)] = raw
        if scales is not None:
            raw = scales.astype(scales.dtype.newbyteorder("<")).tobytes()
            image[m.scales:m.scales + len(raw)] = raw
    return bytes(image)


def _streams(graph: TransformerGraph) -> list[dict]:
    """Per streamed matrix, what its fetches need: L3 addresses, bytes of a row's codes and
    scales, rows a fetch."""
    out = []
    for m in graph.l3.matrices if graph.l3 is not None else ():
        w = graph.weights[m.name]
        rows = w.shape[0] if isinstance(w, np.ndarray) else w.codes.shape[0]
        out.append(dict(name=m.name, macro=c_weight(m.name), codes=m.codes, scales=m.scales, rows=rows,
                        block=m.rows, row=m.row_bytes))
    return out


def _call(graph: TransformerGraph, op) -> tuple[str, list[str]]:
    """The C function an op becomes and its arguments (buffers as arena macros, weights by name)."""
    quantized = graph.weight_format != "f32"

    def weight(name: str) -> list[str]:
        return [c_weight(name), c_weight(name) + "_S"] if quantized else [c_weight(name)]

    def streamed(name: str) -> bool:
        return graph.l3 is not None and graph.l3.get(name) is not None
    if isinstance(op, Embedding) and streamed(op.table):
        return "embedding_l3", [f"*{op.token}", op.out]
    if isinstance(op, Embedding):
        return "embedding", [*weight(op.table), f"*{op.token}", op.out]
    if isinstance(op, PositionEmbedding):
        return "add_position", [c_weight(op.table), op.x]
    if isinstance(op, LayerNorm):
        return "layer_norm", [op.x, c_weight(op.weight), c_weight(op.bias), f"{np.float32(op.eps).item():.9g}f", op.out]
    if isinstance(op, RmsNorm):
        return "rms_norm", [op.x, c_weight(op.weight), f"{np.float32(op.eps).item():.9g}f", op.out]
    if isinstance(op, Rope) and op.inv is not None:
        return "rope", [op.x, str(op.heads), c_weight(op.inv)]
    if isinstance(op, Rope):
        return "rope", [op.x, str(op.heads), c_weight(op.cos), c_weight(op.sin)]
    if isinstance(op, SwiGlu):
        return f"swiglu_{graph.activation(op.gate).elements}", [op.gate, op.up]
    if isinstance(op, MatMul) and streamed(op.weight):
        return f"stream_{op.rows}x{op.cols}", [f"L3_{c_weight(op.weight)}", f"L3_{c_weight(op.weight)}_S", op.x,
                                               c_weight(op.bias) if op.bias else NULL, op.out]
    if isinstance(op, MatMul):
        return f"matvec_{op.rows}x{op.cols}", [*weight(op.weight), op.x, c_weight(op.bias) if op.bias else NULL,
                                               op.out]
    if isinstance(op, QuantizeInput):
        return "quantize_input", [op.x, str(op.cols)]
    if isinstance(op, HeadSelect):
        return "head_select", [*([] if streamed(op.weight) else weight(op.weight)), op.x, op.ids, op.values]
    if isinstance(op, Attention):
        return "attention", [str(op.layer), str(op.window or 0), op.q, op.k, op.v, op.out]
    if isinstance(op, Gelu):
        return f"gelu_{graph.activation(op.x).elements}", [op.x]
    if isinstance(op, Add):
        return f"add_{graph.activation(op.x).elements}", [op.x, op.y]
    raise TypeError(f"no C for {type(op).__name__}")


def stack_buffers(graph: TransformerGraph) -> int:
    """A layer's stack buffers: the KV store's codes (a position's keys, one byte each), the
    computed rotary angles' sines and cosines. Measured
    for tinytalk: inference_run 40-48 B, attention (the KV store inlined) 208-224 B, a matvec
    16-152 B, quantize_blocks 24 B (x86-64 and Cortex-M7 at -O2); the GPT-Neo engine tests check
    the estimate."""
    rope = 4 * graph.config.head_dim if "rope.inv" in graph.weights else 0  # a position's cosines and sines
    return -(-graph.config.kv_dim // 8) * 8 + rope


def render_engine(plan, tokens: bool = False) -> dict:
    """The engine's C file, API header, task glue and CMakeLists.txt (and the qemu/ folder on a
    Cortex-M target); ``tokens``: the library also holds the detokenizer's <ident>_tokens.c."""
    graph, backend, options, arena = plan.graph, plan.backend, plan.options, plan.arena
    guard = guard_bytes(options)
    offsets = {lt.name: plan.offsets[lt.tensor] for lt in plan.lives}  # arena buffer -> offset
    # the kernel family whose matvec runs the matrices (its templates' llm.c.j2), as the plan chose
    family = matrix_family(plan.layers)
    pairs = language_model.input_pairs(plan)
    lives = lifetimes(graph, pairs)
    c, kv = graph.config, graph.kv
    ident = c_identifier(graph.name)
    matmuls = [op for op in graph.ops if isinstance(op, MatMul)]
    select = graph.selection
    l3 = graph.l3
    streams = {op.weight: l3.get(op.weight) for op in matmuls if l3 is not None and l3.get(op.weight)}
    # each matvec shape once: a streamed matrix's blocks of rows (and its last, shorter block)
    shapes = {(op.rows, op.cols) for op in matmuls if op.weight not in streams}
    for op in (op for op in matmuls if op.weight in streams):
        shapes |= {(min(streams[op.weight].rows, op.rows), op.cols)} | ({(op.rows % streams[op.weight].rows, op.cols)}
                                                                       if op.rows % streams[op.weight].rows else set())
    if select:
        shapes |= {(select.block, select.cols)} | ({(select.rows % select.block, select.cols)}
                                                   if select.rows % select.block else set())
    stream_shapes = sorted({(op.rows, op.cols, streams[op.weight].rows) for op in matmuls if op.weight in streams})
    regions = sorted((dict(name=a.name, lo=offsets[a.name] - guard, hi=offsets[a.name] + a.nbytes, first=first,
                           last=last) for a, first, last in lives), key=lambda r: (r["lo"], r["name"]))
    stack = stack_need(stack_buffers(graph), buffer="KV store codes and block sums")
    ctx = dict(model=graph.name, ident=ident, rtos=options.rtos, stack=stack, target=backend.name, d=c.d_model,
               dp=padded(c.d_model), summary=c.summary(), norm=c.norm,
               rope=("compute" if "rope.inv" in graph.weights else "table") if c.position == "rope" else None,
               heads=c.heads, head_dim=c.head_dim, layers=c.layers, inner=c.inner, vocab=c.vocab,
               positions=c.max_positions, context=kv.context, kv_dim=c.kv_dim, group=c.group,
               kv_head="h" if c.group == 1 else f"(h / {c.group})",
               score_scale=None if c.score_scale == 1 else f"{np.float32(c.score_scale).item():.9g}f",
               kv=kv.format, kv_group=kv.group, kv_levels=KV_LEVELS.get(kv.format, 0),
               kv_row=c.kv_dim // 2 if kv.format == "int4" else c.kv_dim,
               kv_scales=c.kv_dim // kv.group if kv.group else 0, kv_bytes=llm_passes.kv_cache_bytes(graph),
               weights=graph.weight_format,
               wtype={"f32": "float", "int8": "int8_t", "q4_0": "uint8_t"}[graph.weight_format],
               stype={"f32": "float", "int8": "float", "q4_0": "uint16_t"}[graph.weight_format],
               arena_bytes=arena.peak, planner=f"{arena.method}, {arena.status}",
               buffers=[dict(macro=a.name, ctype=CTYPES[a.dtype], offset=offsets[a.name],
                             comment=f"{a.nbytes} B {a.dtype}, ops {first}..{last}: {a.what}")
                        for a, first, last in lives],
               constants=_constants(graph, family.llm_q4_pack if family else None),
               calls=[dict(index=k, comment=op_summary(op), fn=fn, args=args)
                      for k, op in enumerate(graph.ops) for fn, args in [_call(graph, op)]],
               family=family.llm_template if family else None, input_pairs=pairs,
               scalar_float=backend.vector_float_flushes,
               matvec_shapes=sorted(shapes), stream_shapes=stream_shapes,
               l3=None if l3 is None else dict(bytes=l3.bytes, streams=_streams(graph),
                                               embedding=l3.get("wte") is not None),
               select=None if select is None else dict(rows=select.rows, cols=select.cols, k=select.k,
                                                       block=select.block, pcols=padded(select.cols),
                                                       l3=None if l3 is None or not l3.get(select.weight)
                                                       else f"L3_{c_weight(select.weight)}"),
               outputs=[dict(name=o, bytes=graph.activation(o).nbytes,
                             what=graph.activation(o).what) for o in graph.outputs],
               elementwise=sorted({graph.activation(op.x).elements for op in graph.ops if isinstance(op, Add)}),
               gelu_sizes=sorted({graph.activation(op.x).elements for op in graph.ops if isinstance(op, Gelu)}),
               swiglu_sizes=sorted({graph.activation(op.gate).elements for op in graph.ops if isinstance(op, SwiGlu)}),
               max_blocks=max(padded(op.cols) for op in (*matmuls, *([select] if select else []))) // Q.BLOCK,
               guards=dict(bytes=guard, canaries=guard_canaries(regions, guard)) if guard else None,
               core_flags=core_flags(backend), tokens=tokens)
    env = template_environment(("llm", "host"))
    names = {"engine.c.j2": f"{ident}_engine.c", "inference_api.h.j2": "inference_api.h",
             "inference_task.c.j2": "inference_task.c", "inference_task.h.j2": "inference_task.h",
             "CMakeLists.txt.j2": "CMakeLists.txt"}
    files = {out: env.get_template(name).render(ctx) for name, out in names.items()}
    if l3 is not None:  # the image to program into external memory, and as a C array where it is mapped
        image = l3_image(graph, family.llm_q4_pack if family else None)
        files[f"{ident}_l3_weights.bin"] = image
        files[f"{ident}_l3_image.c"] = env.get_template("l3_image.c.j2").render(
            ident=ident, bytes=len(image), data=c_array(np.frombuffer(image, np.uint8)))
    if backend.qemu_machine:  # the engine's qemu/ folder: build for the core's board, run on QEMU
        llm_backend = replace(backend, cflags=(*backend.cflags, "-ffp-contract=off"))
        files.update(qemu_files(environment(llm_backend), llm_backend, ident, l3=l3 is not None))
    return files
