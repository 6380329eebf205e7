"""Decisions together: what the patch split, L1 tiles of every kind and the tiler's objective
cost beside the same engine without them, counted on QEMU's M7 board.

    python bench/composition_bench.py [--repeats 3]

* vww_96 on cortex-m7 with --sram 32K (the patch split is needed there): instructions of one
  inference against the unsplit engine's, beside the bound 1.1 x (1 + recomputed MACs);
* the model builder's U-Net (TRANSPOSE_CONV) and FPN (RESIZE_NEAREST_NEIGHBOR) on stm32h743 with
  --l1 32K in its DTCM: tiled against untiled instructions (every layer kind tiles);
* MobileNetV2-224 with --sram 256K --l1 64K: the planned SRAM on the host and on stm32h743
  (--flash 4M), and the deploy's wall time with the Cortex-M default tile objective (cycles)
  against --tile-objective l1 (medians of --repeats runs; a ratio: the machine is shared).

No peer composes these (TFLite Micro neither tiles nor splits), so the reference is our own
engine without the decision. Instruction counts are exact and repeatable; times are not.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer import qemu  # noqa: E402
from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.verify import random_inputs, samples_payload  # noqa: E402
from tests import model_zoo  # noqa: E402

MODELS = ROOT / "tests" / "model_files"
K = 1024


def instructions(dep) -> int:
    total, _ = qemu.instructions_per_inference(qemu.build_elf(dep), samples_payload(dep.graph, [random_inputs(dep.graph, 0)]))
    return total


def find(name: str) -> Path | None:
    return next(iter(sorted(MODELS.rglob(name))), None)


def patch_split() -> None:
    path = find("vww_96_int8.tflite")
    if path is None:
        print(f"vww_96_int8.tflite: not under {MODELS}, skipped")
        return
    whole = deploy(path, Options(target="cortex-m7", flash=1 << 20))
    split = deploy(path, Options(target="cortex-m7", flash=1 << 20, sram=32 * K))
    a, b = instructions(whole), instructions(split)
    c = split.fusion
    grids = ", ".join(f"{p.grid[0]}x{p.grid[1]}@{p.stage.start}..{p.stage.end}" for p in split.patches)
    print(f"vww_96_int8 cortex-m7 --sram 32K: stages {grids or 'none'}, SRAM {split.memory.sram_bytes:,} B "
          f"(unsplit {whole.memory.sram_bytes:,}); instructions {b:,} vs {a:,} = {b / a:.3f}x "
          f"(bound 1.1 x (1 + {100 * c.overhead:.1f} %) = {1.1 * (1 + c.overhead):.3f})")


def zoo_tiles() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for which in ("audio_unet", "detection_fpn"):
            path = Path(folder) / f"{which}.tflite"
            getattr(model_zoo, which)().save(path)
            whole = deploy(path, Options(target="stm32h743", patch="off"))
            tiled = deploy(path, Options(target="stm32h743", patch="off", l1=32 * K))
            kinds = sorted({g.kind for g, _ in tiled.tilings.values()})
            a, b = instructions(whole), instructions(tiled)
            print(f"{which} stm32h743 --l1 32K ({', '.join(kinds)} tiled): instructions {b:,} vs {a:,} untiled "
                  f"= {b / a:.3f}x")


def mobilenet(repeats: int) -> None:
    path = find("mobilenet_v2_quantized_1x3x224x224.tflite")
    if path is None:
        print(f"mobilenet_v2_quantized_1x3x224x224.tflite: not under {MODELS}, skipped")
        return
    common = dict(sram=256 * K, l1=64 * K)
    host = deploy(path, Options(**common))
    print(f"MobileNetV2-224 --sram 256K --l1 64K: host SRAM {host.memory.sram_bytes:,} B")
    times = {}
    for objective in ("l1", "auto"):
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                dep = deploy(path, Options(target="stm32h743", flash=4 << 20, tile_objective=objective, **common))
            runs.append(time.perf_counter() - start)
        times[objective] = statistics.median(runs)
        print(f"  stm32h743 --flash 4M --tile-objective {objective} ({dep.tile_objective}): SRAM "
              f"{dep.memory.sram_bytes:,} B, deploy {times[objective]:.1f} s (median of {repeats}), "
              f"{len(caught)} solver warnings")
    print(f"  deploy time, default (cycles) over l1: {times['auto'] / times['l1']:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="deploys timed per tile objective")
    args = ap.parse_args(argv)
    missing = qemu.missing_tools()
    if missing:
        print(f"needs {', '.join(missing)} (Debian: {qemu.INSTALL})")
        return 1
    patch_split()
    zoo_tiles()
    mobilenet(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
