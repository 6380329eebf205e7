"""The `deploy` command: size parsing, errors a user can act on (one line, no traceback, no
output folder), output-folder safety, deterministic output and the manifest's contents."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tflite
from click.testing import CliRunner

from deployer.cli import main, parse_size
from deployer.pipeline import Options, deploy
from network_parser.errors import UsageError
from tests.tflite_builder import ModelBuilder
from tests.cli_output import messages
from tests.models import shared_model

_NEXT_TO_PYTHON = Path(sys.executable).parent / "deploy"
DEPLOY = str(_NEXT_TO_PYTHON) if _NEXT_TO_PYTHON.exists() else shutil.which("deploy")


def shared(rel: str) -> Path:
    return shared_model(rel)


# ---- parse_size ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, size", [
    ("64K", 65536), ("64k", 65536), ("1M", 1048576), ("2m", 2097152), ("1000", 1000), ("0", 0),
    (" 256K ", 262144), ("64KB", 65536), ("64KiB", 65536), ("1MB", 1048576), (None, None),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "K", "abc", "1.5M", "-1K", "64G", "64 K B", "0x100", "1e3", "64KK"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="cannot read size"):
        parse_size(text)


# ---- models ------------------------------------------------------------------------------

def builder_model(path: Path, seed: int = 0, hw: int = 16) -> Path:
    """A small CNN whose arena is a few KiB: conv -> depthwise -> add -> pool -> FC -> softmax."""
    mb = ModelBuilder(seed)
    x = mb.input((1, hw, hw, 8))
    a = mb.conv2d(x, 8, activation="RELU")
    b = mb.depthwise_conv2d(a, activation="RELU6")
    y = mb.avg_pool(mb.add(a, b))
    mb.output(mb.softmax(mb.fully_connected(mb.reshape(y, (1, -1)), 10)))
    mb.save(path)
    return path


def kitchen_sink_model(path: Path, seed: int = 1) -> Path:
    """Most supported ops in one graph (for determinism and manifest checks)."""
    mb = ModelBuilder(seed)
    x = mb.input((1, 8, 8, 3))
    f = mb.input((1, 4), dtype="float32")
    c = mb.conv2d(mb.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]]), 6, stride=2, activation="RELU")
    d = mb.depthwise_conv2d(c, 2)
    e = mb.concat([mb.hard_swish(d), mb.logistic(d)], axis=-1)
    m = mb.mean(mb.max_pool(e), axes=(1, 2), keep_dims=True)
    t = mb.transpose(mb.mul(m, m), (0, 3, 1, 2))
    g = mb.fully_connected(mb.squeeze(t, (2, 3)), 4)
    h = mb.add(g, mb.quantize(f))
    mb.output(mb.softmax(h), mb.dequantize(mb.relu6(h)))
    mb.save(path)
    return path


def unsupported_model(path: Path) -> Path:
    """A builder model whose second op is relabelled GELU (an op the deployer does not take)."""
    mb = ModelBuilder(0)
    mb.output(mb.relu(mb.relu(mb.input((1, 8)))))
    mb._ops[1].code = tflite.BuiltinOperator.GELU
    mb.save(path)
    return path


# ---- running the command ---------------------------------------------------------------------

def run_clirunner(*args, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # an unexpected exception escaped the command
    return result.exit_code, result.stdout, result.stderr


def run_subprocess(*args, env=None):
    if DEPLOY is None:
        pytest.skip("the `deploy` console script is not installed")
    proc = subprocess.run([DEPLOY, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


RUNNERS = {"clirunner": run_clirunner, "subprocess": run_subprocess}


@pytest.fixture(params=sorted(RUNNERS))
def run(request):
    return RUNNERS[request.param]


def assert_one_line_error(code: int, stderr: str, kind: str) -> str:
    assert code != 0
    lines = messages(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {kind}: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def assert_no_output(out_dir: Path, before: set[str]):
    """The output folder was not created and nothing (temp folders) was left next to it."""
    assert not out_dir.exists()
    assert {p.name for p in out_dir.parent.iterdir()} == before


# ---- errors ----------------------------------------------------------------------------------

def test_infeasible_budget(run, tmp_path):
    model = builder_model(tmp_path / "cnn.tflite")
    need = deploy(model, Options(patch="off")).memory.sram_bytes
    assert need > 1024
    before = {p.name for p in tmp_path.iterdir()}
    code, _, err = run(model, "--sram", "1K", "--patch", "off", "-o", tmp_path / "out")
    line = assert_one_line_error(code, err, "InfeasibleBudget")
    assert f"smallest --sram that works is {need}" in line
    assert_no_output(tmp_path / "out", before)


def test_stated_minimum_budget_is_exact(tmp_path):
    """The budget the error names works; one byte less does not."""
    model = builder_model(tmp_path / "cnn.tflite")
    code, _, err = run_clirunner(model, "--sram", "1K", "-o", tmp_path / "a")
    need = int(re.search(r"smallest --sram that works is (\d+)", err).group(1))
    code, _, err = run_clirunner(model, "--sram", need - 1, "-o", tmp_path / "b")
    assert_one_line_error(code, err, "InfeasibleBudget")
    code, out, err = run_clirunner(model, "--sram", need, "-o", tmp_path / "c")
    assert code == 0 and messages(err) == [] and (tmp_path / "c" / "manifest.json").exists()
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["memory"]["sram_bytes"] == need


def test_infeasible_flash(tmp_path):
    model = builder_model(tmp_path / "cnn.tflite")
    code, _, err = run_clirunner(model, "--flash", "1K", "-o", tmp_path / "out")
    need = deploy(model, Options()).memory.flash_bytes
    assert f"smallest --flash that works is {need}" in assert_one_line_error(code, err, "InfeasibleBudget")
    assert not (tmp_path / "out").exists()


def test_model_format_error(run, tmp_path):
    model = tmp_path / "noise.tflite"
    model.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    before = {p.name for p in tmp_path.iterdir()}
    code, _, err = run(model, "-o", tmp_path / "out")
    assert "noise.tflite" in assert_one_line_error(code, err, "ModelFormatError")
    assert_no_output(tmp_path / "out", before)


def test_unsupported_operator(run, tmp_path):
    model = unsupported_model(tmp_path / "sqrt.tflite")
    before = {p.name for p in tmp_path.iterdir()}
    code, _, err = run(model, "-o", tmp_path / "out")
    line = assert_one_line_error(code, err, "UnsupportedOperator")
    assert "GELU" in line and "op 1" in line
    assert_no_output(tmp_path / "out", before)


def test_lstm_model_deploys_and_an_unsupported_form_is_one_line(tmp_path):
    code, _, err = run_clirunner(shared("tflm/trained_lstm_int8.tflite"), "-o", tmp_path / "lstm")
    assert code == 0, err
    mb = ModelBuilder(0)
    mb.output(mb.lstm(mb.input((1, 4, 6)), 8, projection=5, peephole=True))
    model = tmp_path / "peephole_projection.tflite"
    mb.save(model)
    code, _, err = run_clirunner(model, "-o", tmp_path / "out")
    line = assert_one_line_error(code, err, "UnsupportedOperator")
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in line and "peepholes and a projection" in line
    assert not (tmp_path / "out").exists()


def test_error_is_one_line_with_newline_in_tensor_name(tmp_path):
    mb = ModelBuilder(0)
    y = mb.relu(mb.input((1, 8)))
    mb.output(y)
    mb._tensors[y].name = "relu\nout"
    mb._tensors[y].scale = np.array([0.0], np.float32)
    mb.save(tmp_path / "nl.tflite")
    code, _, err = run_clirunner(tmp_path / "nl.tflite", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "ModelFormatError")


@pytest.mark.parametrize("args, kind", [
    (["missing.tflite"], "ModelFormatError"),
    (["model.onnx"], "ModelFormatError"),
    (["cnn.tflite", "--sram", "lots"], "UsageError"),
    (["cnn.tflite", "--target", "z80"], "UsageError"),
])
def test_other_user_errors(tmp_path, args, kind):
    builder_model(tmp_path / "cnn.tflite")
    (tmp_path / "model.onnx").write_bytes(b"\0" * 16)
    code, _, err = run_clirunner(*(tmp_path / a if a.endswith((".tflite", ".onnx")) else a for a in args),
                                 "-o", tmp_path / "out")
    assert_one_line_error(code, err, kind)
    assert not (tmp_path / "out").exists()


# ---- the output folder -----------------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a folder but the marker that says it is a deploy output."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".deploy-output"}


def test_refuses_foreign_folder_without_force(tmp_path):
    model = builder_model(tmp_path / "cnn.tflite")
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("precious")
    (out / "sub" / "data.bin").write_bytes(b"\x01\x02")
    (out / "manifest.json").write_text('{"not": "ours"}')
    before = snapshot(out)
    code, _, err = run_clirunner(model, "-o", out)
    assert code == 2
    assert "--force" in assert_one_line_error(code, err, "UsageError")
    assert snapshot(out) == before
    code, _, err = run_clirunner(model, "-o", out, "--force")
    assert code == 0, err
    assert not (out / "notes.txt").exists() and json.loads((out / "manifest.json").read_text())["model"] == "cnn"


def test_output_path_is_a_file(tmp_path):
    model = builder_model(tmp_path / "cnn.tflite")
    (tmp_path / "out").write_text("x")
    code, _, err = run_clirunner(model, "-o", tmp_path / "out")
    assert_one_line_error(code, err, "UsageError")
    assert (tmp_path / "out").read_text() == "x"


def test_rerun_replaces_previous_output(tmp_path):
    out = tmp_path / "out"
    code, _, err = run_clirunner(builder_model(tmp_path / "first.tflite"), "-o", out)
    assert code == 0, err
    first = set(snapshot(out))
    assert "first_engine.c" in first
    code, stdout, err = run_clirunner(builder_model(tmp_path / "second.tflite", seed=4, hw=8), "-o", out)
    assert code == 0, err
    files = snapshot(out)
    assert "second_engine.c" in files and "first_engine.c" not in files
    assert json.loads(files["manifest.json"])["model"] == "second"
    assert f"wrote {len(files)} files" in stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folders left


def test_output_is_deterministic(tmp_path):
    """Two separate processes (different hash seeds) write byte-identical folders."""
    model = kitchen_sink_model(tmp_path / "sink.tflite")
    for name, seed in (("a", "1"), ("b", "2")):
        code, _, err = run_subprocess(model, "--sram", "64K", "-o", tmp_path / name, env={"PYTHONHASHSEED": seed})
        assert code == 0, err
    code, _, err = run_clirunner(model, "--sram", "64K", "-o", tmp_path / "c")
    assert code == 0, err
    a, b, c = (snapshot(tmp_path / n) for n in "abc")
    assert len(a) >= 5 and sorted(a) == sorted(b) == sorted(c)
    for name in a:
        assert a[name] == b[name] == c[name], f"{name} differs between runs"


# ---- manifest.json ---------------------------------------------------------------------------

def check_manifest(m: dict) -> None:
    """Schema of the fields tools rely on, and the arena's soundness as the manifest states it."""
    arena, memory = m["arena"], m["memory"]
    assert isinstance(arena["bytes"], int) and arena["bytes"] > 0 and isinstance(arena["planner"], str)
    assert arena["bytes"] >= arena.get("lower_bound", 0)
    for key in ("sram_bytes", "scratch_bytes", "flash_bytes"):
        assert isinstance(memory[key], int) and memory[key] >= 0
    assert memory["sram_bytes"] >= arena["bytes"]
    assert isinstance(m["layers"], list) and m["layers"]
    for layer in m["layers"]:
        assert {"name", "op", "macs", "inputs", "outputs"} <= set(layer)
        assert isinstance(layer["macs"], int) and layer["macs"] >= 0 and layer["outputs"]
    assert m["macs"] == sum(layer["macs"] for layer in m["layers"])
    tensors = arena["tensors"]
    names = {t["name"] for t in tensors}
    assert len(names) == len(tensors)
    last_op = len(m["layers"]) - 1
    for t in tensors:
        assert {"name", "offset", "size", "first_op", "last_op", "alias_of"} <= set(t)
        assert 0 <= t["first_op"] <= t["last_op"] <= last_op
        assert t["offset"] >= 0 and t["offset"] + t["size"] <= arena["bytes"]
        assert t["alias_of"] is None or t["alias_of"] in names
    owner = {t["name"]: t["alias_of"] or t["name"] for t in tensors}
    offset, size = {t["name"]: t["offset"] for t in tensors}, {t["name"]: t["size"] for t in tensors}
    overlapping = set()  # outputs over the inputs they consumed, inside their order's window
    for layer in m["layers"]:
        o = layer["overlap"]
        if o is not None:
            shift = offset[o["output"]] - offset[o["input"]]
            assert shift == o["shift"]
            if -size[o["output"]] < shift < size[o["input"]]:  # they share bytes: within the window walked
                assert shift <= o["window"] if o["direction"] == "forward" else shift >= o["rise"]
            overlapping.add(frozenset((owner[o["input"]], owner[o["output"]])))
    for i, a in enumerate(tensors):
        for b in tensors[:i]:
            if owner[a["name"]] == owner[b["name"]] or frozenset((owner[a["name"]], owner[b["name"]])) in overlapping:
                continue  # an alias and its owner (or two aliases of one owner) share bytes, as may an overlap pair
            if a["first_op"] <= b["last_op"] and b["first_op"] <= a["last_op"]:
                assert a["offset"] + a["size"] <= b["offset"] or b["offset"] + b["size"] <= a["offset"], \
                    f"{a['name']} and {b['name']} are live together and overlap in the arena"


def test_manifest_from_cli(tmp_path):
    code, _, err = run_clirunner(kitchen_sink_model(tmp_path / "sink.tflite"), "--sram", "64K", "-o", tmp_path / "o")
    assert code == 0, err
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    check_manifest(m)
    assert m["budgets"]["sram_bytes"] == 65536
    ops = {layer["op"] for layer in m["layers"]}  # rewrites may fold some ops (PAD into CONV_2D)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "CONCATENATION", "FULLY_CONNECTED", "SOFTMAX"} <= ops
    assert any(t["alias_of"] for t in m["arena"]["tensors"])  # SQUEEZE at least aliases its input


@pytest.mark.parametrize("seed", range(4))
def test_manifest_builder_models(tmp_path, seed):
    dep = deploy(builder_model(tmp_path / f"m{seed}.tflite", seed=seed, hw=6 + 2 * seed), Options())
    check_manifest(json.loads(dep.files["manifest.json"]))


@pytest.mark.parametrize("rel", ["mlperf_tiny/kws_ref_model.tflite", "mlperf_tiny/pretrainedResnet_quant.tflite",
                                 "tflm/person_detect.tflite", "mcunet/mcunet_vww.tflite"])
def test_manifest_shared_models(rel):
    m = json.loads(deploy(shared(rel), Options()).files["manifest.json"])
    check_manifest(m)
    assert m["arena"]["bytes"] == m["arena"]["lower_bound"] or m["arena"]["status"] != "OPTIMAL"


def test_dump_ir_and_plan(tmp_path):
    """--dump-ir lists every layer after rewrites; --dump-plan every tensor's bytes and the tiles."""
    from click.testing import CliRunner

    from deployer.cli import main
    example = Path(__file__).resolve().parents[2] / "examples" / "tiny_kws.tflite"
    result = CliRunner().invoke(main, [str(example), "--l1", "2K", "--dump-ir", "--dump-plan",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = result.stdout  # progress lines (a step over a second on a busy machine) go to stderr
    assert out.startswith("graph tiny_kws:") and "CONV_2D" in out and "SOFTMAX" in out
    assert "arena 8000 B by cpsat" in out and "in place: op 6 elementwise-in-place" in out
    assert "tiles: op 0 " in out and "zero-copy-reshape" in out


# ---- targets, --kernels, --qemu --------------------------------------------------------------

def test_targets_table(run):
    from backends import BACKENDS
    code, out, err = run("targets")
    assert code == 0 and err == "", err
    lines = out.strip("\n").splitlines()
    assert lines[0].split()[:2] == ["target", "description"] and len(lines) == 1 + len(BACKENDS)
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(BACKENDS)
    assert "TCM 128K (--l1)" in rows["stm32h743"] and "2M" in rows["stm32h743"] and "mps2-an500" in rows["stm32h743"]
    assert all(s in rows["gap8"].split() for s in ("64K", "512K", "8M", "plain"))
    assert "smlad" in rows["cortex-m4"].split() and "mps2-an386" in rows["cortex-m4"]


def test_targets_json():
    from backends import BACKENDS
    code, out, err = run_clirunner("targets", "--json")
    assert code == 0, err
    infos = {t["name"]: t for t in json.loads(out)}
    assert list(infos) == list(BACKENDS)
    assert infos["stm32h743"]["tcm_bytes"] == 128 * 1024 and infos["stm32h743"]["l1_bytes"] is None
    assert infos["gap8"]["l3_bytes"] == 8 * 1024 * 1024 and infos["gap8"]["qemu_machine"] is None
    assert infos["cortex-m7"]["kernels"] == "smlad" and infos["cortex-m7"]["qemu_machine"] == "mps2-an500"
    assert infos["host"] == dict(name="host", description=BACKENDS["host"].description, l1_bytes=None,
                                 tcm_bytes=None, sram_bytes=None, flash_bytes=None, l3_bytes=None,
                                 kernels="plain", qemu_machine=None)


@pytest.mark.parametrize("command, extra", [([], ["-o", "out"]), (["verify"], ["--seeds", "1"]),
                                            (["compare"], ["--report", "r.html"])])
def test_kernels_smlad_needs_armv7em(run, tmp_path, command, extra):
    model = builder_model(tmp_path / "cnn.tflite")
    before = {p.name for p in tmp_path.iterdir()}
    value = extra[1] if extra[1].isdigit() else tmp_path / extra[1]
    code, _, err = run(*command, model, "--kernels", "smlad", extra[0], value)
    assert code == 2
    assert "--kernels smlad" in assert_one_line_error(code, err, "UsageError")
    assert {p.name for p in tmp_path.iterdir()} == before


def test_kernels_option_reaches_the_engine(tmp_path, monkeypatch):
    """--kernels plain on a Cortex-M target: no SMLAD in the engine (the ELF step is skipped here)."""
    monkeypatch.setattr("deployer.qemu.shutil.which", lambda tool: None)
    model = builder_model(tmp_path / "cnn.tflite")
    for kernels, smlad in (("auto", True), ("plain", False)):
        code, _, err = run_clirunner(model, "--target", "cortex-m7", "--kernels", kernels, "-o", tmp_path / kernels)
        assert code == 0, err
        assert ("smlad" in (tmp_path / kernels / "cnn_engine.c").read_text().lower()) == smlad


def test_verify_qemu_needs_a_qemu_board(run, tmp_path):
    code, _, err = run("verify", builder_model(tmp_path / "cnn.tflite"), "--qemu", "--target", "host")
    assert "target 'host' has no QEMU board" in assert_one_line_error(code, err, "UsageError")


def test_verify_qemu_without_tools(tmp_path, monkeypatch):
    monkeypatch.setattr("deployer.qemu.shutil.which", lambda tool: None)
    code, _, err = run_clirunner("verify", builder_model(tmp_path / "cnn.tflite"), "--qemu", "--target", "cortex-m4")
    line = assert_one_line_error(code, err, "QemuError")
    assert "qemu-system-arm" in line and "apt-get install" in line


def test_deploy_without_arm_tools(tmp_path, monkeypatch):
    """A Cortex-M deploy still works without the Arm tools: manifest ``elf`` is null and the
    summary says how to get the ELF's memory; host manifests have no ``elf``."""
    monkeypatch.setattr("deployer.qemu.shutil.which", lambda tool: None)
    model = builder_model(tmp_path / "cnn.tflite")
    code, out, err = run_clirunner(model, "--target", "cortex-m7", "-o", tmp_path / "m7")
    assert code == 0, err
    m = json.loads((tmp_path / "m7" / "manifest.json").read_text())
    assert "elf" in m and m["elf"] is None
    elf_lines = [line for line in out.splitlines() if line.startswith("ELF:")]
    assert len(elf_lines) == 1 and "not linked" in elf_lines[0] and "apt-get install gcc-arm-none-eabi" in elf_lines[0]
    assert not any(line.endswith(" ELF") for line in out.splitlines())  # no ELF column
    code, out, err = run_clirunner(model, "-o", tmp_path / "host")
    assert code == 0, err
    assert "elf" not in json.loads((tmp_path / "host" / "manifest.json").read_text()) and "ELF" not in out


def test_compare_on_a_board_preset_shows_the_plan_over_its_budget(tmp_path):
    """deploy compare plans what deploy plans, the board's budgets kept: over the stm32f446's
    128K it is no error, each planner's row says OVER, where deploy stops."""
    from tests.tflite_builder import ModelBuilder

    mb = ModelBuilder(3)
    mb.output(mb.conv2d(mb.input((1, 128, 128, 8)), 8, kernel=(1, 1)))  # 256 KiB of activations
    path = tmp_path / "big.tflite"
    mb.save(path)
    code, out, err = run_clirunner("compare", path, "--target", "stm32f446", "--report", tmp_path / "r.html")
    assert code == 0, err
    assert "OVER --sram 131,072" in out
    code, _, err = run_clirunner(path, "--target", "stm32f446", "-o", tmp_path / "out")
    assert code != 0 and "smallest --sram" in err


@pytest.mark.parametrize("command", ["suggest", "compare"])
def test_a_command_names_the_models_it_takes(command, tmp_path):
    """The frontend table decides: suggest and compare take language models too, so a broken
    .safetensors is the reader's one-line model error (no usage error, nothing written); an
    unknown suffix lists every format."""
    from deployer.frontends import FRONTENDS

    assert all(command in f.commands for f in FRONTENDS.values())
    report = ("--report", tmp_path / "r.html") if command == "compare" else ()
    model = tmp_path / "model.safetensors"
    model.write_bytes(b"{}")
    code, _, err = run_clirunner(command, model, *report)
    line = assert_one_line_error(code, err, "ModelFormatError")
    assert code == 1 and "not a safetensors file" in line and not (tmp_path / "r.html").exists()
    other = tmp_path / "model.xyz"
    other.write_bytes(b"x")
    code, _, err = run_clirunner(command, other, *report)
    assert code == 1 and "(supported: .tflite, .onnx, .safetensors)" in err


@pytest.mark.parametrize("fmt, module, package", [("tflite", "ai_edge_litert.interpreter", "ai-edge-litert"),
                                                  ("onnx", "onnxruntime", "onnxruntime")])
def test_verify_without_the_reference_extra_names_the_package(fmt, module, package, tmp_path, monkeypatch):
    """The reference interpreters are an extra: missing, verify says which package and how to
    install it (a usage error, exit 2), not an internal error."""
    if fmt == "tflite":
        mb = ModelBuilder(0)
        mb.output(mb.relu(mb.input((1, 4))))
        model = tmp_path / "m.tflite"
        mb.save(model)
    else:
        from tests.onnx_builder import quantized_model
        model = quantized_model(tmp_path, "mlp", per_channel=False)
    monkeypatch.setitem(sys.modules, module, None)  # the import fails as it does where it is not installed
    code, _, err = run_clirunner("verify", model)
    assert code == 2 and package in err and "pip install -e '.[reference]'" in err and "Traceback" not in err
