"""deploy sweep at scale: the same sweep (MLPerf Tiny's keyword spotter, visual wake words and
resnet8 over three board presets, four SRAM budgets, two L1 settings, patch auto/off and the
CP-SAT and first-fit planners: 288 points) run one point after the other, on a process pool of
every local core and on a local Ray instance. Prints points per second and each executor's
speed-up over serial (ratios: the machine is shared), the overhead per point (wall time not
spent planning or checking), checks the three tables are identical but for wall times, then
kills a pool sweep part way and checks the rerun redoes only the rest.

    python bench/sweep_bench.py [--ray] [--jobs N] [--verify host]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "model_files" / "tflite" / "mlperf_tiny"
AXES = ["--target", "stm32f446,nrf52840,stm32h743", "--sram", "32K..256K:x2", "--l1", "none,16K",
        "--patch", "auto,off", "--planner", "cpsat,first-fit"]


def run(folder: Path, *extra: str) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "deployer.cli", "sweep", *(str(MODELS / m) for m in
           ("kws_ref_model.tflite", "vww_96_int8.tflite", "pretrainedResnet_quant.tflite")), *AXES,
           "-o", str(folder), "--json", *extra]
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"sweep failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout), wall


def table(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq
    from deployer.sweep.point import TIMING
    return [{k: v for k, v in r.items() if k not in TIMING} for r in pq.read_table(folder / "results.parquet").to_pylist()]


def same(rows: list[dict], reference: list[dict]) -> str:
    """'yes', or which points differ and in what (rows a wall-clock watchdog stopped a solver in
    may differ run to run: they are left out, and counted)."""
    stopped = sum(1 for a, b in zip(rows, reference) if a["watchdog"] or b["watchdog"])
    diffs = [(a["key"], sorted(k for k in a if a[k] != b[k])) for a, b in zip(rows, reference)
             if not (a["watchdog"] or b["watchdog"]) and a != b]
    for key, cols in diffs[:5]:
        print(f"  point {key} differs in {', '.join(cols)}", file=sys.stderr)
    if len(rows) != len(reference) or diffs:
        return f"NO ({len(diffs)})"
    return "yes" + (f" ({stopped} by watchdog)" if stopped else "")


def work_s(folder: Path) -> float:
    import pyarrow.parquet as pq
    t = pq.read_table(folder / "results.parquet").to_pydict()
    return sum(t["plan_s"]) + sum(v or 0 for v in t["verify_s"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ray", action="store_true", help="also on a local Ray instance")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--verify", default="none", choices=("none", "host", "qemu"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    tmp = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    try:
        runs = {}
        modes = [("serial", ["--jobs", "1"]), (f"pool x{args.jobs}", ["--jobs", str(args.jobs)])]
        if args.ray:
            modes.append((f"ray local x{args.jobs}", ["--jobs", str(args.jobs), "--ray", "local"]))
        for name, flags in modes:
            folder = tmp / name.split()[0]
            summary, wall = run(folder, *flags, "--verify", args.verify)
            runs[name] = (summary, wall, folder)
        base = runs["serial"][1]
        points = runs["serial"][0]["points"]
        print(f"{points} points ({runs['serial'][0]['fits']} fit, {runs['serial'][0]['over budget']} over budget, "
              f"{runs['serial'][0]['failed']} failed), verify {args.verify}, {os.cpu_count()} cores\n")
        print(f"{'executor':<18}{'points/s':>10}{'vs serial':>11}{'overhead/point':>16}  same table")
        reference = table(runs["serial"][2])
        for name, (summary, wall, folder) in runs.items():
            overhead = (wall - work_s(folder) / (1 if name == "serial" else args.jobs)) / points
            print(f"{name:<18}{points / wall:>10.2f}{base / wall:>10.2f}x{overhead * 1000:>13.0f} ms  "
                  f"{same(table(folder), reference)}")

        # a pool sweep killed part way, then run again
        folder = tmp / "killed"
        cmd = [sys.executable, "-m", "deployer.cli", "sweep", *(str(MODELS / m) for m in
               ("kws_ref_model.tflite", "vww_96_int8.tflite", "pretrainedResnet_quant.tflite")), *AXES,
               "-o", str(folder), "-q", "--jobs", str(args.jobs), "--verify", args.verify]
        proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
        journal = folder / "journal.jsonl"
        while proc.poll() is None:
            if journal.exists() and journal.read_bytes().count(b"\n") >= points // 2:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait()
        finished = journal.read_bytes().count(b"\n")
        summary, _ = run(folder, "--jobs", str(args.jobs), "--verify", args.verify)
        resumed = same(table(folder), reference)
        ok = summary["reused"] == finished and summary["computed"] == points - finished and resumed.startswith("yes")
        print(f"\nkilled after {finished} of {points} points; the rerun reused {summary['reused']} and ran "
              f"{summary['computed']}; same table: {resumed}")
        return 0 if ok and all(same(table(f), reference).startswith("yes") for _, _, f in runs.values()) else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
