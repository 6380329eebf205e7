"""Cycles (and milliseconds, at a clock) of an engine on a Cortex-M core, estimated from the
instructions QEMU executes.

QEMU executes; it models no pipeline. Our TCG plugin (harness/insn_count_plugin.c, ``blocks=``)
writes every translated block that ran: its instructions' addresses, how often it ran, and how
often execution went on elsewhere than right after its last instruction (a taken branch) or
right after it (fell through). The core's rules (backends/cortexm_timing.py) price each block;
a block's cycles are a fixed cost per execution plus a cost per taken and per fall-through exit,
so the estimate of a trace is exact, deterministic and additive: per function, per layer
(between the engine's marks) and per inference add up. What it leaves out (wait states,
caches, bus contention...) and how far off it may be each table says, and :func:`timing_text`
with the estimate.
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.cortexm_timing import OBJDUMP, Estimator, Table, has_table, load_table

# ---------------------------------------------------------------- the blocks QEMU ran

@dataclass(frozen=True)
class Block:
    """A translated block that ran: its instructions' addresses, how often it ran, how often
    execution went on elsewhere (taken) or right after it (fell)."""
    index: int
    start: int
    end: int
    addrs: tuple[int, ...]
    count: int
    taken: int
    fell: int


def parse_blocks(text: str) -> dict[int, Block]:
    """The plugin's ``blocks=`` file: index -> Block."""
    result = {}
    for line in text.split("\n"):
        parts = line.split()
        if not parts:
            continue
        index, start, end, count, taken, fell, n = (int(parts[0]), int(parts[1], 16), int(parts[2], 16),
                                                    int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]))
        addrs = tuple(int(a, 16) for a in parts[7:7 + n])
        if len(addrs) != n:
            raise ValueError(f"blocks: line for block {index} lists {len(addrs)} addresses, not {n}")
        result[index] = Block(index, start, end, addrs, count, taken, fell)
    return result


def parse_segments(text: str) -> list[dict[int, tuple[int, int, int]]]:
    """The plugin's ``segments=`` file: at each mark k, block index -> (count, taken, fell) since
    the mark before (mark 0's: since the start)."""
    segments: list[dict[int, tuple[int, int, int]]] = []
    for line in text.split("\n"):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "mark":
            if int(parts[1]) != len(segments):
                raise ValueError(f"segments: mark {parts[1]} out of order")
            segments.append({})
        else:
            segments[-1][int(parts[0])] = (int(parts[1]), int(parts[2]), int(parts[3]))
    return segments


def block_runs(blocks: dict[int, Block]):
    return [(b.addrs, b.count, b.taken, b.fell) for b in blocks.values()]


def segment_runs(blocks: dict[int, Block], segment: dict[int, tuple[int, int, int]]):
    return [(blocks[i].addrs, *counts) for i, counts in segment.items()]


def branch_counts(blocks: dict[int, Block], addr: int) -> tuple[int, int]:
    """(taken, fell) of the branch at ``addr``: the blocks it ends, summed."""
    taken = fell = 0
    for b in blocks.values():
        if b.addrs and b.addrs[-1] == addr:
            taken += b.taken
            fell += b.fell
    return taken, fell


# ---------------------------------------------------------------- engines on QEMU

@dataclass(frozen=True)
class Estimate:
    """One inference's instructions and estimated cycles, in all and per function."""
    instructions: int
    cycles: int
    instructions_by_function: dict[str, int]
    cycles_by_function: dict[str, int]
    table: Table
    unknown: int  # instructions the rules priced as plain ALU ones (not classified)


def estimate_inference(elf, sample_payload: bytes, cpu: str) -> Estimate:
    """Instructions and cycles of one inference: as ``qemu.instructions_per_inference``, a run with
    two copies of the sample less a run with one, by function, the harness's left out; the
    instruction counts are the same as that function's."""
    from . import qemu
    funcs = qemu.functions(elf.path, elf.prefix)
    est = Estimator.for_elf(elf.path, cpu)
    results = []
    for payload in (sample_payload, sample_payload * 2):
        run = qemu.run(elf, payload, count=True, blocks=True)
        results.append((qemu.per_function(run.histogram, funcs),
                        qemu.per_function(est.by_address(block_runs(run.blocks)), funcs)))
    (i1, c1), (i2, c2) = results
    instr = {k: i2.get(k, 0) - i1.get(k, 0) for k in i2 if not qemu.is_harness(k)}
    cyc = {k: c2.get(k, 0) - c1.get(k, 0) for k in c2 if not qemu.is_harness(k)}
    instr = {k: v for k, v in instr.items() if v}
    cyc = {k: v for k, v in cyc.items() if v}
    return Estimate(sum(instr.values()), sum(cyc.values()), instr, cyc, est.table, len(est.unknown))


def layer_profile(dep, sample) -> tuple[list[int], list[int]]:
    """Instructions and estimated cycles of each layer of one inference, between the marks the
    engine built with INFERENCE_PROFILE passes before its first layer and after every layer
    (as ``qemu.instructions_per_layer``; the same instruction counts)."""
    from . import qemu
    from .verify import samples_payload
    qemu.require_board_tools(dep.backend)
    elf = qemu.build_elf(dep, profile=True)
    hook = next((start for start, _, name in qemu.functions(elf.path, elf.prefix) if name == "inference_trace"), None)
    if hook is None:
        raise qemu.QemuError("the profiling build has no inference_trace mark")
    run = qemu.run(elf, samples_payload(dep.graph, [sample]), count=True, mark=hook, blocks=True)
    layers = len(dep.graph.layers)
    if len(run.marks) != layers + 1 or len(run.segments) != layers + 1:
        raise qemu.QemuError(f"expected {layers + 1} marks, one before and one after each layer, "
                             f"not {len(run.marks)}")
    instructions = [b - a for a, b in zip(run.marks, run.marks[1:])]
    est = Estimator.for_elf(elf.path, dep.backend.cpu)
    cycles = []
    for k, segment in enumerate(run.segments[1:]):
        counted = sum(len(run.blocks[i].addrs) * c for i, (c, _, _) in segment.items())
        if counted != instructions[k]:
            raise qemu.QemuError(f"layer {k}: the blocks account for {counted} instructions, the marks "
                                 f"{instructions[k]}")
        cycles.append(est.total(segment_runs(run.blocks, segment)))
    return instructions, cycles


def available(backend) -> bool:
    """Whether cycles can be estimated for ``backend``'s engines: a timing table for its core and
    the disassembler."""
    import shutil
    return has_table(backend.cpu) and shutil.which(OBJDUMP) is not None


def milliseconds(cycles: int, clock_mhz: float | None) -> float | None:
    return None if not clock_mhz else cycles / (clock_mhz * 1000.0)


def clock_for(backend, given: float | None) -> tuple[float | None, str | None]:
    """The clock milliseconds are given at: --clock, else the preset's; and where it comes from."""
    if given is not None:
        return given, "--clock"
    if backend.clock_mhz:
        return backend.clock_mhz, f"the {backend.name} preset"
    return None, None


def timing_fields(cycles: int, dep, given_clock: float | None) -> dict:
    """``deploy verify --qemu``'s cycle fields: the estimate, per MAC, the clock and where it comes
    from, the milliseconds at it (None without a clock), and the model with what it leaves out."""
    table = load_table(dep.backend.cpu)
    clock, source = clock_for(dep.backend, given_clock)
    ms = milliseconds(cycles, clock)
    return dict(estimated_cycles=cycles, cycles_per_mac=round(cycles / max(dep.macs, 1), 4), clock_mhz=clock,
                clock_source=source, estimated_ms=None if ms is None else round(ms, 4),
                cycle_model=dict(table=table.path.name, core=table.core, model=table.model, title=table.title,
                                 leaves_out=table.leaves_out, expected_error=table.expected_error))


def timing_text(result: dict) -> str:
    """The estimate in words, for ``deploy verify --qemu``: cycles, milliseconds at the clock (or
    which clock is missing), and a line on what the estimate leaves out."""
    model = result["cycle_model"]
    head = f"estimated {result['estimated_cycles']:,} cycles per inference ({result['cycles_per_mac']:.2f} per MAC)"
    if result.get("estimated_ms") is not None:
        head += f", {result['estimated_ms']:.3f} ms at {result['clock_mhz']:g} MHz ({result['clock_source']})"
    else:
        head += f"; no clock for target '{result['target']}': --clock MHz gives milliseconds"
    return (f"{head}\n"
            f"cycle model: {model['table']} ({model['title']}); leaves out {model['leaves_out']}; "
            f"{model['expected_error']}")
