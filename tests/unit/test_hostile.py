"""Every hostile model gets one clear error line naming the place, exit status 1, no traceback,
no output folder, within a memory limit (2 GiB of address space) and a timeout."""
from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests.fuzz.harness import ROOT
from tests.hostile import CASES

LIMIT_BYTES = 2 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def run_deploy(model, out, *flags, timeout=120):
    return subprocess.run([sys.executable, "-m", "deployer.cli", str(model), "-o", str(out), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_model(case, tmp_path):
    model = tmp_path / f"model{case.suffix}"
    model.write_bytes(case.make())
    run = run_deploy(model, tmp_path / "out")
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {case.kind}: "), run.stderr
    assert case.where in lines[0]
    assert not (tmp_path / "out").exists()


def test_every_fixed_finding_has_its_regression_case():
    from tests.fuzz.findings import FIXED
    names = {c.name for c in CASES}
    missing = []
    for f in FIXED:
        if f.regression.startswith("tests/"):
            path, _, test = f.regression.partition("::")
            if f"def {test}(" not in (ROOT / path).read_text():
                missing.append(f.regression)
        elif f.regression not in names:
            missing.append(f.regression)
    assert missing == []
