"""Below the whole-tensor bound: the SRAM x MAC-overhead front of multi-stage fusion, beside the
published points of a peer that plans the same network, and what outputs over consumed inputs
save with no MAC recomputed.

    python bench/fusion_bench.py [--verify] [--qemu]

* mcunet_vww (MCUNetV2-vww-5fps-r80, --io int8): the least SRAM our plan reaches within each
  MAC budget, with the network's input in the arena and with --input-memory external (how
  msf-CNN counts: its analysis leaves the input out), beside msf-CNN's published front; then
  its three points as budgets (--sram S --max-overhead O), each deployed (and, with --verify,
  compiled and compared with the reference interpreter on the host, bit-exact or not);
* MobileNetV2 w0.35 at 144x144 from the project's model builder (random weights, not msf-CNN's
  network: our own unfused peak beside it, no point-by-point comparison);
* with no recomputed MAC (--patch off): the arena with --overlap on against the whole-tensor
  bound (--overlap off) on the MLPerf Tiny models;
* MobileNetV2-224 (MCUNetV2 runs it in 172 kB) at --sram 176K with the input included: the
  engine taking the frame channels last (--inputs at the model's own NCHW->NHWC transpose: a
  camera's frame is HWC), its recomputed MACs, and with --qemu its instructions on the M7
  against the unsplit engine's x (1 + overhead) (bit-exact checked on the host with --verify).

Sizes are planned bytes (the arena, every buffer the engine needs at run time); MAC overheads
are the recomputed MACs over the network's.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployer.pipeline import Options, deploy  # noqa: E402
from deployer.verify import samples_payload, verification_samples, verify  # noqa: E402
from network_parser.cut import CutSpec  # noqa: E402
from network_parser.errors import DeployError  # noqa: E402
from tests import model_zoo  # noqa: E402

MODELS = ROOT / "tests" / "model_files"
# msf-CNN (NeurIPS 2025), MCUNetV2-vww-5fps-r80: (bytes without the input, MAC factor)
MSF_VWW = ((45_283, 1.02), (26_240, 1.113), (20_568, 1.296), (17_904, 1.345), (15_368, 1.957))
MSF_MBV2 = ((83_133, 1.019), (25_803, 1.253), (15_199, 1.382), (8_560, 1.679))  # its own MBV2 w0.35-144
BUDGETS = (0.0, 0.02, 0.05, 0.113, 0.2, 0.296, 0.345, 0.5, 0.957)


def point(path: Path, **kw):
    """(SRAM bytes, overhead, stages) of one deployment, or the error's first line."""
    try:
        dep = deploy(path, Options(**kw))
    except DeployError as e:
        return None, str(e).splitlines()[0]
    c = dep.fusion
    return dep, (dep.memory.sram_bytes, c.overhead if c else 0.0, len(dep.patches))


def front(path: Path, title: str, published, **kw) -> None:
    print(f"\n{title}: least SRAM within each MAC budget (stages chosen by the exact search)")
    print(f"{'budget':>7} | {'input in arena':>22} | {'--input-memory external':>24} | {'msf-CNN (no input)':>20}")
    for budget in BUDGETS:
        cells = []
        for memory in ("arena", "external"):
            dep, got = point(path, max_overhead=budget, input_memory=memory, **kw)
            cells.append(f"{got[0]:>9,} B +{100 * got[1]:4.1f}% {got[2]:>2}st" if dep else got[:22])
        peer = next((f"{b:>7,} B x{f:.3f}" for b, f in published if abs((f - 1) - budget) < 0.006), "")
        print(f"{budget:>6.1%} | {cells[0]:>22} | {cells[1]:>24} | {peer:>20}")


def msf_points(path: Path, check: bool, **kw) -> None:
    print("\nmcunet_vww, msf-CNN's points as budgets (--input-memory external)")
    print(f"{'--sram':>8} {'--max-overhead':>15} | {'planned':>9} {'recomputed':>10} {'stages':>6} | verify")
    for size, factor in MSF_VWW[1:]:
        dep, got = point(path, sram=size, max_overhead=round(factor - 1, 3), input_memory="external", **kw)
        if dep is None:
            print(f"{size:>8,} {factor - 1:>15.3f} | {got}")
            continue
        result = "-"
        if check:
            samples, expected = verification_samples(dep, path, 3)
            report = verify(dep, path, samples, expected=expected)
            result = "bit-exact" if all(o["max_abs_diff"] == 0 for o in report["outputs"]) else "MISMATCH"
        print(f"{size:>8,} {factor - 1:>15.3f} | {got[0]:>9,} {100 * got[1]:>9.1f}% {got[2]:>6} | {result}")


def no_recompute() -> None:
    print("\nno recomputed MAC (--patch off): outputs over consumed inputs against the whole-tensor bound")
    print(f"{'model':<28} {'bound':>9} {'overlap':>9} {'ratio':>6}")
    for name in ("kws_ref_model.tflite", "vww_96_int8.tflite", "person_detect.tflite", "pretrainedResnet_quant.tflite"):
        path = next(iter(sorted(MODELS.rglob(name))), None)
        if path is None:
            print(f"{name:<28} not under {MODELS}")
            continue
        whole, a = point(path, patch="off", overlap=False)
        over, b = point(path, patch="off")
        if whole is None or over is None:
            print(f"{name:<28} {a if whole is None else b}")
            continue
        print(f"{name:<28} {a[0]:>9,} {b[0]:>9,} {b[0] / a[0]:>6.2f}")


def mobilenet_224(check: bool, on_qemu: bool) -> None:
    path = MODELS / "tflite" / "tflm" / "mobilenet_v2_quantized_1x3x224x224.tflite"
    if not path.exists():
        print(f"\n{path}: not found, skipped")
        return
    frame = CutSpec(inputs=("input.9_te_transform",))  # the transpose's NHWC output: the engine's input
    print("\nMobileNetV2-224, --sram 176K, the input (224x224x3, channels last) in the arena")
    dep, got = point(path, cut=frame, sram=176 * 1024, planner="first-fit")
    if dep is None:
        print(f"  {got}")
        return
    stages = ", ".join(f"{p.stage.start}..{p.stage.end} in {p.grid[0]}x{p.grid[1]}" for p in dep.patches)
    result = "-"
    if check:
        samples, expected = verification_samples(dep, path, 1)
        report = verify(dep, path, samples, expected=expected)
        result = "bit-exact" if all(o["max_abs_diff"] == 0 for o in report["outputs"]) else "MISMATCH"
    print(f"  SRAM {got[0]:,} B ({got[0] / 1024:.1f} KiB), {100 * got[1]:.1f}% MACs recomputed, stages {stages}; "
          f"host: {result}")
    if on_qemu:
        from deployer import qemu
        # the portable kernels: the SMLAD variants' packed weights (about 7 MB) outgrow the 4 MiB the
        # QEMU board maps as flash
        options = dict(cut=frame, target="cortex-m7", flash=4 << 20, planner="first-fit", kernels="plain")
        split = deploy(path, Options(sram=176 * 1024, **options))
        whole = deploy(path, Options(patch="off", sram=4 << 20, **options))
        samples, _ = verification_samples(split, path, 1)
        a, b = (qemu.instructions_per_inference(qemu.build_elf(d), samples_payload(d.graph, samples))[0]
                for d in (whole, split))
        bound = 1.15 * (1 + split.fusion.overhead)
        print(f"  QEMU M7 (portable kernels): {b:,} instructions split, {a:,} unsplit: {b / a:.3f}x (at most "
              f"1.15 x (1 + overhead) = {bound:.3f})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verify", action="store_true", help="compile msf-CNN's points and compare on the host")
    ap.add_argument("--qemu", action="store_true", help="MobileNetV2-224's instructions on the M7, split and not")
    args = ap.parse_args(argv)
    vww = MODELS / "tflite" / "mcunet" / "mcunet_vww.tflite"
    if vww.exists():
        front(vww, "mcunet_vww --io int8", MSF_VWW, cut=CutSpec(io="int8"))
        msf_points(vww, args.verify, cut=CutSpec(io="int8"))
    else:
        print(f"{vww}: not found, skipped")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mobilenet_v2_035_144.tflite"
        model_zoo.mobilenet_v2(0.35, 144).save(path)
        front(path, "MobileNetV2 w0.35 144x144 (the builder's; msf-CNN's own: "
              + ", ".join(f"{b:,} B x{f}" for b, f in MSF_MBV2) + ")", (), planner="first-fit")
    no_recompute()
    mobilenet_224(args.verify, args.qemu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
