"""The build cache runs only what a build of ours produced, from a folder only we can use: a
cache folder (or one above it, or an entry) that another user owns or can write, or a symlink,
is refused; an artifact whose bytes differ from those recorded when it was built is rebuilt,
never run; a fresh cache is private; the normal path reuses the artifact without recompiling."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from deployer import build_cache, qemu
from deployer.build_cache import CacheError
from deployer.verify import compile_files
from tests.unit.test_cli import builder_model, run_clirunner

OTHER_UID = 1001
ENGINE = {"hello.c": "int hello(void) { return 42; }\n"}
HARNESS = '#include <stdio.h>\nint hello(void);\nint main(void) { printf("%d\\n", hello()); return 0; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """DEPLOY_BUILD_CACHE in this test's folder (not created yet): the real cache is never touched."""
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def harness(tmp_path) -> Path:
    (tmp_path / "main.c").write_text(HARNESS)
    return tmp_path / "main.c"


@pytest.fixture
def gcc_runs(monkeypatch) -> list:
    """The compiler commands run, counted (and still run)."""
    calls, real = [], subprocess.run

    def counting(cmd, *args, **kwargs):
        calls.append(cmd)
        return real(cmd, *args, **kwargs)
    monkeypatch.setattr(subprocess, "run", counting)
    return calls


def build(harness: Path) -> Path:
    return compile_files(ENGINE, "gcc", ("-O0",), harness)


def plant(exe: Path, marker: Path, record: bool = True) -> None:
    """Replace a cached executable with a script that leaves ``marker`` when run (its digest
    recorded beside it when ``record``: a plant by someone who could write the folder)."""
    exe.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
    exe.chmod(0o755)
    if record:
        exe.with_name(exe.name + ".sha256").write_text(hashlib.sha256(exe.read_bytes()).hexdigest() + "\n")


def owned_by_another_user(folder: Path) -> None:
    """Another user's folder: chown'ed to another uid when we may (root), else open to everyone."""
    if os.getuid() == 0:
        os.chown(folder, OTHER_UID, OTHER_UID)
    else:
        folder.chmod(0o777)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ---- the normal path -------------------------------------------------------------------------

def test_fresh_cache_is_private(monkeypatch, harness, tmp_path):
    cache = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(cache))
    old = os.umask(0)  # the modes are ours, not the umask's
    try:
        exe = build(harness)
    finally:
        os.umask(old)
    for folder in (cache.parent.parent, cache.parent, cache, exe.parent):
        assert mode(folder) == 0o700, folder
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout == "42\n"
    recorded = exe.with_name("engine.sha256").read_text().strip()
    assert recorded == hashlib.sha256(exe.read_bytes()).hexdigest()


def test_second_build_reuses_the_binary(cache, harness, gcc_runs):
    first = build(harness)
    assert len(gcc_runs) == 1
    assert build(harness) == first
    assert len(gcc_runs) == 1  # hashed and reused, not recompiled
    assert [p.name for p in cache.iterdir()] == [first.parent.name]  # no temp folder left


def test_default_location_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("DEPLOY_BUILD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert build_cache.locations()[0] == tmp_path / "xdg" / "mcu-deploy"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the XDG spec says
    assert build_cache.locations()[0] == tmp_path / "home" / ".cache" / "mcu-deploy"
    assert build_cache.root() == tmp_path / "home" / ".cache" / "mcu-deploy"
    assert mode(build_cache.root()) == 0o700
    monkeypatch.setenv("HOME", str(tmp_path / "not-a-folder" / "home"))
    (tmp_path / "not-a-folder").write_text("")
    assert build_cache.root() == tmp_path / "tmp" / f"mcu-deploy-{os.getuid()}"  # the home is unusable


# ---- another user's folders ------------------------------------------------------------------

@pytest.mark.parametrize("how", ["other-owner", "mode-0777", "mode-0755"])
def test_planted_binary_in_someone_elses_cache_is_refused(cache, harness, tmp_path, how):
    exe = build(harness)
    marker = tmp_path / "ran"
    plant(exe, marker)
    if how == "other-owner":
        if os.getuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(cache, OTHER_UID, OTHER_UID)
        expected = f"owned by uid {OTHER_UID}"
    else:
        cache.chmod(int(how[-4:], 8))
        expected = f"has mode {how[-4:]}: other users can {'write' if how == 'mode-0777' else 'read'} it"
    with pytest.raises(CacheError, match=expected) as e:
        build(harness)
    assert str(cache) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()


@pytest.mark.parametrize("entry", [False, True], ids=["cache", "entry"])
def test_symlinked_folder_is_refused(cache, harness, tmp_path, entry):
    exe = build(harness)
    marker = tmp_path / "ran"
    plant(exe, marker)
    if entry:  # the entry points at a folder elsewhere (private and ours, even)
        elsewhere = tmp_path / "elsewhere"
        exe.parent.rename(elsewhere)
        exe.parent.symlink_to(elsewhere)
        link = exe.parent
    else:
        cache.rename(tmp_path / "real")
        cache.symlink_to(tmp_path / "real")
        link = cache
    with pytest.raises(CacheError, match=f"{link} is a symlink"):
        build(harness)
    assert not marker.exists()


def test_entry_of_another_user_is_refused(cache, harness, tmp_path):
    exe = build(harness)
    marker = tmp_path / "ran"
    plant(exe, marker)
    owned_by_another_user(exe.parent)
    with pytest.raises(CacheError, match=f"build cache entry {exe.parent} "):
        build(harness)
    assert not marker.exists()


@pytest.mark.parametrize("how", ["other-owner", "writable", "sticky"])
def test_folder_above_the_cache(tmp_path, monkeypatch, harness, how):
    """Whoever can rename what a folder above holds can swap the cache for theirs after the
    checks; a sticky folder (/tmp) lets nobody rename what is ours."""
    above = tmp_path / "shared"
    above.mkdir()
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(above / "cache"))
    if how == "other-owner":
        if os.getuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(above, OTHER_UID, OTHER_UID)
    else:
        above.chmod(0o777 | (stat.S_ISVTX if how == "sticky" else 0))
    if how == "sticky":
        assert build(harness).parent.parent == above / "cache"
        return
    with pytest.raises(CacheError, match=f"lies in {above}, " + ("owned by uid" if how == "other-owner" else "mode 0777")):
        build(harness)


def test_cli_refuses_with_one_line_and_status_1(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    model = builder_model(tmp_path / "cnn.tflite")
    code, _, err = run_clirunner("verify", model, "--seeds", "1", env={"DEPLOY_BUILD_CACHE": str(cache)})
    # progress lines may come first on a slow machine: the error is the last line, and the only one
    line = err.strip("\n").splitlines()[-1]
    assert code == 1 and "Traceback" not in err and sum(x.startswith("error:") for x in err.splitlines()) == 1
    assert line.startswith(f"error: CacheError: build cache {cache} ") and "other users can write it" in line


def test_uncreatable_cache_is_a_user_error(tmp_path, monkeypatch, harness):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(CacheError, match="cannot create the build cache"):
        build(harness)


# ---- artifacts that are not what was built ---------------------------------------------------

@pytest.mark.parametrize("record", [True, False], ids=["stale-record", "no-record"])
def test_tampered_binary_is_rebuilt_not_run(cache, harness, tmp_path, gcc_runs, record):
    exe = build(harness)
    marker = tmp_path / "ran"
    original = exe.read_bytes()
    exe.write_text(f"#!/bin/sh\ntouch '{marker}'\n")  # changed after the build, the record kept
    if not record:
        exe.with_name("engine.sha256").unlink()
    again = build(harness)
    assert len(gcc_runs) == 2  # rebuilt
    assert again == exe and again.read_bytes() == original
    assert subprocess.run([str(again)], capture_output=True, text=True).stdout == "42\n"
    assert not marker.exists()
    assert [p.name for p in cache.iterdir()] == [exe.parent.name]  # the stale entry is gone


def test_concurrent_build_of_the_same_entry(cache, harness):
    """Another process installs the same entry while we build: its artifact is kept, ours dropped."""
    def build_racing(folder: Path) -> None:
        build_cache.cached("entry", "artifact", lambda f: (f / "artifact").write_text("theirs"))
        (folder / "artifact").write_text("ours")
    path = build_cache.cached("entry", "artifact", build_racing)
    assert path.read_text() == "theirs"
    assert [p.name for p in cache.iterdir()] == ["entry"]


# ---- the QEMU artifacts go through the same cache --------------------------------------------

def fake_build(monkeypatch, output: str) -> list:
    """subprocess.run replaced by a build that writes ``output`` (a path relative to the folder
    the command names after -o or -C); returns the commands run."""
    calls = []

    def run(cmd, *args, **kwargs):
        calls.append(cmd)
        folder = Path(cmd[cmd.index("-o") + 1]).parent if "-o" in cmd else Path(cmd[cmd.index("-C") + 1]).parent
        (folder / output).parent.mkdir(parents=True, exist_ok=True)
        (folder / output).write_bytes(b"\x7fELF built")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(qemu.subprocess, "run", run)
    return calls


def test_qemu_plugin_is_verified_before_qemu_loads_it(cache, monkeypatch, tmp_path):
    calls = fake_build(monkeypatch, "insn_count.so")
    so = qemu.plugin()
    assert qemu.plugin() == so and len(calls) == 1
    plant(so, tmp_path / "ran", record=False)
    assert qemu.plugin() == so and len(calls) == 2 and so.read_bytes() == b"\x7fELF built"
    cache.chmod(0o777)
    with pytest.raises(CacheError):
        qemu.plugin()


def test_elf_is_verified_before_it_is_run(cache, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from backends import BACKENDS
    monkeypatch.setattr(qemu, "require_tools", lambda *a: None)
    calls = fake_build(monkeypatch, "qemu/engine.elf")
    dep = SimpleNamespace(backend=BACKENDS["cortex-m7"], files={"qemu/Makefile": "all:\n", "a.c": "int a;\n"})
    elf = qemu.build_elf(dep).path
    assert elf.relative_to(cache).parts[1:] == ("qemu", "engine.elf")
    assert qemu.build_elf(dep).path == elf and len(calls) == 1
    elf.write_bytes(b"planted")
    assert qemu.build_elf(dep).path == elf and len(calls) == 2 and elf.read_bytes() == b"\x7fELF built"


def test_cache_path_with_a_comma_adds_no_qemu_option(tmp_path, monkeypatch):
    """QEMU splits -plugin at commas: a cache path holding ",out=..." must stay one file name."""
    monkeypatch.setenv("DEPLOY_BUILD_CACHE", str(tmp_path / "x,out=evil"))
    fake_build(monkeypatch, "insn_count.so")
    seen, build = [], qemu.subprocess.run

    def run(cmd, *args, **kwargs):
        if cmd[0] != "qemu-system-arm":
            return build(cmd, *args, **kwargs)
        seen.append(cmd)
        raise subprocess.TimeoutExpired(cmd, 0)
    monkeypatch.setattr(qemu.subprocess, "run", run)
    with pytest.raises(qemu.QemuError):
        qemu.run(qemu.Elf(tmp_path / "engine.elf", "mps2-an500", False), b"", count=True)
    arg = seen[0][seen[0].index("-plugin") + 1]
    assert arg.startswith(str(tmp_path / "x,,out=evil" / "insn_count-"))
    assert arg.replace(",,", "").count(",") == 1  # only the one before out=
