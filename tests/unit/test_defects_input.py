"""Hostile input that used to deploy a wrong engine, end in the deployer's own error (status 3),
print a traceback or grow without bound: each now gets one clear line and the right status (1
model, 2 usage, 130 interrupted), or stays bounded."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from deployer import build_cache
from deployer.build_cache import CacheError
from deployer.cli import ADDRESS_SPACE_BYTES, MAX_SEEDS, parse_size
from layer_analyzer.requant import RescaleError, quantize_multiplier
from network_parser.errors import UnsupportedOperator, UsageError
from network_parser.onnx_reader import read_onnx
from tests.cli_output import one_error
from tests.fuzz.harness import ROOT
from tests.hostile import WTE, Case, _cnn, _mixed, _qdq_bytes, _requant_shift, _shape, _st_case, _st_header, _tflite, \
    run_deploy, write_case
from tests.unit.test_cli import builder_model, run_clirunner



def _one_line(status: int, stderr: str, expected_status: int, kind: str, where: str) -> str:
    assert status == expected_status, stderr
    line = one_error(stderr)
    assert line.startswith(f"error: {kind}: ") and where in line, line
    return line


# ---- quantization scales the int32 fixed-point arithmetic cannot represent -------------------

def _scaled(make, tensor: int, scale: float):
    def tamper(mb):
        mb._tensors[tensor].scale = np.asarray([scale], np.float32)
    return _tflite(tamper, make)


@pytest.mark.parametrize("scale", [1e20, 3e38])
def test_huge_input_scale_is_refused_not_deployed(tmp_path, scale):
    """input scale x weight scale / output scale far beyond 2^30: the requantization's shift would
    be past 30, which int32 cannot hold (the engine deployed, and differed from the golden model
    by 255 at op 0)."""
    case = Case("huge input scale", ".tflite", _scaled(_cnn, 0, scale), "UnsupportedOperator",
                "op 0 CONV_2D (output 'conv2d_0/out'): rescale factor")
    model = write_case(case, tmp_path)
    status, stderr, _, _ = run_deploy(model, tmp_path / "out")
    line = _one_line(status, stderr, 1, case.kind, case.where)
    assert "2^30 or more" in line and f"input 'input_0' {scale:g}" in line and "model" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tensor, scale, where", [
    (13, 1e20, "op 10 MUL (output 'mul_0/out'): rescale factor inf is not a finite number"),
    (14, 3e38, "op 11 RELU6 (output 'relu6_0/out'): rescale factor inf is not a finite number"),
    (15, 1e20, "op 12 SOFTMAX (output 'softmax_0/out'): rescale factor"),
    (18, 1e20, "op 14 MEAN (output 'mean_0/out'): rescale factor"),
])
def test_huge_activation_scale_is_one_line(tmp_path, tensor, scale, where):
    """An activation deep in the graph: the op that rescales it is named, with no numpy overflow
    warning beside the error."""
    model = write_case(Case("huge activation scale", ".tflite", _scaled(_mixed, tensor, scale), "", ""), tmp_path)
    status, stderr, _, _ = run_deploy(model, tmp_path / "out")
    _one_line(status, stderr, 1, "UnsupportedOperator", where)
    assert not (tmp_path / "out").exists()


def test_largest_representable_multiplier():
    """m * 2^(shift - 31) with shift at most 30: (2^31 - 1) / 2 is the largest factor, 2^30 the
    first refused (what rounds up to 2^30 too)."""
    assert quantize_multiplier((2 ** 31 - 1) / 2) == (2 ** 31 - 1, 30)
    for real in (2.0 ** 30, math.nextafter(2.0 ** 30, 0), 1e20, 3e38, math.inf):
        with pytest.raises(RescaleError):
            quantize_multiplier(real)
    assert quantize_multiplier(1e-20) == (0, 0)  # tiny factors still flush to zero, as TFLite's


# ---- malformed files that ended in status 3 ---------------------------------------------------

WRAPPING_SHAPE = (48912491, 1473194118, 256)  # 2^64 + 512 elements: an int64 product of 512, the buffer's size
CASES = [
    _st_case("dtype that is a list", "ModelFormatError", f"tensor '{WTE}': dtype ['F32'] is not supported",
             tamper=lambda ts: _st_header({WTE: {"dtype": ["F32"], "shape": [64, 32], "data_offsets": [0, 8192]}},
                                          bytes(8192))),
    Case("constant whose shape product wraps int64 to its size", ".tflite", _tflite(_shape(7, WRAPPING_SHAPE)),
         "ModelFormatError", "tensor 7 'fully_connected_0/weights' holds 512 bytes, shape [48912491, 1473194118, "
         "256] int8 needs 18446744073709552128"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_model_is_status_1(case, tmp_path):
    assert math.prod(WRAPPING_SHAPE) % (1 << 64) == 512
    status, stderr, _, _ = run_deploy(write_case(case, tmp_path), tmp_path / "out")
    _one_line(status, stderr, 1, case.kind, case.where)
    assert not (tmp_path / "out").exists()


def _limited() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _deploy_bytes(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """``deploy`` with raw bytes arguments (as a shell passes what is not UTF-8), under 2 GiB."""
    return subprocess.run([sys.executable, "-m", "deployer.cli", *args], cwd=ROOT, capture_output=True,
                          timeout=timeout, preexec_fn=_limited)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_generate_with_a_prompt_that_is_not_utf8(tmp_path, as_json):
    """A prompt of bytes that are not UTF-8 (argv decoded with surrogateescape) is the user's
    error, status 2, before anything is built."""
    from tests.unit.test_side_files import _mark, _out_folder
    _out_folder(tmp_path)
    _mark(tmp_path)
    proc = _deploy_bytes("generate", str(tmp_path).encode(), b"ab\xff\xfe", *(["--json"] if as_json else []))
    stderr = proc.stderr.decode()
    _one_line(proc.returncode, stderr, 2, "UsageError", "the prompt is not UTF-8 text (byte 0xff at character 3)")
    if as_json:
        assert json.loads(proc.stdout)["error"]["exit_status"] == 2


def test_verify_seeds_are_capped(tmp_path):
    model = builder_model(tmp_path / "cnn.tflite")
    proc = _deploy_bytes("verify", str(model), "--seeds", "1000000000", timeout=60)
    _one_line(proc.returncode, proc.stderr.decode(), 2, "UsageError", f"'--seeds': 1000000000 is not in the range "
                                                                      f"1<=x<={MAX_SEEDS}")
    code, _, err = run_clirunner("verify", model, "--seeds", MAX_SEEDS + 1)
    assert code == 2 and "--seeds" in one_error(err)


# ---- memory budgets past a 32-bit address space -----------------------------------------------

@pytest.mark.parametrize("flag", ["--sram", "--flash", "--l1", "--l3"])
def test_budget_beyond_the_address_space_is_a_usage_error(tmp_path, flag):
    model = builder_model(tmp_path / "cnn.tflite")
    code, _, err = run_clirunner(model, flag, str(1 << 63), "-o", tmp_path / "out")
    line = one_error(err)
    assert code == 2 and line.startswith(f"error: UsageError: {flag} {1 << 63} is ") and "4 GiB" in line, err
    assert not (tmp_path / "out").exists()


def test_budget_of_the_whole_address_space_is_taken(tmp_path):
    assert parse_size("4096M", "--sram") == ADDRESS_SPACE_BYTES
    with pytest.raises(UsageError, match="^UsageError: --flash 4097M is "):
        parse_size("4097M", "--flash")
    code, _, err = run_clirunner(builder_model(tmp_path / "cnn.tflite"), "--sram", "4096M", "-o", tmp_path / "out")
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["budgets"]["sram_bytes"] == 1 << 32


# ---- Ctrl-C at any point ----------------------------------------------------------------------

def _interrupt_after_start(args: list[str], extension: str = "_multiarray_umath") -> subprocess.CompletedProcess:
    """``deploy ARGS`` sent SIGINT as soon as it runs the deployer's code: once numpy's extension
    (the CLI's first heavy import) is mapped, so the signal lands in the imports or later, never
    in the interpreter's own start-up, which no program's code can guard."""
    proc = subprocess.Popen([sys.executable, "-m", "deployer.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if extension in Path(f"/proc/{proc.pid}/maps").read_text():
                    break
            except OSError:
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see the imports start")
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_during_start_up(tmp_path, as_json):
    model = builder_model(tmp_path / "cnn.tflite")
    proc = _interrupt_after_start([str(model), "-o", str(tmp_path / "out"), *(["--json"] if as_json else [])])
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    line = one_error(proc.stderr)
    assert line in ("error: interrupted", "error: interrupted; nothing was written")
    if as_json:
        error = json.loads(proc.stdout)["error"]
        assert error["type"] == "Interrupted" and error["exit_status"] == 130 and error["message"] == line[7:]
    assert not (tmp_path / "out").exists()


_INTERRUPTED_IMPORT = """
import sys
module, how = sys.argv[1:3]
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            if how == "extension":  # pybind11 turns it into an ImportError
                raise ImportError("initialization failed") from KeyboardInterrupt()
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv[1:] = sys.argv[3:]
from deployer.cli import main
main()
"""


@pytest.mark.parametrize("module, how", [("numpy", "python"), ("ortools.sat.python.cp_model", "python"),
                                         ("ortools.sat.python.cp_model_helper", "extension")])
def test_ctrl_c_inside_an_import(tmp_path, module, how):
    """The same, at fixed points: an interrupt while a module imports, or the ImportError an
    extension makes of it."""
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT, module, how, "targets", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert one_error(proc.stderr) == "error: interrupted"
    assert json.loads(proc.stdout) == {"error": {"type": "Interrupted", "message": "interrupted", "exit_status": 130}}


_INTERRUPTED_PARSE = """
import os, signal, sys
import click
real = click.Group.parse_args
def parse_args(self, ctx, args):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the command line is read
    return real(self, ctx, args)
click.Group.parse_args = parse_args
from deployer.cli import main
main()
"""


def test_ctrl_c_while_the_command_line_is_read():
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_PARSE, "targets", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert one_error(proc.stderr) == "error: interrupted"
    assert json.loads(proc.stdout)["error"]["exit_status"] == 130


def test_interrupted_extension_load_inside_a_command(tmp_path, monkeypatch):
    """An extension imported by a command (LiteRT, onnxruntime) interrupted while it loads: an
    interrupt, not the deployer's bug."""
    def interrupted_load(*args, **kwargs):
        raise ImportError("initialization failed") from KeyboardInterrupt()
    monkeypatch.setattr("deployer.cli.deploy", interrupted_load)
    code, out, err = run_clirunner(builder_model(tmp_path / "cnn.tflite"), "-o", tmp_path / "out", "--json")
    assert code == 130 and one_error(err) == "error: interrupted; nothing was written"
    assert json.loads(out)["error"]["type"] == "Interrupted"


# ---- ONNX operators of other domains ----------------------------------------------------------

def _save(model, path: Path) -> Path:
    import onnx
    onnx.save(model, path)
    return path


def test_integer_graph_op_of_another_domain_is_refused(tmp_path):
    """A Mul of domain evil.custom inside a requantization chain used to be read as ONNX's Mul."""
    from tests.unit.test_onnx_reader import nemo_conv, save
    w = np.ones((2, 2, 1, 1))
    nodes, inits, _ = nemo_conv("x", "y", w, [3, 5], [0, 0], 1, 4, pads=(0, 0, 0, 0))
    nodes[1].domain = "evil.custom"
    path = save(tmp_path, nodes, inits, [1, 2, 3, 3], "y", [1, 2, 3, 3])
    with pytest.raises(UnsupportedOperator, match="g.onnx: node 1 Mul 'y_1': operator Mul of domain 'evil.custom' "
                                                  "is not supported \\(the reader takes Mul of domain '' or 'ai.onnx'\\)"):
        read_onnx(path, input_type="uint8")
    code, _, err = run_clirunner(path, "--input-type", "uint8", "-o", tmp_path / "out")
    assert code == 1 and "operator Mul of domain 'evil.custom'" in one_error(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("domain, ok", [("", True), ("ai.onnx", True), ("ai.onnx.contrib", True),
                                        ("evil.custom", False), ("com.microsoft", False)])
def test_requant_shift_domains(tmp_path, domain, ok):
    """Deeploy writes RequantShift in the default domain or ai.onnx.contrib; no other."""
    import onnx
    model = onnx.load_from_string(_requant_shift(16)())
    next(n for n in model.graph.node if n.op_type == "RequantShift").domain = domain
    path = _save(model, tmp_path / "rqs.onnx")
    if ok:
        assert read_onnx(path).layers
    else:
        with pytest.raises(UnsupportedOperator, match=f"node 1 RequantShift 'rqs': operator RequantShift of domain "
                                                      f"'{domain}' is not supported"):
            read_onnx(path)


def test_qdq_graph_op_of_another_domain_is_refused(tmp_path):
    import onnx
    model = onnx.load_from_string(_qdq_bytes())
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    conv.domain = "evil.custom"
    with pytest.raises(UnsupportedOperator, match=f"node \\d+ Conv '{conv.name}': operator Conv of domain "
                                                  f"'evil.custom' is not supported"):
        read_onnx(_save(model, tmp_path / "qdq.onnx"))
    model = onnx.load_from_string(_qdq_bytes())
    next(n for n in model.graph.node if n.op_type == "DequantizeLinear").domain = "com.microsoft"
    assert read_onnx(_save(model, tmp_path / "contrib_dq.onnx")).layers  # onnxruntime's own, same for 8 bits


def test_qoperator_contrib_op_in_the_default_domain_is_refused(tmp_path):
    import onnx
    from tests.onnx_builder import quantized_model
    path = quantized_model(tmp_path, "mlp", per_channel=False, fmt="qoperator")
    assert read_onnx(path).layers
    model = onnx.load(path)
    next(n for n in model.graph.node if n.op_type == "QGemm").domain = ""
    with pytest.raises(UnsupportedOperator, match="operator QGemm of domain '' is not supported \\(the reader takes "
                                                  "QGemm of domain 'com.microsoft'\\)"):
        read_onnx(_save(model, tmp_path / "qgemm.onnx"))


def test_shared_deeploy_and_dory_models_pass_the_domain_check():
    """Every shared integer graph's (domain, op type) pairs are in the reader's table (what
    else a model holds is for the other tests)."""
    from tests.models import ONNX
    models = sorted(ONNX.rglob("*.onnx"))
    if not models:
        pytest.skip(f"no reference ONNX models under {ONNX}")
    for path in models:
        try:
            read_onnx(path)
        except UnsupportedOperator as e:
            assert "of domain" not in str(e), path


# ---- the build cache, bounded ----------------------------------------------------------------

@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _entry(key: str, size: int = 1000) -> Path:
    return build_cache.cached(key, "artifact", lambda f: (f / "artifact").write_bytes(b"x" * size))


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_cache_drops_the_least_recently_used_entries(cache, monkeypatch):
    monkeypatch.setenv("DEPLOY_BUILD_CACHE_SIZE", "2500")  # two entries of 1,000 bytes and their records
    a, b = _entry("a").parent, _entry("b").parent
    _age(a, 3 * 3600)
    _age(b, 2 * 3600)
    assert _entry("a").parent == a  # reused: now the most recently used
    _entry("c")
    assert sorted(p.name for p in cache.iterdir()) == ["a", "c"]  # b, used least recently, went


def test_cache_keeps_entries_used_recently_whatever_the_bound(cache, monkeypatch):
    """A concurrent run may be about to execute an entry it was just given."""
    monkeypatch.setenv("DEPLOY_BUILD_CACHE_SIZE", "1")
    _entry("a")
    _entry("b")
    assert sorted(p.name for p in cache.iterdir()) == ["a", "b"]
    _age(cache / "a", build_cache.RECENT_S + 60)
    _entry("c")
    assert sorted(p.name for p in cache.iterdir()) == ["b", "c"]


def test_cache_default_bound_and_bad_setting(cache, monkeypatch):
    monkeypatch.delenv("DEPLOY_BUILD_CACHE_SIZE", raising=False)
    assert build_cache.size_limit() == 512 << 20
    monkeypatch.setenv("DEPLOY_BUILD_CACHE_SIZE", "2G")
    assert build_cache.size_limit() == 2 << 30
    monkeypatch.setenv("DEPLOY_BUILD_CACHE_SIZE", "lots")
    with pytest.raises(CacheError, match="DEPLOY_BUILD_CACHE_SIZE='lots'"):
        _entry("a")


def test_cache_removes_what_killed_builds_left(cache):
    _entry("a")
    dead = 99_999_999  # beyond any pid_max: no such process
    left = {f"build-{dead}-old": 3600, f"build-{os.getpid()}-old": 3600, f"build-{dead}-young": 0,
            "build-legacy": 3600, f"stale-{dead}-old": 3600}
    for name, age in left.items():
        (cache / name / "half").mkdir(parents=True, mode=0o700)
        (cache / name).chmod(0o700)
        _age(cache / name, age)
    _entry("b")
    assert sorted(p.name for p in cache.iterdir()) == sorted(["a", "b", f"build-{os.getpid()}-old",
                                                             f"build-{dead}-young"])


def test_a_model_the_reference_refuses_is_the_models_error(tmp_path):
    """LiteRT refusing to prepare a model (an FC whose output scale is far below its inputs') is
    a one-line error about the model (exit 1), not an internal one."""
    import subprocess
    import sys

    import numpy as np

    from tests.tflite_builder import ModelBuilder
    mb = ModelBuilder(0)
    y = mb.fully_connected(mb.input((1, 8)), 4)
    mb.output(y)
    mb._tensors[y].scale = np.array([1e-12], np.float32)
    model = tmp_path / "refused.tflite"
    mb.save(model)
    proc = subprocess.run([sys.executable, "-m", "deployer.cli", "verify", str(model)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "LiteRT's reference kernels refuse the model" in proc.stderr
    # one error line; progress lines ("deploy: emit: 1.0 s") appear only when a step is slow, so they do not count
    errors = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("deploy: ")]
    assert "Traceback" not in proc.stderr and len(errors) == 1


def test_a_qdq_bias_at_another_scale_than_the_accumulators_is_refused(tmp_path):
    """A bias whose DequantizeLinear scale is not the input's times the weights' has no integer
    form (onnxruntime adds it in float): refused by name, never a silent mismatch."""
    import onnx
    from onnx import numpy_helper

    from deployer.pipeline import Options, deploy
    from network_parser.errors import UnsupportedOperator
    from tests.onnx_builder import quantized_model
    model = onnx.load(quantized_model(tmp_path, "mlp", per_channel=False))
    inits = {t.name: t for t in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear"
              and numpy_helper.to_array(inits[n.input[0]]).dtype == np.int32)
    scale = inits[dq.input[1]]
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * 3, scale.name))
    path = tmp_path / "bias_scale.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedOperator, match="not the input's times the weights'"):
        deploy(path, Options())
