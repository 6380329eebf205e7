"""What deploy writes and trusts under hostile input: NaN and infinities in verify's comparison and
its --json, hidden folders named like a killed run's, output folders holding only empty folders,
markers deploy did not write in front of deploy generate, and --report paths that are not ours."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deployer import output
from deployer.output import MARKER, marker_text, write_output
from deployer.verify import max_abs_diff
from tests.cli_output import one_error
from tests.fuzz.harness import ROOT
from tests.tflite_builder import ModelBuilder
from tests.unit.test_hostile_paths import small_model

NEVER_A_PID = 999_999_999  # above any pid_max: never a running process


def deploy(*args, cwd=ROOT, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the worktree's deployer whatever the folder
    return subprocess.run([sys.executable, "-m", "deployer.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``folder``."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def model(tmp_path):
    return small_model(tmp_path / "net.tflite")


# ---- verify: NaN and infinities ----------------------------------------------------------------

def test_non_finite_values_are_compared_not_dropped():
    nan, inf = np.nan, np.inf
    assert max_abs_diff(np.array([nan, 1.0]), np.array([nan, 1.0])) == 0  # NaN at the same element
    assert max_abs_diff(np.array([nan, 1.0]), np.array([1.0, nan])) == inf
    assert max_abs_diff(np.array([2.0, 5.0]), np.array([nan, 1.0])) == inf  # not 4: the NaN is no number
    assert max_abs_diff(np.array([3], np.int8), np.array([nan])) == inf  # an integer output is never NaN
    assert max_abs_diff(np.array([inf, -inf]), np.array([inf, -inf])) == 0
    assert max_abs_diff(np.array([inf]), np.array([-inf])) == inf
    assert max_abs_diff(np.array([inf]), np.array([1e300])) == inf
    assert max_abs_diff(np.array([127], np.int8), np.array([-128], np.int8)) == 255


@pytest.fixture
def float_output(tmp_path):
    """A model with a float (dequantized) output, one input file and what the engine gives for it."""
    mb = ModelBuilder(0)
    mb.output(mb.dequantize(mb.fully_connected(mb.input((1, 8)), 4)))
    path = tmp_path / "deq.tflite"
    mb.save(path)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(-4, 4, dtype=np.int8).reshape(1, 8))
    return path, x


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_verify_a_non_finite_expected_value_is_a_mismatch_in_strict_json(float_output, tmp_path, value):
    path, x = float_output
    expected = tmp_path / "e.npy"
    np.save(expected, np.array([[float(value), 0, 0, 0]], np.float32))
    proc = deploy("verify", path, "--input", x, "--expected", expected)
    assert proc.returncode == 1, proc.stderr
    assert "max |diff| = inf" in proc.stdout and proc.stdout.strip().endswith("MISMATCH")
    proc = deploy("verify", path, "--input", x, "--expected", expected, "--json")
    assert proc.returncode == 1, proc.stderr
    assert strict_json(proc.stdout)["outputs"][0]["max_abs_diff"] == "inf"


def test_strict_json_of_every_non_finite_number():
    from deployer.cli import json_text
    text = json_text({"a": [float("inf"), float("-inf"), float("nan"), 1.5], "b": {"c": (2, float("inf"))}})
    assert strict_json(text) == {"a": ["inf", "-inf", "nan", 1.5], "b": {"c": [2, "inf"]}}


# ---- hidden folders named like a killed run's ---------------------------------------------------

def test_hidden_folders_deploy_did_not_write_are_left_alone(model, tmp_path):
    notes = tmp_path / f".out.tmp-{NEVER_A_PID}-notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    aside = tmp_path / f".out.old-{NEVER_A_PID}"
    (aside / "sub").mkdir(parents=True)
    (aside / "sub" / "thesis.tex").write_text("mine too")
    forged = tmp_path / f".out.tmp-{NEVER_A_PID}-forged"  # our marker, and a file it does not name
    forged.mkdir()
    (forged / MARKER).write_text(marker_text({"a.h": "a"}))
    (forged / "diary.txt").write_text("mine as well")
    before = {p: tree(p) for p in (notes, aside, forged)}
    proc = deploy(model, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert {p: tree(p) for p in (notes, aside, forged)} == before  # neither deleted nor moved into out
    assert (tmp_path / "out" / "net_engine.c").exists() and not (tmp_path / "out" / "sub").exists()


def test_a_killed_runs_folders_are_still_cleaned_and_put_back(tmp_path):
    previous = {"manifest.json": '{"manifest_version": 1}', "engine.c": "int previous;\n"}
    half = tmp_path / f".out.tmp-{NEVER_A_PID}-x1"  # killed while writing b.h: cut short
    half.mkdir()
    (half / MARKER).write_text(marker_text({"a.h": "a", "q/b.h": "b" * 100}))
    (half / "a.h").write_text("a")
    (half / "q").mkdir()
    (half / "q" / "b.h").write_text("b")
    aside = tmp_path / f".out.old-{NEVER_A_PID}-x1"  # set aside between the two renames
    aside.mkdir()
    (aside / MARKER).write_text(marker_text(previous))
    for name, text in previous.items():
        (aside / name).write_text(text)
    output._remove_stale(tmp_path, "out")
    assert not half.exists() and not aside.exists()
    assert {k: v.decode() for k, v in tree(tmp_path / "out").items() if k != MARKER} == previous


# ---- output folders holding only empty folders --------------------------------------------------

@pytest.mark.parametrize("setup", ["empty folders", "garbage marker", "empty marker", "{} marker"])
def test_a_folder_holding_anything_but_our_marker_is_not_empty(model, tmp_path, setup):
    out = tmp_path / "out"
    out.mkdir()
    if setup == "empty folders":
        (out / "photos" / "2023").mkdir(parents=True)
        (out / "keep").mkdir()
    else:
        (out / MARKER).write_text({"garbage marker": "\x00garbage", "empty marker": "", "{} marker": "{}"}[setup])
    before = tree(out)
    proc = deploy(model, "-o", out)
    line = one_error(proc.stderr)
    assert proc.returncode == 2 and "-o" in line and "not a deploy output" in line and "--force" in line
    assert tree(out) == before
    assert deploy(model, "-o", out, "--force").returncode == 0
    assert (out / "net_engine.c").exists() and not (out / "keep").exists()


def test_an_empty_folder_added_to_our_output_is_named(model, tmp_path):
    out = tmp_path / "out"
    assert deploy(model, "-o", out).returncode == 0
    (out / "mine").mkdir()
    proc = deploy(model, "-o", out)
    assert proc.returncode == 2 and "would lose 1 folder" in one_error(proc.stderr) and "mine/" in proc.stderr
    assert (out / "mine").is_dir()


def test_a_folder_we_wrote_whose_files_were_deleted_is_still_ours(tmp_path):
    out = tmp_path / "out"
    write_output({"a.h": "a", "qemu/main.c": "int main;\n"}, out)
    (out / "qemu" / "main.c").unlink()
    assert output.would_lose(out) == []
    write_output({"a.h": "b"}, out)
    assert not (out / "qemu").exists()


def test_a_truly_empty_folder_is_still_an_output_folder(model, tmp_path):
    (tmp_path / "out").mkdir()
    assert deploy(model, "-o", tmp_path / "out").returncode == 0


# ---- deploy generate trusts only deploy's marker -------------------------------------------------

ENGINE_C = """#include <stdint.h>
#include <stdio.h>
#include "inference_api.h"
static int32_t input_id, position;
static float logits[INFERENCE_VOCAB];
int inference_init(void)
{
    FILE *f = fopen("%s", "w"); /* proof that this C ran */
    if (f) {
        fclose(f);
    }
    return 0;
}
void *inference_get_input(int i) { (void)i; return &input_id; }
const void *inference_get_output(int i) { (void)i; return logits; }
int inference_run(void) { ++position; return 0; }
int inference_position(void) { return position; }
"""
API_H = """#define INFERENCE_VOCAB 4
#define INFERENCE_POSITIONS 16
int inference_init(void);
void *inference_get_input(int i);
const void *inference_get_output(int i);
int inference_run(void);
int inference_position(void);
"""


def language_model_folder(folder: Path, ran: Path) -> None:
    from tests.unit.test_side_files import MANIFEST, MERGES, VOCAB
    files = {"manifest.json": json.dumps(MANIFEST), "tokenizer/vocab.json": json.dumps(VOCAB),
             "tokenizer/merges.txt": MERGES, "m_engine.c": ENGINE_C % ran, "inference_api.h": API_H}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


@pytest.mark.parametrize("marker", ["garbage", "empty", "{}", "other generator", "link", "none"])
def test_generate_runs_no_c_without_deploys_marker(tmp_path, marker):
    out, ran = tmp_path / "out", tmp_path / "ran"
    language_model_folder(out, ran)
    texts = {"garbage": "\x00not json", "empty": "", "{}": "{}",
             "other generator": json.dumps({"generator": "someone", "files": {}})}
    if marker in texts:
        (out / MARKER).write_text(texts[marker])
    elif marker == "link":
        real = tmp_path / "real-marker"
        real.write_text(marker_text({p: (out / p).read_bytes() for p in ("manifest.json", "m_engine.c")}))
        (out / MARKER).symlink_to(real)
    proc = deploy("generate", out, "ab", "--max-tokens", "2")
    line = one_error(proc.stderr)
    assert proc.returncode == 2 and str(out) in line and "not a deploy output as deploy wrote it" in line
    assert not ran.exists()


def test_generate_runs_what_deploys_marker_lists_and_nothing_changed_since(tmp_path):
    out, ran = tmp_path / "out", tmp_path / "ran"
    language_model_folder(out, ran)
    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (out / MARKER).write_text(marker_text(files))
    (out / "empty").mkdir()  # added since: not what deploy wrote
    proc = deploy("generate", out, "ab", "--max-tokens", "2")
    assert proc.returncode == 2 and "files added or changed since" in one_error(proc.stderr) and not ran.exists()
    (out / "empty").rmdir()
    proc = deploy("generate", out, "ab", "--max-tokens", "2")  # the marker is deploy's: this C runs
    assert proc.returncode == 0, proc.stderr
    assert ran.exists()


# ---- --report paths --------------------------------------------------------------------------

def test_reports_carry_the_generator_tag(model, tmp_path):
    assert deploy(model, "-o", tmp_path / "out").returncode == 0
    assert output.REPORT_GENERATOR in (tmp_path / "out" / "report.html").read_text()[:output._REPORT_HEAD]


@pytest.mark.parametrize("command", ["compare", "verify"])
@pytest.mark.parametrize("case", ["the model", "a link", "another file", "an input", "a folder"])
def test_report_never_replaces_what_is_not_a_report(model, tmp_path, command, case):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 6, 6, 4), np.int8))
    precious = tmp_path / "precious.html"
    precious.write_text("<html>my own page</html>")
    report = {"the model": model, "a link": tmp_path / "report.html", "another file": precious, "an input": x,
              "a folder": tmp_path / "folder"}[case]
    if case == "a link":
        report.symlink_to(precious)
    if case == "a folder":
        report.mkdir()
    if case == "an input" and command == "compare":
        pytest.skip("compare reads no input files")
    args = ("verify", model, "--target", "cortex-m4", "--qemu", "--per-layer", "--input", x) \
        if command == "verify" else ("compare", model)
    before = {p: p.read_bytes() for p in (model, x, precious)}
    proc = deploy(*args, "--report", report)
    line = one_error(proc.stderr)
    assert proc.returncode == 2 and f"--report {report}" in line
    assert {"the model": "is the model", "a link": "symbolic link", "another file": "not a report deploy wrote",
            "an input": "is an --input file", "a folder": "not a regular file"}[case] in line
    assert {p: p.read_bytes() for p in (model, x, precious)} == before
    assert report.is_symlink() == (case == "a link") and report.is_dir() == (case == "a folder")
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_compare_replaces_its_own_report_and_refuses_a_stranger_at_the_default_path(model, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = deploy("compare", model, cwd=work)
    assert proc.returncode == 0, proc.stderr
    first = (work / "report.html").read_text()
    assert output.REPORT_GENERATOR in first
    assert deploy("compare", model, cwd=work).returncode == 0  # our own report: replaced
    assert [p.name for p in work.iterdir()] == ["report.html"]  # and no temporary file left
    (work / "report.html").write_text("<!DOCTYPE html><title>someone else's</title>")
    proc = deploy("compare", model, cwd=work)
    assert proc.returncode == 2 and "--report report.html" in one_error(proc.stderr)
    assert (work / "report.html").read_text() == "<!DOCTYPE html><title>someone else's</title>"


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_verify_report_replaces_its_own_report_whole(model, tmp_path):
    report = tmp_path / "r.html"
    args = ("verify", model, "--target", "cortex-m4", "--qemu", "--per-layer", "--report", report)
    proc = deploy(*args)
    assert proc.returncode == 0, proc.stderr
    assert output.REPORT_GENERATOR in report.read_text() and "instructions" in report.read_text()
    report.write_text(report.read_text() + "<!-- touched -->")
    assert deploy(*args).returncode == 0
    assert "touched" not in report.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.tflite", "r.html"]
