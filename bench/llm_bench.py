"""GPT-Neo engines: flash, SRAM and speed per weight / KV-cache format, beside the published
MLIR-compiler figures for a TinyStories GPT-Neo on a 160 MHz Cortex-M7.

    python bench/llm_bench.py [--model tests/model_files/safetensors/tinytalk_gptneo_3m/model.safetensors]
                              [--context 96] [--tokens 40]

Flash = weights + the engine's measured .text (gcc -O2 -c on this machine; x86-64, so a
Cortex-M build differs); SRAM = KV cache + activation arena. Host tokens/s from `deploy
generate` (every inference_run: prompt and generated tokens), a ratio between formats only.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.generate import generate  # noqa: E402
from deployer.llm_passes import LanguageFlags  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.output import write_output  # noqa: E402

SHARED = ROOT / "tests" / "model_files" / "safetensors"
PUBLISHED = dict(sram=249 * 1000, flash=3.62e6, kv=108 * 1000, tokens_per_s=1.0)  # 160 MHz M7, int4 KV x 96


def text_bytes(engine: Path) -> int:
    obj = engine.with_suffix(".o")
    subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-c", str(engine), "-o", str(obj),
                    "-I", str(engine.parent)], check=True)
    out = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.startswith(".text"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=SHARED / "tinytalk_gptneo_3m" / "model.safetensors")
    ap.add_argument("--tokenizer", type=Path, default=SHARED / "gpt2_tokenizer")
    ap.add_argument("--context", type=int, default=96)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--prompt", default="Once upon a time")
    args = ap.parse_args()
    if not args.model.exists():
        sys.exit(f"{args.model} is not present on this machine")
    rows = []
    for weights, kv in (("q4_0", "int4"), ("q4_0", "int8"), ("int8", "int8"), ("f32", "f32")):
        dep = deploy(args.model, Options(language=LanguageFlags(weights=weights, kv=kv, context=args.context, tokenizer=args.tokenizer)))
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            write_output(dep.files, out)
            code = text_bytes(out / next(n for n in dep.files if n.endswith("_engine.c")))
            g = generate(out, args.prompt, args.tokens, args.tokenizer)
        m = dep.memory
        flash = m.weights_bytes + code
        rows.append((f"{weights} / {kv}", flash, m.weights_bytes, code, m.sram_bytes, m.state_bytes,
                     m.arena_bytes, g["tokens_per_s"], g["text"][:48]))
    print(f"model {args.model.parent.name}, context {args.context}, prompt {args.prompt!r}, {args.tokens} tokens\n")
    print("| weights / KV | flash B | weights B | code B | SRAM B | KV B | arena B | host tok/s | continuation |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:,} | {r[2]:,} | {r[3]:,} | {r[4]:,} | {r[5]:,} | {r[6]:,} | {r[7]:,.0f} | {r[8]!r} |")
    base = rows[0]
    print(f"| published (MLIR, M7 160 MHz, int4 KV x 96) | {PUBLISHED['flash']:,.0f} | | | {PUBLISHED['sram']:,} | "
          f"{PUBLISHED['kv']:,} | | ~1 on the M7 | |")
    print(f"\nq4_0 / int4 against the published: flash {base[1] / PUBLISHED['flash']:.2f}x, SRAM "
          f"{base[4] / PUBLISHED['sram']:.2f}x, KV cache {base[5] / PUBLISHED['kv']:.2f}x")
    m7 = on_cortex_m7(args.model, args.context)
    if m7 is None:
        print("instructions per token on the Cortex-M7: QEMU or the Arm tools are missing (tests/install.sh)")
    else:
        n, macs, mem = m7
        print(f"Cortex-M7 (QEMU mps2-an500), q4_0 / int4: {n:,} instructions for the token at position 1, "
              f"{n / macs:.2f} per MAC ({macs:,} MACs in its matrices); ELF flash {mem['flash_bytes']:,} B, "
              f"SRAM {mem['sram_bytes']:,} B (with the QEMU harness and a 4 KiB stack); at 160 MHz and one "
              f"instruction per cycle, about {160e6 / n:.1f} tokens/s (the published: about 1)")


def on_cortex_m7(model: Path, context: int):
    """Instructions per token of the q4_0 / int4 engine on QEMU's Cortex-M7 board."""
    from types import SimpleNamespace

    import numpy as np

    from backends import BACKENDS
    from deployer import qemu

    if qemu.missing_tools():
        return None
    dep = deploy(model, Options(target="cortex-m7", language=LanguageFlags(weights="q4_0", kv="int4", context=context)))
    elf = qemu.build_elf(SimpleNamespace(backend=BACKENDS["cortex-m7"], files=dep.files))
    n, _ = qemu.instructions_per_inference(elf, np.array([1], np.int32).tobytes())
    c = dep.graph.config
    macs = c.layers * (4 * c.d_model * c.d_model + 2 * c.d_model * c.inner) + c.vocab * c.d_model
    return n, macs, qemu.elf_memory(elf.path)


if __name__ == "__main__":
    main()
