"""Cycles of Cortex-M code, estimated from the instructions it executes: the Arm cores' rules.

Each instruction is classified from the ELF's disassembly (``arm-none-eabi-objdump``;
``-marmv8.1-m.main`` on the M55 so that Helium instructions read as VLDRB/VMLADAVA, not LDC/CDP),
and the core's timing table (backends/timing/<core>.toml: every figure with the manual, table or
section it comes from) prices it:

* ``in-order`` (M4, M33): each instruction's cycles from the table, with the interactions the
  Cortex-M4 manual states between neighbours in a block: an LDR or STR right after an LDR is
  pipelined (one cycle) unless the LDR's result forms its address; a load or store whose address
  the preceding data-processing instruction computed stalls a cycle; LDM/STM/PUSH/POP 1 + N;
  an IT after a 16-bit instruction folds; an FP result used by the next instruction costs one
  more. A branch costs its refill P only when it is taken, from the block's taken count.
* ``in-order+mve`` (M55): the same, and a Helium instruction two cycles (four beats, two a cycle),
  one when the instruction before it is a Helium instruction on another pipe (beats overlap);
  a taken LE costs nothing (low-overhead loop), its exit one cycle.
* ``dual-issue`` (M7): in-order issue of up to two instructions a cycle when the pair fits the
  pipes (:func:`m7_block`), operands waited for by latency, branches predicted by the static
  rule "backward taken, forward not".

Every figure applies inside one translated block (whose instructions run back to back: QEMU
ends a block at every branch, and at a page's end, where neighbours' effects are lost); a
block's cycles are a fixed cost per execution plus a cost per taken and per fall-through exit,
so the estimate of a trace is exact, deterministic and additive: per function, per layer
(between the engine's marks) and per inference add up. What it leaves out (wait states,
caches, bus contention...) and how far off it may be each table says, and :func:`timing_text`
with the estimate.
"""
from __future__ import annotations

import functools
import math
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

TIMING_DIR = Path(__file__).resolve().parent / "timing"
OBJDUMP = "arm-none-eabi-objdump"
# objdump's default for an ELF whose attributes say v8.1-M reads MVE as coprocessor instructions
OBJDUMP_ARCH = {"cortex-m55": "-marmv8.1-m.main"}


# ---------------------------------------------------------------- the timing tables

@dataclass(frozen=True)
class Figure:
    cycles: int
    source: str
    note: str = ""


@dataclass(frozen=True)
class Table:
    """A core's timing table (backends/timing/<core>.toml), with what it inherits."""
    core: str
    title: str
    model: str  # "in-order" | "in-order+mve" | "dual-issue"
    figures: dict[str, Figure]
    sources: tuple[str, ...]
    leaves_out: str
    expected_error: str
    path: Path

    def __getitem__(self, key: str) -> int:
        return self.figures[key].cycles

    def get(self, key: str, default: int) -> int:
        figure = self.figures.get(key)
        return default if figure is None else figure.cycles


def table_path(cpu: str) -> Path:
    return TIMING_DIR / f"{cpu.replace('-', '_')}.toml"


@functools.lru_cache(maxsize=None)
def load_table(cpu: str) -> Table:
    """The timing table of ``cpu`` (a Backend's ``cpu``, e.g. "cortex-m4")."""
    path = table_path(cpu)
    if not path.is_file():
        raise KeyError(f"no timing table for {cpu} ({path.name} in {TIMING_DIR})")
    data = tomllib.loads(path.read_text())
    figures: dict[str, Figure] = {}
    if "inherits" in data:
        figures.update(load_table(data["inherits"].replace("_", "-")).figures)
    for key, value in data.get("cycles", {}).items():
        figures[key] = Figure(int(value["cycles"]), value["source"], value.get("note", ""))
    return Table(data["core"], data["title"], data["model"], figures, tuple(data["sources"]), data["leaves_out"],
                 data["expected_error"], path)


def has_table(cpu: str | None) -> bool:
    return cpu is not None and table_path(cpu).is_file()


# ---------------------------------------------------------------- disassembly

@dataclass(frozen=True)
class Insn:
    addr: int
    size: int  # bytes: 2 or 4
    mnemonic: str  # as objdump prints it (ldr.w, bne.n, vldrb.u8...)
    operands: str  # without objdump's comments


_LINE = re.compile(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{4}\s?){1,2})\s+(\S+)\s*(.*)$")


def parse_objdump(text: str) -> dict[int, Insn]:
    """Address -> instruction, from ``objdump -d`` output (literal pools' ``.word`` left out)."""
    result = {}
    for line in text.split("\n"):
        m = _LINE.match(line)
        if m is None or m.group(3).startswith("."):
            continue
        operands = m.group(4).split("@")[0].split(";")[0].strip()
        result[int(m.group(1), 16)] = Insn(int(m.group(1), 16), 2 * len(m.group(2).split()), m.group(3), operands)
    return result


def disassemble(elf: Path, cpu: str | None) -> dict[int, Insn]:
    """The ELF's instructions by address (``arm-none-eabi-objdump -d``)."""
    stat = Path(elf).stat()
    return _disassemble(str(elf), stat.st_mtime_ns, stat.st_size, cpu)


@functools.lru_cache(maxsize=16)
def _disassemble(elf: str, mtime: int, size: int, cpu: str | None) -> dict[int, Insn]:
    arch = [OBJDUMP_ARCH[cpu]] if cpu in OBJDUMP_ARCH else []
    proc = subprocess.run([OBJDUMP, "-d", *arch, elf], capture_output=True, text=True, check=True)
    return parse_objdump(proc.stdout)


# ---------------------------------------------------------------- classification

CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al")

MOVES = {"mov", "movw", "mvn", "neg", "rev", "rev16", "revsh", "rbit", "clz", "sxtb", "sxth", "uxtb", "uxth",
         "sxtb16", "uxtb16", "ssat", "usat", "ssat16", "usat16", "ubfx", "sbfx", "adr", "cpy", "rrx", "cset",
         "csetm"}
READS_DEST = {"movt", "bfi", "bfc"}  # write part of their destination
COMPARES = {"cmp", "cmn", "tst", "teq"}
DATA = {"add", "addw", "adc", "sub", "subw", "sbc", "rsb", "and", "orr", "orn", "eor", "bic", "lsl", "lsr", "asr",
        "ror", "sxtab", "sxtah", "sxtab16", "uxtab", "uxtah", "uxtab16", "pkhbt", "pkhtb", "sel", "usad8",
        "qadd", "qsub", "qdadd", "qdsub", "qadd8", "qadd16", "qsub8", "qsub16", "qasx", "qsax", "sadd8", "sadd16",
        "ssub8", "ssub16", "sasx", "ssax", "shadd8", "shadd16", "shsub8", "shsub16", "shasx", "shsax", "uadd8",
        "uadd16", "usub8", "usub16", "uasx", "usax", "uhadd8", "uhadd16", "uhsub8", "uhsub16", "uhasx", "uhsax",
        "uqadd8", "uqadd16", "uqsub8", "uqsub16", "uqasx", "uqsax", "csel", "csinc", "csinv", "csneg", "cinc",
        "cinv", "cneg", "usada8"}
LONG_SHIFTS = {"asrl", "lsll", "lsrl", "sqrshrl", "srshrl", "sqshll", "uqrshll", "urshrl", "uqshll"}  # RdaLo, RdaHi
SCALAR_SHIFTS = {"sqrshr", "srshr", "sqshl", "uqrshl", "urshr", "uqshl"}  # Rda
SIMD = {"sxtb", "sxth", "uxtb", "uxth", "sxtb16", "uxtb16", "sxtab", "sxtah", "sxtab16", "uxtab", "uxtah", "uxtab16",
        "pkhbt", "pkhtb", "ssat", "usat", "ssat16", "usat16", "sel", "usad8", "usada8", "rev", "rev16", "revsh", "rbit",
        "ubfx", "sbfx", "bfi", "bfc", "clz"} | {m for m in DATA if m[0] in "qsu" and m[-1] in "68x"}
SATURATING = {"qadd", "qsub", "qdadd", "qdsub", "qadd8", "qadd16", "qsub8", "qsub16", "qasx", "qsax", "uqadd8",
              "uqadd16", "uqsub8", "uqsub16", "uqasx", "uqsax", "ssat", "usat", "ssat16", "usat16", "usad8", "usada8"}
MULTIPLIES = {"mul", "mla", "mls", "smmul", "smmulr", "smmla", "smmlar", "smmls", "smmlsr", "smlabb", "smlabt",
              "smlatb", "smlatt", "smlawb", "smlawt", "smlad", "smladx", "smlsd", "smlsdx", "smulbb", "smulbt",
              "smultb", "smultt", "smulwb", "smulwt", "smuad", "smuadx", "smusd", "smusdx"}
LONG_MULTIPLIES = {"smull", "umull"}  # RdLo, RdHi written
LONG_ACCUMULATES = {"smlal", "umlal", "umaal", "smlald", "smlaldx", "smlsld", "smlsldx", "smlalbb", "smlalbt",
                    "smlaltb", "smlaltt"}  # RdLo, RdHi read and written
ACCUMULATE4 = {"mla", "mls", "smmla", "smmlar", "smmls", "smmlsr", "smlabb", "smlabt", "smlatb", "smlatt", "smlawb",
               "smlawt", "smlad", "smladx", "smlsd", "smlsdx"}  # the fourth operand accumulates
DIVIDES = {"sdiv", "udiv"}
LOADS = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrt", "ldrbt", "ldrht", "ldrsbt", "ldrsht", "ldrex", "ldrexb",
         "ldrexh", "lda", "ldab", "ldah", "ldaex", "ldaexb", "ldaexh"}
NARROW_LOADS = {"ldrb", "ldrh", "ldrsb", "ldrsh", "ldrbt", "ldrht", "ldrsbt", "ldrsht", "ldrexb", "ldrexh", "ldrex",
                "ldab", "ldah", "ldaexb", "ldaexh"}
STORES = {"str", "strb", "strh", "strt", "strbt", "strht", "strex", "strexb", "strexh", "stl", "stlb", "stlh",
          "stlex", "stlexb", "stlexh"}
DOUBLES = {"ldrd", "strd", "ldaexd", "stlexd"}
MULTIPLE_LOADS = {"ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "pop"}
MULTIPLE_STORES = {"stm", "stmia", "stmea", "stmdb", "stmfd", "push"}
BRANCHES = {"b", "bl", "bx", "blx", "cbz", "cbnz", "tbb", "tbh", "bxns", "blxns"}
LOOPS = {"le", "letp", "dls", "dlstp", "wls", "wlstp", "lctp"}
HINTS = {"nop", "yield", "sev", "wfe", "wfi", "pld", "pldw", "pli", "bf", "bfx", "bfl", "bflx", "bfcsel", "esb",
         "csdb"}
BARRIERS = {"dmb", "dsb", "isb"}
SYSTEM = {"mrs", "msr", "cpsid", "cpsie", "svc", "bkpt", "udf", "clrex", "sg", "tt", "ttt", "tta", "ttat",
          "vlldm", "vlstm", "clrm", "vscclrm", "hlt"}
FP_ALU = {"vadd", "vsub", "vmul", "vnmul", "vabs", "vneg", "vcmp", "vcmpe", "vcvt", "vcvtr", "vcvta", "vcvtn",
          "vcvtp", "vcvtm", "vcvtb", "vcvtt", "vrintr", "vrintz", "vrintx", "vrinta", "vrintn", "vrintp", "vrintm",
          "vseleq", "vselge", "vselgt", "vselvs", "vmaxnm", "vminnm", "vins", "vmovx"}
FP_MAC = {"vmla", "vmls", "vnmla", "vnmls", "vfma", "vfms", "vfnma", "vfnms"}
FP_DIV = {"vdiv", "vsqrt"}
FP_MULTIPLE = {"vldm", "vldmia", "vldmdb", "vstm", "vstmia", "vstmdb", "vpush", "vpop"}
FP_MOVES = {"vmov", "vmrs", "vmsr"}
MVE_ONLY = {"vctp", "vpst", "vpnot", "vpt", "vpte", "vptt", "vptee", "vptet", "vptte", "vpttt", "vpteee",
            "vpteet", "vptete", "vptett", "vpttee", "vpttet", "vpttte", "vptttt", "vpstt", "vpste", "vpsttt",
            "vpstee", "vpstet", "vpstte", "vpsttte", "vpstttt", "vpsteee"}
MVE_LS = re.compile(r"^v(ldr|str)[bhwd]$|^v(ld|st)[24][0-3]$")
MVE_MUL = re.compile(r"^v(q?r?d?ml[as]|q?r?d?mul|mull|qdmull|vmlav|addv|addva|addlv|addlva|cmp|pt|fma|fms|cvt|"
                     r"rint|maxnm|minnm|cmul|cmla|r?mlaldavh|r?mlsldavh)")
PREDICATE_SUFFIX = re.compile(r"^(v\w+?)[te]$")
FLAG_BASES = DATA | MOVES | READS_DEST | MULTIPLIES | LONG_MULTIPLIES | LONG_ACCUMULATES | {"movt"}
ALL_BASES = sorted(MOVES | READS_DEST | COMPARES | DATA | LONG_SHIFTS | SCALAR_SHIFTS | MULTIPLIES | LONG_MULTIPLIES
                   | LONG_ACCUMULATES | DIVIDES | LOADS | STORES | DOUBLES | MULTIPLE_LOADS | MULTIPLE_STORES | BRANCHES
                   | LOOPS | HINTS | BARRIERS | SYSTEM | {"movt", "it"}, key=len, reverse=True)

_REG_ALIASES = {"sb": "r9", "sl": "r10", "fp": "r11", "ip": "r12", "sp": "r13", "lr": "r14", "pc": "r15"}
_REG = re.compile(r"\b(r1[0-5]|r[0-9]|sb|sl|fp|ip|sp|lr|pc|apsr_nzcv|s[0-9]+|d[0-9]+|q[0-7])\b")
_RANGE = re.compile(r"\b([rsdq])(\d+)\s*-\s*[rsdq]?(\d+)\b")
_TARGET = re.compile(r"\b([0-9a-f]+)\s+<")
_SHIFTED = re.compile(r",\s*(lsl|lsr|asr|ror)\s+(#|r|ip|sl|fp|lr|sb)|,\s*rrx\b")


def registers(text: str) -> frozenset[str]:
    """Register names in ``text`` as canonical units: r0..r15 for the core registers, s0..s31 for
    the FP/vector registers (a d register is two, a q register four), ranges ({d8-d15}) expanded."""
    text = _RANGE.sub(lambda m: ", ".join(f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)),
                      text)
    result = set()
    for name in _REG.findall(text):
        if name == "apsr_nzcv":
            continue
        name = _REG_ALIASES.get(name, name)
        kind, n = name[0], int(name[1:])
        if kind == "r":
            result.add(f"r{n}")
        elif kind == "s":
            result.add(f"s{n}")
        elif kind == "d":
            result.update((f"s{2 * n}", f"s{2 * n + 1}"))
        else:
            result.update(f"s{4 * n + i}" for i in range(4))
    return frozenset(result)


def split_operands(text: str) -> list[str]:
    """Top-level comma-separated operands (a [..] address or {..} list stays one)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def split_mnemonic(mnemonic: str) -> tuple[str, bool, bool, str]:
    """(base, sets flags, conditional, data type): ``addseq.w`` -> ("add", True, True, ""),
    ``vldrb.u8`` -> ("vldrb", False, False, "u8"), ``bne.n`` -> ("b", False, True, "")."""
    name, _, dtype = mnemonic.lower().partition(".")
    if dtype in ("w", "n"):
        dtype = ""
    elif dtype.endswith((".w", ".n")):
        dtype = dtype[:-2]
    if name.startswith("v"):
        return name, False, False, dtype
    if re.fullmatch(r"it[te]{0,3}", name):
        return "it", False, False, ""
    for base in ALL_BASES:
        if not name.startswith(base):
            continue
        rest = name[len(base):]
        flags = False
        if rest.startswith("s") and base in FLAG_BASES and (rest == "s" or rest[1:] in CONDITIONS):
            flags, rest = True, rest[1:]
        if rest == "":
            return base, flags, False, dtype
        if rest in CONDITIONS:
            return base, flags, True, dtype
    return name, False, False, dtype


@dataclass(frozen=True)
class Op:
    """One instruction as the timing rules see it."""
    addr: int
    size: int
    text: str  # "mnemonic operands", for messages
    kind: str  # alu, mul, div, load, store, double, multiple, branch, loop, it, nop, barrier, system,
    #            fp_alu, fp_mac, fp_div, fp_move, fp_load, fp_store, fp_multiple, mve, mve_predicate, unknown
    base: str = ""
    conditional: bool = False
    reads: frozenset = frozenset()
    writes: frozenset = frozenset()
    loaded: frozenset = frozenset()  # registers a load fills (not its base's writeback)
    address: frozenset = frozenset()  # registers that form a load's or store's address
    accumulator: frozenset = frozenset()  # a multiply-accumulate's accumulator
    shifted: bool = False  # an operand goes through the shifter (M7: one early shifter)
    words: int = 0  # LDM/STM/PUSH/POP/VLDM...: the words moved
    registers: int = 0  # LDM/STM/PUSH/POP: N, the registers in the list
    branch: str = ""  # direct, indirect, table (TBB/TBH), loop_end, loop_start
    target: int | None = None  # a direct branch's target
    writes_pc: bool = False
    narrow: bool = False  # a byte/halfword load (M7 latency)
    fp64: bool = False
    pipe: str = ""  # mve: ls, int, mul

    @property
    def memory(self) -> bool:
        return self.kind in ("load", "store", "double", "multiple", "fp_load", "fp_store", "fp_multiple")


def _address(operands: list[str]) -> tuple[frozenset, bool]:
    """An addressing operand's registers, and whether it writes its base back ([rn, #4]! or a
    post-index [rn], #4)."""
    mem = next((o for o in operands if o.startswith("[")), "")
    writeback = mem.endswith("!") or (mem != "" and operands[-1] is not mem and not operands[-1].startswith("["))
    return registers(mem.rstrip("!")), writeback


def _base_register(mem: str) -> frozenset:
    regs = registers(mem.split(",")[0])
    return regs


def classify(insn: Insn) -> Op:
    """``insn`` as the timing rules see it: its class, the registers it reads and writes, what
    forms its address, and for branches their kind and target."""
    base, _, cond, dtype = split_mnemonic(insn.mnemonic)
    ops_text = insn.operands
    operands = split_operands(ops_text)
    regs = registers(ops_text)
    text = f"{insn.mnemonic} {ops_text}".strip()
    common = dict(addr=insn.addr, size=insn.size, text=text, base=base, conditional=cond)
    target_m = _TARGET.search(ops_text)
    target = int(target_m.group(1), 16) if target_m else None

    if base.startswith("v"):
        return _classify_vector(insn, base, dtype, operands, regs, common)
    if base == "it":
        return Op(kind="it", **common)
    if base in HINTS:
        return Op(kind="nop", **common)
    if base in BARRIERS:
        return Op(kind="barrier", **common)
    if base in SYSTEM:
        return Op(kind="system", reads=regs, **common)
    if base in BRANCHES:
        if base in ("b", "bl"):
            return Op(kind="branch", branch="direct", target=target, writes=frozenset({"r14"}) if base == "bl"
                      else frozenset(), writes_pc=True, **common)
        if base in ("cbz", "cbnz"):
            return Op(kind="branch", branch="direct", target=target, reads=registers(operands[0]), writes_pc=True,
                      **common)
        if base in ("tbb", "tbh"):
            return Op(kind="branch", branch="table", reads=regs, address=regs, writes_pc=True, **common)
        return Op(kind="branch", branch="indirect", reads=regs,
                  writes=frozenset({"r14"}) if base.startswith("blx") else frozenset(), writes_pc=True, **common)
    if base in LOOPS:
        if base in ("le", "letp"):
            return Op(kind="loop", branch="loop_end", target=target, reads=frozenset({"r14"}),
                      writes=frozenset({"r14"}), writes_pc=True, **common)
        if base == "lctp":
            return Op(kind="alu", **common)
        wls = base.startswith("wls")
        return Op(kind="loop", branch="loop_start" if not wls else "direct", target=target if wls else None,
                  reads=registers(operands[1]) if len(operands) > 1 else frozenset(), writes=frozenset({"r14"}),
                  writes_pc=wls, **common)
    if base in LOADS or base in STORES:
        load = base in LOADS
        address, writeback = _address(operands)
        base_reg = _base_register(next((o for o in operands if o.startswith("[")), ""))
        if base.startswith(("strex", "stlex")):  # STREX Rd, Rt, [Rn]: Rd the status
            data, status = registers(operands[1]), registers(operands[0])
        else:
            data, status = registers(operands[0]), frozenset()
        back = base_reg if writeback else frozenset()
        pc = "r15" in data and load
        if load:
            kind = "branch" if pc else "load"
            return Op(kind=kind, branch="indirect" if pc else "", reads=address, writes=(data | back) - {"r15"},
                      loaded=data - {"r15"}, address=address - {"r15"}, writes_pc=pc, narrow=base in NARROW_LOADS,
                      **common)
        # STR with a register offset: DDI 0439D 3.3.2 treats it apart from STR Rx,[Ry,#imm]
        offset_reg = len(address) > 1 or (writeback and not operands[-1].startswith(("[", "#")) and
                                          bool(registers(operands[-1])))
        return Op(kind="store", reads=data | address, writes=back | status, address=address - {"r15"},
                  shifted=offset_reg, **common)
    if base in DOUBLES:
        address, writeback = _address(operands)
        base_reg = _base_register(next((o for o in operands if o.startswith("[")), ""))
        back = base_reg if writeback else frozenset()
        data = registers(",".join(operands[:2]))
        if base.startswith("ld"):
            return Op(kind="double", reads=address, writes=data | back, loaded=data, address=address - {"r15"},
                      words=2, **common)
        return Op(kind="double", reads=data | address, writes=back, address=address - {"r15"}, words=2, **common)
    if base in MULTIPLE_LOADS or base in MULTIPLE_STORES:
        listed = registers(next((o for o in operands if o.startswith("{")), ""))
        if base in ("push", "pop"):
            rn, writeback = frozenset({"r13"}), True
        else:
            rn, writeback = registers(operands[0].rstrip("!")), operands[0].endswith("!")
        back = rn if writeback else frozenset()
        n = len(listed)
        if base in MULTIPLE_LOADS:
            pc = "r15" in listed
            return Op(kind="branch" if pc else "multiple", branch="indirect" if pc else "", reads=rn,
                      writes=(listed | back) - {"r15"},
                      loaded=listed - {"r15"}, address=rn, words=n, registers=n, writes_pc=pc, **common)
        return Op(kind="multiple", reads=listed | rn, writes=back, address=rn, words=n, registers=n, **common)
    if base in DIVIDES:
        return Op(kind="div", reads=registers(",".join(operands[1:])), writes=registers(operands[0]), **common)
    if base in MULTIPLIES or base in LONG_MULTIPLIES or base in LONG_ACCUMULATES:
        if base in LONG_MULTIPLIES:
            return Op(kind="mul", reads=registers(",".join(operands[2:])), writes=registers(",".join(operands[:2])),
                      **common)
        if base in LONG_ACCUMULATES:
            pair = registers(",".join(operands[:2]))
            return Op(kind="mul", reads=pair | registers(",".join(operands[2:])), writes=pair, accumulator=pair,
                      **common)
        dest = registers(operands[0])
        sources = operands[1:] if len(operands) > 1 else []
        reads = registers(",".join(sources)) | (dest if len(sources) == 1 else frozenset())
        acc = registers(operands[3]) if base in ACCUMULATE4 and len(operands) > 3 else frozenset()
        return Op(kind="mul", reads=reads, writes=dest, accumulator=acc, **common)
    if base in LONG_SHIFTS:
        pair = registers(",".join(operands[:2]))
        return Op(kind="alu", reads=regs, writes=pair, shifted=True, **common)
    if base in SCALAR_SHIFTS:
        return Op(kind="alu", reads=regs, writes=registers(operands[0]), shifted=True, **common)
    if base in COMPARES:
        return Op(kind="alu", reads=regs, shifted=bool(_SHIFTED.search(ops_text)), **common)
    if base in MOVES or base in READS_DEST or base in DATA or base == "movt":
        dest = registers(operands[0]) if operands else frozenset()
        sources = operands[1:]
        reads = registers(",".join(sources))
        if base in READS_DEST or (base in DATA and len(sources) == 1):
            reads |= dest
        shifted = bool(_SHIFTED.search(ops_text)) or (base in ("lsl", "lsr", "asr", "ror") and
                                                       len(sources) >= 1 and bool(registers(sources[-1])))
        pc = "r15" in dest
        if pc:
            return Op(kind="branch", branch="indirect", reads=reads, writes_pc=True, **common)
        return Op(kind="alu", reads=reads - {"r15"}, writes=dest, shifted=shifted, **common)
    return Op(kind="unknown", reads=regs, **common)


def _classify_vector(insn: Insn, base: str, dtype: str, operands: list[str], regs: frozenset, common: dict) -> Op:
    """VFP and Helium (MVE) instructions."""
    has_q = any(re.match(r"q[0-7]\b", o) for o in operands)
    stem = base
    m = PREDICATE_SUFFIX.match(base)
    if m and (has_q or m.group(1) in ("vldrb", "vldrh", "vldrw", "vldrd", "vstrb", "vstrh", "vstrw", "vstrd")):
        stem = m.group(1)  # a VPT-predicated instruction: vldrbt, vmlavat...
    if stem in MVE_ONLY or stem.startswith(("vpt", "vpst")) or stem in ("vctp",):
        return Op(kind="mve_predicate", reads=regs, **common)
    if has_q or MVE_LS.match(stem) or stem in ("vmlav", "vmladav", "vmlava", "vmladava"):
        if MVE_LS.match(stem):
            pipe = "ls"
        elif MVE_MUL.match(stem) or (stem in ("vadd", "vsub", "vabs", "vneg", "vabd", "vmov")
                                     and dtype.startswith("f")):
            pipe = "mul"
        elif stem == "vmov" and "#" in insn.operands:
            pipe = "mul"  # MVE_VMOVimm on the float/mul pipe
        else:
            pipe = "int"
        mem = next((o for o in operands if o.startswith("[")), "")
        return Op(kind="mve", pipe=pipe, reads=regs, writes=registers(operands[0]) if operands else frozenset(),
                  address=registers(mem) - {"r15"}, **common)
    doubles = any(re.match(r"d\d+$", o) for o in operands)
    fp64 = "f64" in dtype.split(".") or (doubles and stem in (FP_ALU | FP_MAC | FP_DIV))
    dest = registers(operands[0]) if operands else frozenset()
    sources = registers(",".join(operands[1:]))
    if stem in FP_MAC:
        return Op(kind="fp_mac", reads=sources | dest, writes=dest, accumulator=dest, fp64=fp64, **common)
    if stem in FP_DIV:
        return Op(kind="fp_div", reads=sources, writes=dest, fp64=fp64, **common)
    if stem in FP_ALU:
        if stem in ("vcmp", "vcmpe"):
            return Op(kind="fp_alu", reads=regs, fp64=fp64, **common)
        return Op(kind="fp_alu", reads=sources, writes=dest, fp64=fp64, **common)
    if stem in ("vldr", "vstr"):
        address, writeback = _address(operands)
        double = any(re.match(r"d\d+$", o) for o in operands[:1])
        if stem == "vldr":
            return Op(kind="fp_load", reads=address, writes=dest, loaded=dest, address=address - {"r15"},
                      fp64=double, **common)
        return Op(kind="fp_store", reads=dest | address, address=address - {"r15"}, fp64=double, **common)
    if stem in FP_MULTIPLE:
        listed = registers(next((o for o in operands if o.startswith("{")), ""))
        rn = frozenset({"r13"}) if stem in ("vpush", "vpop") else registers(operands[0].rstrip("!"))
        loads = stem in ("vldm", "vldmia", "vldmdb", "vpop")
        double = bool(re.search(r"\bd\d+", next((o for o in operands if o.startswith("{")), "")))
        return Op(kind="fp_multiple", reads=rn if loads else listed | rn, writes=(listed | rn) if loads else rn,
                  loaded=listed if loads else frozenset(), address=rn, words=len(listed), registers=len(listed),
                  fp64=double, **common)
    if stem in FP_MOVES:
        if stem in ("vmrs", "vmsr"):
            return Op(kind="fp_move", reads=sources, writes=dest, **common)
        core = [o for o in operands if re.match(r"(r\d+|sb|sl|fp|ip|sp|lr|pc)$", o)]
        half = any("[" in o for o in operands)
        kind = "fp_move_half" if half else "fp_move_core" if core else "fp_alu"
        return Op(kind=kind, reads=sources, writes=dest, **common)
    return Op(kind="unknown", reads=regs, **common)


# ---------------------------------------------------------------- the cores' rules

@dataclass(frozen=True)
class BlockCost:
    """A block's cycles: ``per_insn`` each execution (by instruction), and the last instruction's
    extra per taken and per fall-through exit."""
    per_insn: tuple[int, ...]
    taken: int
    fell: int


DATA_PROCESSING = ("alu", "mul")
FP_ARITHMETIC = ("fp_alu", "fp_mac", "fp_div")


def _fp_cost(op: Op, t: Table) -> int:
    if op.kind == "fp_alu":
        return t.get("fp64", t["fp_alu"]) if op.fp64 else t["fp_alu"]
    if op.kind == "fp_mac":
        return t.get("fp64_mac", t["fp_mac"]) if op.fp64 else t["fp_mac"]
    if op.kind == "fp_div":
        return t.get("fp64_div", t["fp_div"]) if op.fp64 else t["fp_div"]
    raise AssertionError(op.kind)


def _fp64_mul(op: Op) -> bool:
    return op.fp64 and op.base in ("vmul", "vnmul")


def base_cost(op: Op, t: Table) -> int:
    """An instruction's cycles on an in-order core (M4 table), before its neighbours' effects
    and without a branch's refill."""
    kind = op.kind
    if kind in ("alu", "unknown"):
        return t["alu"]
    if kind == "mul":
        return t["mul"]
    if kind == "div":
        return t["div"]
    if kind == "load":
        return t["load"]
    if kind == "store":
        return t["store_reg"] if op.shifted else t["store_imm"]
    if kind == "double":
        return t["load_store_double"]
    if kind == "multiple":
        return t["multiple_base"] + t["multiple_per_register"] * op.registers
    if kind == "branch":
        if op.branch == "table":
            return t["table_branch"]
        if op.base.startswith("ldr"):
            return t["load"]  # LDR PC: 2 + P
        if op.registers:
            return t["multiple_base"] + t["multiple_per_register"] * op.registers  # POP {..,PC}: 1 + N + P
        return t["branch"]
    if kind == "loop":
        return t.get("loop_end", t["branch"]) if op.branch == "loop_end" else t.get("loop_start", t["alu"])
    if kind == "it":
        return t["it"]
    if kind == "nop":
        return t["nop"]
    if kind == "barrier":
        return t["barrier"] + (t["refill_indirect"] if op.base == "isb" else 0)
    if kind == "system":
        return t["system"]
    if kind in FP_ARITHMETIC:
        if _fp64_mul(op):
            return t.get("fp64_mul", t["fp_alu"])
        return _fp_cost(op, t)
    if kind == "fp_move":
        return t["fp_alu"]
    if kind == "fp_move_core":
        return t["fp_move_core"]
    if kind == "fp_move_half":
        return t["fp_move_half"]
    if kind in ("fp_load", "fp_store"):
        return t["fp_load_double"] if op.fp64 else t["fp_load"]
    if kind == "fp_multiple":
        return t["fp_multiple_base"] + t["fp_multiple_per_word"] * op.words
    if kind == "mve":
        return t["mve"]
    if kind == "mve_predicate":
        return t["mve_predicate"]
    raise AssertionError(kind)


def refill(op: Op, t: Table) -> int:
    """The pipeline refill a taken branch pays (M4 table: P)."""
    return t["refill_direct"] if op.branch == "direct" else t["refill_indirect"]


def in_order_block(ops: list[Op], t: Table) -> BlockCost:
    """The Cortex-M4's rules (and the M33's, the M55's scalar ones; MVE beats with ``mve``)."""
    costs = []
    prev: Op | None = None
    for op in ops:
        c = base_cost(op, t)
        if prev is not None:
            # DDI 0439D 3.3.2: an LDR or STR after an LDR whose result does not form its address
            if op.kind in ("load", "store") and prev.kind == "load" and not (op.address & prev.loaded):
                c = min(c, t["load_pipelined"] if op.kind == "load" else t["store_pipelined"])
            # a load or store whose address the preceding data-processing instruction computed
            if op.memory and prev.kind in DATA_PROCESSING and op.address & prev.writes:
                c += t["address_stall"]
            if op.kind == "branch" and op.base.startswith(("ldr", "pop", "ldm")) and prev.kind in DATA_PROCESSING \
                    and op.address & prev.writes:
                c += t["address_stall"]
            # DDI 0439D 7.2.3: an FP result the next instruction consumes (not as a MAC's addend)
            if prev.kind in FP_ARITHMETIC and prev.writes and op.reads & prev.writes and \
                    not (op.kind == "fp_mac" and not (op.reads - op.accumulator) & prev.writes):
                c += t["fp_result_stall"]
            if op.kind == "it" and prev.size == 2:
                c = t["it_folded"]
            # Helium beats: the first half overlaps the one before on another pipe
            if op.kind == "mve" and prev.kind == "mve" and prev.pipe != op.pipe:
                c -= t["mve_overlap"]
        costs.append(c)
        prev = op
    taken, fell = 0, 0
    last = ops[-1]
    if last.kind == "loop" and last.branch == "loop_end":
        fell = t.get("loop_exit", t["branch"]) - t.get("loop_end", t["branch"])
    elif last.writes_pc or last.branch in ("direct", "indirect", "table"):
        taken = refill(last, t)
    return BlockCost(tuple(costs), taken, fell)


# ---- the M7: in-order dual issue

SINGLE_ISSUE = ("multiple", "double", "div", "system", "barrier", "fp_multiple")


def _resources(op: Op) -> dict[str, int]:
    kind = op.kind
    if kind in ("alu", "nop", "unknown", "loop"):
        return {"alu": 1, "shift": int(op.shifted or op.base in ("ssat", "usat", "sbfx", "ubfx", "pkhbt", "pkhtb"))}
    if kind == "mul":
        return {"mac": 1}
    if kind in ("load", "fp_load"):
        return {"load": 1}
    if kind in ("store", "fp_store"):
        return {"store": 1}
    if kind == "branch":
        return {"branch": 1, **({"load": 1} if op.base.startswith("ldr") else {})}
    if kind in ("fp_alu", "fp_mac", "fp_div", "fp_move", "fp_move_core", "fp_move_half"):
        return {"fp": 1}
    return {"single": 1}


def _latency(op: Op, t: Table) -> int:
    kind = op.kind
    if kind == "alu":
        return t["latency_saturating"] if op.base in SATURATING else t["latency_alu"]
    if kind == "mul":
        return t["latency_mac"]
    if kind in ("load", "double", "multiple"):
        return t["latency_load_narrow"] if op.narrow else t["latency_load"]
    if kind == "fp_load":
        return t["latency_fp_load"] + (1 if op.fp64 else 0)
    if kind == "fp_mac":
        return t["latency_fp64_mac"] if op.fp64 else t["latency_fp_mac"]
    if kind == "fp_div":
        return t["latency_fp64_div"] if op.fp64 else t["latency_fp_div"]
    if kind in ("fp_alu", "fp_move", "fp_move_core", "fp_move_half"):
        if _fp64_mul(op):
            return t["latency_fp64_mul"]
        return t["latency_fp64"] if op.fp64 else t["latency_fp"]
    if kind == "div":
        return t["div"]
    return t["latency_alu"]


def _issue_cycles(op: Op, t: Table) -> int:
    if op.kind in ("multiple", "fp_multiple"):
        return max(1, math.ceil(op.words / t["words_per_cycle"]))
    if op.kind == "div":
        return t["div"]
    if op.kind == "branch" and op.branch == "table":
        return t["table_branch"]
    if op.kind == "branch" and op.registers:  # POP {..,PC}
        return max(1, math.ceil(op.registers / t["words_per_cycle"]))
    if op.kind == "it":
        return 0
    return t["issue"]


def _slot0_only(op: Op) -> bool:
    return (op.kind == "alu" and op.base in SIMD) or op.fp64 or op.base.startswith(("ldrex", "strex"))


def _ready_at(op: Op, ready: dict[str, int], t: Table) -> int:
    """The first cycle ``op`` can issue with its operands ready."""
    need = 0
    for r in op.reads:
        if r not in ready:  # not written in this block: ready
            continue
        at = ready[r]
        if r in op.address or (op.shifted and op.kind == "alu"):
            at += t["early_operand"]
        elif r in op.accumulator:
            at -= t["accumulator_forward"]
        elif op.kind in ("store", "fp_store", "double", "multiple") and r not in op.address:
            at -= t["late_store_data"]
        need = max(need, at)
    return need


def _pairable(a: Op, b: Op, t: Table) -> bool:
    if a.kind in SINGLE_ISSUE or b.kind in SINGLE_ISSUE or a.kind == "it" or b.kind == "it":
        return False
    if _slot0_only(b) or a.writes_pc or a.kind == "loop":
        return False
    if a.kind in ("fp_load", "fp_store") and a.fp64:  # M7LoadDP, M7StoreDP: single issue
        return False
    if a.kind == "branch" and a.branch == "table" or b.kind == "branch" and (b.branch == "table" or b.registers):
        return False
    if b.reads & a.writes or b.writes & a.writes:
        return False
    limits = {"alu": t["alu_pipes"], "load": t["load_pipes"], "store": t["store_pipes"], "mac": t["mac_pipes"],
              "fp": t["fp_pipes"], "shift": t["shifters"], "branch": 1, "single": 0}
    use: dict[str, int] = {}
    for op in (a, b):
        for k, v in _resources(op).items():
            use[k] = use.get(k, 0) + v
    return all(v <= limits[k] for k, v in use.items())


def m7_block(ops: list[Op], t: Table) -> BlockCost:
    """The Cortex-M7 approximation: in order, two instructions a cycle when they pair, each
    waiting for its operands; the cycles an instruction adds go to it (a paired younger one
    adds none). Registers are ready when the block starts."""
    ready: dict[str, int] = {}
    costs = [0] * len(ops)
    cycle = 0  # the first cycle the next instruction may issue
    i = 0
    while i < len(ops):
        a = ops[i]
        if a.kind == "it":
            i += 1
            continue
        start = max(cycle, _ready_at(a, ready, t))
        issue = _issue_cycles(a, t)
        costs[i] = start + issue - cycle
        j = i + 1
        while j < len(ops) and ops[j].kind == "it":
            j += 1
        paired = (issue == t["issue"] and j < len(ops) and _pairable(a, ops[j], t)
                  and _ready_at(ops[j], ready, t) <= start)
        for r in a.writes:
            ready[r] = start + _latency(a, t)
        if paired:
            b = ops[j]
            for r in b.writes:
                ready[r] = start + _latency(b, t)
            i = j + 1
        else:
            i += 1
        cycle = start + issue
    taken, fell = 0, 0
    last = ops[-1]
    if last.kind == "branch" and last.branch == "direct":
        if last.conditional or last.base in ("cbz", "cbnz"):
            backward = last.target is not None and last.target <= last.addr
            taken, fell = (0, t["mispredict"]) if backward else (t["mispredict"], 0)
        else:
            taken = t["predicted_taken"]
    elif last.kind == "loop" and last.branch == "direct":  # WLS: forward, predicted not taken
        taken = t["mispredict"]
    elif last.kind == "loop" and last.branch == "loop_end":
        fell = t["mispredict"]
    elif last.writes_pc:
        taken = t["mispredict"]
    return BlockCost(tuple(costs), taken, fell)


# ---------------------------------------------------------------- estimating a trace

@dataclass
class Estimator:
    """Cycles of the blocks of one ELF on one core."""
    table: Table
    insns: dict[int, Insn]
    unknown: set = field(default_factory=set)  # addresses the disassembly lacks or the rules do not know

    def __post_init__(self):
        self._ops: dict[int, Op] = {}
        self._blocks: dict[tuple[int, ...], BlockCost] = {}

    @classmethod
    def for_elf(cls, elf: Path, cpu: str) -> "Estimator":
        return cls(load_table(cpu), disassemble(elf, cpu))

    def op(self, addr: int) -> Op:
        op = self._ops.get(addr)
        if op is None:
            insn = self.insns.get(addr)
            op = classify(insn) if insn is not None else Op(addr=addr, size=2, text="?", kind="unknown")
            if op.kind == "unknown":
                self.unknown.add(addr)
            self._ops[addr] = op
        return op

    def block(self, addrs: tuple[int, ...]) -> BlockCost:
        cost = self._blocks.get(addrs)
        if cost is None:
            ops = [self.op(a) for a in addrs]
            cost = m7_block(ops, self.table) if self.table.model == "dual-issue" else in_order_block(ops, self.table)
            self._blocks[addrs] = cost
        return cost

    def by_address(self, runs) -> dict[int, int]:
        """Cycles per instruction address over ``runs``: (addrs, count, taken, fell) tuples; a
        branch's refills go to the branch."""
        result: dict[int, int] = {}
        for addrs, count, taken, fell in runs:
            if not count and not taken and not fell:
                continue
            cost = self.block(addrs)
            for a, c in zip(addrs, cost.per_insn):
                result[a] = result.get(a, 0) + count * c
            last = addrs[-1]
            result[last] = result.get(last, 0) + taken * cost.taken + fell * cost.fell
        return result

    def total(self, runs) -> int:
        return sum(self.by_address(runs).values())
