"""Every hostile model gets one clear error line naming the place, exit status 1, no traceback,
no output folder, within a memory limit (2 GiB of address space) and a timeout."""
from __future__ import annotations

import pytest

from tests.fuzz.harness import ROOT
from tests.cli_output import messages
from tests.hostile import CASES, run_deploy, write_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_model(case, tmp_path):
    model = write_case(case, tmp_path)
    status, stderr, _, _ = run_deploy(model, tmp_path / "out")
    assert status == 1, stderr
    assert "Traceback" not in stderr
    lines = messages(stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: {case.kind}: "), stderr
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
