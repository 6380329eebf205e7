"""Build an engine for a target with a QEMU board with its ``qemu/`` harness, run it on that
board, read its memory from the ELF and count the instructions it executes (a TCG plugin of
ours); ``deploy verify --qemu`` and the ELF's memory in ``deploy``'s manifest. The cross
toolchain and the QEMU binary are the target's (backends: ``cc``, ``qemu_system``)."""
from __future__ import annotations

import bisect
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backends import BACKENDS
from network_parser.errors import DeployError
from solver.plan import Plan

from . import build_cache
from .verify import BuildError, build_run, compare, files_digest, parse_output, samples_payload, stream, write_files

PLUGIN_SOURCE = Path(__file__).resolve().parent / "harness" / "insn_count_plugin.c"
TIMEOUT_S = 600


def build_tools(backend) -> tuple[str, ...]:
    """What links a target's ELF and sizes it."""
    return backend.cc, f"{backend.binutils_prefix}size", f"{backend.binutils_prefix}nm", "make"


def board_tools(backend) -> tuple[str, ...]:
    """... and runs it on its QEMU board."""
    return (*build_tools(backend), backend.qemu_system)


def install_hint(backend) -> str:
    return f"apt-get install {' '.join(backend.tool_packages)} make"


# the Cortex-M boards' (every target with a QEMU board today shares their toolchain): what a
# caller without a target checks
BOARD = BACKENDS["cortex-m4"]
TOOLS, BUILD_TOOLS, INSTALL = board_tools(BOARD), build_tools(BOARD), install_hint(BOARD)
PREFIX = BOARD.binutils_prefix


class QemuError(DeployError):
    kind = "QemuError"


def missing_tools(tools: tuple[str, ...] = TOOLS) -> list[str]:
    return [t for t in tools if shutil.which(t) is None]


def require_tools(tools: tuple[str, ...] = TOOLS, what: str = "--qemu", backend=BOARD) -> None:
    missing = missing_tools(tools)
    if missing:
        raise QemuError(f"{what} needs {', '.join(missing)} (Debian: {install_hint(backend)})")


def require_board_tools(backend) -> None:
    """What ``--qemu`` needs for ``backend`` (a target without a board: the Cortex-M boards')."""
    if backend.qemu_system:
        require_tools(board_tools(backend), backend=backend)
    else:
        require_tools()


@dataclass(frozen=True)
class Elf:
    path: Path
    machine: str
    trace: bool
    qemu: str = BOARD.qemu_system  # the QEMU binary of its board
    prefix: str = PREFIX  # its toolchain's binutils prefix


def build_elf(dep: Plan, trace: bool = False, profile: bool = False) -> Elf:
    """``make`` in the engine's qemu/ folder (cached by the files' digest and the flags); with
    ``profile``, the trace hook is a mark between layers that writes nothing."""
    if dep.backend.qemu_machine is None:
        raise QemuError(f"target '{dep.backend.name}' has no QEMU board (use a Cortex-M target)")
    backend = dep.backend
    require_tools(build_tools(backend), "building the ELF", backend)
    digest = files_digest(dep.files)
    defs = ["-DINFERENCE_TRACE"] * (trace or profile) + ["-DINFERENCE_PROFILE"] * profile
    digest.update(b"elf" + " ".join(defs).encode())

    def build(folder: Path) -> None:
        write_files(dep.files, folder)
        cmd = ["make", "-s", "-C", str(folder / "qemu"), "all"] + ([f"DEFS={' '.join(defs)}"] if defs else [])
        proc = build_run(cmd, f"make ({backend.cc})")
        if proc.returncode != 0:
            raise BuildError(f"{backend.cc} failed on the generated engine:\n{(proc.stdout + proc.stderr)[-4000:]}")

    elf = build_cache.cached("elf-" + digest.hexdigest()[:24], "qemu/engine.elf", build)
    return Elf(elf, backend.qemu_machine, trace, backend.qemu_system, backend.binutils_prefix)


def plugin() -> Path:
    """The instruction-counting plugin, built once per source version with the host gcc."""
    digest = files_digest({"p": PLUGIN_SOURCE.read_bytes()}).hexdigest()[:16]

    def build(folder: Path) -> None:
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(folder / "insn_count.so"), str(PLUGIN_SOURCE),
                               "-lpthread"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"cannot build the QEMU plugin:\n{proc.stderr[-2000:]}")

    return build_cache.cached(f"insn_count-{digest}", "insn_count.so", build)


@dataclass(frozen=True)
class Run:
    output: bytes
    histogram: dict[int, int] | None  # instruction address -> executions
    marks: list[int] | None = None  # instructions executed so far, each time the mark ran
    blocks: dict | None = None  # with blocks=True: the translated blocks that ran (cycles.Block by index)
    segments: list | None = None  # ... and with a mark, each mark's blocks since the one before


EXIT_MEANING = {2: "inference_init failed", 3: "input.bin ended inside a sample", 4: "inference_run failed",
                5: "output.bin could not be written", 98: "stack overflow", 99: "a CPU fault"}


def run(elf: Elf, payload: bytes, count: bool = False, timeout: float = TIMEOUT_S, mark: int | None = None,
        blocks: bool = False) -> Run:
    """Run on the board with ``payload`` as input.bin; with ``count``, an instruction histogram,
    and with ``mark`` (an address) the running count each time that instruction ran; with
    ``blocks`` the blocks that ran and where each went on (deployer.cycles), per mark too."""
    with tempfile.TemporaryDirectory(prefix="qemu-") as d:
        work = Path(d)
        (work / "input.bin").write_bytes(payload)
        cmd = [elf.qemu, "-M", elf.machine, "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native", "-kernel", str(elf.path)]
        if count:
            # QEMU splits option values at commas (",," is a literal one): a path must not add options
            so, out = (str(p).replace(",", ",,") for p in (plugin(), work / "histogram.txt"))
            marks = str(work / "marks.txt").replace(",", ",,")
            extra = f",mark={mark:x},marks={marks}" if mark is not None else ""
            if blocks:
                extra += ",blocks=" + str(work / "blocks.txt").replace(",", ",,")
                if mark is not None:
                    extra += ",segments=" + str(work / "segments.txt").replace(",", ",,")
            cmd += ["-plugin", f"{so},out={out}{extra}", "-d", "plugin"]
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
        marked = None
        if count and mark is not None:
            marked = [int(x) for x in (work / "marks.txt").read_text().split()]
        ran = segments = None
        if count and blocks:
            from .cycles import parse_blocks, parse_segments
            ran = parse_blocks((work / "blocks.txt").read_text())
            if mark is not None:
                segments = parse_segments((work / "segments.txt").read_text())
        return Run((work / "output.bin").read_bytes(), histogram, marked, ran, segments)


_SECTION = re.compile(r"^(\.\S+)\s+(\d+)\s+(\d+)\s*$")
FLASH_SECTIONS = (".isr_vector", ".text", ".rodata", ".ARM.extab", ".ARM.exidx", ".data")
SRAM_SECTIONS = (".data", ".bss", ".stack")
TCM_SECTIONS = (".dtcm",)  # in QEMU's RAM (it models no TCM), on the part its own memory: not SRAM


def elf_memory(elf: Path, prefix: str = PREFIX) -> dict:
    """Flash (.text + .rodata + .data image) and SRAM (.data + .bss + stack) from the toolchain's size."""
    proc = subprocess.run([f"{prefix}size", "-A", str(elf)], capture_output=True, text=True, check=True)
    sections = {}
    for line in proc.stdout.split("\n"):
        m = _SECTION.match(line)
        if m:
            sections[m.group(1)] = int(m.group(2))
    banks = [k for k in sections if k.startswith(".bank_")]  # a memory map's banks: SRAM too
    return dict(sections={k: v for k, v in sections.items() if k in (*FLASH_SECTIONS, *SRAM_SECTIONS, *TCM_SECTIONS, *banks)
                          and (v or k not in TCM_SECTIONS)},
                flash_bytes=sum(sections.get(s, 0) for s in FLASH_SECTIONS),
                sram_bytes=sum(sections.get(s, 0) for s in (*SRAM_SECTIONS, *banks)))


def functions(elf: Path, prefix: str = PREFIX) -> list[tuple[int, int, str]]:
    """(start, end, name) of every function with a size, by address (Thumb bit cleared)."""
    proc = subprocess.run([f"{prefix}nm", "-S", "--defined-only", str(elf)], capture_output=True,
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


# The qemu/ harness's own functions (main.c, semihost.c, startup.c and its *_Handler vectors):
# not the engine's work. startup.c's memcpy/memset/memmove stand in for the C library the engine's
# compiled code may call, so they count as the engine's.
HARNESS_FUNCTIONS = {"main", "put", "get", "read_sample", "run_once", "sample_bytes", "inference_trace",
                     "put_hex", "fault_report", "length"}


def is_harness(name: str) -> bool:
    return name in HARNESS_FUNCTIONS or name.startswith("sh_") or name.endswith("_Handler")


def engine_text_bytes(funcs: list[tuple[int, int, str]]) -> int:
    """.text bytes of the functions that are not the harness's; aliases (``__aeabi_dadd`` /
    ``__adddf3``) and symbols inside another's range are counted once."""
    total, end = 0, 0
    for start, stop, name in sorted(funcs):
        if not is_harness(name):
            total += max(0, stop - max(start, end))
            end = max(end, stop)
    return total


def instructions_per_inference(elf: Elf, sample_payload: bytes) -> tuple[int, dict[str, int]]:
    """Instructions of one inference, in all and per function: runs with two and with one copy
    of the same sample differ by exactly one inference plus one sample's file I/O, which the
    harness's functions account for and which is left out."""
    funcs = functions(elf.path, elf.prefix)
    one = per_function(run(elf, sample_payload, count=True).histogram, funcs)
    two = per_function(run(elf, sample_payload * 2, count=True).histogram, funcs)
    diff = {name: two.get(name, 0) - one.get(name, 0) for name in two if not is_harness(name)}
    diff = {k: v for k, v in diff.items() if v}
    return sum(diff.values()), diff


def instructions_per_layer(dep: Plan, sample: list[np.ndarray]) -> list[int]:
    """Instructions each layer executes in one inference, counted between the marks the engine
    built with INFERENCE_PROFILE passes before its first layer and after every layer."""
    require_board_tools(dep.backend)
    elf = build_elf(dep, profile=True)
    hook = next((start for start, _, name in functions(elf.path, elf.prefix) if name == "inference_trace"), None)
    if hook is None:
        raise QemuError("the profiling build has no inference_trace mark")
    marks = run(elf, samples_payload(dep.graph, [sample]), count=True, mark=hook).marks
    if len(marks) != len(dep.graph.layers) + 1:
        raise QemuError(f"expected {len(dep.graph.layers) + 1} marks, one before and one after each layer, "
                        f"not {len(marks)}")
    return [b - a for a, b in zip(marks, marks[1:])]


def toolchain(backend=BOARD) -> str:
    """The compiler's version line, e.g. 'arm-none-eabi-gcc (15:12.2.rel1-1) 12.2.1 20221205'."""
    proc = subprocess.run([backend.cc, "--version"], capture_output=True, text=True, check=True)
    line = proc.stdout.split("\n")[0].strip()
    return line if line.startswith(backend.cc) else f"{backend.cc} {line}"


def elf_entry(plan) -> dict | None:
    """The linked image's memory: the engine built from its qemu/ folder (harness and its stack
    included), or None when the Arm tools are missing."""
    if missing_tools(build_tools(plan.backend)):
        return None
    elf = build_elf(plan)
    mem = elf_memory(elf.path, elf.prefix)
    return dict(flash_bytes=mem["flash_bytes"], sram_bytes=mem["sram_bytes"], sections=mem["sections"],
                toolchain=toolchain(plan.backend))


def verify_on_qemu(dep: Plan, model: Path, samples: list[list[np.ndarray]], expected=None,
                   clock_mhz: float | None = None) -> dict:
    """``deploy verify --qemu``: every sample in one run on the core's QEMU board, compared with the
    reference as on the host; then the instructions of one inference (the first sample), the cycles
    the core's timing table gives them (deployer.cycles; milliseconds at ``clock_mhz``, else the
    preset's clock) and the ELF's memory (harness and stack included) beside the planner's estimates."""
    from . import cycles
    require_board_tools(dep.backend)
    elf = build_elf(dep)
    samples, resets, expected = stream(dep, model, samples, expected)
    outs, _ = parse_output(dep.graph, run(elf, samples_payload(dep.graph, samples, resets)).output, len(samples), False)
    result = compare(dep, model, samples, outs, expected)
    payload = samples_payload(dep.graph, samples[:1])
    estimate = cycles.estimate_inference(elf, payload, dep.backend.cpu) if cycles.available(dep.backend) else None
    instructions = estimate.instructions if estimate else instructions_per_inference(elf, payload)[0]
    mem = elf_memory(elf.path, elf.prefix)
    result.update(planned_flash_bytes=result["flash_bytes"], planned_sram_bytes=result["sram_bytes"],
                  flash_bytes=mem["flash_bytes"], sram_bytes=mem["sram_bytes"], instructions=instructions,
                  instructions_per_mac=round(instructions / max(dep.macs, 1), 4), qemu_machine=elf.machine)
    if estimate:
        result.update(cycles.timing_fields(estimate.cycles, dep, clock_mhz))
    return result


def trace_on_qemu(dep: Plan, sample: list[np.ndarray]) -> list:
    """Every layer's output for one sample, from the engine built with INFERENCE_TRACE, run on QEMU."""
    require_board_tools(dep.backend)
    elf = build_elf(dep, trace=True)
    return parse_output(dep.graph, run(elf, samples_payload(dep.graph, [sample])).output, 1, True)[1][0]
