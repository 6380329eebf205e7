"""What the `deploy` command says on stderr, for tests: progress lines ("deploy: STEP: ...")
appear or not depending on how fast the machine runs a step, so tests read the rest."""
from __future__ import annotations


def messages(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not progress: errors and warnings."""
    return [line for line in stderr.splitlines() if line and not line.startswith("deploy: ")]


def one_error(stderr: str) -> str:
    """The only message of ``stderr``, which must be an error line."""
    lines = messages(stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]
