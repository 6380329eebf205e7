"""A language model's passes on the plan (solver.plan.Plan, kind "language_model"): the same
start, budgets, arena planner and tensor-level checker, manifest and report as a network's
(deployer.pipeline lists both), with the transformer IR as the plan's graph.

    plan = lower(plan)       # --prune-vocab, --weights, --kv-cache, --logits on the read checkpoint
    plan = plan_back(plan)   # the activation arena (checked), the KV cache as state, flash
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from backends.decoder_kernels import choose_decoder, decoder_family, matrix_family
from network_parser.errors import UsageError
from network_parser.lifetimes import Lifetime
from network_parser.side_files import TOKEN_IDS_BYTES, read_json, token_ids
from network_parser.transformer_ir import TransformerGraph, lifetimes, op_summary
from solver.arena import SolverConfig, plan_arena
from solver.plan import LayerPlan, Memory
from solver.tensor_arena import arena_problem, plan_level

from . import llm_passes
from .emit import c_identifier, guard_bytes
from .llm_passes import cache_kv, place_rope, prune_vocabulary, quantize_weights, select_logits, stream_weights
from .tokenizer import present as tokenizer_present

# The engine's functions, one call per op included. Measured .text of tinytalk's engine at -O2:
# x86-64 7.5 KB (q4_0), 6.8 KB (int8), 5.1 KB (f32); Cortex-M7 5.6 KB (q4_0 on the DSP), 4.3, 3.6 KB.
CODE_BYTES_ESTIMATE = 8 * 1024


@dataclass(frozen=True)
class LanguagePlan:
    """What the language-model passes decided beside the graph."""
    quantization: tuple = ()  # (matrix, RMSE, SNR dB) per quantized matrix
    kept: tuple | None = None  # --prune-vocab: new token id i is the checkpoint's kept[i]
    vocab: int = 0  # the checkpoint's vocabulary before pruning


def _read_ids(file: Path) -> list[int]:
    """--prune-vocab's JSON list of token ids (prune_vocabulary checks them against the vocabulary)."""
    where = f"--prune-vocab {file}"
    ids = read_json(file, what="the token ids to keep", max_bytes=TOKEN_IDS_BYTES, error=UsageError, name=where)
    return token_ids(ids, where=where, what="integer token ids", error=UsageError)


def lower(plan):
    """The flags' passes on the checkpoint's IR: --prune-vocab, --weights, --kv-cache, --logits, --rope,
    --l3."""
    return lower_as(plan, plan.options.language, {})


def lower_as(plan, flags, quantized: dict):
    """The passes with ``flags`` (an llm_passes.LanguageFlags, the plan's own for ``lower``) on the
    checkpoint as read (a plan after pipeline.read). ``quantized`` keeps each (--prune-vocab,
    --weights) result, the slow passes, so that the many flag sets deploy suggest measures cost
    one quantization per weight format."""
    backend = plan.backend
    if not (backend.name == "host" or backend.qemu_machine):
        raise UsageError(f"language models are built for the host or a Cortex-M target, not '{backend.name}'")
    key = (flags.prune_vocab, flags.weights)
    if key not in quantized:
        graph, kept, vocab = plan.graph, None, plan.graph.config.vocab
        if flags.prune_vocab is not None:
            graph, kept = prune_vocabulary(graph, _read_ids(flags.prune_vocab))
        graph, report = quantize_weights(graph, flags.weights)
        quantized[key] = (graph, kept, vocab, tuple(report))
    graph, kept, vocab, report = quantized[key]
    options = replace(plan.options, language=flags)
    graph = cache_kv(graph, flags.kv, flags.context)
    graph = select_logits(graph, flags.logits)
    graph = place_rope(graph, flags.rope, options.flash, CODE_BYTES_ESTIMATE)
    graph = stream_weights(graph, options.l3, options.flash, CODE_BYTES_ESTIMATE)
    return choose_kernels(plan.but(options=options, graph=graph,
                                   language=LanguagePlan(report, None if kept is None else tuple(kept), vocab)))


def choose_kernels(plan):
    """Each op as a layer of the plan, with the kernel that runs it: the engine's own, or for the
    quantized matrices the matvec of the target's family that --kernels allows and that takes
    their format (backends.decoder_kernels)."""
    graph = plan.graph
    family = decoder_family(plan.backend.families, plan.options.kernels, graph.weight_format)
    return plan.but(layers=tuple(LayerPlan(k, op, variant=choose_decoder(op, graph, family, l3), l3_weights=l3)
                                 for k, op in enumerate(graph.ops) for l3 in [streamed(graph, op)]))


def streamed(graph: TransformerGraph, op) -> bool:
    """The op's matrix (or embedding table) streams from L3."""
    weight = getattr(op, "weight", None) or getattr(op, "table", None)
    return weight is not None and graph.l3 is not None and graph.l3.get(weight) is not None


def plan_as(plan, flags, quantized: dict):
    """The plan ``deploy`` makes with ``flags`` (its arena planned and checked, its memory
    measured; no budget check, no files), from the checkpoint as read (see lower_as)."""
    return plan_back(lower_as(plan, flags, quantized))


def input_pairs(plan) -> bool:
    """The family running the plan's matrices reads their input as int16 pairs (a larger XQ)."""
    family = matrix_family(plan.layers)
    return family is not None and family.llm_input_pairs


def buffer_lifetimes(graph: TransformerGraph, pairs: bool = False) -> list[Lifetime]:
    """The IR's activation and scratch buffers as the arena planner's lifetimes (numbered in
    order of first use; none shares another's bytes); ``pairs``: see input_pairs."""
    return [Lifetime(i, a.name, a.nbytes, first, last, None)
            for i, (a, first, last) in enumerate(lifetimes(graph, pairs))]


def plan_back(plan):
    """The activation arena, planned and checked as a network's, and the memory record."""
    options, lives = plan.options, buffer_lifetimes(plan.graph, input_pairs(plan))
    arena, offsets = plan_level(lives, options.planner, options.time_limit_s, plan.backend.alignment,
                                guard_bytes(options))
    return measure(plan.but(lives=tuple(lives), arena=arena, offsets=offsets))


def measure(plan):
    """The KV cache is state kept across calls; every constant (matrices, their scales, biases,
    norms) counts as weights, in flash or, streamed, in L3."""
    graph, arena = plan.graph, plan.arena.peak
    weights, kv = llm_passes.weight_bytes(graph), llm_passes.kv_cache_bytes(graph)
    l3 = graph.l3.bytes if graph.l3 is not None else 0
    return plan.but(memory=Memory(
        arena_bytes=arena, state_bytes=kv, sram_bytes=kv + arena, weights_bytes=weights,
        code_bytes_estimate=CODE_BYTES_ESTIMATE, flash_bytes=weights + CODE_BYTES_ESTIMATE,
        flash_sections=(("weights", weights), ("biases", 0), ("parameters", 0), ("code_estimate", CODE_BYTES_ESTIMATE)),
        l3_bytes=l3, l3_weights_bytes=l3))


def _sram_at(graph: TransformerGraph, fmt: str, context: int, alignment: int, guard: int, pairs: bool) -> int:
    """SRAM of the engine with this KV cache (its arena planned first-fit: the solver's is never larger)."""
    g = cache_kv(graph, fmt, context, graph.kv.group if fmt == graph.kv.format else None)
    problem = arena_problem(buffer_lifetimes(g, pairs), alignment, guard)[0]
    return llm_passes.kv_cache_bytes(g) + plan_arena(problem, "first-fit", SolverConfig(time_limit_s=1.0)).peak


def budget_details(plan) -> dict:
    """flag -> what the need is made of and what would fit the budget: a shorter context, a
    lighter KV cache or weight format, a pruned vocabulary."""
    graph, memory, options = plan.graph, plan.memory, plan.options
    kv, details = graph.kv, {}
    sram, flash, guard, alignment = options.sram, options.flash, guard_bytes(options), plan.backend.alignment
    pairs = input_pairs(plan)
    if sram is not None and memory.sram_bytes > sram:
        lighter = ("f32", "int8", "int4")
        fixes = [f"--kv-cache {f} needs {_sram_at(graph, f, kv.context, alignment, guard, pairs):,} (at --context {kv.context})"
                 for f in lighter[lighter.index(kv.format) + 1:]]
        lo, hi = 0, kv.context - 1  # the longest context that fits: SRAM grows with it
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _sram_at(graph, kv.format, mid, alignment, guard, pairs) <= sram else (lo, mid - 1)
        if lo:
            fixes.insert(0, f"--context {lo} fits")
        if graph.selection is None:  # the float logits row: argmax streams the head instead
            g = select_logits(graph, "argmax")
            problem = arena_problem(buffer_lifetimes(g, pairs), alignment, guard)[0]
            need = memory.state_bytes + plan_arena(problem, "first-fit", SolverConfig(time_limit_s=1.0)).peak
            fixes.insert(0, f"--logits argmax needs {need:,}")
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
    return details


# ---- the files beside the engine ------------------------------------------------------------

def side_files(plan) -> tuple[dict, list[str]]:
    """The model's tokenizer (so that the folder runs `deploy generate` alone), token_ids.json
    (engine id -> GPT-2 id) where the vocabulary was pruned or remapped, and with the tokenizer
    the on-device detokenizer: <ident>_tokens.c and .h, every engine token's bytes; and the notes
    on them (a tokenizer whose decoder no table of tokens can reproduce)."""
    tok, files = _tokenizer_and_files(plan.model, plan.options.language.tokenizer)
    to_gpt2 = _gpt2_ids(plan.model, plan.language.kept, plan.language.vocab)
    if to_gpt2 is not None:
        files["token_ids.json"] = json.dumps(to_gpt2) + "\n"
    if tok is None:
        return files, []
    tables = token_text_files(plan, tok, to_gpt2)
    if not tables:
        from .tokenizer import decoder_name
        return files, [f"no on-device detokenizer ({tokens_file(plan)}): the tokenizer's decoder "
                       f"({decoder_name(tok)}) does not turn each token into its own bytes"]
    return {**files, **tables}, []


def tokens_file(plan) -> str:
    """The detokenizer's C file (side_files)."""
    return f"{c_identifier(plan.graph.name)}_tokens.c"


def _tokenizer_and_files(path: Path, tokenizer: Path | None) -> tuple:
    """The tokenizer's files to copy as tokenizer/..., and the tokenizer they make (None, {} without
    one; opened once, its files checked before they are copied)."""
    from .tokenizer import open_tokenizer_and_files

    if tokenizer is None and not tokenizer_present(path.parent):
        return None, {}
    tok, files = open_tokenizer_and_files(tokenizer or path.parent, given=tokenizer is not None)
    return tok, {f"tokenizer/{name}": data for name, data in files.items()}


# A token's start is its group's start plus the lengths of the group's tokens before it: one
# length byte a token and one start per TOKEN_GROUP tokens (tinytalk's 14,019 tokens: 17.5 KB of
# index where a start per token would take 56 KB), at most TOKEN_GROUP - 1 additions a lookup.
TOKEN_GROUP = 16


def token_table(texts: list[bytes]) -> tuple[bytes, list[int], list[int]]:
    """Token texts as one packed byte string, each token's length, and the start of every group
    of TOKEN_GROUP tokens: token i starts at starts[i // G] + sum(lengths[i - i % G:i])."""
    starts, at = [], 0
    for i, t in enumerate(texts):
        if i % TOKEN_GROUP == 0:
            starts.append(at)
        at += len(t)
    return b"".join(texts), [len(t) for t in texts], starts


def token_text_files(plan, tok, to_tokenizer: list[int] | None) -> dict:
    """<ident>_tokens.c and <ident>_tokens.h: inference_token_text(id, &text), engine id -> the
    bytes the token stands for (the tokenizer's id through token_ids.json when the vocabulary
    was pruned or remapped), from const tables; {} when the tokenizer's decoder is not token by
    token (tokenizer.token_texts)."""
    from .emit import c_array, template_environment
    from .tokenizer import JsonTokenizer, token_texts

    table = token_texts(tok)
    if table is None:
        return {}
    vocab = plan.graph.config.vocab
    ids = to_tokenizer if to_tokenizer is not None else range(vocab)
    texts = [table.texts[i] if 0 <= i < len(table.texts) else b"" for i in ids]
    packed, lengths, starts = token_table(texts)
    ltype = "uint8_t" if max(lengths, default=0) <= 0xFF else "uint16_t"
    stype = "uint16_t" if max(starts, default=0) <= 0xFFFF else "uint32_t"
    width = {"uint8_t": 1, "uint16_t": 2, "uint32_t": 4}
    ident = c_identifier(plan.graph.name)
    source = "tokenizer/tokenizer.json" if isinstance(tok, JsonTokenizer) else "tokenizer/vocab.json"
    ctx = dict(model=plan.graph.name, ident=ident, guard=f"{ident.upper()}_TOKENS_H", vocab=vocab,
               bytes=len(packed), storage=max(len(packed), 1), ltype=ltype, stype=stype, group=TOKEN_GROUP,
               groups=len(starts), index_bytes=vocab * width[ltype] + len(starts) * width[stype],
               longest=max(lengths, default=0), source=source,
               remapped=to_tokenizer is not None, metaspace="metaspace" in table.edges, strip="strip" in table.edges,
               empty=sum(1 for t in texts if not t),
               data=c_array(np.frombuffer(packed or b"\0", np.uint8), per_line=20),
               lengths=c_array(np.asarray(lengths, np.uint32), per_line=20),
               starts=c_array(np.asarray(starts, np.uint32), per_line=12))
    env = template_environment(("llm", "host"))
    return {f"{ident}_tokens.h": env.get_template("tokens.h.j2").render(ctx),
            tokens_file(plan): env.get_template("tokens.c.j2").render(ctx)}


def _gpt2_ids(path: Path, kept, vocab: int) -> list[int] | None:
    """Engine token id -> GPT-2 id: a pruned_to_gpt2_ids.json beside the model (model id i is GPT-2
    id map[i], one for each of the model's ``vocab`` ids), composed with --prune-vocab's kept ids
    (engine id i is the checkpoint's kept[i])."""
    id_map = path.with_name("pruned_to_gpt2_ids.json")
    to_gpt2 = None
    if id_map.exists() or id_map.is_symlink():
        to_gpt2 = token_ids(read_json(id_map, what="the model's GPT-2 token ids", max_bytes=TOKEN_IDS_BYTES),
                            where=str(id_map), what="GPT-2 token ids", length=vocab)
    if kept is not None:
        to_gpt2 = [to_gpt2[k] for k in kept] if to_gpt2 is not None else list(kept)
    return to_gpt2


def manifest_section(plan, tokenizer: bool) -> dict:
    """The manifest's ``language_model`` section (its shared part: deployer.manifest)."""
    graph, lang = plan.graph, plan.language
    c, kv = graph.config, graph.kv
    padded_rows = [dict(matrix=name, cols=w.cols, stored=w.codes.shape[1]) for name, w in graph.weights.items()
                   if not isinstance(w, np.ndarray) and w.codes.shape[1] != w.cols]
    return dict(
        architecture=c.architecture,
        config={**{k: v for k, v in vars(c).items() if k not in ("eos", "bos")}, "attention": list(c.attention),
                "attention_bias": list(c.attention_bias)},
        padded_rows=padded_rows,
        weights=graph.weight_format, kv_cache=kv.format, kv_group=kv.group, context=kv.context,
        logits=plan.options.language.logits,
        rope=None if graph.config.position != "rope" else ("compute" if "rope.inv" in graph.weights else "table"),
        ops=[op_summary(op) for op in graph.ops],
        kernels=[lp.variant.name for lp in plan.layers], macs=plan.macs,
        quantization=[dict(matrix=n, rmse=round(r, 8), snr_db=None if s == float("inf") else round(s, 3))
                      for n, r, s in lang.quantization],
        pruned_vocabulary=None if lang.kept is None else dict(kept=len(lang.kept), of=lang.vocab),
        eos_token_id=c.eos, bos_token_id=c.bos, tokenizer="tokenizer/" if tokenizer else None,
        detokenizer=tokens_file(plan) if tokens_file(plan) in plan.files else None,
        l3=None if graph.l3 is None else dict(
            bytes=graph.l3.bytes, image=f"{c_identifier(graph.name)}_l3_weights.bin",
            streamed_bytes_per_token=llm_passes.streamed_bytes_per_token(graph), buffer_bytes=graph.l3.buffer,
            matrices=[dict(matrix=m.name, codes=m.codes, scales=m.scales, row_bytes=m.row_bytes, rows_per_fetch=m.rows)
                      for m in graph.l3.matrices]))
