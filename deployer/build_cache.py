"""The build cache: the compiled engines, ELFs and the QEMU plugin, keyed by their sources' digest.

The deployer runs what it finds here, so nobody but this user may be able to put anything in it,
and nothing is run that is not byte for byte what a build of ours produced:

- one folder per user: ``$DEPLOY_BUILD_CACHE``, else ``$XDG_CACHE_HOME/mcu-deploy`` or
  ``~/.cache/mcu-deploy``, else ``<tmp>/mcu-deploy-<uid>``; created 0700. Before every use the
  folder must be ours, a real folder (not a symlink) and closed to group and others, and every
  folder above it must be one no other user can rename or replace (owned by us or root, and not
  writable by others unless sticky, as /tmp); the same holds for each entry reused. Anything
  else is refused (``CacheError``), never repaired: another user may have planted it.
- an entry is built in a fresh private temp folder that then takes its name in one rename, with
  the artifact's sha256 recorded beside it; on reuse the artifact is hashed again, and a missing
  record or a mismatch means the entry is rebuilt, never run.
- the cache holds at most ``$DEPLOY_BUILD_CACHE_SIZE`` bytes (512M by default; K, M and G are
  multiples of 1024): after each build the entries used least recently go first, but none used
  in the last ``RECENT_S`` seconds (a concurrent run may be about to execute it). Temp folders
  that a killed build left (``build-<pid>-*``, ``stale-<pid>-*``) go once they are that old and
  their process is gone.

    exe = cached(digest, "engine", lambda folder: compile_into(folder))
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from network_parser.errors import DeployError

ENV = "DEPLOY_BUILD_CACHE"
SIZE_ENV = "DEPLOY_BUILD_CACHE_SIZE"
DEFAULT_SIZE = 512 << 20
RECENT_S = 600.0  # entries used this recently are kept, and temp folders this young too
NAME = "mcu-deploy"
RECORD = ".sha256"  # the artifact's digest, in a file of that name beside it
TEMP_PREFIXES = ("build-", "stale-")  # folders being built or being removed: never entries
_TEMP = re.compile(r"^(?:build|stale)-(?:(\d+)-)?")
_SIZE = re.compile(r"^\s*(\d+)\s*([KkMmGg]?)\s*$")


class CacheError(DeployError):
    kind = "CacheError"


def locations() -> list[Path]:
    """Where the cache may live, in order of preference (absolute, neither created nor checked)."""
    override = os.environ.get(ENV)
    if override:
        return [Path(os.path.abspath(override))]
    found = []
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec says to ignore a relative value
        found.append(Path(xdg) / NAME)
    home = os.path.expanduser("~")  # "~" itself when there is no home
    if os.path.isabs(home):
        found.append(Path(home) / ".cache" / NAME)
    return [*found, Path(tempfile.gettempdir()) / f"{NAME}-{os.getuid()}"]


def root() -> Path:
    """The cache folder, created if missing and checked (``CacheError`` if it is not private).
    A location that cannot be created (a read-only home) gives way to the next; one that exists
    but is not safe is refused rather than silently replaced."""
    candidates = locations()
    for i, path in enumerate(candidates):
        try:
            return _private_folder(path)
        except OSError as e:
            if i + 1 == len(candidates):
                raise CacheError(f"cannot create the build cache {path}: {e.strerror or e}; set {ENV} to a "
                                 f"folder of yours") from None
    raise AssertionError("unreachable")


def cached(key: str, artifact: str, build: Callable[[Path], None]) -> Path:
    """``<cache>/<key>/<artifact>``: reused when the entry is private and the artifact's bytes are
    the ones recorded when it was built; otherwise ``build(folder)`` makes the artifact (and
    whatever else it needs) in a fresh private folder that then takes the entry's place."""
    if not key or "/" in key or key.startswith((".", *TEMP_PREFIXES)) or os.path.isabs(artifact) \
            or ".." in Path(artifact).parts:
        raise ValueError(f"not a cache entry: {key!r}, {artifact!r}")
    base = root()
    limit = size_limit()
    entry = base / key
    found = _reuse(entry, artifact)
    if found is not None:
        _touch(entry)
        return found
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=base))  # 0700, ours
        try:
            build(tmp)
            made = tmp / artifact
            made.with_name(made.name + RECORD).write_text(_sha256(made) + "\n")
            _install(tmp, entry, artifact)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as e:  # a full or read-only file system under the cache
        raise CacheError(f"cannot write the build cache {base}: {e.strerror or e}; free space there or set {ENV} "
                         f"to another folder") from None
    prune(base, limit)
    return entry / artifact


def size_limit() -> int:
    """The most the cache may hold, in bytes (``$DEPLOY_BUILD_CACHE_SIZE``, else 512M)."""
    text = os.environ.get(SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_SIZE
    m = _SIZE.match(text)
    if not m:
        raise CacheError(f"{SIZE_ENV}={text!r}: expected a number of bytes such as 536870912, 512M or 2G")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def prune(base: Path, limit: int, now: float | None = None) -> None:
    """Temp folders of builds that died removed; then, while the entries hold more than
    ``limit`` bytes, the one used least recently, among those not used in the last RECENT_S
    seconds. Only our own folders are touched; what vanishes meanwhile (another process
    pruning too) is skipped."""
    now = time.time() if now is None else now
    entries = []
    for path in _children(base):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if path.name.startswith(TEMP_PREFIXES):
            if now - st.st_mtime > RECENT_S and not _owner_alive(path.name):
                shutil.rmtree(path, ignore_errors=True)
            continue
        entries.append((st.st_mtime, _bytes(path), path))
    total = sum(size for _, size, _ in entries)
    for used, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= limit or now - used <= RECENT_S:
            break
        _discard(path)
        total -= size


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _bytes(folder: Path) -> int:
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total


def _owner_alive(name: str) -> bool:
    """Whether the process a temp folder's name carries still runs (a name without one, from
    before names carried it, has no owner)."""
    m = _TEMP.match(name)
    if m is None or m.group(1) is None:
        return False
    try:
        os.kill(int(m.group(1)), 0)
    except PermissionError:  # another user's process
        return True
    except (ProcessLookupError, OverflowError):
        return False
    return True


def _discard(entry: Path) -> None:
    """An entry out of the cache: renamed away first, so no reader ever sees it half removed."""
    try:
        stale = Path(tempfile.mkdtemp(prefix=f"stale-{os.getpid()}-", dir=entry.parent))
    except OSError:
        return
    try:
        entry.rename(stale / "entry")
    except OSError:  # another process discarded or replaced it first
        pass
    shutil.rmtree(stale, ignore_errors=True)


def _touch(entry: Path) -> None:
    """The entry's time of last use, which pruning orders by."""
    try:
        os.utime(entry)
    except OSError:
        pass


def _install(tmp: Path, entry: Path, artifact: str) -> None:
    try:
        tmp.rename(entry)
        return
    except OSError:  # an entry is there: a concurrent build of the same sources, or one refused above
        pass
    if _reuse(entry, artifact) is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    stale = Path(tempfile.mkdtemp(prefix=f"stale-{os.getpid()}-", dir=entry.parent))
    try:
        entry.rename(stale / "entry")
    except FileNotFoundError:  # another process discarded it first
        pass
    shutil.rmtree(stale, ignore_errors=True)
    tmp.rename(entry)


def _reuse(entry: Path, artifact: str) -> Path | None:
    """The entry's artifact if it is still what was built, None if it must be (re)built."""
    if not os.path.lexists(entry):
        return None
    _check_private(entry, "build cache entry")
    path = entry / artifact
    record = path.with_name(path.name + RECORD)
    try:
        if not (_own_file(path) and _own_file(record)):
            return None
        return path if record.read_text().strip() == _sha256(path) else None
    except OSError:
        return None


def _private_folder(path: Path) -> Path:
    """``path`` created (missing folders 0700) and checked, with its parent's symlinks resolved
    so that what was checked is what is used; the folder itself must not be a symlink."""
    path = Path(os.path.realpath(path.parent)) / path.name
    for folder in reversed([f for f in [path, *path.parents] if not os.path.lexists(f)]):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
    for folder in reversed(path.parents):
        _check_above(folder, path)
    _check_private(path, "build cache")
    return path


def _check_above(folder: Path, cache: Path) -> None:
    """A folder above the cache: whoever can rename its entries can swap the cache for theirs."""
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        _refuse(f"build cache {cache}", f"has {folder} on its path, which is not a folder (a symlink?)")
    if st.st_uid not in (0, os.getuid()):
        _refuse(f"build cache {cache}", f"lies in {folder}, owned by uid {st.st_uid}: that user could replace it")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        _refuse(f"build cache {cache}", f"lies in {folder}, mode {stat.S_IMODE(st.st_mode):04o}: other users "
                                        f"could replace it")


def _check_private(folder: Path, what: str) -> None:
    st = os.lstat(folder)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        _refuse(f"{what} {folder}", "is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        _refuse(f"{what} {folder}", "is not a folder")
    if st.st_uid != os.getuid():
        _refuse(f"{what} {folder}", f"is owned by uid {st.st_uid}, not {os.getuid()}")
    if mode & 0o022:
        _refuse(f"{what} {folder}", f"has mode {mode:04o}: other users can write it")
    if mode & 0o077:
        _refuse(f"{what} {folder}", f"has mode {mode:04o}: other users can read it")


def _refuse(subject: str, problem: str) -> None:
    raise CacheError(f"{subject} {problem}; not using it (remove it, or set {ENV} to a folder only you can "
                     f"use)")


def _own_file(path: Path) -> bool:
    st = os.lstat(path)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
