"""GPT-Neo to C: the quantized tables (the reference's own codes), the activation arena
planned by the same planners as a CNN's, the KV cache in .bss, and the engine's files.

    dep = deploy_gptneo(path, LlmOptions(weights="q4_0", kv="int4", context=96))
    dep.files       # name -> text: <model>_engine.c, inference_api.h, manifest.json
    dep.memory      # flash (weights, code estimate) and SRAM (KV cache, arena) in bytes
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from backends import BACKENDS
from network_parser.errors import InfeasibleBudget, UsageError
from network_parser.gptneo import GptNeo, read_gptneo
from network_parser.side_files import TOKEN_IDS_BYTES, read_json, token_ids
from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, LayerNorm, MatMul, PositionEmbedding,
                                           TransformerGraph, lifetimes, lower_gptneo, op_summary)
from solver.arena import ArenaPlan, ArenaProblem, Buffer, SolverConfig, plan_arena
from solver.plan import Memory

from . import gptneo_quant as Q
from . import llm_passes
from .emit import (GUARD_BYTES, STACK_LAYER_BYTES, STACK_RUN_BYTES, TASK_EXTRA_BYTES, c_array, c_identifier,
                   core_flags, environment, qemu_files, template_environment)
from .llm_passes import KV_LEVELS, cache_kv, prune_vocabulary, quantize_weights
from .manifest import MANIFEST_VERSION
from .pipeline import budget_error, over_budget
from .report_html import language_model_report
from .tokenizer import present as gpt2_files_present, read_gpt2_files


# The engine's functions, one call per op included. Measured .text of tinytalk's engine at -O2:
# x86-64 7.5 KB (q4_0), 6.8 KB (int8), 5.1 KB (f32); Cortex-M7 5.6 KB (q4_0 on the DSP), 4.3, 3.6 KB.
CODE_BYTES_ESTIMATE = 8 * 1024


@dataclass(frozen=True)
class LlmOptions:
    weights: str = "q4_0"  # "q4_0" | "int8" | "f32"
    kv: str = "int8"  # "int8" | "int4" | "f32"
    context: int | None = None  # KV positions (default: all the model's)
    planner: str = "cpsat"
    time_limit_s: float = 5.0
    target: str = "host"
    tokenizer: Path | None = None  # the GPT-2 vocab.json + merges.txt (default: beside the model)
    prune_vocab: Path | None = None  # a JSON list of the token ids to keep (the model's own ids)
    debug_guards: bool = False  # canaries around every arena buffer, checked after each op
    sram: int | None = None  # budgets (bytes): KV cache + arena, and weights + code
    flash: int | None = None
    rtos: str = "baremetal"  # the task glue: "baremetal" | "freertos"


@dataclass(frozen=True)
class LlmDeployment:
    graph: TransformerGraph  # after the passes
    options: LlmOptions
    offsets: dict  # arena buffer -> byte offset
    plan: ArenaPlan
    memory: Memory
    quant_report: list = field(default_factory=list)  # (matrix, RMSE, SNR dB)
    files: dict = field(default_factory=dict, repr=False)

    @property
    def context(self) -> int:
        return self.graph.kv.context

    @property
    def kv_group(self) -> int:
        return self.graph.kv.group

    @property
    def arena_bytes(self) -> int:
        return self.plan.peak


def _pack_q4(m: Q.Q4Matrix) -> np.ndarray:
    """Two codes per byte, block by block: byte j holds element j (low nibble) and j + 16 (high)."""
    rows, cols = m.codes.shape
    b = m.codes.reshape(rows, cols // Q.BLOCK, 2, 16)
    return (b[:, :, 0, :] | (b[:, :, 1, :] << 4)).astype(np.uint8).reshape(-1)


def _read_ids(file: Path) -> list[int]:
    """--prune-vocab's JSON list of token ids (prune_vocabulary checks them against the vocabulary)."""
    where = f"--prune-vocab {file}"
    ids = read_json(file, what="the token ids to keep", max_bytes=TOKEN_IDS_BYTES, error=UsageError, name=where)
    return token_ids(ids, where=where, what="integer token ids", error=UsageError)


def c_weight(name: str) -> str:
    """'h.3.c_fc.bias' -> 'H3_C_FC_B', 'ln_f.weight' -> 'LN_F_W', 'wte' -> 'WTE'."""
    name = re.sub(r"^h\.(\d+)\.", r"h\1_", name)
    name = re.sub(r"\.weight$", "_w", re.sub(r"\.bias$", "_b", name))
    return name.replace(".", "_").upper()


CTYPES = {"float32": "float", "int32": "int32_t", "int8": "int8_t"}
NULL = "(const float *)0"


def _constants(graph: TransformerGraph) -> list[dict]:
    """Every weight as C arrays: a matrix's codes (Q4_0: two per byte) and its scales."""
    out = []
    for name, w in graph.weights.items():
        cname = c_weight(name)
        if isinstance(w, np.ndarray):
            out.append(dict(name=cname, ctype="float", count=w.size, data=c_array(w.astype(np.float32).reshape(-1))))
            continue
        if isinstance(w, Q.Q4Matrix):
            codes, scales, ctype, stype = _pack_q4(w), w.scales.reshape(-1), "uint8_t", "uint16_t"
        else:
            codes, scales, ctype, stype = w.codes.reshape(-1), w.scales, "int8_t", "float"
        out.append(dict(name=cname, ctype=ctype, count=codes.size, data=c_array(codes)))
        out.append(dict(name=f"{cname}_S", ctype=stype, count=scales.size, data=c_array(scales)))
    return out


def _call(graph: TransformerGraph, op) -> tuple[str, list[str]]:
    """The C function an op becomes and its arguments (buffers as arena macros, weights by name)."""
    quantized = graph.weight_format != "f32"

    def weight(name: str) -> list[str]:
        return [c_weight(name), c_weight(name) + "_S"] if quantized else [c_weight(name)]
    if isinstance(op, Embedding):
        return "embedding", [*weight(op.table), f"*{op.token}", op.out]
    if isinstance(op, PositionEmbedding):
        return "add_position", [c_weight(op.table), op.x]
    if isinstance(op, LayerNorm):
        return "layer_norm", [op.x, c_weight(op.weight), c_weight(op.bias), f"{np.float32(op.eps).item():.9g}f", op.out]
    if isinstance(op, MatMul):
        return f"matvec_{op.rows}x{op.cols}", [*weight(op.weight), op.x, c_weight(op.bias) if op.bias else NULL,
                                               op.out]
    if isinstance(op, Attention):
        return "attention", [str(op.layer), str(op.window or 0), op.q, op.k, op.v, op.out]
    if isinstance(op, Gelu):
        return f"gelu_{graph.activation(op.x).elements}", [op.x]
    if isinstance(op, Add):
        return f"add_{graph.activation(op.x).elements}", [op.x, op.y]
    raise TypeError(f"no C for {type(op).__name__}")


def build_graph(model: GptNeo, options: LlmOptions) -> tuple[TransformerGraph, list, list[int] | None]:
    """read -> IR -> the passes the flags ask for: (graph, quantization report, kept token ids)."""
    graph, kept = lower_gptneo(model), None
    if options.prune_vocab is not None:
        graph, kept = prune_vocabulary(graph, _read_ids(options.prune_vocab))
    graph, report = quantize_weights(graph, options.weights)
    return cache_kv(graph, options.kv, options.context), report, kept


def plan_activations(graph: TransformerGraph, planner: str, time_limit_s: float, guard: int = 0):
    """The activation arena from the IR's buffer lifetimes, each buffer with ``guard`` bytes of
    canary on both sides: (lifetimes, plan, buffer name -> offset, the planners' problem)."""
    lives = lifetimes(graph)
    problem = ArenaProblem(tuple(Buffer(a.name, a.nbytes + 2 * guard, first, last) for a, first, last in lives), 16)
    plan = plan_arena(problem, planner, SolverConfig(time_limit_s=time_limit_s))
    return lives, plan, {a.name: off + guard for (a, *_), off in zip(lives, plan.offsets)}, problem


def memory_of(graph: TransformerGraph, arena_bytes: int) -> Memory:
    """The network's memory record: the KV cache is state kept across calls, every constant
    (matrices, their scales, biases, norms) counts as weights."""
    weights, kv = llm_passes.weight_bytes(graph), llm_passes.kv_cache_bytes(graph)
    return Memory(arena_bytes=arena_bytes, state_bytes=kv, sram_bytes=kv + arena_bytes, weights_bytes=weights,
                  code_bytes_estimate=CODE_BYTES_ESTIMATE, flash_bytes=weights + CODE_BYTES_ESTIMATE,
                  flash_sections=(("weights", weights), ("biases", 0), ("parameters", 0),
                                  ("code_estimate", CODE_BYTES_ESTIMATE)))


def _sram_at(graph: TransformerGraph, fmt: str, context: int, guard: int) -> int:
    """SRAM of the engine with this KV cache (its arena planned first-fit: the solver's is never larger)."""
    g = cache_kv(graph, fmt, context, graph.kv.group if fmt == graph.kv.format else None)
    return llm_passes.kv_cache_bytes(g) + plan_activations(g, "first-fit", 1.0, guard)[1].peak


def check_budgets(graph: TransformerGraph, memory: Memory, sram: int | None, flash: int | None, guard: int) -> None:
    """Every memory over its budget in one error, as a network's (pipeline.budget_error): the
    need, the smallest budget that works, what the need is made of and what would fit this
    budget (a shorter context, a lighter KV cache or weight format)."""
    over = over_budget(memory, LlmOptions(sram=sram, flash=flash))
    if not over:
        return
    kv, details = graph.kv, {}
    if sram is not None and memory.sram_bytes > sram:
        lighter = ("f32", "int8", "int4")
        fixes = [f"--kv-cache {f} needs {_sram_at(graph, f, kv.context, guard):,} (at --context {kv.context})"
                 for f in lighter[lighter.index(kv.format) + 1:]]
        lo, hi = 0, kv.context - 1  # the longest context that fits: SRAM grows with it
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _sram_at(graph, kv.format, mid, guard) <= sram else (lo, mid - 1)
        if lo:
            fixes.insert(0, f"--context {lo} fits")
        details["--sram"] = (f"KV cache {memory.state_bytes:,} + arena {memory.arena_bytes:,}"
                             + (f"; at --sram {sram}: {', '.join(fixes)}" if fixes else ""))
    if flash is not None and memory.flash_bytes > flash:
        code = memory.code_bytes_estimate
        order = ("f32", "int8", "q4_0")
        fixes = [f"--weights {f} needs {llm_passes.weight_bytes_as(graph, f) + code:,}"
                 for f in order[order.index(graph.weight_format) + 1:]]
        details["--flash"] = (f"weights {memory.weights_bytes:,} + code about {code:,}"
                              + (f"; {', '.join(fixes)}" if fixes else "")
                              + "; --prune-vocab shrinks the embedding and the head")
    raise budget_error(over, details)


def deploy_gptneo(path: Path, options: LlmOptions) -> LlmDeployment:
    """The language-model pipeline: read -> IR -> passes -> arena -> budgets -> C -> manifest."""
    model = read_gptneo(path)
    backend = BACKENDS.get(options.target)
    if backend is None or not (backend.name == "host" or backend.qemu_machine):
        raise UsageError(f"language models are built for the host or a Cortex-M target, not '{options.target}'")
    graph, report, kept = build_graph(model, options)
    guard = GUARD_BYTES if options.debug_guards else 0
    lives, plan, offsets, problem = plan_activations(graph, options.planner, options.time_limit_s, guard)
    memory = memory_of(graph, plan.peak)
    sram, flash = options.sram, options.flash
    if backend.part:  # a part's memories are the default budgets
        sram, flash = sram or backend.sram_bytes, flash or backend.flash_bytes
    check_budgets(graph, memory, sram, flash, guard)
    files = render_engine(graph, backend, lives, plan, offsets, guard, options.rtos)
    files["report.html"] = language_model_report(graph, memory, dict(sram=sram, flash=flash), problem, plan, report,
                                                 backend.description)
    files.update(_tokenizer_files(Path(path), options.tokenizer))
    manifest = _manifest(graph, options, memory, lives, plan, offsets, guard, report)
    to_gpt2 = _gpt2_ids(Path(path), kept, model.config.vocab)
    if kept is not None:
        manifest["pruned_vocabulary"] = dict(kept=len(kept), of=model.config.vocab)
    if to_gpt2 is not None:
        files["token_ids.json"] = json.dumps(to_gpt2) + "\n"
    manifest["eos_token_id"] = graph.config.eos
    manifest["tokenizer"] = "tokenizer/" if "tokenizer/vocab.json" in files else None
    files["manifest.json"] = json.dumps(manifest, indent=2) + "\n"
    return LlmDeployment(graph, options, offsets, plan, memory, report, files)


def stack_need(graph: TransformerGraph) -> dict:
    """The engine's stack below inference_run's caller: a CNN engine's frames (see emit) plus the
    KV store's codes (d_model bytes) and the DSP matvec's per-block input sums. Measured for
    tinytalk: inference_run 40-48 B, attention (the KV store inlined) 208-224 B, a matvec 16-152 B,
    quantize_blocks 24 B (x86-64 and Cortex-M7 at -O2); tests/host/test_gptneo_engine.py checks it."""
    blocks = max(op.cols for op in graph.ops if isinstance(op, MatMul)) // Q.BLOCK
    layer = STACK_LAYER_BYTES + -(-graph.config.d_model // 8) * 8 + 4 * blocks
    engine = STACK_RUN_BYTES + layer
    return dict(layer_bytes=layer, column_bytes=0, engine_bytes=engine, task_words=-(-(engine + TASK_EXTRA_BYTES) // 4))


def render_engine(graph: TransformerGraph, backend, lives, plan, offsets: dict, guard: int,
                  rtos: str = "baremetal") -> dict:
    """The engine's C file, API header, task glue and CMakeLists.txt (and the qemu/ folder on a
    Cortex-M target)."""
    c, kv = graph.config, graph.kv
    ident = c_identifier(graph.name)
    matmuls = [op for op in graph.ops if isinstance(op, MatMul)]
    regions = sorted((dict(name=a.name, lo=offsets[a.name] - guard, hi=offsets[a.name] + a.nbytes, first=first,
                           last=last) for a, first, last in lives), key=lambda r: (r["lo"], r["name"]))
    ctx = dict(model=graph.name, ident=ident, rtos=rtos, stack=stack_need(graph), target=backend.name, d=c.d_model, heads=c.heads, head_dim=c.head_dim,
               layers=c.layers, inner=c.inner, vocab=c.vocab, positions=c.max_positions, context=kv.context,
               kv=kv.format, kv_group=kv.group, kv_levels=KV_LEVELS.get(kv.format, 0),
               kv_row=c.d_model // 2 if kv.format == "int4" else c.d_model,
               kv_scales=c.d_model // kv.group if kv.group else 0, kv_bytes=llm_passes.kv_cache_bytes(graph),
               weights=graph.weight_format,
               wtype={"f32": "float", "int8": "int8_t", "q4_0": "uint8_t"}[graph.weight_format],
               stype={"f32": "float", "int8": "float", "q4_0": "uint16_t"}[graph.weight_format],
               arena_bytes=plan.peak, planner=f"{plan.method}, {plan.status}",
               buffers=[dict(macro=a.name, ctype=CTYPES[a.dtype], offset=offsets[a.name],
                             comment=f"{a.nbytes} B {a.dtype}, ops {first}..{last}: {a.what}")
                        for a, first, last in lives],
               constants=_constants(graph),
               calls=[dict(index=k, comment=op_summary(op), fn=fn, args=args)
                      for k, op in enumerate(graph.ops) for fn, args in [_call(graph, op)]],
               dsp=backend.kernels == "smlad" and graph.weight_format == "q4_0",
               matvec_shapes=sorted({(op.rows, op.cols) for op in matmuls}),
               elementwise=sorted({graph.activation(op.x).elements for op in graph.ops if isinstance(op, Add)}),
               gelu_sizes=sorted({graph.activation(op.x).elements for op in graph.ops if isinstance(op, Gelu)}),
               max_blocks=max(op.cols for op in matmuls) // Q.BLOCK,
               guards=dict(bytes=guard, regions=regions) if guard else None,
               core_flags=core_flags(backend))
    env = template_environment(("llm", "host"))
    names = {"engine.c.j2": f"{ident}_engine.c", "inference_api.h.j2": "inference_api.h",
             "inference_task.c.j2": "inference_task.c", "inference_task.h.j2": "inference_task.h",
             "CMakeLists.txt.j2": "CMakeLists.txt"}
    files = {out: env.get_template(name).render(ctx) for name, out in names.items()}
    if backend.qemu_machine:  # the engine's qemu/ folder: build for the core's board, run on QEMU
        llm_backend = replace(backend, cflags=(*backend.cflags, "-ffp-contract=off"))
        files.update(qemu_files(environment(llm_backend), llm_backend, ident))
    return files


def _manifest(graph: TransformerGraph, options: LlmOptions, memory: Memory, lives, plan, offsets: dict, guard: int,
              report: list) -> dict:
    c, kv = graph.config, graph.kv
    return dict(manifest_version=MANIFEST_VERSION, kind="gpt_neo", model=graph.name, library=c_identifier(graph.name), target=options.target,
                config={**{k: v for k, v in vars(c).items() if k != "eos"}, "attention": list(c.attention)},
                weights=graph.weight_format, kv_cache=kv.format, kv_group=kv.group, context=kv.context,
                memory=memory.as_dict(), ops=[op_summary(op) for op in graph.ops],
                arena=dict(bytes=plan.peak, planner=plan.method, status=plan.status, lower_bound=plan.lower_bound,
                           guard_bytes=guard,
                           buffers=[dict(name=a.name, offset=offsets[a.name], size=a.nbytes, first_op=first,
                                         last_op=last) for a, first, last in lives]),
                quantization=[dict(matrix=n, rmse=round(r, 8), snr_db=None if s == float("inf") else round(s, 3))
                              for n, r, s in report])


def _tokenizer_files(path: Path, tokenizer: Path | None) -> dict:
    """The GPT-2 BPE files, so that the folder runs `deploy generate` alone."""
    if tokenizer is None and not gpt2_files_present(path.parent):
        return {}
    # copied only once checked: what lands in the output is a tokenizer, whatever the folder held
    files = read_gpt2_files(tokenizer or path.parent, given=tokenizer is not None)
    return {f"tokenizer/{name}": data for name, data in files.raw.items()}


def _gpt2_ids(path: Path, kept: list[int] | None, vocab: int | None = None) -> list[int] | None:
    """Engine token id -> GPT-2 id: a pruned_to_gpt2_ids.json beside the model (model id i is GPT-2
    id map[i], one for each of the model's ``vocab`` ids), composed with --prune-vocab's kept ids
    (engine id i is the checkpoint's kept[i])."""
    id_map = path.with_name("pruned_to_gpt2_ids.json")
    to_gpt2 = None
    if id_map.exists() or id_map.is_symlink():
        to_gpt2 = token_ids(read_json(id_map, what="the model's GPT-2 token ids", max_bytes=TOKEN_IDS_BYTES),
                            where=str(id_map), what="GPT-2 token ids", length=vocab)
    if kept is not None:
        to_gpt2 = [to_gpt2[k] for k in kept] if to_gpt2 is not None else kept
    return to_gpt2
