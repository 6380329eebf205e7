"""The output folder is written whole or not at all: an interrupt, a crash or a kill on the way
leaves the previous output as it was, and the next run cleans up after the one that died."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deployer import output
from deployer.output import write_output
from network_parser.errors import UsageError
from tests.fuzz.harness import ROOT
from tests.models import shared_model

PREVIOUS = {"manifest.json": '{"manifest_version": 1}', "engine.c": "int previous;\n", "sub/x.h": "old\n"}
NEW = {"manifest.json": '{"manifest_version": 1, "new": true}', "engine.c": "int new_one;\n", "a.h": "a\n",
       "b.h": "b\n", "c.h": "c\n"}


def contents(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != output.MARKER}


def hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture
def previous(tmp_path):
    out = tmp_path / "out"
    write_output(PREVIOUS, out)
    assert contents(out) == PREVIOUS
    return out


def test_replaces_the_previous_output_whole(previous):
    write_output(NEW, previous)
    assert contents(previous) == NEW
    assert hidden(previous.parent) == []


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError, MemoryError])
def test_interrupted_write_leaves_the_previous_output(previous, monkeypatch, error, exchange):
    real, written = Path.write_bytes, []

    def flaky(self, data):
        if len(written) == 2:
            raise error("stopped half way")
        written.append(self)
        return real(self, data)
    monkeypatch.setattr(Path, "write_bytes", flaky)
    if not exchange:
        monkeypatch.setattr(output, "_exchange", lambda a, b: False)
    with pytest.raises(UsageError if error is OSError else error):  # a file system's error is the -o's
        write_output(NEW, previous)
    assert contents(previous) == PREVIOUS
    assert hidden(previous.parent) == []


_CRASH = """
import os, sys
from pathlib import Path
from deployer import output
stage = sys.argv[2]
real_write, real_rename = Path.write_bytes, Path.rename
def write(self, data):
    if stage == "write" and self.name == "b.h":
        os._exit(9)
    return real_write(self, data)
def rename(self, target):
    result = real_rename(self, target)
    if stage == "rename" and ".old-" in str(target):
        os._exit(9)
    return result
Path.write_bytes, Path.rename = write, rename
if stage == "rename":
    output._exchange = lambda a, b: False
output.write_output({"manifest.json": '{"manifest_version": 2}', "a.h": "a", "b.h": "b"}, Path(sys.argv[1]))
"""


@pytest.mark.parametrize("stage", ["write", "rename"])
def test_killed_run_leaves_the_previous_output_and_the_next_run_cleans_up(previous, stage):
    run = subprocess.run([sys.executable, "-c", _CRASH, str(previous), stage], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 9, run.stderr
    assert hidden(previous.parent), "the killed run left its hidden folder"
    if stage == "write":
        assert contents(previous) == PREVIOUS
    else:  # killed between setting the previous output aside and moving the new one in
        assert not previous.exists()
    write_output(NEW, previous)
    assert contents(previous) == NEW
    assert hidden(previous.parent) == []


def test_stale_previous_output_is_put_back(tmp_path):
    """A run killed between its two renames: the previous output, set aside, comes back (it
    carries our marker; a folder without it is left alone)."""
    out, aside = tmp_path / "out", tmp_path / ".out.old-999999999"
    aside.mkdir()
    (aside / "manifest.json").write_text(PREVIOUS["manifest.json"])
    (aside / output.MARKER).write_text(output.marker_text({"manifest.json": PREVIOUS["manifest.json"]}))
    output._remove_stale(tmp_path, "out")
    assert contents(out) == {"manifest.json": PREVIOUS["manifest.json"]}


_INTERRUPT_WHILE_PLANNING = """
import os, signal, sys
from deployer import cli, pipeline
real = pipeline.plan_memory
def plan_memory(plan):
    os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C while memory is planned
    return real(plan)
pipeline.plan_memory = plan_memory
sys.argv[0] = "deploy"
cli.main()
"""


def test_ctrl_c_while_planning_keeps_the_previous_output(previous, tmp_path):
    """SIGINT while memory is planned (at a fixed point, not after a delay): one line, status 130, the previous folder untouched."""
    model = shared_model("mlperf_tiny/kws_ref_model.tflite")
    proc = subprocess.run([sys.executable, "-c", _INTERRUPT_WHILE_PLANNING, str(model), "-o", str(previous)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    err = proc.stderr
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "error: interrupted; nothing was written"
    assert contents(previous) == PREVIOUS
    assert hidden(previous.parent) == []
