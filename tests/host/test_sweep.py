"""deploy sweep end to end on 16 points (two models, one of them not a model, over two targets,
two SRAM budgets and two arena planners, checked on the host): one after the other, on the
process pool and on a local Ray instance the tables are the same but for the wall times; a
sweep killed part way resumes without redoing its finished points; a change of the deployer
redoes them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.sweep import run as sweep_run
from deployer.sweep.point import COLUMNS, TIMING

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (pip install -e '.[sweep]')")

REPO = Path(__file__).resolve().parents[2]
AXES = ["--target", "host,stm32h743", "--sram", "4K,64K", "--planner", "cpsat,first-fit", "--verify", "host"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    kws = folder / "tiny_kws.tflite"
    example = REPO / "examples" / "tiny_kws.tflite"
    if example.exists():
        kws.write_bytes(example.read_bytes())
    else:
        subprocess.run([sys.executable, str(REPO / "examples" / "make_example.py"), str(kws)], check=True, cwd=REPO)
    bad = folder / "broken.tflite"
    bad.write_bytes(b"TFL3 is not a flatbuffer" * 8)
    return [str(kws), str(bad)]


def sweep(args: list[str]) -> dict:
    result = CliRunner().invoke(main, ["sweep", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def table(folder: Path) -> list[dict]:
    """results.parquet's rows, wall times aside (and checked against results.csv)."""
    rows = pq.read_table(folder / "results.parquet").to_pylist()
    csv_lines = (folder / "results.csv").read_text().splitlines()
    assert csv_lines[0].split(",") == [name for name, _ in COLUMNS] and len(csv_lines) == len(rows) + 1
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.fixture(scope="module")
def serial(models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serial") / "sweep"
    summary = sweep([*models, *AXES, "--jobs", "1", "-o", str(folder)])
    return folder, summary


def test_one_row_per_point_fitting_over_and_failed(serial):
    folder, summary = serial
    assert summary["points"] == 16 and summary["computed"] == 16 and summary["reused"] == 0
    rows = table(folder)
    assert [r["model"] for r in rows] == ["tiny_kws.tflite"] * 8 + ["broken.tflite"] * 8
    kws, bad = rows[:8], rows[8:]
    assert {r["status"] for r in bad} == {"failed"} and {r["error_type"] for r in bad} == {"ModelFormatError"}
    assert all(r["error_message"].startswith("broken.tflite") for r in bad)  # its name, not a path a run made
    assert [r["status"] for r in kws if r["sram"] == 64 * 1024] == ["fits"] * 4
    over = [r for r in kws if r["status"] == "over budget"]
    assert over and all(r["sram_need"] > r["sram"] and r["over"].startswith("SRAM by ") for r in over)
    # checked where the engine runs here; a board's engine is not
    assert {(r["target"], r["verified_on"], r["bit_exact"]) for r in kws if r["status"] == "fits"} == \
        {("host", "host", True), ("stm32h743", None, None)}
    assert all(r["macs"] > 0 and r["modeled_cycles"] > 0 and r["arena_method"] for r in kws)
    assert not any(r["watchdog"] for r in rows)


def test_pool_and_ray_give_the_same_table(models, serial, tmp_path):
    folder, _ = serial
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    pool = tmp_path / "pool"
    assert sweep([*models, *AXES, "--jobs", "2", "-o", str(pool)])["executor"] == "pool"
    on_ray = tmp_path / "ray"
    assert sweep([*models, *AXES, "--jobs", "2", "--ray", "local", "-o", str(on_ray)])["executor"] == "ray"
    reference = table(folder)
    assert table(pool) == reference
    assert table(on_ray) == reference
    report = (folder / "report.html").read_bytes()  # no wall times in the report either
    assert (pool / "report.html").read_bytes() == report == (on_ray / "report.html").read_bytes()


def test_a_killed_sweep_resumes_without_redoing_points(models, serial, tmp_path):
    folder = tmp_path / "killed"
    cmd = [sys.executable, "-m", "deployer.cli", "sweep", *models, *AXES, "--jobs", "1", "-q", "-o", str(folder)]
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    journal = folder / "journal.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 3:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    finished = journal.read_bytes().count(b"\n")
    assert finished >= 3
    summary = sweep([*models, *AXES, "--jobs", "1", "-o", str(folder)])
    assert (summary["reused"], summary["computed"]) == (finished, 16 - finished)
    assert table(folder) == table(serial[0])
    assert sweep([*models, *AXES, "--jobs", "1", "-o", str(folder)])["computed"] == 0  # all done: nothing to redo


def test_a_change_of_the_deployer_redoes_the_points(models, serial, tmp_path, monkeypatch):
    folder = tmp_path / "changed"
    args = [models[0], "--target", "host", "--sram", "8K,64K", "--jobs", "1", "-o", str(folder)]
    assert sweep(args)["computed"] == 2
    assert sweep(args)["computed"] == 0
    monkeypatch.setattr(sweep_run, "sources_digest", lambda: "another deployer")
    assert sweep(args)["computed"] == 2
    assert len((folder / "journal.jsonl").read_text().splitlines()) == 2  # compacted to the run's points


def test_usage_errors(models, tmp_path):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "x").write_text("x")
    for args, words in ((["--sram", "64K..32K:x2"], "low <= high"), (["-o", str(tmp_path / "theirs")], "not a sweep's"),
                        (["--ray", "local", "--target", "nowhere"], "not one of")):
        result = CliRunner().invoke(main, ["sweep", models[0], *args])
        assert result.exit_code == 2 and words in result.output, result.output
