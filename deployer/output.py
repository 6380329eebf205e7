"""Write an output folder atomically: a complete new folder or the previous one, never a mix.

The files go to a hidden sibling folder first; when all are written, it takes the output's
name in one step (Linux's renameat2 RENAME_EXCHANGE swaps the two folders, so there is no
moment without an output folder), and the previous contents are removed. A run killed on the
way leaves its hidden folder behind; the next run into the same output removes it. Of two runs
into one folder, the last to finish wins and neither fails.

Only our own output is ever replaced: every folder we write holds ``.deploy-output``, a marker
listing its files with their digests. A folder without it (or a marker that does not match its
files), or one where someone added or changed files since, is replaced only with ``--force``;
the refusal names the files that would be lost. Folders written before the marker existed are
recognised by their manifest and file names. A folder holding anything, be it only empty folders
or a marker we cannot read, is not empty. The hidden folders a killed run left are removed (or
put back) only when they carry our marker and nothing it does not name: a folder someone else
named alike is left alone.
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from network_parser.errors import DeployError, UsageError
from network_parser.side_files import MANIFEST_BYTES, read_json

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
MARKER = ".deploy-output"
GENERATOR = "mcu-deployer"
# What the engine's own qemu/Makefile writes into the folder: rebuilt at will, never a user's work.
BUILD_PRODUCTS = frozenset({"qemu/engine.elf", "qemu/engine.map", "qemu/output.bin"})
SHOWN = 8  # files named in a refusal
_ACTIVE: set[Path] = set()  # hidden folders of writes under way in this process (not stale)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def marker_text(files: dict[str, str | bytes]) -> str:
    """The marker of a folder holding ``files``: the generator and each file's digest."""
    listing = {name: _digest(data if isinstance(data, bytes) else data.encode()) for name, data in sorted(files.items())}
    return json.dumps({"generator": GENERATOR, "files": listing}, indent=1, sort_keys=True) + "\n"


def _present(folder: Path) -> list[str]:
    """Every file, link, empty folder ('name/') and unreadable folder ('name/ (unreadable)') under
    ``folder`` (relative, '/'-separated), the top-level marker excepted. Walked with a stack, not
    recursion: a folder nested thousands deep is listed like any other."""
    found, stack = [], [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(folder / rel if rel else folder) as entries:
                empty = True
                for e in entries:
                    empty = False
                    name = f"{rel}/{e.name}" if rel else e.name
                    if e.is_dir(follow_symlinks=False):
                        stack.append(name)
                    elif name != MARKER:
                        found.append(name)
            if empty and rel:  # replacing the folder would lose it too
                found.append(f"{rel}/")
        except OSError:  # a folder we cannot read: whatever it holds would be lost
            found.append(f"{rel or '.'}/ (unreadable)")
    return sorted(found)


def _holds_ours(name: str, ours) -> bool:
    """An empty folder on the way to one of ``ours`` (its files deleted since): ours too."""
    return name.endswith("/") and any(f.startswith(name) for f in ours)


def _count(names: list[str]) -> str:
    """'3 files', '1 file and 2 folders': what a list from _present names."""
    folders = sum(n.endswith("/") or n.endswith("/ (unreadable)") for n in names)
    files = len(names) - folders
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((files, "file"), (folders, "folder")) if n]
    return " and ".join(parts) or "0 files"


def remove_tree(path: Path) -> None:
    """``path`` and everything under it, links removed and never followed, without recursion
    (shutil.rmtree recurses: a deep enough folder would stop it half way); what cannot be
    removed is left."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        try:
            path.unlink()
        except OSError:
            pass
        return
    folders, stack = [], [path]
    while stack:
        d = stack.pop()
        folders.append(d)
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
                    else:
                        try:
                            os.unlink(e.path)
                        except OSError:
                            pass
        except OSError:
            continue
    for d in reversed(folders):
        try:
            os.rmdir(d)
        except OSError:
            pass


def _read_marker(folder: Path) -> dict | None:
    path = folder / MARKER
    if path.is_symlink():
        return None
    try:
        data = read_json(path, what="marker", max_bytes=MANIFEST_BYTES)
    except DeployError:
        return None
    if not (isinstance(data, dict) and data.get("generator") == GENERATOR and isinstance(data.get("files"), dict)):
        return None
    return data


def _legacy_names(library: str) -> set[str]:
    """The files an output folder written before the marker could hold."""
    engine = {f"{library}_engine.c", f"{library}_engine.h", f"{library}_fixedpoint.h", f"{library}_dma.h",
              f"{library}_l3_weights.bin"}
    qemu = {f"qemu/{n}" for n in ("startup.c", "link.ld", "semihost.c", "semihost.h", "main.c", "Makefile")}
    return engine | qemu | {"inference_api.h", "inference_task.c", "inference_task.h", "CMakeLists.txt",
                            "manifest.json", "report.html", "tokenizer/vocab.json", "tokenizer/merges.txt",
                            "token_ids.json"}


def would_lose(folder: Path) -> list[str] | None:
    """The files that replacing ``folder`` would lose: [] for our own unchanged output (or a
    folder holding nothing at all), the added or changed files of our output, None when it is
    not our output (a marker that is not one we wrote says so too)."""
    present = _present(folder)
    if not present and not _has_marker(folder):
        return []
    marker = _read_marker(folder)
    if marker is not None:
        ours = marker["files"]
        lost = []
        for name in present:
            if name in BUILD_PRODUCTS or _holds_ours(name, ours):
                continue
            path = folder / name
            if name not in ours or path.is_symlink() or not path.is_file():
                lost.append(name)
                continue
            try:
                if _file_digest(path) != ours[name]:
                    lost.append(f"{name} (changed)")
            except FileNotFoundError:  # gone since the listing (another run's swap): nothing to lose
                pass
            except OSError:  # cannot be read, so cannot be shown to be ours
                lost.append(f"{name} (unreadable)")
        return lost
    if _has_marker(folder):
        return None  # a marker we did not write (or no longer can read): not ours
    try:  # an output written before the marker: its manifest and nothing but our file names
        manifest = read_json(folder / "manifest.json", what="manifest", max_bytes=MANIFEST_BYTES)
    except DeployError:
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("library"), str) or \
            ("manifest_version" not in manifest and manifest.get("kind") != "gpt_neo"):
        return None
    names = _legacy_names(manifest["library"])
    return [n for n in present if n not in names and n not in BUILD_PRODUCTS and not _holds_ours(n, names)]


def _has_marker(folder: Path) -> bool:
    return (folder / MARKER).exists() or (folder / MARKER).is_symlink()


def read_marker(folder: Path) -> dict | None:
    """The marker of ``folder`` when it is one deploy wrote (``files``: name -> sha256), else None:
    missing, unreadable, a link, or anything but our generator's listing."""
    return _read_marker(folder)


def _refuse_unless_ours(out_dir: Path, shown: str, force: bool) -> None:
    if force or not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UsageError(f"-o {shown}: exists and is not a folder")
    lost = would_lose(out_dir)
    if lost is None:
        held = _present(out_dir) + ([MARKER] if _has_marker(out_dir) else [])
        raise UsageError(f"-o {shown}: folder exists and is not a deploy output; choose another folder or "
                         f"pass --force to replace it (its {_count(held)} would be lost)")
    if lost:
        names = ", ".join(lost[:SHOWN]) + (f" and {len(lost) - SHOWN} more" if len(lost) > SHOWN else "")
        raise UsageError(f"-o {shown}: replacing this deploy output would lose {_count(lost)} it did not write "
                         f"or that changed since: {names}; move them away or pass --force")


def resolve_output(out_dir: Path) -> Path:
    """The folder ``-o`` names: symbolic links followed (the folder they point to is replaced,
    the link stays); a link to nothing, and a folder holding the current one, refused."""
    given = Path(out_dir)
    try:
        if given.is_symlink() and not given.exists():
            raise UsageError(f"-o {given}: a symbolic link to {os.readlink(given)}, which does not exist; create "
                             f"that folder or choose another -o")
        target = given.resolve()
    except (RuntimeError, OSError) as e:  # a loop of links, a name too long, a folder we may not enter
        raise UsageError(f"-o {given}: cannot resolve the path ({getattr(e, 'strerror', None) or e})") from None
    if target == Path(target.anchor):
        raise UsageError(f"-o {given}: the root folder cannot be an output folder")
    cwd = Path.cwd().resolve()
    if cwd == target or target in cwd.parents:
        raise UsageError(f"-o {given}: the output folder is replaced whole, so it must not be the current folder "
                         f"or hold it; choose a subfolder (e.g. -o out)")
    return target


def _hidden_stem(name: str) -> str:
    """The part of the hidden sibling folders' names that says which output they belong to,
    short enough that a long output name still leaves room for the rest."""
    raw = os.fsencode(name)  # a name that is not UTF-8 keeps its bytes (surrogate escapes)
    if len(raw) <= 100:
        return name
    return f"{os.fsdecode(raw[:40])}~{hashlib.sha256(raw).hexdigest()[:16]}"


def write_output(files: dict[str, str | bytes], out_dir: Path, force: bool = False) -> None:
    shown = str(out_dir)
    target = resolve_output(out_dir)
    parent, stem = target.parent, _hidden_stem(target.name)
    try:
        _refuse_unless_ours(target, shown, force)
        parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(parent, stem, target.name)
        _write_and_swap(files, target, parent, stem, shown, force)
    except OSError as e:
        raise UsageError(f"-o {shown}: cannot write the output folder ({e.strerror or e})") from e


def _write_and_swap(files, target: Path, parent: Path, stem: str, shown: str, force: bool) -> None:
    # unique per run, and tagged with our pid so that a later run can tell whether we died
    tmp = Path(tempfile.mkdtemp(prefix=f".{stem}.tmp-{os.getpid()}-", dir=parent))
    old = tmp.with_name(tmp.name.replace(".tmp-", ".old-", 1))
    _ACTIVE.update((tmp, old))
    try:
        # the marker first: a run killed half way leaves a folder the next run can tell is ours
        (tmp / MARKER).write_text(marker_text(files))
        for name, text in sorted(files.items()):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp made it private; an output folder is an ordinary one
        for _ in range(8):  # another run may take the name between our look and our move
            if not target.exists():
                try:
                    tmp.rename(target)
                    return
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    continue  # another run wrote it first: ours replaces it, below
            _refuse_unless_ours(target, shown, force)  # what is there now must still be ours
            if _exchange(tmp, target):
                return
            try:  # not Linux, or a file system without the exchange
                target.rename(old)
            except FileNotFoundError:
                continue
            tmp.rename(target)
            return
        raise UsageError(f"-o {shown}: other runs keep replacing the output folder; try again")
    finally:
        remove_tree(tmp)  # after the exchange: the previous contents
        remove_tree(old)
        _ACTIVE.difference_update((tmp, old))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step; False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


def _remove_stale(parent: Path, stem: str, name: str | None = None) -> None:
    """Hidden folders of earlier runs into the output (``stem``: the hidden folders' tag for it)
    that were killed before they finished; a previous output set aside by a run killed between
    its two renames is put back. Only folders that are ours (_stale_is_ours) are touched."""
    name = stem if name is None else name
    for p in sorted(parent.glob(f".{_glob_escape(stem)}.*-*")):
        kind, _, rest = p.name[len(stem) + 2:].partition("-")
        pid = rest.split("-")[0]
        if kind not in ("tmp", "old") or not pid.isdigit() or _alive(int(pid)) or p.is_symlink() or p in _ACTIVE \
                or not _stale_is_ours(p):
            continue
        if kind == "old" and not (parent / name).exists():
            p.rename(parent / name)
        else:
            remove_tree(p)


def _stale_is_ours(folder: Path) -> bool:
    """A hidden folder named like a killed run's is ours only with our marker and nothing the
    marker does not name (a file the kill cut short keeps its name; its digest may differ)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    marker = _read_marker(folder)
    if marker is None:
        return False
    ours = marker["files"]
    return all(n in BUILD_PRODUCTS or _holds_ours(n, ours) or
               n in ours and not (folder / n).is_symlink() and (folder / n).is_file() for n in _present(folder))


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


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


# ---- single report files (deploy compare --report, deploy verify --report) ------------------

REPORT_GENERATOR = f'<meta name="generator" content="{GENERATOR}">'  # in every report.html's head
_REPORT_HEAD = 4096  # where the generator tag must sit: the page's head


def check_report(path: Path, flag: str, keep: list[tuple[str, Path]]) -> None:
    """Refuse a report path that is not ours to write: a symbolic link (never followed), a folder
    or anything but a regular file, one of ``keep`` (what the command reads, as (what it is, path):
    its model, its --input files), or an existing file that is not a report deploy wrote
    (no generator tag in its head). A path that does not exist yet is fine."""
    path = Path(path)
    if path.is_symlink():
        raise UsageError(f"{flag} {path}: a symbolic link; a report is never written through a link: give the "
                         f"file's own path")
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot look at it ({e.strerror or e})") from None
    for what, other in keep:
        try:
            same = os.path.samefile(path, other)
        except OSError:
            continue
        if same:
            raise UsageError(f"{flag} {path}: is {what}; choose another path for the report")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{flag} {path}: exists and is not a regular file; choose another path for the report")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb", closefd=True) as f:
            head = f.read(_REPORT_HEAD)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read the file it would replace ({e.strerror or e})") from None
    if REPORT_GENERATOR.encode() not in head:
        raise UsageError(f"{flag} {path}: exists and is not a report deploy wrote; choose another path or remove "
                         f"it first")


def write_report(path: Path, text: str, flag: str, keep: list[tuple[str, Path]]) -> None:
    """``text`` written to ``path`` whole or not at all: a temporary file in the same folder takes
    the name in one rename (which replaces a link rather than following it), after check_report."""
    path = Path(path)
    check_report(path, flag, keep)
    parent = path.parent
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{_hidden_stem(path.name)}.tmp-", dir=parent)
        with open(fd, "wb") as f:
            f.write(text.encode())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it private; a report is an ordinary file
        check_report(path, flag, keep)  # what is there now must still be ours to replace
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write it ({e.strerror or e})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
