"""The command line as a hostile or careless user meets it: output folders that are not ours, odd
-o paths, concurrent runs, impossible flags, terminal escapes in names, --json errors. Every
case ends in a clear one-line error (exit 1 or 2) or a correct run, never exit 3."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from deployer import output
from deployer.cli import main
from tests.tflite_builder import ModelBuilder
from tests.cli_output import messages, one_error
from tests.fuzz.harness import ROOT


def small_model(path: Path, seed: int = 0) -> Path:
    mb = ModelBuilder(seed)
    x = mb.input((1, 6, 6, 4))
    mb.output(mb.softmax(mb.fully_connected(mb.reshape(mb.conv2d(x, 4), (1, 144)), 5)))
    mb.save(path)
    return path


def run(*args, env=None):
    r = CliRunner().invoke(main, [str(a) for a in args], env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def model(tmp_path):
    return small_model(tmp_path / "net.tflite")


# ---- whose folder is it -------------------------------------------------------------------

def test_a_browser_extension_folder_is_not_ours(model, tmp_path):
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "manifest.json").write_text('{"manifest_version": 3, "name": "an extension"}')
    (ext / "background.js").write_text("chrome.runtime;")
    before = files(ext)
    code, _, err = run(model, "-o", ext)
    assert code == 2 and "not a deploy output" in one_error(err) and "2 files would be lost" in err
    assert files(ext) == before
    assert run(model, "-o", ext, "--force")[0] == 0


def test_files_a_user_added_to_our_output_are_named_not_deleted(model, tmp_path):
    out = tmp_path / "out"
    assert run(model, "-o", out)[0] == 0
    (out / "my_notes.txt").write_text("mine")
    (out / "qemu" / "input.bin").parent.mkdir(exist_ok=True)
    (out / "qemu" / "input.bin").write_bytes(b"\x01")
    engine = next(out.glob("*_engine.c"))
    engine.write_text(engine.read_text() + "/* my tweak */\n")
    code, _, err = run(model, "-o", out)
    line = one_error(err)
    assert code == 2 and "my_notes.txt" in line and "qemu/input.bin" in line and f"{engine.name} (changed)" in line
    assert (out / "my_notes.txt").read_text() == "mine"
    assert run(model, "-o", out, "--force")[0] == 0
    assert not (out / "my_notes.txt").exists()


def test_our_own_build_products_do_not_block_a_rerun(model, tmp_path):
    out = tmp_path / "out"
    assert run(model, "-o", out, "--target", "cortex-m4")[0] == 0
    for name in output.BUILD_PRODUCTS:
        (out / name).write_bytes(b"built")
    assert run(model, "-o", out, "--target", "cortex-m4")[0] == 0


def test_an_output_written_before_the_marker_is_still_ours(model, tmp_path):
    out = tmp_path / "out"
    assert run(model, "-o", out)[0] == 0
    (out / output.MARKER).unlink()  # as an earlier version wrote it
    assert run(small_model(tmp_path / "other.tflite", seed=3), "-o", out)[0] == 0
    assert (out / "other_engine.c").exists() and not (out / "net_engine.c").exists()
    (out / output.MARKER).unlink()
    (out / "extra.c").write_text("int x;")
    code, _, err = run(model, "-o", out)
    assert code == 2 and "extra.c" in one_error(err)


# ---- -o paths ----------------------------------------------------------------------------

def test_output_through_a_symlink_keeps_the_link(model, tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    assert run(model, "-o", real)[0] == 0
    link.symlink_to(real)
    assert run(small_model(tmp_path / "two.tflite", seed=2), "-o", link)[0] == 0
    assert link.is_symlink() and (real / "two_engine.c").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_dangling_symlink_is_refused_and_creates_nothing(model, tmp_path):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere" / "deeper")
    code, _, err = run(model, "-o", link)
    assert code == 2 and "does not exist" in one_error(err)
    assert not (tmp_path / "nowhere").exists()


def test_the_current_folder_cannot_be_replaced(model, tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for target in (".", str(tmp_path)):
        code, _, err = run(model, "-o", target)
        assert code == 2 and "current folder" in one_error(err)


def test_long_names_fit_the_file_system(tmp_path):
    model = small_model(tmp_path / ("m" * 240 + ".tflite"))
    out = tmp_path / ("o" * 250)
    code, _, err = run(model, "-o", out)
    assert code == 0, err
    assert all(len(p.name) <= 64 for p in out.iterdir())
    assert run(model, "-o", out)[0] == 0  # and again, replacing it


@pytest.mark.parametrize("err_no", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_an_unwritable_output_is_a_usage_error(model, tmp_path, monkeypatch, err_no):
    out = tmp_path / "out"
    assert run(model, "-o", out)[0] == 0
    before = files(out)
    real = Path.write_bytes

    def failing(self, data):
        if ".tmp-" in str(self):
            raise OSError(err_no, os.strerror(err_no))
        return real(self, data)
    monkeypatch.setattr(Path, "write_bytes", failing)
    code, _, err = run(model, "-o", out)
    assert code == 2 and os.strerror(err_no) in one_error(err)
    assert files(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_that_finds_the_folder_taken_replaces_it(model, tmp_path, monkeypatch):
    """Two first runs into one new folder: the other finished between our look and our move;
    ours, finishing last, takes the name."""
    out = tmp_path / "out"
    real_rename, other = Path.rename, []

    def rename(self, target):
        if Path(target) == out and not out.exists() and not other:
            other.append(True)
            output.write_output({"other.c": "int other;\n"}, out)  # the other run finishes first
        return real_rename(self, target)
    monkeypatch.setattr(Path, "rename", rename)
    monkeypatch.setattr(output, "_exchange", lambda a, b: False)
    assert run(model, "-o", out)[0] == 0
    assert (out / "net_engine.c").exists() and not (out / "other.c").exists()


def test_concurrent_first_runs_both_succeed(model, tmp_path):
    out = tmp_path / "out"
    for attempt in range(3):
        procs = [subprocess.Popen([sys.executable, "-m", "deployer.cli", str(model), "-o", str(out / str(attempt)),
                                   "-q"], cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        assert output.would_lose(out / str(attempt)) == []
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


# ---- flags -------------------------------------------------------------------------------

@pytest.mark.parametrize("limit", ["nan", "inf", "-inf", "0", "-1"])
def test_time_limit_must_be_a_positive_number(model, tmp_path, limit):
    code, _, err = run(model, "-o", tmp_path / "out", "--time-limit", limit)
    assert code == 2 and "--time-limit" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("patch", ["0x0@0", "0x2@1", "99x99@1", "2x2@99", "2x2@-1"])
def test_impossible_patch_grids_are_usage_errors(model, tmp_path, patch):
    code, _, err = run(model, "-o", tmp_path / "out", "--patch", patch)
    assert code == 2 and "--patch" in one_error(err)


def test_version(tmp_path):
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("deploy ") and out.split()[1][0].isdigit()


def test_json_errors_go_to_stdout_as_well(model, tmp_path):
    code, out, err = run(model, "--sram", "64", "-o", tmp_path / "out", "--json")
    error = json.loads(out)["error"]
    assert code == 1 == error["exit_status"] and error["type"] == "InfeasibleBudget"
    assert one_error(err) == f"error: InfeasibleBudget: {error['message']}"
    code, out, err = run("verify", tmp_path / "missing.tflite", "--json")
    assert json.loads(out)["error"]["exit_status"] == code != 0


def test_terminal_escapes_in_names_are_shown_not_obeyed(tmp_path):
    mb = ModelBuilder(1)
    mb.output(mb.relu(mb.input((1, 8))))
    for t in mb._tensors:
        t.name = "\x1b]0;owned\x07\x1b[2J" + t.name + "\u202e"
    path = tmp_path / "esc\x1b[31m.tflite"
    mb.save(path)
    for args in (("suggest", path), (path, "-o", tmp_path / "out", "--dump-ir"), (path, "--sram", "1", "-o",
                                                                                  tmp_path / "x")):
        _, out, err = run(*args)
        assert "\x1b" not in out + err and "\u202e" not in out + err and "\x07" not in out + err, args


def test_an_error_quotes_a_bounded_amount(tmp_path):
    """A config list of a million entries: the error line stays short."""
    from tests import gptneo_builder
    folder = tmp_path / "lm"
    cfg = gptneo_builder.config()
    cfg["attention_layers"] = ["everywhere"] * 1_000_000
    model = gptneo_builder.write(folder, cfg)
    code, _, err = run(model, "-o", tmp_path / "out")
    assert code == 1 and len(one_error(err)) < 3000


def test_progress_lines_never_count_as_messages():
    assert messages("deploy: tiling: 3/9 (1.2 s)\nerror: X: y\ndeploy: emit: done in 1.1 s\n") == ["error: X: y"]


@pytest.mark.parametrize("suffix", [".tflite", ".onnx", ".safetensors"])
@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "folder"])
def test_a_model_that_is_no_regular_file_is_refused_unread(tmp_path, suffix, kind):
    model = tmp_path / f"model{suffix}"
    if kind == "dev_zero":
        model.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(model)
    else:
        model.mkdir()
    if suffix == ".safetensors":
        (tmp_path / "config.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "deployer.cli", str(model), "-o", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "must be a regular file" in one_error(proc.stderr)
    assert not (tmp_path / "out").exists()


def test_a_folder_nested_thousands_deep_is_listed_and_replaced(model, tmp_path):
    out = tmp_path / "deep"
    path = str(out)
    for _ in range(1200):  # deeper than Python's recursion limit (os.makedirs itself recurses)
        os.mkdir(path)
        path += "/d"
    with open(path, "w") as f:  # something to lose at the bottom
        f.write("x")
    code, _, err = run(model, "-o", out)
    assert code == 2 and "not a deploy output" in one_error(err)
    assert run(model, "-o", out, "--force")[0] == 0
    assert run(model, "-o", out)[0] == 0  # nothing left behind blocks the next run
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_names_that_are_not_utf8(tmp_path):
    model = small_model(tmp_path / os.fsdecode(b"m\xff.tflite"))
    out = tmp_path / os.fsdecode(b"o\xfe")
    code, _, err = run(model, "-o", out)
    assert code == 0, err
    assert "\ufffd" in json.loads((out / "manifest.json").read_text())["model"]
    (out / "x").write_text("mine")
    code, _, err = run(model, "-o", out)
    assert code == 2 and "\\udcfe" in one_error(err)  # shown, not a crash on the terminal's encoding


def test_a_loop_of_links_is_a_usage_error(model, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, _, err = run(model, "-o", tmp_path / "loop" / "out")
    assert code == 2 and "-o" in one_error(err)


def test_an_output_folder_is_an_ordinary_folder(model, tmp_path):
    old = os.umask(0o022)
    try:
        assert run(model, "-o", tmp_path / "out")[0] == 0
    finally:
        os.umask(old)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755


def test_compare_report_that_cannot_be_written(model, tmp_path):
    code, _, err = run("compare", model, "--report", tmp_path / "missing" / "r.html")
    assert code == 2 and "--report" in one_error(err)


@pytest.mark.parametrize("args, needle", [
    (("--time-limit", "5e9"), "--time-limit"), (("--max-overhead", "nan"), "--max-overhead"),
    (("--target", "z80"), "--target"), (("--no-such-flag",), "--no-such-flag")])
def test_flags_click_or_we_refuse_give_one_line(model, tmp_path, args, needle):
    code, out, err = run(model, "-o", tmp_path / "out", *args, "--json")
    assert code == 2 and needle in one_error(err)
    assert json.loads(out)["error"]["exit_status"] == 2


def test_verify_needs_a_sample(model):
    code, _, err = run("verify", model, "--seeds", "0")
    assert code == 2 and "--seeds" in one_error(err)


def test_inputs_for_an_integer_input_must_be_its_integers(model, tmp_path):
    import numpy as np
    for name, values in (("frac", np.full((1, 6, 6, 4), 0.5)), ("big", np.full((1, 6, 6, 4), 300.0)),
                         ("nan", np.full((1, 6, 6, 4), np.nan))):
        np.save(tmp_path / f"{name}.npy", values)
        code, _, err = run("verify", model, "--input", tmp_path / f"{name}.npy")
        assert code == 2 and "whole numbers from -128 to 127" in one_error(err), name
