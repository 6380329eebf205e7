"""Language-model engines, both families (GPT-Neo and LLaMA), beside the published figures for
microcontrollers: te-comp's MLIR-compiled 8.3M GPT-Neo (about 1 token/s on a 160 MHz Cortex-M7
in 249 KB SRAM and 3.62 MB flash) and llama2.c's stories260K (about 19 tokens/s on an RP2350,
a Cortex-M33 at 150 MHz). It measures only; nothing here is a pass or a fail.

    python bench/llm_bench.py [--tinytalk DIR] [--llama DIR] [--context 96] [--tokens 40]
                              [--prompt "Once upon a time"] [--no-qemu]

1. tinytalk (GPT-Neo, 3M): flash, SRAM, KV cache, arena, host tokens/s and the greedy
   continuation per weights / KV format, and q4_0 / int4 with --logits argmax beside full.
2. llama_tiny_random (LLaMA): flash, SRAM, host tokens/s per format, and the numpy executor's
   logits against the transformers reference (ref_logits.npy over ref_input_ids.npy): top-1
   agreement (random weights have near-ties, so a figure, not a gate) and max relative error.
3. Shapes with random weights (tests/*_builder.py): a stories260K-shaped LLaMA on the Cortex-M7
   against 256 KiB SRAM / 512 KiB flash, and GPT-Neo at te-comp's shape (vocabulary 50,257)
   with full and argmax logits against te-comp's 249 KB.
4. Under QEMU (Cortex-M7, M55 and M33): instructions and MACs per token, instructions per MAC,
   the top functions, and cycles estimated from the trace by deployer/cycles.py with each
   core's timing table, as tokens/s at 160 MHz, 150 MHz and each core's preset clock.

Host flash = weights + the engine's .text from gcc -O2 -c on this machine (x86-64; a Cortex-M
build differs, section 4 gives the ELF's). SRAM = KV cache + activation arena. Host tokens/s
come from `deploy generate` (every inference_run: prompt and generated tokens) and are a ratio
between formats only. Cycle estimates are not checked against silicon (each timing table says
how far off it may be); the published figures are measured on hardware, so the comparisons are
ratios of an estimate to a measurement.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends import BACKENDS, cortexm_timing  # noqa: E402
from deployer import cycles, qemu  # noqa: E402
from deployer.decoder_executor import Session  # noqa: E402
from deployer.generate import generate  # noqa: E402
from deployer.llm_passes import LanguageFlags  # noqa: E402
from deployer.output import write_output  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from network_parser.decoders import read_decoder  # noqa: E402
from network_parser.errors import DeployError  # noqa: E402
from network_parser.transformer_ir import HeadSelect, MatMul  # noqa: E402
from tests import gptneo_builder, llama_builder  # noqa: E402

SHARED = ROOT / "tests" / "model_files" / "safetensors"
FORMATS = (("q4_0", "int4"), ("q4_0", "int8"), ("int8", "int8"), ("f32", "f32"))
KIB = 1024

# te-comp: an 8.3M GPT-Neo (8 layers, d_model 128, 16 heads, GPT-2's vocabulary), int4 KV x 96
TE_COMP = dict(sram=249_000, flash=3.62e6, kv=108_000, tokens_per_s=1.0, mhz=160)
TE_COMP_SHAPE = dict(vocab=50257, d=128, heads=16, layers=8, inner=512, positions=2048, window=256)
# llama2.c's stories260K on an RP2350 (Cortex-M33 at 150 MHz)
LLAMA2C = dict(tokens_per_s=19.0, mhz=150, sram=256 * KIB, flash=512 * KIB)
STORIES260K_SHAPE = dict(vocab=512, d=64, heads=8, kv_heads=4, layers=5, inner=172, positions=512)


# ---------------------------------------------------------------- printing

def table(header: list[str], rows: list[list], right: set[int] = frozenset()) -> None:
    """A Markdown table; the columns in ``right`` are right-aligned."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print()


def n(x: float) -> str:
    return f"{x:,.0f}"


def heading(text: str) -> None:
    print(f"\n## {text}\n")


# ---------------------------------------------------------------- on this machine

def text_bytes(engine: Path, scratch: Path) -> int:
    """.text of the engine compiled with gcc -O2 (the object outside the output folder, which
    `deploy generate` checks is as deploy wrote it)."""
    obj = scratch / "engine.o"
    subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-c", str(engine), "-o", str(obj),
                    "-I", str(engine.parent)], check=True)
    out = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.startswith(".text"))


@dataclass
class HostRow:
    flash: int
    weights: int
    code: int
    sram: int
    kv: int
    arena: int
    tokens_per_s: float
    text: str


def on_host(model: Path, flags: LanguageFlags, prompt: str, tokens: int) -> HostRow:
    """Deploy for the host, measure the code, and generate greedily with `deploy generate`."""
    dep = deploy(model, Options(language=flags))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        write_output(dep.files, out)
        code = text_bytes(out / next(f for f in dep.files if f.endswith("_engine.c")), Path(tmp))
        g = generate(out, prompt, tokens, flags.tokenizer)
    m = dep.memory
    return HostRow(m.weights_bytes + code, m.weights_bytes, code, m.sram_bytes, m.state_bytes, m.arena_bytes,
                   g["tokens_per_s"], g["text"])


# ---------------------------------------------------------------- 1. tinytalk's formats

def tinytalk_formats(model: Path, tokenizer: Path, context: int, prompt: str, tokens: int) -> None:
    heading(f"1. GPT-Neo: {model.parent.name}, context {context}, prompt {prompt!r}, {tokens} tokens (host)")
    variants = [(w, kv, "full") for w, kv in FORMATS]
    variants.insert(1, ("q4_0", "int4", "argmax"))
    rows, first = [], None
    for weights, kv, logits in variants:
        r = on_host(model, LanguageFlags(weights=weights, kv=kv, context=context, tokenizer=tokenizer, logits=logits),
                    prompt, tokens)
        first = first or r
        rows.append([f"{weights} / {kv}", logits, n(r.flash), n(r.weights), n(r.code), n(r.sram), n(r.kv),
                     n(r.arena), f"{r.tokens_per_s:,.0f}", repr(r.text[:48])])
    rows.append([f"te-comp (MLIR, M7 {TE_COMP['mhz']} MHz, int4 KV x 96)", "full", n(TE_COMP["flash"]), "", "",
                 n(TE_COMP["sram"]), n(TE_COMP["kv"]), "", "~1 on the M7", ""])
    table(["weights / KV", "logits", "flash B", "weights B", "code B", "SRAM B", "KV B", "arena B", "host tok/s",
           "continuation"], rows, right=set(range(2, 9)))
    print(f"q4_0 / int4 (full logits) against te-comp's: flash {first.flash / TE_COMP['flash']:.2f}x, SRAM "
          f"{first.sram / TE_COMP['sram']:.2f}x, KV cache {first.kv / TE_COMP['kv']:.2f}x (tinytalk's vocabulary is "
          f"pruned to 14,019 tokens; te-comp's shape with GPT-2's 50,257 is in section 3)")


# ---------------------------------------------------------------- 2. LLaMA

def top1(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a.argmax(-1) == b.argmax(-1)))


def rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def executor_logits(ckpt, ids: np.ndarray, weights: str, kv: str, context: int | None) -> np.ndarray:
    s = Session(ckpt, context=context, weights=weights, kv=kv)
    return np.stack([s.step(int(i)) for i in ids])


def llama_formats(folder: Path, prompt: str, tokens: int) -> None:
    model = folder / "model.safetensors"
    ckpt = read_decoder(model)
    ids = np.load(folder / "ref_input_ids.npy")
    ref = np.load(folder / "ref_logits.npy").reshape(len(ids), -1)
    c = ckpt.config
    heading(f"2. LLaMA: {folder.name} (d {c.d_model}, {c.layers} layers, {c.heads} heads / {c.kv_heads} KV, "
            f"vocab {c.vocab}), context {c.max_positions}, {tokens} tokens (host)")
    rows = []
    for weights, kv in FORMATS:
        r = on_host(model, LanguageFlags(weights=weights, kv=kv), prompt, tokens)
        got = executor_logits(ckpt, ids, weights, kv, None)
        rows.append([f"{weights} / {kv}", n(r.flash), n(r.sram), n(r.kv), f"{r.tokens_per_s:,.0f}",
                     f"{top1(got, ref) * len(ids):.0f}/{len(ids)}", f"{rel_err(got, ref):.2e}"])
    table(["weights / KV", "flash B", "SRAM B", "KV B", "host tok/s", "top-1 vs reference", "max rel. error"],
          rows, right=set(range(1, 7)))
    print(f"top-1: the executor's arg-max against the transformers reference's over ref_input_ids.npy "
          f"({len(ids)} positions); random weights leave near-ties, so a quantized format's misses are a figure, "
          f"not a failure. Max relative error: max |executor - reference| / max |reference|.")


# ---------------------------------------------------------------- 3. shapes

def write_shapes(folder: Path) -> tuple[Path, Path]:
    """The stories260K-shaped LLaMA and the te-comp-shaped GPT-Neo, random weights."""
    stories = llama_builder.write(folder / "stories260k", llama_builder.config(**STORIES260K_SHAPE))
    tecomp = gptneo_builder.write(folder / "tecomp", gptneo_builder.config(**TE_COMP_SHAPE))
    return stories, tecomp


def m7_plan(model: Path, context: int, logits: str = "full"):
    flags = LanguageFlags(weights="q4_0", kv="int4", context=context, logits=logits)
    return deploy(model, Options(target="cortex-m7", language=flags))


def stories_shape(model: Path) -> None:
    s = STORIES260K_SHAPE
    m = m7_plan(model, s["positions"]).memory
    print(f"stories260K shape (dim {s['d']}, {s['layers']} layers, {s['heads']} heads / {s['kv_heads']} KV, MLP "
          f"{s['inner']}, vocab {s['vocab']}, context {s['positions']}):\n")
    sram, flash = LLAMA2C["sram"], LLAMA2C["flash"]
    table(["", "plan B", "budget B", "share"], [
        ["SRAM (KV + arena)", n(m.sram_bytes), n(sram), f"{m.sram_bytes / sram:.0%}"],
        ["of it the KV cache", n(m.state_bytes), "", f"{m.state_bytes / sram:.0%}"],
        ["flash (weights + code estimate)", n(m.flash_bytes), n(flash), f"{m.flash_bytes / flash:.0%}"],
    ], right={1, 2, 3})


def tecomp_shape(model: Path) -> None:
    t = TE_COMP_SHAPE
    print(f"GPT-Neo at te-comp's shape ({t['layers']} layers, d_model {t['d']}, {t['heads']} heads, vocab "
          f"{t['vocab']:,}, inner {t['inner']}, {t['positions']:,} positions), int4 KV x 96:\n")
    rows = []
    for logits in ("full", "argmax"):
        m = m7_plan(model, 96, logits).memory
        rows.append([logits, n(m.sram_bytes), n(m.state_bytes), n(m.arena_bytes),
                     f"{m.sram_bytes / TE_COMP['sram']:.2f}x", n(m.flash_bytes),
                     f"{m.flash_bytes / TE_COMP['flash']:.2f}x"])
    rows.append(["te-comp (published)", n(TE_COMP["sram"]), n(TE_COMP["kv"]), "", "1.00x", n(TE_COMP["flash"]),
                 "1.00x"])
    table(["logits", "SRAM B", "KV B", "arena B", "SRAM / te-comp", "flash B", "flash / te-comp"], rows,
          right=set(range(1, 7)))
    print(f"Our flash holds the learned position table of all {t['positions']:,} positions in float32 "
          f"({t['positions'] * t['d'] * 4:,} B of it).")


def shapes(stories: Path, tecomp: Path) -> None:
    heading("3. Shapes (random weights, cortex-m7 plans, q4_0 weights, int4 KV cache)")
    stories_shape(stories)
    tecomp_shape(tecomp)


# ---------------------------------------------------------------- 4. QEMU

@dataclass
class Cost:
    """Instructions and estimated cycles of some tokens, by function (the harness's left out)."""
    instructions: dict[str, float]
    cycles: dict[str, float]

    @property
    def total_instructions(self) -> float:
        return sum(self.instructions.values())

    @property
    def total_cycles(self) -> float:
        return sum(self.cycles.values())

    def top(self, k: int = 5) -> str:
        """The ``k`` functions with the most cycles: their shares of cycles and of instructions."""
        ranked = sorted(self.cycles.items(), key=lambda kv: -kv[1])[:k]
        cycles_all, instructions_all = self.total_cycles, self.total_instructions
        return ", ".join(f"{name.split('.')[0]} {c / cycles_all:.0%} "
                         f"({self.instructions.get(name, 0) / instructions_all:.0%} of instructions)"
                         for name, c in ranked)


@dataclass
class Measure:
    core: str
    macs: int  # per token, in the matrices
    first: Cost  # the token at position 1
    mean: Cost  # per token over positions 1 .. context-1
    elf: dict  # qemu.elf_memory
    context: int


def graph_macs(graph) -> int:
    """Multiply-accumulates of one token in the graph's matrices (attention left out)."""
    return sum(op.rows * op.cols for op in graph.ops if isinstance(op, (MatMul, HeadSelect)))


def run_by_function(elf, estimator, ids: np.ndarray) -> tuple[dict, dict]:
    """Instructions and estimated cycles by function of one run over ``ids``."""
    run = qemu.run(elf, np.asarray(ids, np.int32).tobytes(), count=True, blocks=True)
    funcs = qemu.functions(elf.path)
    return (qemu.per_function(run.histogram, funcs),
            qemu.per_function(estimator.by_address(cycles.block_runs(run.blocks)), funcs))


def tokens_between(elf, estimator, ids: np.ndarray, start: int, stop: int) -> Cost:
    """The tokens at positions start .. stop-1: a run over ids[:stop] less one over ids[:start],
    per token (as cycles.estimate_inference does for one token)."""
    (i1, c1), (i2, c2) = run_by_function(elf, estimator, ids[:start]), run_by_function(elf, estimator, ids[:stop])

    def per_token(a: dict, b: dict) -> dict:
        d = {k: (b[k] - a.get(k, 0)) / (stop - start) for k in b if not qemu.is_harness(k)}
        return {k: v for k, v in d.items() if v}
    return Cost(per_token(i1, i2), per_token(c1, c2))


def measure(model: Path, target: str, context: int) -> Measure:
    """The q4_0 / int4 engine for ``target`` on QEMU: the token at position 1, and the mean token
    over positions 1 .. context-1 (the KV cache filled once)."""
    dep = deploy(model, Options(target=target, language=LanguageFlags(weights="q4_0", kv="int4", context=context)))
    elf = qemu.build_elf(dep)
    estimator = cortexm_timing.Estimator.for_elf(elf.path, dep.backend.cpu)
    ids = np.random.default_rng(0).integers(3, dep.graph.config.vocab, context)
    return Measure(dep.backend.cpu, graph_macs(dep.graph), tokens_between(elf, estimator, ids, 1, 2),
                   tokens_between(elf, estimator, ids, 1, context), qemu.elf_memory(elf.path), context)


def preset_for(cpu: str):
    """The first part preset with this core (stm32h743 for the M7)."""
    return next(b for b in BACKENDS.values() if b.part and b.cpu == cpu)


def tokens_per_s(cycles_per_token: float, mhz: float) -> float:
    return 1000.0 / cycles.milliseconds(cycles_per_token, mhz)


def speeds(cost: Cost, core: str) -> list[str]:
    """tokens/s at 160 MHz and at the core's preset clock."""
    preset = preset_for(core)
    clock, _ = cycles.clock_for(preset, None)
    return [f"{tokens_per_s(cost.total_cycles, 160):,.1f}",
            f"{tokens_per_s(cost.total_cycles, clock):,.1f} ({preset.name}, {clock:g} MHz)"]


TINYTALK, STORIES = "tinytalk", "stories260K shape"
QEMU_TARGETS = {TINYTALK: ("cortex-m7", "cortex-m55"), STORIES: ("cortex-m7", "cortex-m55", "cortex-m33")}


def qemu_section(models: dict[str, tuple[Path, int]], tecomp_macs: int) -> None:
    """``models``: label -> (model, context), the labels of QEMU_TARGETS."""
    heading("4. Under QEMU: q4_0 weights, int4 KV cache, full logits")
    missing = qemu.missing_tools()
    if missing:
        print(f"skipped: {', '.join(missing)} missing (tests/install.sh)")
        return
    results = {}
    for key, targets in QEMU_TARGETS.items():
        model, context = models[key]
        for target in targets:
            try:
                results[(key, target)] = measure(model, target, context)
            except DeployError as e:  # a core that cannot build the model: said in one line
                print(f"{key} on {target}: not measured ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    first_token_table(results)
    context_table(results)
    compare_published(results, tecomp_macs)
    for core in dict.fromkeys(m.core for m in results.values()):
        t = cortexm_timing.load_table(core)
        print(f"- cycle model {t.path.name} ({t.model}): leaves out {t.leaves_out}; {t.expected_error}.")


def first_token_table(results: dict) -> None:
    print("The token at position 1 (runs of one and two tokens, the harness's functions left out):\n")
    rows = []
    for (label, target), m in results.items():
        f = m.first
        rows.append([f"{label}, context {m.context}", target, n(f.total_instructions), n(m.macs),
                     f"{f.total_instructions / m.macs:.2f}", n(f.total_cycles), f"{f.total_cycles / m.macs:.2f}",
                     *speeds(f, m.core), n(m.elf["flash_bytes"]), n(m.elf["sram_bytes"])])
    table(["model", "core", "instr/token", "MACs/token", "instr/MAC", "est. cycles/token", "cycles/MAC",
           "tok/s @160 MHz", "tok/s @preset clock", "ELF flash B", "ELF SRAM B"], rows, right=set(range(2, 11)))
    print("MACs: rows x cols over the graph's MatMul and HeadSelect ops (attention's dot products left out). "
          "Goal: at most 2.0 instructions per MAC (tinytalk was 3.31). ELF SRAM includes the QEMU harness and a "
          "4 KiB stack. Top functions by estimated cycles:\n")
    for (label, target), m in results.items():
        print(f"- {label}, {target}: {m.first.top()}")
    print()


def context_table(results: dict) -> None:
    print("The mean token over positions 1 .. context-1 (the KV cache filled once; attention grows with the "
          "position; exp_f32 also serves GELU and SiLU):\n")
    rows = []
    for (label, target), m in results.items():
        f = m.mean
        attention = sum(v for k, v in f.cycles.items() if k.startswith(("attention", "exp_f32", "kv_at4")))
        rows.append([f"{label}, context {m.context}", target, n(f.total_instructions), n(f.total_cycles),
                     *speeds(f, m.core), f"{attention / f.total_cycles:.0%}",
                     f"{f.total_cycles / m.first.total_cycles:.1f}x"])
    table(["model", "core", "instr/token", "est. cycles/token", "tok/s @160 MHz", "tok/s @preset clock",
           "attention + exp_f32 share", "cycles / position 1's"], rows, right=set(range(2, 8)))
    for (label, target), m in results.items():
        print(f"- {label}, {target}: {m.mean.top()}")
    print()


def compare_published(results: dict, tecomp_macs: int) -> None:
    """Our estimates against te-comp's and llama2.c's measured figures, as ratios."""
    print("Against the published (our cycle estimates, not checked against silicon, over their measurements on "
          "hardware):\n")
    m = results.get((TINYTALK, "cortex-m7"))
    if m is not None:
        first, mean = (tokens_per_s(c.total_cycles, TE_COMP["mhz"]) / TE_COMP["tokens_per_s"]
                       for c in (m.first, m.mean))
        cpm = m.first.total_cycles / m.macs
        scaled = TE_COMP["mhz"] * 1e6 / (cpm * tecomp_macs) / TE_COMP["tokens_per_s"]
        print(f"- te-comp, 8.3M GPT-Neo, ~{TE_COMP['tokens_per_s']:g} token/s on a {TE_COMP['mhz']} MHz M7: tinytalk "
              f"(te-comp's layers, vocabulary 14,019) on the M7 at {TE_COMP['mhz']} MHz is {first:.0f}x at position 1 "
              f"and {mean:.0f}x over its {m.context}-position context; te-comp's own shape ({tecomp_macs:,} MACs "
              f"per token with full logits) at tinytalk's {cpm:.2f} cycles per MAC would be {scaled:.0f}x at "
              f"position 1 (an extrapolation by MACs: every other op scaled with the matrices)")
    for core, note in (("cortex-m33", "the RP2350's core class, timed as an M4"), ("cortex-m7", "dual-issue")):
        m = results.get((STORIES, core))
        if m is not None:
            first, mean = (tokens_per_s(c.total_cycles, LLAMA2C["mhz"]) / LLAMA2C["tokens_per_s"]
                           for c in (m.first, m.mean))
            print(f"- llama2.c, stories260K, ~{LLAMA2C['tokens_per_s']:g} tokens/s on an RP2350 (M33, "
                  f"{LLAMA2C['mhz']} MHz): our {core} ({note}) at {LLAMA2C['mhz']} MHz is {first:.1f}x at position 1 "
                  f"and {mean:.1f}x over a {m.context}-position context")
    print()


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tinytalk", type=Path, default=SHARED / "tinytalk_gptneo_3m")
    ap.add_argument("--tokenizer", type=Path, default=SHARED / "gpt2_tokenizer")
    ap.add_argument("--llama", type=Path, default=SHARED / "llama_tiny_random")
    ap.add_argument("--context", type=int, default=96, help="tinytalk's KV positions")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--no-qemu", action="store_true", help="leave out section 4")
    args = ap.parse_args()
    tinytalk = args.tinytalk / "model.safetensors"
    for path in (tinytalk, args.llama / "model.safetensors"):
        if not path.exists():
            sys.exit(f"{path} is not present on this machine")
    tinytalk_formats(tinytalk, args.tokenizer, args.context, args.prompt, args.tokens)
    llama_formats(args.llama, args.prompt, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        stories, tecomp = write_shapes(Path(tmp))
        shapes(stories, tecomp)
        if args.no_qemu:
            return
        models = {TINYTALK: (tinytalk, args.context), STORIES: (stories, STORIES260K_SHAPE["positions"])}
        qemu_section(models, graph_macs(m7_plan(tecomp, 96).graph))


if __name__ == "__main__":
    main()
