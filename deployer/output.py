"""Write an output folder atomically: a complete new folder or the previous one, never a mix.

The files go to a hidden sibling folder first; when all are written, it takes the output's
name in one step (Linux's renameat2 RENAME_EXCHANGE swaps the two folders, so there is no
moment without an output folder), and the previous contents are removed. A run killed on the
way leaves its hidden folder behind; the next run into the same output removes it.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
from pathlib import Path

from network_parser.errors import UsageError

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def is_deploy_output(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "manifest_version" in manifest


def write_output(files: dict[str, str | bytes], out_dir: Path, force: bool = False) -> None:
    out_dir = Path(out_dir)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise UsageError(f"-o {out_dir}: exists and is not a folder")
        if any(out_dir.iterdir()) and not is_deploy_output(out_dir) and not force:
            raise UsageError(f"-o {out_dir}: folder exists and is not a deploy output; "
                             f"choose another folder or pass --force to replace it")
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent, out_dir.name)
    tmp = parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = parent / f".{out_dir.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for name, text in sorted(files.items()):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        if not out_dir.exists():
            tmp.rename(out_dir)
        elif not _exchange(tmp, out_dir):  # not Linux, or a file system without the exchange
            out_dir.rename(old)
            tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after the exchange: the previous contents
        shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step; False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


def _remove_stale(parent: Path, name: str) -> None:
    """Hidden folders of earlier runs into ``name`` that were killed before they finished; a
    previous output set aside by a run killed between its two renames is put back."""
    for p in sorted(parent.glob(f".{name}.*-*")):
        kind, _, pid = p.name[len(name) + 2:].partition("-")
        if kind not in ("tmp", "old") or not pid.isdigit() or _alive(int(pid)):
            continue
        if kind == "old" and not (parent / name).exists():
            p.rename(parent / name)
        else:
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
