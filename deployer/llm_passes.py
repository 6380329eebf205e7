"""The language-model passes, each behind one flag, each a function from a graph to a new graph
plus what it did:

    graph, kept = prune_vocabulary(graph, ids)          # --prune-vocab FILE
    graph, report = quantize_weights(graph, "q4_0")      # --weights: (matrix, RMSE, SNR dB) each
    graph = cache_kv(graph, "int4", context=96)          # --kv-cache with --context
    graph = select_logits(graph, "argmax")               # --logits full|argmax|topk:K
    graph = place_rope(graph, "auto", flash, code)       # --rope: the rotary table or its computation
    graph = stream_weights(graph, l3, flash, code)       # --l3: matrices in external memory
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from network_parser.errors import UsageError
from network_parser.errors import InfeasibleBudget
from network_parser.transformer_ir import (Activation, HeadSelect, KvCache, L3Weights, MatMul, QuantizeInput, Rope,
                                           StreamedMatrix, TransformerGraph, rope_inverse_frequencies)

from . import decoder_quant as Q

WEIGHT_FORMATS = ("q4_0", "int8", "f32")
KV_FORMATS = ("int8", "int4", "f32")
KV_LEVELS = {"int8": 127, "int4": 7}


@dataclass(frozen=True)
class LanguageFlags:
    """The flags only a language model takes (deployer.pipeline.Options.language)."""
    weights: str = "q4_0"  # the matrices: "q4_0" | "int8" | "f32"
    kv: str = "int8"  # the KV cache: "int8" | "int4" | "f32"
    context: int | None = None  # KV positions (default: all the model's)
    tokenizer: Path | None = None  # the GPT-2 vocab.json + merges.txt (default: beside the model)
    prune_vocab: Path | None = None  # a JSON list of the token ids to keep (the model's own ids)
    logits: str = "full"  # the output: "full" float logits, "argmax" (the id), "topk:K" (K ids and logits)
    rope: str = "auto"  # rotary angles: "table" (in flash), "compute" (per token), "auto" (the table if flash allows)


def prune_vocabulary(graph: TransformerGraph, ids: list[int]) -> tuple[TransformerGraph, list[int]]:
    """Only the listed token ids, in their sorted order: the embedding and the head (tied or
    not) keep those rows. Returns the kept ids too: new id i is old id kept[i]."""
    c = graph.config
    bad = [i for i in ids if not 0 <= i < c.vocab]
    if bad:
        raise UsageError(f"--prune-vocab: token {bad[0]} is outside the vocabulary of {c.vocab}")
    kept = sorted(set(ids))
    config = replace(c, vocab=len(kept), eos=kept.index(c.eos) if c.eos in kept else None,
                     bos=kept.index(c.bos) if c.bos in kept else None)
    tables = {"wte", graph.head}
    weights = {**graph.weights, **{t: np.ascontiguousarray(graph.weights[t][kept]) for t in tables}}
    ops = tuple(replace(op, rows=len(kept)) if isinstance(op, MatMul) and op.weight in tables else op
                for op in graph.ops)
    acts = tuple(replace(a, elements=len(kept)) if a.name == graph.logits else a for a in graph.activations)
    return replace(graph, config=config, ops=ops, activations=acts, weights=weights), kept


def quantize_weights(graph: TransformerGraph, fmt: str) -> tuple[TransformerGraph, list[tuple[str, float, float]]]:
    """Every matrix a MatMul multiplies by and the embedding table to Q4_0 or int8 rows (a row
    whose length is not a multiple of 32 gets a zero-padded last block); norms, biases, position
    embeddings and rotary tables stay float32."""
    if fmt not in WEIGHT_FORMATS:
        raise UsageError(f"--weights {fmt}: expected one of {'|'.join(WEIGHT_FORMATS)}")
    if fmt == "f32":
        return replace(graph, weight_format="f32"), []
    quant = Q.quantize_q4_0 if fmt == "q4_0" else Q.quantize_int8_rows
    weights, report = dict(graph.weights), []
    for name in graph.matrices():
        m = quant(weights[name])
        report.append((name, *Q.error_stats(weights[name], m.dequantize())))
        weights[name] = m
    return replace(graph, weights=weights, weight_format=fmt, ops=quantize_inputs(graph.ops)), report


def quantize_inputs(ops: tuple) -> tuple:
    """A QuantizeInput before each run of matvecs reading the same input: its int8 blocks are
    made once (q, k and v share theirs; gate and up theirs)."""
    out, last = [], None
    for op in ops:
        if isinstance(op, (MatMul, HeadSelect)):
            if op.x != last:
                out.append(QuantizeInput(op.x, op.cols))
                last = op.x
        elif any(getattr(op, f) == last for f in op._acts):  # x written again (or read by another op)
            last = None
        out.append(op)
    return tuple(out)


def kv_group_default(c, kv: str) -> int:
    """Values per KV scale: one head for int8 (its greedy decoding of tinytalk matches f32's,
    which 32 values per scale does not); 32 values for int4, whose scales must stay small
    beside its codes: tinytalk at 96 positions keeps 24.6 KB of scales instead of 98 KB per
    head (measured top-1 agreement with f32: 0.93 per head, 0.90 per 32, 0.82 per position)."""
    return c.head_dim if kv == "int8" else min(Q.BLOCK, c.kv_dim)


def cache_kv(graph: TransformerGraph, fmt: str, context: int | None = None, group: int | None = None) -> TransformerGraph:
    """The KV cache's format and length (default: every position the model has)."""
    c = graph.config
    if fmt not in KV_FORMATS:
        raise UsageError(f"--kv-cache {fmt}: expected one of {'|'.join(KV_FORMATS)}")
    context = c.max_positions if context is None else context
    if not 1 <= context <= c.max_positions:
        raise UsageError(f"--context {context}: the model has {c.max_positions} positions")
    group = 0 if fmt == "f32" else (group or kv_group_default(c, fmt))
    if group and c.kv_dim % group:
        raise UsageError(f"KV scale groups of {group} do not divide a position's {c.kv_dim} keys")
    return replace(graph, kv=KvCache(fmt, context, group))


def kv_cache_bytes(graph: TransformerGraph) -> int:
    c, kv = graph.config, graph.kv
    row = {"f32": 4 * c.kv_dim, "int8": c.kv_dim, "int4": c.kv_dim // 2}[kv.format]
    scales = 4 * (c.kv_dim // kv.group) if kv.group else 0
    return 2 * c.layers * kv.context * (row + scales)


def weight_bytes(graph: TransformerGraph) -> int:
    """The weights in flash: every one but the matrices streamed from L3."""
    streamed = {m.name for m in graph.l3.matrices} if graph.l3 is not None else set()
    return sum(w.nbytes for name, w in graph.weights.items() if name not in streamed)



def weight_bytes_as(graph: TransformerGraph, fmt: str) -> int:
    """The weights' bytes were the matrices in ``fmt``; the norms, biases, position embeddings
    and rotary tables stay float32."""
    matrices = set(graph.matrices())
    return sum(Q.matrix_bytes(fmt, *(w.shape if isinstance(w, np.ndarray) else (w.codes.shape[0], w.cols)))
               if name in matrices else w.nbytes for name, w in graph.weights.items())


HEAD_BLOCK = 64  # head rows computed at a time when the logits are streamed (256 bytes of float32)


def logits_k(mode: str, vocab: int | None = None) -> int:
    """--logits as a count of selected ids: 0 for full, 1 for argmax, K for topk:K."""
    if mode == "full":
        return 0
    if mode == "argmax":
        return 1
    k = mode[5:] if mode.startswith("topk:") else ""
    if not k.isdigit() or int(k) < 1:
        raise UsageError(f"--logits {mode}: expected full, argmax or topk:K with K a positive integer")
    if vocab is not None and int(k) > vocab:
        raise UsageError(f"--logits {mode}: the vocabulary has {vocab} tokens")
    return int(k)


def select_logits(graph: TransformerGraph, mode: str) -> TransformerGraph:
    """--logits argmax|topk:K: the head's MatMul becomes a HeadSelect streaming its rows into the
    k best ids (output 0, int32) and their logits (output 1 for topk), so SRAM no longer holds a
    float per token of the vocabulary."""
    k = logits_k(mode, graph.config.vocab)
    if not k:
        return graph
    head = next(op for op in graph.ops if isinstance(op, MatMul) and op.out == graph.logits)
    select = HeadSelect(head.x, "NEXT_IDS", "NEXT_LOGITS", head.weight, head.rows, head.cols, k,
                        min(HEAD_BLOCK, head.rows))
    acts = tuple(a for a in graph.activations if a.name != graph.logits) + (
        Activation("NEXT_IDS", k, "int32", "the most likely token ids, best first"),
        Activation("NEXT_LOGITS", k, "float32", "their logits"))
    return replace(graph, ops=tuple(select if op is head else op for op in graph.ops), activations=acts,
                   logits="NEXT_IDS", outputs=("NEXT_IDS", "NEXT_LOGITS") if k > 1 else ("NEXT_IDS",))


STREAM_BUFFER = 8 * 1024  # a streamed matrix's two fetch blocks together at most (rows permitting)
L3_ALIGN = 16


def _matrix_parts(w) -> tuple[int, int, int]:
    """(rows, bytes of codes or floats per row, bytes of scales per row) of a matrix as stored."""
    if isinstance(w, np.ndarray):
        return w.shape[0], 4 * w.shape[1], 0
    rows, stored = w.codes.shape
    if isinstance(w, Q.Q4Matrix):
        return rows, stored // 2, 2 * (stored // Q.BLOCK)
    return rows, stored, 4


def stream_weights(graph: TransformerGraph, l3: int | None, flash: int | None, code: int) -> TransformerGraph:
    """--l3: matrices move to external memory, largest first, until the rest fits --flash (every
    matrix without --flash); each streams a block of rows at a time, double-buffered: multiples
    of 4 rows (the DSP matvec's pass), the two blocks within STREAM_BUFFER bytes."""
    if l3 is None:
        return graph
    sizes = {n: graph.weights[n].nbytes for n in graph.matrices()}
    rest, chosen = weight_bytes(graph), set()
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if flash is not None and rest + code <= flash:
            break
        chosen.add(name)
        rest -= sizes[name]
    if flash is not None and rest + code > flash:
        raise InfeasibleBudget(f"the plan needs {rest + code} bytes of FLASH but --flash is {flash} with every matrix "
                               f"in L3 (norms, biases, tables {rest:,} + code about {code:,}); the smallest --flash that "
                               f"works is {rest + code} ({-(-(rest + code) // 1024)}K)", rest + code,
                               needs={"--flash": rest + code})
    streamed, addr, buffer = [], 0, 0
    for name in (n for n in graph.matrices() if n in chosen):  # in the graph's order
        rows, codes_row, scales_row = _matrix_parts(graph.weights[name])
        row = codes_row + scales_row
        block = max(4, min(64, STREAM_BUFFER // (2 * row) // 4 * 4))
        block = min(block, -(-rows // 4) * 4)
        codes, scales = addr, _align(addr + rows * codes_row)
        addr = _align(scales + rows * scales_row)
        streamed.append(StreamedMatrix(name, codes, scales, row, block))
        buffer = max(buffer, 2 * block * row)
    if not streamed:
        return graph
    l3w = L3Weights(tuple(streamed), addr, buffer)
    ops = tuple(replace(op, block=l3w.get(op.weight).rows) if isinstance(op, HeadSelect) and l3w.get(op.weight)
                else op for op in graph.ops)
    return replace(graph, ops=ops, l3=l3w)


def _align(n: int) -> int:
    return -(-n // L3_ALIGN) * L3_ALIGN


def streamed_bytes_per_token(graph: TransformerGraph) -> int:
    """Bytes read from L3 for one token: every streamed matrix a matvec multiplies by, whole,
    and a row of the embedding table when it is streamed and not also the head."""
    if graph.l3 is None:
        return 0
    used = {op.weight for op in graph.ops if isinstance(op, (MatMul, HeadSelect))}
    total = sum(graph.weights[m.name].nbytes for m in graph.l3.matrices if m.name in used)
    wte = graph.l3.get("wte")
    return total + (wte.row_bytes if wte is not None and "wte" not in used else 0)


ROPE_MODES = ("auto", "table", "compute")


def place_rope(graph: TransformerGraph, mode: str, flash: int | None, code: int) -> TransformerGraph:
    """--rope: the rotary angles' cosines and sines as tables in flash (positions x head_dim/2
    of each: nothing to compute), or computed each token from the inverse frequencies (head_dim/2
    floats of flash, a sine and a cosine per frequency and rotation). ``auto``: the tables unless
    --flash cannot hold them beside the rest."""
    if mode not in ROPE_MODES:
        raise UsageError(f"--rope {mode}: expected one of {'|'.join(ROPE_MODES)}")
    if "rope.cos" not in graph.weights:
        if mode != "auto":
            raise UsageError(f"--rope {mode}: the model has no rotary embeddings")
        return graph
    if mode == "table" or (mode == "auto" and (flash is None or weight_bytes(graph) + code <= flash)):
        return graph
    weights = {k: v for k, v in graph.weights.items() if k not in ("rope.cos", "rope.sin")}
    weights["rope.inv"] = rope_inverse_frequencies(graph.config)
    ops = tuple(replace(op, cos=None, sin=None, inv="rope.inv") if isinstance(op, Rope) else op for op in graph.ops)
    return replace(graph, weights=weights, ops=ops)
