"""The one way to read a file that comes with a model (config.json, the tokenizer's files, token
id maps, test vectors) or that a flag names: such a file is as untrusted as the model.

* it must be a regular file once links are followed (a Hugging Face cache folder links every
  file to a blob, so links stay allowed); a folder, device, named pipe or socket is refused
  before it is opened, and again on the opened descriptor, so a path swapped in between
  cannot slip through;
* it is read up to a size cap, never further, so ``/dev/zero``-like files cannot exhaust memory;
* its content is checked by the caller with the validators below, and an error quotes at most
  a few characters of it (``brief``).

Every failure is one ``DeployError`` line naming the file (ModelFormatError by default; the
callers reading a file a flag names pass UsageError).
"""
from __future__ import annotations

import io
import json
import math
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DeployError, ModelFormatError

MiB = 1 << 20
CONFIG_BYTES = 1 * MiB  # config.json: a few hundred bytes in practice
TOKENIZER_BYTES = 64 * MiB  # vocab.json (GPT-2: 0.8 MB), merges.txt (0.5 MB), tokenizer.json (32k vocabulary: MBs)
TOKEN_IDS_BYTES = 16 * MiB  # a JSON list of token ids (GPT-2's whole vocabulary: 0.3 MB)
MANIFEST_BYTES = 64 * MiB  # an output folder's manifest.json (one entry per op and buffer)
ENGINE_SOURCE_BYTES = 1024 * MiB  # an output folder's engine C file (the weights as C arrays)
VECTOR_TEXT_BYTES = 64 * MiB  # one DORY input.txt / out_layerN.txt
VECTOR_BYTES = 256 * MiB  # inputs.npz / outputs.npz, a .npy, all of a model's DORY dumps together
MODEL_BYTES = 2048 * MiB - 1  # the model file itself (a protobuf cannot exceed 2 GiB either)
NPZ_MEMBERS = 4096  # arrays in one .npz
MAX_ID = 2**31 - 1  # token ids are int32 in the engine

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def brief(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, with the item count of a long container,
    so that an error line quoting a value from a file stays one short line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, (str, bytes)):
        return f"{text[:limit]}... ({len(value)} characters)"
    count = f" ({len(value)} items)" if isinstance(value, (list, tuple, dict, set)) else ""
    return f"{text[:limit]}...{count}"


def _kind(mode: int) -> str | None:
    """None for a regular file, else what the file is instead."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _link_target(path: Path) -> str | None:
    try:
        return os.readlink(path) if path.is_symlink() else None
    except OSError:
        return None


def _read_capped(f, limit: int, chunk: int = 16 * MiB) -> bytes:
    """Up to ``limit`` bytes, in chunks (one read of ``limit`` would reserve that much memory first)."""
    parts, size = [], 0
    while size < limit:
        part = f.read(min(chunk, limit - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_side_file(path: str | Path, *, what: str, max_bytes: int, error: type[DeployError] = ModelFormatError,
                   name: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``). ``what`` says what the file
    is for the messages; ``name`` is how they name it (default: the path)."""
    path = Path(path)
    where = name or str(path)
    try:
        # A first look before opening: opening a device or a pipe can block or act on hardware.
        kind = _kind(os.stat(path).st_mode)
        if kind is None:
            # O_NONBLOCK: should a pipe be swapped in after the look, open returns instead of waiting
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
            with open(fd, "rb", closefd=True) as f:
                st = os.fstat(f.fileno())
                kind = _kind(st.st_mode)
                if kind is None:
                    if st.st_size > max_bytes:
                        raise error(f"{where}: {what} is {st.st_size:,} bytes, over the limit of {max_bytes:,}")
                    data = _read_capped(f, max_bytes + 1)  # never more, whatever the file claims or becomes
    except FileNotFoundError:
        target = _link_target(path)
        note = f": a link to {target}, which does not exist" if target else ": no such file"
        raise error(f"{where}: cannot read {what} ({note[2:]})") from None
    except OSError as e:
        raise error(f"{where}: cannot read {what} ({e.strerror or type(e).__name__})") from None
    if kind is not None:
        target = _link_target(path)
        note = f" (a link to {target})" if target else ""
        raise error(f"{where}: {what} must be a regular file, not {kind}{note}")
    if len(data) > max_bytes:
        raise error(f"{where}: {what} is over the limit of {max_bytes:,} bytes")
    return data


def decode_text(data: bytes, *, where: str, error: type[DeployError] = ModelFormatError) -> str:
    """Bytes read from ``where`` as UTF-8 text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte {e.start})") from None


def parse_json(data: bytes, *, where: str, error: type[DeployError] = ModelFormatError) -> Any:
    """Bytes read from ``where`` as JSON (any value: the caller checks its shape)."""
    text = decode_text(data, where=where, error=error)
    try:
        return json.loads(text)
    except RecursionError:  # absurdly deep nesting
        raise error(f"{where}: not JSON (RecursionError: nested too deeply)") from None
    except ValueError as e:  # json's messages give a position, not the text
        raise error(f"{where}: not JSON ({e})") from None


def read_text(path: str | Path, *, what: str, max_bytes: int, error: type[DeployError] = ModelFormatError,
              name: str | None = None) -> str:
    """A side file as UTF-8 text."""
    data = read_side_file(path, what=what, max_bytes=max_bytes, error=error, name=name)
    return decode_text(data, where=name or str(path), error=error)


def read_json(path: str | Path, *, what: str, max_bytes: int, error: type[DeployError] = ModelFormatError,
              name: str | None = None) -> Any:
    """A side file as JSON."""
    data = read_side_file(path, what=what, max_bytes=max_bytes, error=error, name=name)
    return parse_json(data, where=name or str(path), error=error)


def read_json_object(path: str | Path, *, what: str, max_bytes: int, error: type[DeployError] = ModelFormatError,
                     name: str | None = None) -> dict:
    value = read_json(path, what=what, max_bytes=max_bytes, error=error, name=name)
    if not isinstance(value, dict):
        raise error(f"{name or path}: {what} must be a JSON object, got {brief(value, 16)}")
    return value


def is_id(value: Any) -> bool:
    """A JSON integer (``True`` is not one, although Python says it is an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def token_ids(value: Any, *, where: str, what: str, vocab: int | None = None, length: int | None = None,
              error: type[DeployError] = ModelFormatError) -> list[int]:
    """``value`` checked as a non-empty list of token ids: integers in [0, vocab) (vocab: the
    vocabulary's size when known, else the engine's int32 range), ``length`` of them if given."""
    if not isinstance(value, list) or not value:
        raise error(f"{where}: expected a non-empty JSON list of {what}, got {brief(value, 16)}")
    top = MAX_ID if vocab is None else vocab - 1
    for k, i in enumerate(value):
        if not is_id(i) or not 0 <= i <= top:
            raise error(f"{where}: item {k} is {brief(i, 16)}; {what} are integers from 0 to {top}"
                        + ("" if vocab is None else f" (a vocabulary of {vocab})"))
    if length is not None and len(value) != length:
        raise error(f"{where}: {len(value)} {what}; the model's vocabulary has {length}")
    return value


# ---- arrays: .npy, and .npz archives of them ---------------------------------------------

def _npy(data: bytes, where: str, what: str, error: type[DeployError], finite: bool = True) -> np.ndarray:
    """One .npy (allow_pickle=False: numbers only), its header checked against its bytes before
    numpy allocates anything for it."""
    fmt = np.lib.format
    f = io.BytesIO(data)
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(f)
        else:
            raise error(f"{where}: {what}: .npy format version {version} is not supported")
    except DeployError:
        raise
    except (ValueError, TypeError, SyntaxError) as e:  # numpy's own header errors
        raise error(f"{where}: {what}: not a .npy array ({type(e).__name__}: {brief(str(e))})") from None
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
        raise error(f"{where}: {what}: an array of {dtype.str}; expected integers or floats")
    if any(n < 0 for n in shape):
        raise error(f"{where}: {what}: its header declares the shape {brief(list(shape), 40)}")
    count = math.prod(int(n) for n in shape)
    body = len(data) - f.tell()
    if count * dtype.itemsize != body:
        raise error(f"{where}: {what}: its header declares {list(shape)} of {dtype.str} ({count * dtype.itemsize:,} "
                    f"bytes) but {body:,} bytes follow")
    f.seek(0)
    try:
        array = fmt.read_array(f, allow_pickle=False)
    except ValueError as e:
        raise error(f"{where}: {what}: not a .npy array ({brief(str(e))})") from None
    if finite and array.dtype.kind == "f" and not np.isfinite(array).all():
        raise error(f"{where}: {what}: holds NaN or infinite values")
    return array


def load_npy(path: str | Path, what: str, max_bytes: int = VECTOR_BYTES, *,
             error: type[DeployError] = ModelFormatError, name: str | None = None, finite: bool = True) -> np.ndarray:
    """A .npy file of numbers (``finite``: no NaN or infinity either)."""
    data = read_side_file(path, what=what, max_bytes=max_bytes, error=error, name=name)
    return _npy(data, name or str(path), what, error, finite)


def read_model_file(path: str | Path) -> bytes:
    """The model file's bytes: a regular file (a link to one is fine), read up to MODEL_BYTES."""
    return read_side_file(path, what="the model", max_bytes=MODEL_BYTES)


def read_npz(path: str | Path, *, what: str, max_bytes: int = VECTOR_BYTES, error: type[DeployError] = ModelFormatError,
             name: str | None = None) -> dict[str, np.ndarray]:
    """An .npz archive's arrays in their stored order (name without '.npy' -> array). The members'
    declared sizes together stay under ``max_bytes`` (a small archive cannot inflate past it: a
    member's data ends at its declared size)."""
    where = name or str(path)
    data = read_side_file(path, what=what, max_bytes=max_bytes, error=error, name=name)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = z.infolist()
            if len(members) > NPZ_MEMBERS:
                raise error(f"{where}: {what} holds {len(members):,} members; at most {NPZ_MEMBERS:,} are read")
            declared = sum(m.file_size for m in members)
            if declared > max_bytes:
                raise error(f"{where}: {what} unpacks to {declared:,} bytes, over the limit of {max_bytes:,}")
            arrays = {}
            for m in members:
                if not m.filename.endswith(".npy") or m.is_dir():
                    raise error(f"{where}: {what}: member {brief(m.filename, 40)} is not a .npy array")
                if m.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    # bzip2 and lzma members are inflated whole before the declared size is checked
                    raise error(f"{where}: {what}: member {brief(m.filename, 40)} uses compression {m.compress_type}; "
                                f"numpy writes stored or deflated members")
                key = m.filename[:-len(".npy")]
                with z.open(m) as f:  # never more than the declared size, whatever the stream inflates to
                    data = f.read(m.file_size + 1)
                if len(data) != m.file_size:
                    raise error(f"{where}: {what}: member {brief(m.filename, 40)} holds more or less than the "
                                f"{m.file_size:,} bytes it declares")
                arrays[key] = _npy(data, where, f"{what}, array {brief(key, 40)}", error)
    except DeployError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError, ValueError,
            OSError) as e:  # NotImplementedError: a compression zipfile lacks; RuntimeError: encrypted
        raise error(f"{where}: {what} is not a readable .npz archive ({type(e).__name__}: {brief(str(e))})") from None
    return arrays
