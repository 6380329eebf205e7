"""deploy suggest against deploy: per shared TFLite model, the estimated SRAM and flash next to
what deploy then produces (its plan, or the smallest budget its InfeasibleBudget names), the
difference, both commands' wall times and the first recommendation.

    python bench/suggest_bench.py [--sram 128K] [--flash 512K] [--target host] [--models GLOB]

Both run as the user runs them (the `deploy` command, one process each).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "tests" / "model_files" / "tflite"
DEPLOY = str(Path(sys.executable).parent / "deploy") if (Path(sys.executable).parent / "deploy").exists() \
    else shutil.which("deploy")


def run(*args) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    proc = subprocess.run([DEPLOY, *map(str, args)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start


def produced(code: int, out: str, err: str) -> dict | None:
    """SRAM and flash that deploy needs: its plan when it fits, else the smallest budgets it names."""
    if code == 0:
        memory = json.loads(out)["memory"]
        return {"sram": memory["sram_bytes"], "flash": memory["flash_bytes"]}
    needs = {k: int(v) for k, v in re.findall(r"the smallest --(sram|flash) that works is (\d+)", err)}
    return needs or None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sram", default="128K")
    ap.add_argument("--flash", default="512K")
    ap.add_argument("--target", default="host")
    ap.add_argument("--models", default=str(MODELS / "*" / "*.tflite"))
    args = ap.parse_args(argv)
    if DEPLOY is None:
        print("the `deploy` command is not installed (pip install -e .)", file=sys.stderr)
        return 1
    paths = sorted(glob.glob(args.models))
    if not paths:
        print(f"no models match {args.models}", file=sys.stderr)
        return 1
    budget = ["--sram", args.sram, "--flash", args.flash, "--target", args.target]
    print(f"deploy suggest vs deploy at {' '.join(budget)}")
    head = ("model", "est SRAM", "deploy SRAM", "diff", "est flash", "deploy flash", "diff", "suggest s", "deploy s",
            "first recommendation")
    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            name = Path(path).stem
            code, out, err, t_suggest = run("suggest", path, *budget, "--json", "-q")
            j = json.loads(out) if out.strip().startswith("{") else None
            dcode, dout, derr, t_deploy = run(path, *budget, "--json", "-q", "-o", os.path.join(tmp, name))
            if j is None or j["unsupported"]:
                reason = (j or {}).get("unsupported") or err.strip()
                rows.append((name, "-", "-", "-", "-", "-", "-", f"{t_suggest:.1f}", f"{t_deploy:.1f}",
                             f"unsupported: {reason.split(': ')[-1][:50]}"))
                continue
            need = produced(dcode, dout, derr) or {}
            cells = []
            for memory in ("sram", "flash"):
                est, got = j[f"estimated_{memory}_bytes"], need.get(memory)
                if got is None:  # within its budget while another memory is over: deploy names only those
                    cells += [f"{est:,}", "(fits)", "-"]
                    continue
                diff = (est - got) / got if got else 0.0
                worst = max(worst, abs(diff))
                cells += [f"{est:,}", f"{got:,}", f"{100 * diff:+.1f}%"]
            top = next((r for r in j["recommendations"] if r["priority"] != "SKIP"), None)
            first = f"{top['priority']} {top['name']} {' '.join(top['flags']) or '(on)'}" if top else "-"
            rows.append((name, *cells, f"{t_suggest:.1f}", f"{t_deploy:.1f}", first))
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    for r in (head, *rows):
        print("  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print(f"largest difference between the estimate and deploy: {100 * worst:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
