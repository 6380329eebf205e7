"""`deploy verify` for a language model: the engine, built with the host compiler (or for the
core's QEMU board), runs seeded random token sequences and its every output is compared with the
numpy executor of the same plan (deployer.decoder_executor), which computes float32 as the engine
does: equal bytes are the pass. The sequences run past the KV cache's context (it slides) where
the model's positions allow. On QEMU: the instructions of one token (the one at position 1) and
the cycles the core's timing table gives them.

    result = verify_language_model(dep, seeds=3, sanitize=False, on_qemu=False)
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from network_parser.transformer_ir import HeadSelect, MatMul

from .decoder_executor import Executor

HARNESS = Path(__file__).resolve().parent / "harness" / "verify_main.c"
FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")
REFERENCE = "the numpy executor of the same plan (deployer/decoder_executor.py)"


def token_sequences(dep, seeds: int) -> list[np.ndarray]:
    """One sequence per seed: past the KV cache's context by two positions (so it slides), within
    the model's positions, at least 8 tokens."""
    c, kv = dep.graph.config, dep.graph.kv
    n = min(c.max_positions, max(8, min(kv.context + 2, 64)))
    return [np.random.default_rng(seed).integers(0, c.vocab, n).astype(np.int32) for seed in range(seeds)]


def matrix_macs(graph) -> int:
    """The MACs of one token's matrices (its attention's are few beside them)."""
    return sum(op.rows * op.cols for op in graph.ops if isinstance(op, (MatMul, HeadSelect)))


def expected_bytes(graph, ids: np.ndarray) -> list[bytes]:
    """Every token's outputs as the engine writes them, from a fresh executor."""
    ex, out = Executor(graph), []
    for t in ids:
        ex.step(int(t))
        out.append(b"".join(o.tobytes() for o in ex.outputs()))
    return out


def compare(graph, got: bytes, want: list[bytes]) -> dict:
    """Per output: elements and the largest difference over the tokens (ids: how many differ)."""
    step = len(want[0])
    outputs, offset = [], 0
    for index, name in enumerate(graph.outputs):
        act = graph.activation(name)
        dtype = np.int32 if act.dtype == "int32" else np.float32
        g = np.stack([np.frombuffer(got[k * step + offset:k * step + offset + act.nbytes], dtype)
                      for k in range(len(got) // step)]) if len(got) == step * len(want) else None
        w = np.stack([np.frombuffer(b[offset:offset + act.nbytes], dtype) for b in want])
        offset += act.nbytes
        if g is None:
            diff = float("inf")
        elif dtype == np.int32:
            diff = float(np.count_nonzero(g != w))
        else:
            same = (g.view(np.uint32) == w.view(np.uint32))
            diff = 0.0 if same.all() else float(np.nanmax(np.abs(g.astype(np.float64) - w)))
        outputs.append(dict(index=index, name=name, elements=act.elements, max_abs_diff=diff))
    return dict(outputs=outputs, exact=all(o["max_abs_diff"] == 0 for o in outputs))


def verify_language_model(dep, seeds: int = 3, sanitize: bool = False, on_qemu: bool = False,
                          clock_mhz: float | None = None) -> dict:
    from .verify import SANITIZE_FLAGS, compile_files
    sequences = token_sequences(dep, seeds)
    result = dict(kind="language_model", target=dep.backend.name, samples=len(sequences), tokens=len(sequences[0]), reference=REFERENCE,
                  macs=matrix_macs(dep.graph))
    checks = []
    if on_qemu:
        from . import cycles, qemu
        qemu.require_board_tools(dep.backend)
        elf = qemu.build_elf(dep)
        for ids in sequences:  # a run each: the engine starts every sequence at position 0
            checks.append(compare(dep.graph, qemu.run(elf, ids.tobytes()).output, expected_bytes(dep.graph, ids)))
        payload = sequences[0][:1].tobytes()
        estimate = cycles.estimate_inference(elf, payload, dep.backend.cpu) if cycles.available(dep.backend) else None
        instructions = estimate.instructions if estimate else qemu.instructions_per_inference(elf, payload)[0]
        mem = qemu.elf_memory(elf.path, elf.prefix)
        result.update(qemu_machine=elf.machine, instructions=instructions,
                      instructions_per_mac=round(instructions / max(result["macs"], 1), 4),
                      flash_bytes=mem["flash_bytes"], sram_bytes=mem["sram_bytes"],
                      planned_flash_bytes=dep.memory.flash_bytes, planned_sram_bytes=dep.memory.sram_bytes)
        if estimate:
            timing = cycles.timing_fields(estimate.cycles, dep, clock_mhz)
            timing["cycles_per_mac"] = round(estimate.cycles / max(result["macs"], 1), 4)
            result.update(timing)
    else:
        flags = (*(f for f in FLAGS if not f.startswith("-O")), *SANITIZE_FLAGS) if sanitize else FLAGS
        exe = compile_files(dep.files, "gcc", flags, HARNESS)
        for ids in sequences:
            run = subprocess.run([str(exe)], input=ids.tobytes(), capture_output=True, timeout=600)
            checks.append(compare(dep.graph, run.stdout if run.returncode == 0 else b"", expected_bytes(dep.graph, ids)))
    result["outputs"] = [dict(o, max_abs_diff=max(c["outputs"][o["index"]]["max_abs_diff"] for c in checks))
                         for o in checks[0]["outputs"]]
    result["exact"] = all(c["exact"] for c in checks)
    return result
