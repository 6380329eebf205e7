"""Write an output folder atomically: a complete new folder or the previous one, never a mix."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from network_parser.errors import UsageError


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
    tmp = parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = parent / f".{out_dir.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for name, text in sorted(files.items()):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        if out_dir.exists():
            out_dir.rename(old)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
