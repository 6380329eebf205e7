"""GPT-Neo to C: the quantized tables (the reference's own codes), the activation arena
planned by the same planners as a CNN's, the KV cache in .bss, and the engine's files.

    dep = deploy_gptneo(path, LlmOptions(weights="q4_0", kv="int4", context=96))
    dep.files       # name -> text: <model>_engine.c, inference_api.h, manifest.json
    dep.memory      # flash (weights, code estimate) and SRAM (KV cache, arena) in bytes
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from backends import BACKENDS
from network_parser.errors import UsageError
from network_parser.gptneo import GptNeo, read_gptneo
from solver.arena import ArenaProblem, Buffer, SolverConfig, plan_arena

from . import gptneo_quant as Q
from .emit import c_array, c_identifier, core_flags, environment, qemu_files, template_environment
from .gptneo_golden import KV_LEVELS, kv_group_default


CODE_BYTES_ESTIMATE = 6 * 1024  # the engine's functions (measured: 4.5-5.5 KB at -O2 on x86-64)


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


@dataclass(frozen=True)
class LlmDeployment:
    model: GptNeo
    options: LlmOptions
    context: int
    kv_group: int
    offsets: dict
    arena_bytes: int
    planner: str
    memory: dict
    quant_report: list = field(default_factory=list)  # (matrix, RMSE, SNR dB)
    files: dict = field(default_factory=dict, repr=False)


# The per-token op sequence and what each op reads and writes: the lifetimes the arena planner sees.
# 0 embed, 1 ln_1, 2 q/k/v, 3 store k/v, 4 attention, 5 out_proj, 6 residual, 7 ln_2, 8 c_fc,
# 9 gelu, 10 c_proj, 11 residual, 12 ln_f, 13 head
def _buffers(c, context: int) -> list[tuple[str, int, int, int, str]]:
    f = 4
    cols = max(c.d_model, c.inner)
    return [("TOKEN", 4, 0, 0, "the input token id (int32)"),
            ("X", c.d_model * f, 0, 12, "the residual stream"),
            ("H", c.d_model * f, 1, 13, "LayerNorm output"),
            ("QV", c.d_model * f, 2, 4, "query"), ("KV", c.d_model * f, 2, 3, "key"), ("VV", c.d_model * f, 2, 3, "value"),
            ("SCORES", context * f, 4, 4, "attention scores of one head"),
            ("ATT", c.d_model * f, 4, 5, "attention output"),
            ("T", c.d_model * f, 5, 11, "a sublayer's output before the residual add"),
            ("FF", c.inner * f, 8, 10, "MLP hidden"),
            ("XQ", cols, 2, 13, "int8 blocks of a matvec input"), ("XS", cols // Q.BLOCK * f, 2, 13, "their scales"),
            ("LOGITS", c.vocab * f, 13, 13, "the output logits (float)")]


def _pack_q4(m: Q.Q4Matrix) -> np.ndarray:
    """Two codes per byte, block by block: byte j holds element j (low nibble) and j + 16 (high)."""
    rows, cols = m.codes.shape
    b = m.codes.reshape(rows, cols // Q.BLOCK, 2, 16)
    return (b[:, :, 0, :] | (b[:, :, 1, :] << 4)).astype(np.uint8).reshape(-1)


def prune_vocabulary(model: GptNeo, file: Path) -> tuple[GptNeo, list[int]]:
    """The model with only the listed token ids (in their sorted order): the embedding and the
    tied head keep those rows. Returns the kept ids: new id i is old id kept[i]."""
    try:
        ids = json.loads(Path(file).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--prune-vocab {file}: not a readable JSON list of token ids ({e})") from None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise UsageError(f"--prune-vocab {file}: expected a non-empty JSON list of integer token ids")
    bad = [i for i in ids if not 0 <= i < model.config.vocab]
    if bad:
        raise UsageError(f"--prune-vocab {file}: token {bad[0]} is outside the vocabulary of {model.config.vocab}")
    kept = sorted(set(ids))
    eos = model.config.eos
    config = replace(model.config, vocab=len(kept), eos=kept.index(eos) if eos in kept else None)
    return replace(model, config=config, wte=np.ascontiguousarray(model.wte[kept])), kept


def deploy_gptneo(path: Path, options: LlmOptions) -> LlmDeployment:
    model = read_gptneo(path)
    kept, original_vocab = None, model.config.vocab
    if options.prune_vocab is not None:
        model, kept = prune_vocabulary(model, options.prune_vocab)
    c = model.config
    if options.weights not in ("q4_0", "int8", "f32") or options.kv not in ("int8", "int4", "f32"):
        raise UsageError(f"--weights {options.weights} / --kv-cache {options.kv}: expected q4_0|int8|f32 and int8|int4|f32")
    backend = BACKENDS.get(options.target)
    if backend is None or not (backend.name == "host" or backend.qemu_machine):
        raise UsageError(f"language models are built for the host or a Cortex-M target, not '{options.target}'")
    context = options.context or c.max_positions
    if not 1 <= context <= c.max_positions:
        raise UsageError(f"--context {context}: the model has {c.max_positions} positions")
    if options.weights != "f32" and (c.d_model % Q.BLOCK or c.inner % Q.BLOCK):
        raise UsageError(f"--weights {options.weights} needs d_model and the MLP width to be multiples of {Q.BLOCK} "
                         f"({c.d_model}, {c.inner})")
    kv_group = kv_group_default(c, options.kv)

    buffers = _buffers(c, context)
    problem = ArenaProblem(tuple(Buffer(n, size, first, last) for n, size, first, last, _ in buffers), 16)
    plan = plan_arena(problem, options.planner, SolverConfig(time_limit_s=options.time_limit_s))
    offsets = {n: off for (n, *_), off in zip(buffers, plan.offsets)}

    quant = {"f32": None, "int8": Q.quantize_int8_rows, "q4_0": Q.quantize_q4_0}[options.weights]
    constants, report = [], []

    def matrix(name: str, w: np.ndarray) -> int:
        if quant is None:
            constants.append(dict(name=name, ctype="float", count=w.size, data=c_array(w.astype(np.float32))))
            return w.size * 4
        m = quant(w)
        report.append((name, *Q.error_stats(w, m.dequantize())))
        if options.weights == "q4_0":
            codes, scales, ctype, stype = _pack_q4(m), m.scales.reshape(-1), "uint8_t", "uint16_t"
        else:
            codes, scales, ctype, stype = m.codes.reshape(-1), m.scales, "int8_t", "float"
        constants.append(dict(name=name, ctype=ctype, count=codes.size, data=c_array(codes)))
        constants.append(dict(name=f"{name}_S", ctype=stype, count=scales.size, data=c_array(scales)))
        return m.nbytes

    def vector(name: str, v: np.ndarray) -> int:
        constants.append(dict(name=name, ctype="float", count=v.size, data=c_array(np.asarray(v, np.float32))))
        return v.size * 4

    weight_bytes = matrix("WTE", model.wte) + vector("WPE", model.wpe)
    weight_bytes += vector("LN_F_W", model.ln_f[0]) + vector("LN_F_B", model.ln_f[1])
    blocks = []
    for i, b in enumerate(model.blocks):
        p = f"L{i}"
        weight_bytes += sum(vector(f"{p}_{n}", v) for n, v in (("LN1_W", b.ln_1[0]), ("LN1_B", b.ln_1[1]),
                                                                 ("LN2_W", b.ln_2[0]), ("LN2_B", b.ln_2[1]),
                                                                 ("OUT_B", b.out[1]), ("FC_B", b.fc[1]),
                                                                 ("PROJ_B", b.proj[1])))
        weight_bytes += sum(matrix(f"{p}_{n}", w) for n, w in (("Q", b.q), ("K", b.k), ("V", b.v), ("OUT", b.out[0]),
                                                                ("FC", b.fc[0]), ("PROJ", b.proj[0])))
        blocks.append(dict(p=p, ln1=f"{p}_LN1", ln2=f"{p}_LN2", local=int(c.attention[i] == "local")))

    kv_row = c.d_model // 2 if options.kv == "int4" else c.d_model
    kv_scales = c.d_model // kv_group if options.kv != "f32" else 0
    kv_bytes = 2 * c.layers * context * (kv_row * (4 if options.kv == "f32" else 1) + kv_scales * 4)
    memory = dict(flash_bytes=weight_bytes + CODE_BYTES_ESTIMATE, weights_bytes=weight_bytes,
                  code_bytes_estimate=CODE_BYTES_ESTIMATE, kv_cache_bytes=kv_bytes, arena_bytes=plan.peak,
                  sram_bytes=kv_bytes + plan.peak)
    ident = c_identifier(model.name)
    ctx = dict(model=model.name, target=options.target, d=c.d_model, heads=c.heads, head_dim=c.head_dim,
               layers=c.layers, inner=c.inner, vocab=c.vocab, positions=c.max_positions, context=context,
               window=c.window, eps=f"{np.float32(c.eps).item():.9g}f", kv=options.kv, kv_group=kv_group,
               kv_levels=KV_LEVELS.get(options.kv, 0), kv_row=kv_row, kv_scales=kv_scales, kv_bytes=kv_bytes,
               weights=options.weights, wtype={"f32": "float", "int8": "int8_t", "q4_0": "uint8_t"}[options.weights],
               stype={"f32": "float", "int8": "float", "q4_0": "uint16_t"}[options.weights],
               arena_bytes=plan.peak, planner=f"{plan.method}, {plan.status}",
               buffers=[dict(macro=n, offset=offsets[n], comment=f"{size} B, ops {first}..{last}: {what}")
                        for n, size, first, last, what in buffers if n not in ("TOKEN", "XQ", "XS")],
               token_offset=offsets["TOKEN"], xq_offset=offsets["XQ"], xs_offset=offsets["XS"],
               constants=constants, blocks=blocks,
               dsp=backend.kernels == "smlad" and options.weights == "q4_0",
               matvec_shapes=sorted({(c.d_model, c.d_model), (c.inner, c.d_model), (c.d_model, c.inner),
                                     (c.vocab, c.d_model)}),
               max_blocks=max(c.d_model, c.inner) // Q.BLOCK,
               core_flags=core_flags(backend))
    env = template_environment(("llm",))
    files = {f"{ident}_engine.c": env.get_template("engine.c.j2").render(ctx),
             "inference_api.h": env.get_template("inference_api.h.j2").render(ctx)}
    if backend.qemu_machine:  # the engine's qemu/ folder: build for the core's board, run on QEMU
        llm_backend = replace(backend, cflags=(*backend.cflags, "-ffp-contract=off"))
        files.update(qemu_files(environment(llm_backend), llm_backend, ident))
    manifest = dict(kind="gpt_neo", model=model.name, library=ident, target=options.target,
                    config={**{k: v for k, v in vars(c).items() if k != "eos"}, "attention": list(c.attention)}, weights=options.weights, kv_cache=options.kv,
                    kv_group=kv_group, context=context, memory=memory,
                    arena=dict(bytes=plan.peak, planner=plan.method, status=plan.status, lower_bound=plan.lower_bound,
                               buffers=[dict(name=n, offset=offsets[n], size=size, first_op=first, last_op=last)
                                        for n, size, first, last, _ in buffers]),
                    quantization=[dict(matrix=n, rmse=round(r, 8), snr_db=None if s == float("inf") else round(s, 3))
                                  for n, r, s in report])
    tokenizer = options.tokenizer or Path(path).parent
    if (tokenizer / "vocab.json").exists() and (tokenizer / "merges.txt").exists():
        for name in ("vocab.json", "merges.txt"):  # so that the folder runs `deploy generate` alone
            files[f"tokenizer/{name}"] = (tokenizer / name).read_bytes()
    elif options.tokenizer is not None:
        raise UsageError(f"--tokenizer {tokenizer}: needs vocab.json and merges.txt")
    id_map = Path(path).with_name("pruned_to_gpt2_ids.json")
    to_gpt2 = json.loads(id_map.read_text()) if id_map.exists() else None  # model id i is GPT-2 id map[i]
    if kept is not None:  # --prune-vocab: engine id i is the checkpoint's id kept[i]
        to_gpt2 = [to_gpt2[k] for k in kept] if to_gpt2 is not None else kept
        manifest["pruned_vocabulary"] = dict(kept=len(kept), of=original_vocab)
    if to_gpt2 is not None:
        files["token_ids.json"] = json.dumps(to_gpt2) + "\n"
    manifest["eos_token_id"] = c.eos
    manifest["tokenizer"] = "tokenizer/" if "tokenizer/vocab.json" in files else None
    files["manifest.json"] = json.dumps(manifest, indent=2) + "\n"
    return LlmDeployment(model, options, context, kv_group, offsets, plan.peak, plan.method, memory, report, files)
