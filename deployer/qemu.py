"""Build an engine for a Cortex-M target with its ``qemu/`` harness, run it on QEMU's board,
read its memory from the ELF and count the instructions it executes (a TCG plugin of ours)."""
from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from network_parser.errors import DeployError

from .pipeline import Deployment
from .verify import CACHE, BuildError, files_digest, write_files

PLUGIN_SOURCE = Path(__file__).resolve().parent / "harness" / "insn_count_plugin.c"
TIMEOUT_S = 600
TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-size", "arm-none-eabi-nm", "qemu-system-arm", "make")


class QemuError(DeployError):
    kind = "QemuError"


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def require_tools() -> None:
    missing = missing_tools()
    if missing:
        raise QemuError(f"--qemu needs {', '.join(missing)} (Debian: apt-get install gcc-arm-none-eabi "
                        f"libnewlib-arm-none-eabi qemu-system-arm make)")


@dataclass(frozen=True)
class Elf:
    path: Path
    machine: str
    trace: bool


def build_elf(dep: Deployment, trace: bool = False) -> Elf:
    """``make`` in the engine's qemu/ folder (cached by the files' digest and the flags)."""
    if dep.backend.qemu_machine is None:
        raise QemuError(f"target '{dep.backend.name}' has no QEMU board (use a Cortex-M target)")
    require_tools()
    digest = files_digest(dep.files)
    digest.update(b"elf" + (b"trace" if trace else b""))
    folder = CACHE / ("elf-" + digest.hexdigest()[:24])
    elf = folder / "qemu" / "engine.elf"
    if elf.exists():
        return Elf(elf, dep.backend.qemu_machine, trace)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE))
    try:
        write_files(dep.files, tmp)
        cmd = ["make", "-s", "-C", str(tmp / "qemu"), "all"] + (["DEFS=-DINFERENCE_TRACE"] if trace else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"arm-none-eabi-gcc failed on the generated engine:\n{(proc.stdout + proc.stderr)[-4000:]}")
        try:
            tmp.rename(folder)
        except OSError:  # built concurrently
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Elf(elf, dep.backend.qemu_machine, trace)


def plugin() -> Path:
    """The instruction-counting plugin, built once per source version with the host gcc."""
    digest = files_digest({"p": PLUGIN_SOURCE.read_bytes()}).hexdigest()[:16]
    so = CACHE / f"insn_count-{digest}.so"
    if not so.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(tmp), str(PLUGIN_SOURCE), "-lpthread"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"cannot build the QEMU plugin:\n{proc.stderr[-2000:]}")
        tmp.rename(so)
    return so


@dataclass(frozen=True)
class Run:
    output: bytes
    histogram: dict[int, int] | None  # instruction address -> executions


EXIT_MEANING = {2: "inference_init failed", 3: "input.bin ended inside a sample", 4: "inference_run failed",
                5: "output.bin could not be written", 98: "stack overflow", 99: "a CPU fault"}


def run(elf: Elf, payload: bytes, count: bool = False, timeout: float = TIMEOUT_S) -> Run:
    """Run on the board with ``payload`` as input.bin; with ``count``, an instruction histogram."""
    with tempfile.TemporaryDirectory(prefix="qemu-") as d:
        work = Path(d)
        (work / "input.bin").write_bytes(payload)
        cmd = ["qemu-system-arm", "-M", elf.machine, "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native", "-kernel", str(elf.path)]
        if count:
            cmd += ["-plugin", f"{plugin()},out={work / 'histogram.txt'}", "-d", "plugin"]
        try:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise QemuError(f"the engine did not finish within {timeout:.0f} s on QEMU {elf.machine}") from None
        if proc.returncode != 0:
            why = EXIT_MEANING.get(proc.returncode, "unexpected status")
            raise QemuError(f"the engine exited with status {proc.returncode} ({why}) on QEMU {elf.machine}: "
                            f"{proc.stderr.decode(errors='replace')[-2000:]}")
        histogram = None
        if count:
            histogram = {}
            for line in (work / "histogram.txt").read_text().split("\n"):
                if line:
                    addr, n = line.split()
                    histogram[int(addr, 16)] = int(n)
        return Run((work / "output.bin").read_bytes(), histogram)


_SECTION = re.compile(r"^(\.\S+)\s+(\d+)\s+(\d+)\s*$")
FLASH_SECTIONS = (".isr_vector", ".text", ".rodata", ".ARM.extab", ".ARM.exidx", ".data")
SRAM_SECTIONS = (".data", ".bss", ".stack")


def elf_memory(elf: Path) -> dict:
    """Flash (.text + .rodata + .data image) and SRAM (.data + .bss + stack) from arm-none-eabi-size."""
    proc = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True, check=True)
    sections = {}
    for line in proc.stdout.split("\n"):
        m = _SECTION.match(line)
        if m:
            sections[m.group(1)] = int(m.group(2))
    return dict(sections={k: v for k, v in sections.items() if k in (*FLASH_SECTIONS, *SRAM_SECTIONS)},
                flash_bytes=sum(sections.get(s, 0) for s in FLASH_SECTIONS),
                sram_bytes=sum(sections.get(s, 0) for s in SRAM_SECTIONS))


def functions(elf: Path) -> list[tuple[int, int, str]]:
    """(start, end, name) of every function with a size, by address (Thumb bit cleared)."""
    proc = subprocess.run(["arm-none-eabi-nm", "-S", "--defined-only", str(elf)], capture_output=True,
                          text=True, check=True)
    result = []
    for line in proc.stdout.split("\n"):
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            start, size = int(parts[0], 16) & ~1, int(parts[1], 16)
            result.append((start, start + size, parts[3]))
    return sorted(result)


def per_function(histogram: dict[int, int], funcs: list[tuple[int, int, str]]) -> dict[str, int]:
    """Executed instructions per function ("?" for addresses outside every sized symbol)."""
    starts = [f[0] for f in funcs]
    totals: dict[str, int] = {}
    for addr, n in histogram.items():
        i = bisect.bisect_right(starts, addr) - 1
        name = funcs[i][2] if i >= 0 and addr < funcs[i][1] else "?"
        totals[name] = totals.get(name, 0) + n
    return totals


# The qemu/ harness's own functions (main.c, semihost.c, startup.c): not the engine's work.
HARNESS_FUNCTIONS = {"main", "put", "get", "read_sample", "run_once", "sample_bytes", "inference_trace",
                     "put_hex", "Reset_Handler"}


def is_harness(name: str) -> bool:
    return name in HARNESS_FUNCTIONS or name.startswith("sh_")


def instructions_per_inference(elf: Elf, sample_payload: bytes) -> tuple[int, dict[str, int]]:
    """Instructions of one inference, in all and per function: runs with two and with one copy
    of the same sample differ by exactly one inference plus one sample's file I/O, which the
    harness's functions account for and which is left out."""
    funcs = functions(elf.path)
    one = per_function(run(elf, sample_payload, count=True).histogram, funcs)
    two = per_function(run(elf, sample_payload * 2, count=True).histogram, funcs)
    diff = {name: two.get(name, 0) - one.get(name, 0) for name in two if not is_harness(name)}
    diff = {k: v for k, v in diff.items() if v}
    return sum(diff.values()), diff
