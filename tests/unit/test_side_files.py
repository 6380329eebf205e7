"""The files beside a model (config.json, the tokenizer's files, token id maps, test vectors), the
files a flag names and the files of an output folder are read one way: a regular file (links to
one are fine, as in a Hugging Face cache), up to a size cap, its content checked. A link to
another file, to /dev/zero, a named pipe, a folder, an oversized or malformed file is one
DeployError naming the file, never a hang, an exhausted memory or a crash reported as a bug.

The cases that would hang or exhaust memory in a reader without these checks (/dev/zero, a
pipe, an oversized file) run in a subprocess under a timeout and a memory limit."""
from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from deployer import generate
from deployer.language_model import _gpt2_ids, _read_ids, _tokenizer_and_files
from deployer.test_vectors import find_vectors, read_dory_txt, vector_input_range
from deployer.tokenizer import Gpt2Tokenizer
from network_parser import side_files as sf
from network_parser.errors import DeployError, ModelFormatError, UsageError
from network_parser.gptneo import read_gptneo
from tests.cli_output import messages
from tests import gptneo_builder as gb
from tests.hostile import run_deploy

ROOT = Path(__file__).resolve().parents[2]
PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
VOCAB = {"a": 0, "b": 1, "ab": 2, "c": 3}
MERGES = "#version: 0.2\na b\n"
FAKE_GRAPH = SimpleNamespace(inputs=["x"], outputs=["y"],  # what find_vectors reads of a graph
                             source=SimpleNamespace(input_shapes=((1, 4),), output_shapes=((1, 2),)))
MANIFEST = dict(kind="language_model", library="m",
                language_model=dict(config=dict(vocab=4, max_positions=16), eos_token_id=None))


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)


def _gptneo(folder: Path) -> None:
    gb.write(folder)
    _write(folder, {"vocab.json": json.dumps(VOCAB), "merges.txt": MERGES, "tok/vocab.json": json.dumps(VOCAB),
                    "tok/merges.txt": MERGES, "pruned_to_gpt2_ids.json": json.dumps(list(range(64))),
                    "keep.json": "[0, 1, 2]"})


def _out_folder(folder: Path) -> None:
    _write(folder, {"manifest.json": json.dumps(MANIFEST), "token_ids.json": "[3, 2, 1, 0]",
                    "tokenizer/vocab.json": json.dumps(VOCAB), "tokenizer/merges.txt": MERGES,
                    "m_engine.c": "int x;\n", "inference_api.h": "\n"})


def _deeploy(folder: Path) -> None:
    _write(folder, {"network.onnx": b"", "inputs.npz": _npz(x=np.array([[-1, 2, 3, 4]], np.int8)),
                    "outputs.npz": _npz(y=np.array([[5, 6]], np.int8))})


def _dory(folder: Path) -> None:
    _write(folder, {"network.onnx": b"", "input.txt": "# input (shape [1, 4]),\\\n1.000,\\\n2.000,\\\n3.0,\\\n4,\n",
                    "out_layer0.txt": "# out (shape [1, 2]),\n5,\n6,\n"})


def _vectors(folder: Path):
    vec = find_vectors(folder / "network.onnx", FAKE_GRAPH)
    return vec, vector_input_range(folder / "network.onnx")


@dataclass(frozen=True)
class SideFile:
    name: str
    file: str  # its place in the folder
    setup: Callable[[Path], None]  # the model (or output folder) with every file valid
    read: Callable[[Path], object]  # the deployer reading it
    error: type[DeployError]
    cap: int
    checked: bool = True  # its content is checked (a passwd file in its place is refused)


SIDE_FILES = [
    SideFile("config.json", "config.json", _gptneo, lambda f: read_gptneo(f / "model.safetensors"),
             ModelFormatError, sf.CONFIG_BYTES),
    SideFile("vocab.json", "vocab.json", _gptneo, lambda f: _tokenizer_and_files(f / "model.safetensors", None)[1],
             ModelFormatError, sf.TOKENIZER_BYTES),
    SideFile("merges.txt", "merges.txt", _gptneo, lambda f: _tokenizer_and_files(f / "model.safetensors", None)[1],
             ModelFormatError, sf.TOKENIZER_BYTES),
    SideFile("--tokenizer vocab.json", "tok/vocab.json", _gptneo,
             lambda f: _tokenizer_and_files(f / "model.safetensors", f / "tok")[1], UsageError, sf.TOKENIZER_BYTES),
    SideFile("pruned_to_gpt2_ids.json", "pruned_to_gpt2_ids.json", _gptneo,
             lambda f: _gpt2_ids(f / "model.safetensors", None, 64), ModelFormatError, sf.TOKEN_IDS_BYTES),
    SideFile("--prune-vocab", "keep.json", _gptneo, lambda f: _read_ids(f / "keep.json"), UsageError,
             sf.TOKEN_IDS_BYTES),
    SideFile("output manifest.json", "manifest.json", _out_folder, lambda f: generate._manifest(f), UsageError,
             sf.MANIFEST_BYTES),
    SideFile("output token_ids.json", "token_ids.json", _out_folder, lambda f: generate._token_ids(f, 4, 4),
             ModelFormatError, sf.TOKEN_IDS_BYTES),
    SideFile("output tokenizer/merges.txt", "tokenizer/merges.txt", _out_folder,
             lambda f: Gpt2Tokenizer(f / "tokenizer").encode("ab"), ModelFormatError, sf.TOKENIZER_BYTES),
    SideFile("output engine source", "m_engine.c", _out_folder, lambda f: generate.build(f, MANIFEST, {}), UsageError,
             sf.ENGINE_SOURCE_BYTES, checked=False),  # C: the compiler checks it
    SideFile("inputs.npz", "inputs.npz", _deeploy, _vectors, ModelFormatError, sf.VECTOR_BYTES),
    SideFile("outputs.npz", "outputs.npz", _deeploy, _vectors, ModelFormatError, sf.VECTOR_BYTES),
    SideFile("input.txt", "input.txt", _dory, _vectors, ModelFormatError, sf.VECTOR_TEXT_BYTES),
    SideFile("out_layer0.txt", "out_layer0.txt", _dory, _vectors, ModelFormatError, sf.VECTOR_TEXT_BYTES),
]
BY_NAME = {s.name: s for s in SIDE_FILES}


def _replace(folder: Path, side: SideFile, variant: str) -> None:
    """Put ``variant`` in the side file's place."""
    path = folder / side.file
    path.unlink()
    if variant == "passwd":
        passwd = folder.parent / f"{folder.name}_etc" / "passwd"  # outside the model's folder, as /etc is
        passwd.parent.mkdir()
        passwd.write_text(PASSWD)
        path.symlink_to(passwd)
    elif variant == "dev_zero":
        path.symlink_to("/dev/zero")
    elif variant == "fifo":
        os.mkfifo(path)
    elif variant == "folder":
        path.mkdir()
    elif variant == "oversized":
        with open(path, "wb") as f:
            f.truncate(side.cap + 1)  # sparse: no disk, no memory
    else:
        raise ValueError(variant)


def _outcome(side: SideFile, folder: Path) -> tuple[str, str]:
    try:
        side.read(folder)
    except DeployError as e:
        return type(e).__name__, str(e)
    return "ok", ""


def _check(side: SideFile, kind: str, message: str) -> None:
    assert kind == side.error.__name__, (side.name, kind, message)
    assert Path(side.file).name in message and "\n" not in message and "root:" not in message, message


@pytest.mark.parametrize("variant", ["passwd", "folder"])
@pytest.mark.parametrize("side", SIDE_FILES, ids=[s.name for s in SIDE_FILES])
def test_a_hostile_side_file_is_refused(tmp_path, side, variant):
    if variant == "passwd" and not side.checked:
        pytest.skip("a C source is the compiler's to check")
    folder = tmp_path / "m"
    side.setup(folder)
    _replace(folder, side, variant)
    kind, message = _outcome(side, folder)
    _check(side, kind, message)
    if variant == "folder":
        assert "must be a regular file, not a folder" in message


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """A Python subprocess in the repository, under 2 GiB of address space and a timeout (a
    reader that follows /dev/zero or waits on a pipe fails the test instead of hanging it)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_memory)


@pytest.mark.parametrize("variant", ["dev_zero", "fifo", "oversized"])
def test_dev_zero_pipes_and_oversized_files_are_refused_unread(tmp_path, variant):
    """Every side file at once, in one subprocess: each a link to /dev/zero, a named pipe nothing
    writes to, or a (sparse) file one byte over its cap."""
    for i, side in enumerate(SIDE_FILES):
        side.setup(tmp_path / str(i))
        _replace(tmp_path / str(i), side, variant)
    code = ("import json, sys; from pathlib import Path; from tests.unit.test_side_files import SIDE_FILES, _outcome; "
            "print(json.dumps([_outcome(s, Path(sys.argv[1]) / str(i)) for i, s in enumerate(SIDE_FILES)]))")
    proc = _run(["-c", code, str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    for side, (error, message) in zip(SIDE_FILES, json.loads(proc.stdout)):
        _check(side, error, message)
        assert {"dev_zero": "must be a regular file, not a character device",
                "fifo": "must be a regular file, not a named pipe",
                "oversized": f"{side.cap + 1:,} bytes, over the limit"}[variant] in message


@pytest.mark.parametrize("side", [s for s in SIDE_FILES if s.checked], ids=[s.name for s in SIDE_FILES if s.checked])
def test_a_link_to_a_regular_file_still_works(tmp_path, side):
    """A Hugging Face cache folder: every file a link to a blob elsewhere."""
    folder = tmp_path / "m"
    side.setup(folder)
    path = folder / side.file
    blob = tmp_path / "blobs" / "0123abcd"
    blob.parent.mkdir()
    path.rename(blob)
    path.symlink_to(blob)
    result = side.read(folder)
    assert result is not None
    if side.name in ("vocab.json", "merges.txt"):
        assert result[f"tokenizer/{side.file}"] == blob.read_bytes()  # the bytes checked are the bytes copied


# ---- malformed content ----------------------------------------------------------------------

MALFORMED = [
    ("config.json", "[1, 2]", "the model's configuration must be a JSON object, got [1, 2]"),
    ("config.json", json.dumps({**gb.config(), "attention_layers": ["local"] * 50_000}), "(50000 items)"),
    ("config.json", json.dumps({**gb.config(), "attention_layers": [["global"], {}]}), "attention_layers must list"),
    ("config.json", json.dumps({**gb.config(), "intermediate_size": "64"}), "intermediate_size must be a positive"),
    ("config.json", json.dumps({**gb.config(), "layer_norm_epsilon": True}), "layer_norm_epsilon True"),
    ("config.json", "\xff{}", "not JSON"),
    ("vocab.json", "[\"a\", \"b\"]", "expected a non-empty JSON object of token -> id"),
    ("vocab.json", "{}", "expected a non-empty JSON object"),
    ("vocab.json", json.dumps({**VOCAB, "d": "4"}), "token 'd' has the id '4'"),
    ("vocab.json", json.dumps({**VOCAB, "d": -4}), "token 'd' has the id -4"),
    ("vocab.json", json.dumps({**VOCAB, "d": True}), "token 'd' has the id True"),
    ("vocab.json", b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    ("merges.txt", "#version: 0.2\na b c\n", "line 2 is not two tokens of vocab.json"),
    ("merges.txt", "#version: 0.2\na z\n", "line 2 is not two tokens of vocab.json"),
    ("merges.txt", "#version: 0.2\nb a\n", "join into a third"),  # "ba" is no token
    ("pruned_to_gpt2_ids.json", json.dumps(["0"] * 64), "item 0 is '0'; GPT-2 token ids are integers"),
    ("pruned_to_gpt2_ids.json", json.dumps([-1] * 64), "item 0 is -1"),
    ("pruned_to_gpt2_ids.json", json.dumps([True] * 64), "item 0 is True"),
    ("pruned_to_gpt2_ids.json", json.dumps([2**31] * 64), f"item 0 is {2**31}"),
    ("pruned_to_gpt2_ids.json", json.dumps(list(range(63))), "63 GPT-2 token ids; the model's vocabulary has 64"),
    ("pruned_to_gpt2_ids.json", "[]", "expected a non-empty JSON list"),
    ("pruned_to_gpt2_ids.json", "{\"0\": 1}", "expected a non-empty JSON list"),
    ("--prune-vocab", "[1, \"2\"]", "item 1 is '2'"),
    ("--prune-vocab", "[1, -2]", "item 1 is -2"),
    ("--prune-vocab", "[false]", "item 0 is False"),
    ("--prune-vocab", "[]", "expected a non-empty JSON list"),
    ("output token_ids.json", "[0, 1, 2, 4]", "item 3 is 4; GPT-2 token ids are integers from 0 to 3 (a vocabulary of 4)"),
    ("output token_ids.json", "[0, 1, 2]", "3 GPT-2 token ids; the model's vocabulary has 4"),
    ("output token_ids.json", "[0, 1, 2, 3.0]", "item 3 is 3.0"),
    ("output manifest.json", "[]", "must be a JSON object"),
    ("output manifest.json", json.dumps({**MANIFEST, "library": "../../x"}), "not a manifest deploy wrote"),
    ("output manifest.json", json.dumps({**MANIFEST, "language_model": {"config": {"vocab": 4}}}),
     "not a manifest deploy wrote"),
    ("output manifest.json", json.dumps({**MANIFEST, "kind": ["x"] * 100}), "holds a ['x', "),
    ("input.txt", "# header\n1,\n2,\nnan,\n4\n", "line 4 holds something other than numbers"),
    ("input.txt", "# header\n1,\n2,\n3,\n1e999\n", "a value is out of the floating-point range"),
    ("out_layer0.txt", "# header\n1; 2\n", "line 2 holds something other than numbers"),
    ("input.txt", "# header\n1,2,3\n", "3 values for an input of shape [1, 4]"),
    ("outputs.npz", _npz(y=np.zeros(3, np.int8)), "3 values for an output of shape [1, 2]"),
    ("outputs.npz", b"PK\x03\x04 not a zip", "not a readable .npz archive"),
    ("outputs.npz", _npz(y=np.array([1.0, np.nan])), "holds NaN or infinite values"),
    ("inputs.npz", _npz(x=np.array([{}, 1], dtype=object)), "an array of |O; expected integers or floats"),
    ("inputs.npz", _npz(x=np.array(["ab", "cd"])), "expected integers or floats"),
]


@pytest.mark.parametrize("name, content, message", MALFORMED, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(MALFORMED)])
def test_malformed_content_is_the_files_error(tmp_path, name, content, message):
    side = BY_NAME[name]
    folder = tmp_path / "m"
    side.setup(folder)
    _write(folder, {side.file: content})
    kind, text = _outcome(side, folder)
    _check(side, kind, text)
    assert message in text and len(text) < 400, text


def _member(name: str, data: bytes, **kw) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", **kw) as z:
        z.writestr(name, data)
    return buf.getvalue()


def _npy_header(shape: tuple[int, ...], dtype=np.float64) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, dict(descr=np.dtype(dtype).str, fortran_order=False, shape=shape))
    return buf.getvalue()


def test_an_npz_array_declaring_a_huge_shape_is_refused_before_allocation(tmp_path):
    path = tmp_path / "inputs.npz"
    path.write_bytes(_member("x.npy", _npy_header((10**12,)) + b"\0" * 64))
    with pytest.raises(ModelFormatError, match=r"declares \[1000000000000\] of <f8 \(8,000,000,000,000 bytes\) but "
                                                r"64 bytes follow"):
        sf.read_npz(path, what="test inputs")


def test_an_npz_that_unpacks_past_the_cap_is_refused_before_unpacking(tmp_path):
    """A zip bomb: 300 MiB of zeros deflate to a few hundred KB; the archive declares the size."""
    path = tmp_path / "inputs.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("x.npy", "w", force_zip64=True) as f:
        f.write(_npy_header((300 * sf.MiB,), np.int8))
        for _ in range(300):
            f.write(bytes(sf.MiB))
    assert path.stat().st_size < 2 * sf.MiB
    with pytest.raises(ModelFormatError, match=r"inputs.npz: test inputs unpacks to 314,572,9\d\d bytes, over the "
                                               r"limit of 268,435,456"):
        sf.read_npz(path, what="test inputs")


def test_npz_members_must_be_arrays(tmp_path):
    path = tmp_path / "outputs.npz"
    path.write_bytes(_member("y.pkl", b"\x80\x04N."))
    with pytest.raises(ModelFormatError, match="member 'y.pkl' is not a .npy array"):
        sf.read_npz(path, what="outputs")
    path.write_bytes(_member("y.npy", _npy_header((-2, -4)) + bytes(64)))
    with pytest.raises(ModelFormatError, match="declares the shape"):
        sf.read_npz(path, what="outputs")


def test_npz_arrays_read_as_numpy_saved_them(tmp_path):
    a, b = np.arange(12, dtype=np.int16).reshape(3, 4), np.asfortranarray(np.eye(3, dtype=np.float32))
    path = tmp_path / "x.npz"
    with open(path, "wb") as f:
        np.savez_compressed(f, first=a, second=b)
    arrays = sf.read_npz(path, what="vectors")
    assert list(arrays) == ["first", "second"]
    assert np.array_equal(arrays["first"], a) and np.array_equal(arrays["second"], b)
    np.save(tmp_path / "y.npy", a)
    assert np.array_equal(sf.load_npy(tmp_path / "y.npy", "an input"), a)


def test_names_that_only_look_like_dumps_are_not_dumps(tmp_path):
    folder = tmp_path / "m"
    _dory(folder)
    _write(folder, {"out_layer.txt": "x", "out_layerX.txt": "x", "out_layer1.txt.bak": "x"})
    (folder / "out_layer3.txt").mkdir()  # a folder of a dump's name: refused, not skipped
    with pytest.raises(ModelFormatError, match="out_layer3.txt: a DORY test vector must be a regular file, not a "
                                               "folder"):
        find_vectors(folder / "network.onnx", FAKE_GRAPH)
    (folder / "out_layer3.txt").rmdir()
    vec = find_vectors(folder / "network.onnx", FAKE_GRAPH)
    assert vec.source == "dory" and [list(y) for y in vec.layers] == [[5, 6]]
    assert read_dory_txt(folder / "input.txt").tolist() == [1, 2, 3, 4]


def test_valid_files_read_as_before(tmp_path):
    folder = tmp_path / "m"
    _gptneo(folder)
    assert _read_ids(folder / "keep.json") == [0, 1, 2]
    assert _gpt2_ids(folder / "model.safetensors", [0, 5], 64) == [0, 5]
    files = _tokenizer_and_files(folder / "model.safetensors", None)[1]
    assert files == {"tokenizer/vocab.json": json.dumps(VOCAB).encode(), "tokenizer/merges.txt": MERGES.encode()}
    out = tmp_path / "out"
    _out_folder(out)
    tok = Gpt2Tokenizer(out / "tokenizer")
    assert tok.encode("ab") == [2] and tok.decode([2, 3]) == "abc" and tok.size == 4
    assert generate._token_ids(out, 4, tok.size) == [3, 2, 1, 0]
    _deeploy(tmp_path / "d")
    vec, kind = _vectors(tmp_path / "d")
    assert vec.source == "deeploy" and vec.inputs[0].tolist() == [[-1, 2, 3, 4]] and kind == "int8"


def test_a_missing_tokenizer_names_the_flag(tmp_path):
    with pytest.raises(ModelFormatError, match="the GPT-2 tokenizer needs vocab.json and merges.txt; pass --tokenizer "
                                               "DIR"):
        Gpt2Tokenizer(tmp_path)
    with pytest.raises(UsageError, match="--tokenizer .*: the GPT-2 tokenizer needs vocab.json and merges.txt"):
        _tokenizer_and_files(tmp_path / "model.safetensors", tmp_path)[1]


def test_a_dangling_link_is_named(tmp_path):
    folder = tmp_path / "m"
    _gptneo(folder)
    (folder / "pruned_to_gpt2_ids.json").unlink()
    (folder / "pruned_to_gpt2_ids.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(ModelFormatError, match="cannot read .*\\(a link to .*gone.json, which does not exist\\)"):
        _gpt2_ids(folder / "model.safetensors", None, 64)


def test_brief_keeps_error_lines_short():
    assert sf.brief([1, 2]) == "[1, 2]"
    long = sf.brief(list(range(10**6)))
    assert len(long) < 120 and long.endswith("... (1000000 items)")
    assert sf.brief("x" * 1000, 10) == "'xxxxxxxxx... (1000 characters)"


# ---- through the command line ----------------------------------------------------------------

def _one_line_error(status: int, stderr: str, kind: str, where: str) -> str:
    assert status == 1, stderr
    lines = messages(stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: {kind}: ") and where in lines[0], stderr
    return lines[0]


def test_cli_config_json_linked_to_dev_zero(tmp_path):
    model = gb.write(tmp_path / "m")
    (tmp_path / "m" / "config.json").unlink()
    (tmp_path / "m" / "config.json").symlink_to("/dev/zero")
    status, stderr, _, _ = run_deploy(model, tmp_path / "out")
    _one_line_error(status, stderr, "ModelFormatError", "config.json: the model's configuration must be a regular "
                                                         "file, not a character device (a link to /dev/zero)")
    assert not (tmp_path / "out").exists()


def test_cli_vocab_json_linked_to_a_passwd_file_is_not_copied(tmp_path):
    folder = tmp_path / "m"
    _gptneo(folder)
    _replace(folder, BY_NAME["vocab.json"], "passwd")
    status, stderr, _, _ = run_deploy(folder / "model.safetensors", tmp_path / "out")
    line = _one_line_error(status, stderr, "ModelFormatError", "vocab.json: not JSON")
    assert "root:" not in line and not (tmp_path / "out").exists()


def test_cli_a_token_map_of_strings_is_the_models_error(tmp_path):
    folder = tmp_path / "m"
    _gptneo(folder)
    _write(folder, {"pruned_to_gpt2_ids.json": json.dumps([str(i) for i in range(64)])})
    status, stderr, _, _ = run_deploy(folder / "model.safetensors", tmp_path / "out")
    _one_line_error(status, stderr, "ModelFormatError", "pruned_to_gpt2_ids.json: item 0 is '0'")
    assert not (tmp_path / "out").exists()


def _mark(folder: Path) -> None:
    """The marker deploy writes, over the folder's files as they are (generate runs nothing else)."""
    from deployer.output import MARKER, marker_text
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    (folder / MARKER).write_text(marker_text(files))


def test_cli_generate_with_a_bad_token_map(tmp_path):
    _out_folder(tmp_path)
    _write(tmp_path, {"token_ids.json": "[0, 1, 2, -3]"})
    _mark(tmp_path)
    proc = _run(["-m", "deployer.cli", "generate", str(tmp_path), "ab"])
    _one_line_error(proc.returncode, proc.stderr, "ModelFormatError", "token_ids.json: item 3 is -3")


def test_cli_onnx_inputs_npz_as_a_pipe(tmp_path):
    from tests.onnx_builder import quantized_model
    model = quantized_model(tmp_path / "m", "mlp", per_channel=False)
    os.mkfifo(tmp_path / "m" / "inputs.npz")
    _write(tmp_path / "m", {"outputs.npz": _npz(y=np.zeros((1, 4), np.int8))})
    status, stderr, _, _ = run_deploy(model, tmp_path / "out")
    _one_line_error(status, stderr, "ModelFormatError", "inputs.npz: the model's test inputs must be a regular file, "
                                                        "not a named pipe")
    assert not (tmp_path / "out").exists()


def _npz_member(name: str, payload: bytes, compression: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        z.writestr(name, payload)
    return buf.getvalue()


def test_npz_bombs_are_refused_without_inflating(tmp_path):
    """A bzip2 member (inflated whole before its size is checked) and a deflated member that lies about
    its size: refused after reading at most the declared bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|i1", "fortran_order": False, "shape": (8,)})
    npy = header.getvalue() + bytes(8)
    bz = tmp_path / "bz.npz"
    bz.write_bytes(_npz_member("x.npy", npy, zipfile.ZIP_BZIP2))
    with pytest.raises(ModelFormatError, match="uses compression"):
        sf.read_npz(bz, what="test vectors")
    big = npy + bytes(64 * sf.MiB)  # inflates to 64 MiB; declares only the small array's size
    data = bytearray(_npz_member("x.npy", big, zipfile.ZIP_DEFLATED))
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        pos = data.index(sig)
        data[pos + at:pos + at + 4] = len(npy).to_bytes(4, "little")
    liar = tmp_path / "liar.npz"
    liar.write_bytes(bytes(data))
    arrays = None
    try:
        arrays = sf.read_npz(liar, what="test vectors")
    except ModelFormatError:
        pass  # the stream's CRC or length no longer matches: refused
    assert arrays is None or arrays["x"].size == 8  # never the 64 MiB the stream holds
