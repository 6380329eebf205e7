"""Run one reader's fuzz campaign: atheris over the deployer's front half, seeded with real models.

    campaign("tflite", seconds=60, work=Path(...)) -> {"executions", "outcomes", "findings", ...}

libFuzzer limits each input to ``timeout_s`` and the process to ``rss_mb``: an input that hangs
or allocates gigabytes is a finding too (libFuzzer stops on it; the campaign records its
artifact and starts again for the time left).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.fuzz.harness import ROOT
from tests.fuzz.seeds import seeds


def campaign(reader: str, seconds: float, work: Path, timeout_s: int = 20, rss_mb: int = 3072,
             seed: int = 1, max_len: int = 200_000) -> dict:
    work = Path(work)
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    for name, data in seeds(reader).items():
        (work / "corpus" / name).write_bytes(data)
    total = {"reader": reader, "seeds": len(list((work / "corpus").iterdir())), "executions": 0,
             "outcomes": {}, "findings": {}, "restarts": 0}
    deadline = time.monotonic() + seconds
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    while (left := deadline - time.monotonic()) > 2:
        (work / "stats.json").unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.fuzz.atheris_main", reader, str(work), f"{left:.1f}",
               f"-timeout={timeout_s}", f"-rss_limit_mb={rss_mb}", f"-malloc_limit_mb={rss_mb}",
               f"-seed={seed + total['restarts']}", f"-max_len={max_len}", "-print_final_stats=0",
               f"-artifact_prefix={work / 'findings'}/"]
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=left + 120)
        stats = json.loads((work / "stats.json").read_text()) if (work / "stats.json").exists() else {}
        total["executions"] += stats.get("executions", 0)
        for k, v in stats.get("outcomes", {}).items():
            total["outcomes"][k] = total["outcomes"].get(k, 0) + v
        for sig, f in stats.get("findings", {}).items():
            total["findings"].setdefault(sig, f)
        if run.returncode != 0:  # libFuzzer stopped on an input: a timeout, out of memory, a crash
            kind = next((k for k in ("timeout", "out-of-memory", "crash", "oom", "leak")
                         if f"-{k}-" in run.stderr or f"{k}-" in run.stderr), "crash")
            tail = [ln for ln in run.stderr.splitlines() if "ERROR" in ln or "Traceback" in ln][:1]
            total["findings"].setdefault(f"libFuzzer {kind}", {"message": " ".join(tail)[:300], "count": 1,
                                                                 "input": _artifact(work / "findings")})
            total["restarts"] += 1
            if total["restarts"] > 5:
                break
        elif not stats.get("final"):
            break
    total["distinct_findings"] = len(total["findings"])
    return total


def _artifact(folder: Path) -> str:
    arts = sorted((p for p in folder.iterdir() if p.name.split("-")[0] in ("timeout", "oom", "crash", "leak")),
                  key=lambda p: p.stat().st_mtime)
    return arts[-1].name if arts else "?"
