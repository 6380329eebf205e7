"""Cortex-M: instructions per MAC of our kernels on QEMU (the target's own families, "auto", beside
the plain C kernels), against TFLite Micro with CMSIS-NN; code size without weights; the linked
ELF's memory against the budgets; estimated milliseconds beside published figures.

    python bench/cortexm_bench.py [--models NAME,...] [--cores cortex-m4,cortex-m7,cortex-m33,cortex-m55]
        [--kernels auto,plain[,smlad,mve]] [--l1 32K|off]   (a family a core lacks is reported and skipped)

For kws_ref_model, vww_96_int8, pretrainedResnet_quant and ad01_int8 (``--models`` adds others from
shared/models/tflite, by file name), on every core and kernel family: deploy with --sram 256K
--flash 1M --patch off (no recomputed MACs, like TFLite Micro), link the engine's qemu/ folder
with arm-none-eabi-gcc, and count the instructions of one inference on QEMU's board with our
TCG plugin (the difference between a run with two copies of a seeded random sample and a run
with one; qemu.instructions_per_inference). Instructions go to layers by the engine's
op{k}_ functions (never inlined), the kernel functions layers of one shape share to the kind of
the layers calling them; the rest (fx_*, __aeabi_*, inference_run, memcpy...) to a row "other". Tables:

* per model: MACs, instructions and instructions/MAC per kernel choice, the plain/auto ratio,
  and TFLite Micro's own figures on the same QEMU board (M7: with CMSIS-NN, and with its
  reference kernels; M55: CMSIS-NN's Helium kernels);
* per layer: index, op, kind, MACs, instructions and instructions/MAC per kernel family;
* per layer kind over all models (sum of instructions / sum of MACs) beside CMSIS-NN's
  per-kind figures and our targets;
* code without weights: the engine's functions in .text (nm sizes of every function that is
  not the QEMU harness's) and .rodata less the weights, beside TFLite Micro + CMSIS-NN's runtime
  code on the same part;
* the ELF's flash and SRAM (the harness and its stack included) against --flash and --sram;
* tiled: the target's kernels with every layer cut into tiles of an --l1 scratchpad (32K by
  default; the tiles' copies are the core's) against the same engine untiled;
* estimated milliseconds (deployer/cycles.py: the executed instructions priced by the core's
  timing table, backends/timing) of the four MLPerf Tiny models on an STM32L4R5-class M4 at
  120 MHz and an STM32H7A3-class M7 at 280 MHz, beside MLPerf Tiny's published latencies on
  those boards; and on the M55 at its part's clock (alif-e7-hp, 400 MHz) beside TFLite Micro +
  CMSIS-NN on an RA8D1 (Cortex-M85 at 480 MHz).

Instruction counts are exact and repeatable: QEMU executes, it does not model a pipeline. The
cycles are an estimate from them (no wait states, caches or bus contention: see the tables).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends import BACKENDS  # noqa: E402
from deployer import cycles, qemu  # noqa: E402
from deployer.flag_values import parse_size  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from solver.plan import Plan  # noqa: E402
from deployer.verify import random_inputs, samples_payload  # noqa: E402
from layer_analyzer import kernels as K  # noqa: E402
from network_parser.errors import DeployError  # noqa: E402

MODELS_DIR = ROOT / "tests" / "model_files" / "tflite"
DEFAULT_MODELS = ("kws_ref_model", "vww_96_int8", "pretrainedResnet_quant", "ad01_int8")
SRAM, FLASH = 256 * 1024, 1024 * 1024

# TFLite Micro on the same QEMU M7 board, instructions per MAC: with CMSIS-NN, with its reference kernels.
# (ad01: the CMSIS-NN figure alone, from the same build; its reference kernels were not counted)
TFLM = {"kws_ref_model": (2.88, 16.4), "vww_96_int8": (3.21, 13.5), "pretrainedResnet_quant": (2.40, 8.7),
        "ad01_int8": (2.21, None)}
# MLPerf Tiny inference v1.1/v1.2 closed division, published latencies in ms (X-CUBE-AI 9.0): an STM32L4R5
# (Cortex-M4) at 120 MHz and an STM32H7A3 (Cortex-M7) at 280 MHz; ad on the L4R5 also by Plumerai (4.05 ms).
# Their vww is the same network as vww_96_int8, ic is pretrainedResnet_quant (resnet8).
MLPERF_BOARDS = {"cortex-m4": ("STM32L4R5", 120.0), "cortex-m7": ("STM32H7A3", 280.0)}
MLPERF_MS = {"cortex-m4": {"kws_ref_model": 43.19, "vww_96_int8": 88.93, "pretrainedResnet_quant": 165.1,
                           "ad01_int8": 5.26},
             "cortex-m7": {"kws_ref_model": 11.32, "vww_96_int8": 23.80, "pretrainedResnet_quant": 40.85,
                           "ad01_int8": 1.23}}
MLPERF_OTHER = {("cortex-m4", "ad01_int8"): "Plumerai 4.05"}
# TFLite Micro + CMSIS-NN on a Renesas RA8D1 (Cortex-M85, Helium, 480 MHz), MLPerf Tiny v1.2 closed
MVE_PART = ("alif-e7-hp", "RA8D1 (M85 @480)")
MVE_MS = {"kws_ref_model": 3.47, "vww_96_int8": 13.39}
MLPERF_NAME = {"kws_ref_model": "kws", "vww_96_int8": "vww", "pretrainedResnet_quant": "ic (resnet8)",
               "ad01_int8": "ad"}
# ... and on the M55 (QEMU mps3-an547), CMSIS-NN's Helium (MVE) kernels: instructions per MAC
TFLM_MVE = {"kws_ref_model": 0.684, "vww_96_int8": 0.876, "pretrainedResnet_quant": 0.393, "ad01_int8": 0.569}
TFLM_CODE_KB = 81  # TFLite Micro + CMSIS-NN runtime code (interpreter, resolver, kernels) on the same part
KINDS = ("1x1 conv", "conv >1x1", "depthwise", "fc", "other")
CMSIS_KIND = {"1x1 conv": "2.05-2.3", "conv >1x1": "2.1 (3x3)", "depthwise": "7.8-8.1 (3x3)"}
TARGET_KIND = {"1x1 conv": "1.1", "conv >1x1": "1.2", "depthwise": "4.0", "network": "1.5"}
_LAYER = re.compile(r"^op(\d+)_")


@dataclass(frozen=True)
class Measure:
    dep: Plan
    instructions: int
    cycles: int | None  # estimated (deployer.cycles), None where the core has no timing table
    layers: dict[int, int]  # layer index -> instructions of its op{k}_ function
    other: int  # every other function's
    shared: dict[str, int]  # layer kind -> instructions of the kernel functions layers of one shape share
    flash: int
    sram: int
    text: int  # engine functions' .text bytes
    rodata_code: int  # .rodata less the weights (tables, constants; the harness's few strings)


def kind(kern) -> str:
    if isinstance(kern, K.Conv):
        return "depthwise" if kern.depthwise else "1x1 conv" if kern.k_h == kern.k_w == 1 else "conv >1x1"
    return "fc" if isinstance(kern, K.FullyConnected) else "other"


def by_layer(per_function: dict[str, int], dep: Plan) -> tuple[dict[int, int], int, dict[str, int]]:
    """Instructions by layer (its op{k}_ function), of the rest, and of the kernel functions
    layers of one shape share (named after their variant: by the kind of the layers calling them)."""
    variants = {lp.variant.name: kind(lp.kernel) for lp in dep.layers if lp.variant is not None}
    layers, other, shared = {}, 0, {}
    for name, n in per_function.items():
        m = _LAYER.match(name)
        owner = next((kd for v, kd in variants.items() if name.startswith(v + "_")), None)
        if m:
            layers[int(m.group(1))] = layers.get(int(m.group(1)), 0) + n
        elif owner is not None:
            shared[owner] = shared.get(owner, 0) + n
        else:
            other += n
    return layers, other, shared


def measure(path: Path, core: str, kernels: str, l1: int | None = None) -> Measure:
    dep = deploy(path, Options(target=core, kernels=kernels, sram=SRAM, flash=FLASH, patch="off", l1=l1))
    elf = qemu.build_elf(dep)
    payload = samples_payload(dep.graph, [random_inputs(dep.graph, 0)])
    if cycles.available(dep.backend):
        est = cycles.estimate_inference(elf, payload, dep.backend.cpu)
        total, per_function, cyc = est.instructions, est.instructions_by_function, est.cycles
    else:
        (total, per_function), cyc = qemu.instructions_per_inference(elf, payload), None
    layers, other, shared = by_layer(per_function, dep)
    mem = qemu.elf_memory(elf.path)
    return Measure(dep, total, cyc, layers, other, shared, mem["flash_bytes"], mem["sram_bytes"],
                   qemu.engine_text_bytes(qemu.functions(elf.path)),
                   mem["sections"].get(".rodata", 0) - dep.memory.weights_bytes)


def size(n: int) -> str:
    return f"{n >> 20}M" if n % (1 << 20) == 0 else f"{n >> 10}K"


def ratio(n: int, macs: int) -> str:
    return f"{n / macs:.2f}" if macs else "-"


def find_model(name: str) -> Path | None:
    stem = Path(name).stem
    return next(iter(sorted(MODELS_DIR.rglob(f"{stem}.tflite"))), None)


def model_table(results: dict, models: list[str], cores: list[str], kernels: list[str]) -> None:
    both = {"auto", "plain"} <= set(kernels)
    head = f"{'model':<24} {'core':<10} {'MACs':>11}"
    for k in kernels:
        head += f" {k + ' instr':>13} {'i/MAC':>6}"
    print(head + (f" {'plain/auto':>12}" if both else "") + f" {'TFLM+CMSIS-NN':>14} {'TFLM ref':>9}")
    for model in models:
        for core in cores:
            runs = {k: results.get((model, core, k)) for k in kernels}
            if not any(runs.values()):
                continue
            macs = next(r for r in runs.values() if r).dep.macs
            row = f"{model[:24]:<24} {core:<10} {macs:>11,}"
            for r in runs.values():
                row += f" {r.instructions:>13,} {ratio(r.instructions, macs):>6}" if r else f" {'-':>13} {'-':>6}"
            if both:
                s, p = runs["auto"], runs["plain"]
                row += f" {p.instructions / s.instructions:>12.2f}" if s and p else f" {'-':>12}"
            cmsis, ref = TFLM.get(model, (None, None)) if core == "cortex-m7" else (None, None)
            if core == "cortex-m55":
                cmsis = TFLM_MVE.get(model)
            print(row + (f" {cmsis:>14.2f}" if cmsis else f" {'-':>14}") + (f" {ref:>9.1f}" if ref else f" {'-':>9}"))


def layer_table(model: str, core: str, runs: dict[str, Measure]) -> None:
    dep = next(iter(runs.values())).dep
    print(f"\n{model} on {core}: per layer")
    head = f"{'op':>4} {'type':<18} {'kind':<10} {'MACs':>11}"
    for k in runs:
        head += f" {k + ' instr':>13} {'i/MAC':>6}"
    print(head)
    for i, (layer, kern) in enumerate(zip(dep.graph.layers, dep.kernels)):
        macs = K.macs(kern)
        row = f"{i:>4} {layer.op[:18]:<18} {kind(kern):<10} {macs:>11,}"
        for r in runs.values():
            n = r.layers.get(i, 0)
            row += f" {n:>13,} {ratio(n, macs):>6}"
        print(row)
    for kd in sorted({kd for r in runs.values() for kd in r.shared}):
        row = f"{'':>4} {'shared kernels':<18} {kd:<10} {'':>11}"
        for r in runs.values():
            row += f" {r.shared.get(kd, 0):>13,} {'':>6}"
        print(row)
    row = f"{'':>4} {'other functions':<18} {'other':<10} {'':>11}"
    for r in runs.values():
        row += f" {r.other:>13,} {'':>6}"
    print(row)


def kind_table(results: dict, core: str, kernels: list[str]) -> None:
    """Sum of instructions / sum of MACs per layer kind over every model measured on ``core``."""
    macs = dict.fromkeys(KINDS, 0)
    instr = {k: dict.fromkeys(KINDS, 0) for k in kernels}
    counted = set()
    for (model, c, k), r in results.items():
        if c != core:
            continue
        for i, kern in enumerate(r.dep.kernels):
            instr[k][kind(kern)] += r.layers.get(i, 0)
            if (model, i) not in counted:
                counted.add((model, i))
                macs[kind(kern)] += K.macs(kern)
        instr[k]["other"] += r.other
        for kd, n in r.shared.items():
            instr[k][kd] += n
    print(f"\nper layer kind on {core}, all models (sum instructions / sum MACs)")
    print(f"{'kind':<10} {'MACs':>12}" + "".join(f" {k + ' instr':>13} {'i/MAC':>6}" for k in kernels)
          + f" {'CMSIS-NN':>14} {'target':>7}")
    for kd in KINDS:
        print(f"{kd:<10} {macs[kd]:>12,}"
              + "".join(f" {instr[k][kd]:>13,} {ratio(instr[k][kd], macs[kd]):>6}" for k in kernels)
              + f" {CMSIS_KIND.get(kd, '-'):>14} {TARGET_KIND.get(kd, '-'):>7}")
    total = sum(macs.values())
    whole = [min(v[0] for v in TFLM.values()), max(v[0] for v in TFLM.values())]  # TFLM + CMSIS-NN, per model
    print(f"{'network':<10} {total:>12,}"
          + "".join(f" {sum(instr[k].values()):>13,} {ratio(sum(instr[k].values()), total):>6}" for k in kernels)
          + f" {f'{whole[0]:.2f}-{whole[1]:.2f}':>14} {TARGET_KIND['network']:>7}")


def code_table(results: dict) -> None:
    print(f"\ncode without weights: engine functions' .text, .rodata less the weights "
          f"(TFLite Micro + CMSIS-NN runtime on the same part: about {TFLM_CODE_KB} KB)")
    print(f"{'model':<24} {'core':<10} {'kernels':<7} {'.text':>8} {'.rodata-w':>9} {'total':>8} {'vs TFLM':>7}")
    for (model, core, k), r in results.items():
        total = r.text + r.rodata_code
        print(f"{model[:24]:<24} {core:<10} {k:<7} {r.text:>8,} {r.rodata_code:>9,} {total:>8,} "
              f"{total / (TFLM_CODE_KB * 1000):>7.2f}")


def memory_table(results: dict) -> None:
    print(f"\nELF memory (QEMU harness and its stack included) against --flash {size(FLASH)} --sram "
          f"{size(SRAM)}; planned = the deployer's estimate")
    print(f"{'model':<24} {'core':<10} {'kernels':<7} {'flash':>9} {'planned':>9} {'SRAM':>9} {'planned':>9} "
          f"{'fits':>4}")
    for (model, core, k), r in results.items():
        m = r.dep.memory
        fits = "yes" if r.flash <= FLASH and r.sram <= SRAM else "NO"
        print(f"{model[:24]:<24} {core:<10} {k:<7} {r.flash:>9,} {m.flash_bytes:>9,} {r.sram:>9,} "
              f"{m.sram_bytes:>9,} {fits:>4}")


def mlperf_table(results: dict, models: list[str], cores: list[str]) -> None:
    """Estimated milliseconds (the target's kernels) beside MLPerf Tiny's published latencies."""
    rows = [(m, c) for c in cores if c in MLPERF_BOARDS for m in models if m in MLPERF_MS[c]
            and (m, c, "auto") in results and results[(m, c, "auto")].cycles]
    if not rows:
        return
    print("\nestimated latency (SMLAD kernels; cycles from the executed instructions and the core's timing table, "
          "backends/timing) beside MLPerf Tiny's published figures (X-CUBE-AI 9.0)")
    print(f"{'model':<14} {'board':<10} {'MHz':>5} {'instructions':>13} {'est. cycles':>12} {'cyc/instr':>9} "
          f"{'est. ms':>8} {'MLPerf ms':>10} {'est/MLPerf':>10}  other")
    for model, core in rows:
        r = results[(model, core, "auto")]
        board, mhz = MLPERF_BOARDS[core]
        ms = r.cycles / (mhz * 1000.0)
        published = MLPERF_MS[core][model]
        print(f"{MLPERF_NAME[model]:<14} {board:<10} {mhz:>5.0f} {r.instructions:>13,} {r.cycles:>12,} "
              f"{r.cycles / r.instructions:>9.2f} {ms:>8.2f} {published:>10.2f} {ms / published:>10.2f}  "
              f"{MLPERF_OTHER.get((core, model), '')}")
    print("MLPerf's figures are measured on the boards (code and weights in flash behind the ART accelerator or "
          "caches, their own kernels); ours are estimates for our engines at zero wait states.")


def tiled_table(results: dict, tiled: dict, models: list[str], cores: list[str], l1: int) -> None:
    """The target's kernels tile by tile in an --l1 scratchpad against the same engine untiled."""
    rows = [(m, c) for m in models for c in cores if (m, c) in tiled and (m, c, "auto") in results]
    if not rows:
        return
    print(f"\ntiled: --l1 {size(l1)} against untiled (the target's kernels; instructions, and estimated cycles)")
    print(f"{'model':<24} {'core':<10} {'untiled':>11} {'tiled':>11} {'tiled/untiled':>13} {'cycles ratio':>12}")
    for model, core in rows:
        u, t = results[(model, core, "auto")], tiled[(model, core)]
        cyc = f"{t.cycles / u.cycles:>12.2f}" if t.cycles and u.cycles else f"{'-':>12}"
        print(f"{model[:24]:<24} {core:<10} {u.instructions:>11,} {t.instructions:>11,} "
              f"{t.instructions / u.instructions:>13.2f} {cyc}")


def helium_table(results: dict, models: list[str]) -> None:
    """The M55's estimated milliseconds at its part's clock beside TFLite Micro + CMSIS-NN's
    published figures on an M85 (a faster clock and a wider core: the ratio says what the
    instructions do, not which chip wins)."""
    part, peer = MVE_PART
    mhz = BACKENDS[part].clock_mhz
    rows = [m for m in models if (m, "cortex-m55", "auto") in results and results[(m, "cortex-m55", "auto")].cycles]
    if not rows:
        return
    print(f"\nestimated latency on the M55 ({part} at {mhz:.0f} MHz; Helium and SMLAD kernels) beside TFLite "
          f"Micro + CMSIS-NN on an {peer}")
    print(f"{'model':<14} {'instructions':>13} {'est. cycles':>12} {'est. ms':>8} {'M85 ms':>7} {'est/M85':>8}")
    for model in rows:
        r = results[(model, "cortex-m55", "auto")]
        ms = r.cycles / (mhz * 1000.0)
        peer_ms = MVE_MS.get(model)
        print(f"{MLPERF_NAME.get(model, model):<14} {r.instructions:>13,} {r.cycles:>12,} {ms:>8.2f} "
              + (f"{peer_ms:>7.2f} {ms / peer_ms:>8.2f}" if peer_ms else f"{'-':>7} {'-':>8}"))
    print("The M85's figures are measured on silicon (MLPerf Tiny v1.2, 480 MHz, caches); ours are estimates at "
          "zero wait states whose accuracy against silicon is unknown here.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="more models from shared/models/tflite, by name (comma-separated)")
    ap.add_argument("--cores", default="cortex-m4,cortex-m7,cortex-m33,cortex-m55",
                    help="cores, comma-separated (cortex-m4, cortex-m7, cortex-m33, cortex-m55)")
    ap.add_argument("--kernels", default="auto,plain",
                    help="kernel choices, comma-separated: auto (the core's families), plain, or a family")
    ap.add_argument("--l1", default="32K", help="the scratchpad of the tiled column (e.g. 32K), or off")
    args = ap.parse_args(argv)
    missing = qemu.missing_tools()
    if missing:
        print(f"needs {', '.join(missing)} (Debian: {qemu.INSTALL})")
        return 1
    names = list(dict.fromkeys([*DEFAULT_MODELS, *(Path(n).stem for n in args.models.split(",") if n)]))
    cores = [c for c in args.cores.split(",") if c]
    kernels = [k for k in args.kernels.split(",") if k]
    l1 = None if args.l1 == "off" else parse_size(args.l1)
    print(f"Cortex-M instructions per inference on QEMU (one seeded random input); deploy --sram {size(SRAM)} "
          f"--flash {size(FLASH)} --patch off\n")
    results, tiled, models = {}, {}, []
    for name in names:
        path = find_model(name)
        if path is None:
            print(f"{name}: not found under {MODELS_DIR}")
            continue
        models.append(name)
        for core in cores:
            for k in kernels:
                try:
                    results[(name, core, k)] = measure(path, core, k)
                except DeployError as e:
                    print(f"{name} {core} {k}: {e}")  # reported, not fatal
            if l1 and "auto" in kernels:
                try:
                    tiled[(name, core)] = measure(path, core, "auto", l1)
                except DeployError as e:
                    print(f"{name} {core} --l1 {size(l1)}: {e}")
    model_table(results, models, cores, kernels)
    for model in models:
        for core in cores:
            runs = {k: results[(model, core, k)] for k in kernels if (model, core, k) in results}
            if runs:
                layer_table(model, core, runs)
    for core in cores:
        kind_table(results, core, kernels)
    code_table(results)
    memory_table(results)
    tiled_table(results, tiled, models, cores, l1 or 0)
    mlperf_table(results, models, cores)
    helium_table(results, models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
