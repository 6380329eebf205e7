"""The atheris (libFuzzer) process of one reader's campaign (started by tests/fuzz/campaign.py).

    python -m tests.fuzz.atheris_main READER WORKDIR SECONDS [libFuzzer flags...]

WORKDIR/corpus holds the seeds (libFuzzer adds what it finds there); a finding (an exception
that is not a DeployError) is saved once per signature to WORKDIR/findings/ and the run goes
on; WORKDIR/stats.json counts executions and outcomes, written every second and at the end.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["network_parser", "layer_analyzer", "solver", "deployer", "backends"]):
    import deployer.decoder_executor  # noqa: F401 - instrumented like the rest
    import network_parser.gptneo  # noqa: F401
    from tests.fuzz.harness import READERS, exercise, signature


def main() -> None:
    reader, work, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    findings = work / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    stats = {"reader": reader, "executions": 0, "outcomes": {}, "findings": {}}
    deadline, last_dump = time.monotonic() + seconds, [0.0]

    def dump(final=False):
        stats["final"] = final
        tmp = work / "stats.json.tmp"
        tmp.write_text(json.dumps(stats, indent=1, sort_keys=True))
        tmp.replace(work / "stats.json")

    def one_input(data: bytes) -> None:
        try:
            outcome = exercise(reader, data)
        except Exception as e:  # noqa: BLE001 - anything but a DeployError is what we look for
            sig = signature(e)
            outcome = "finding"
            if sig not in stats["findings"]:
                name = hashlib.sha1(data).hexdigest()[:16] + READERS[reader]
                (findings / name).write_bytes(data)
                stats["findings"][sig] = {"input": name, "message": str(e)[:300], "count": 0}
            stats["findings"][sig]["count"] += 1
        stats["executions"] += 1
        stats["outcomes"][outcome] = stats["outcomes"].get(outcome, 0) + 1
        now = time.monotonic()
        if now >= deadline:
            dump(final=True)
            os._exit(0)
        if now - last_dump[0] >= 1.0:
            last_dump[0] = now
            dump()

    atheris.Setup([sys.argv[0], *sys.argv[4:], str(work / "corpus")], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
