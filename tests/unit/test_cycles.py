"""The cycle estimate (backends/cortexm_timing.py, deployer/cycles.py) without QEMU: the timing
tables (every figure sourced), the disassembly reader and classifier, each core's rules on
hand-made blocks (the Cortex-M4 manual's own examples among them), the plugin's files and the estimate's additivity over a fake trace."""
from __future__ import annotations

import re

import pytest

from backends import BACKENDS
from backends import cortexm_timing as T
from deployer import cycles as C
from deployer import qemu
from deployer.profile import LayerTime, per_layer_json, per_layer_table

CORES = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55")
DOCUMENT = re.compile(r"DDI 0439D|DDI 0489F|DDI 0553|Arm 1\d{5}|ARMSchedule|ARM\.td")


def block(*lines: str, start: int = 0x100) -> list[T.Op]:
    """Ops from "mnemonic operands" lines, laid out as 32-bit instructions unless the mnemonic
    ends in .n or is a plain 16-bit-looking one given with a "/2" suffix."""
    ops, addr = [], start
    for line in lines:
        size = 2 if line.endswith("/2") else 4
        line = line.removesuffix("/2")
        mnemonic, _, operands = line.partition(" ")
        ops.append(T.classify(T.Insn(addr, size, mnemonic, operands.strip())))
        addr += size
    return ops


def m4(*lines: str, **kw) -> T.BlockCost:
    return T.in_order_block(block(*lines, **kw), T.load_table("cortex-m4"))


def m7(*lines: str, **kw) -> T.BlockCost:
    return T.m7_block(block(*lines, **kw), T.load_table("cortex-m7"))


def m55(*lines: str, **kw) -> T.BlockCost:
    return T.in_order_block(block(*lines, **kw), T.load_table("cortex-m55"))


# ---------------------------------------------------------------- tables

@pytest.mark.parametrize("core", CORES)
def test_every_figure_names_its_source(core):
    table = T.load_table(core)
    assert table.core == core and table.figures and table.leaves_out and table.expected_error
    assert all(DOCUMENT.search(s) for s in table.sources), table.sources
    for key, figure in table.figures.items():
        assert isinstance(figure.cycles, int) and figure.cycles >= 0, key
        assert DOCUMENT.search(figure.source), f"{core} {key}: {figure.source}"


def test_tables_inherit_and_every_cortex_m_target_has_one():
    m4, m33, m55 = (T.load_table(c) for c in ("cortex-m4", "cortex-m33", "cortex-m55"))
    assert m33.figures == m4.figures  # Arm publishes no M33 table: the M4's, stated
    assert all(m55.figures[k] == f for k, f in m4.figures.items()) and m55["mve"] == 2
    for backend in BACKENDS.values():
        if backend.qemu_machine:
            assert T.has_table(backend.cpu), backend.name
    with pytest.raises(KeyError, match="no timing table"):
        T.load_table("cortex-m0")


def test_the_m4_figures_are_the_manuals():
    t = T.load_table("cortex-m4")
    # DDI 0439D Table 3-1 / 3.3.2 / Table 7-1
    assert (t["alu"], t["mul"], t["load"], t["store_imm"], t["load_store_double"], t["fp_mac"], t["fp_div"]) == \
        (1, 1, 2, 1, 3, 3, 14)
    assert 1 <= t["refill_direct"] <= 3 and t["refill_indirect"] == 3


# ---------------------------------------------------------------- disassembly and classes

OBJDUMP = """
engine.elf:     file format elf32-littlearm

Disassembly of section .text:

00000348 <op2_conv_2d+0x3c>:
     348:\tf1b9 0901 \tsubs.w\tr9, r9, #1
     34c:\tf85c eb04 \tldr.w\tlr, [ip], #4
     350:\tfa2f fb8e \tsxtb16\tfp, lr
     358:\te8ba 0170 \tldmia.w\tsl!, {r4, r5, r6, r8}
     35c:\tfb2b 3304 \tsmlad\tr3, fp, r4, r3
     3b4:\td1c8      \tbne.n\t348 <op2_conv_2d+0x3c>
     3b6:\t4c52      \tldr\tr4, [pc, #328]\t@ (504 <x+0x20>)
     3b8:\t00000000 \t.word\t0x00000000
     714:\ted94 1e00 \tvldrb.u8\tq0, [r4, #0]
     72e:\teef6 8f20 \tvmlava.s8\tr8, q3, q0
     738:\tf00f c817 \tle\tlr, 70e <op11_fully_connected+0x96>
"""


def test_objdump_is_read_and_classified():
    insns = T.parse_objdump(OBJDUMP)
    assert 0x3b8 not in insns and insns[0x3b4].size == 2 and insns[0x34c].size == 4
    assert insns[0x3b6].operands == "r4, [pc, #328]"
    ops = {a: T.classify(i) for a, i in insns.items()}
    assert ops[0x348].kind == "alu" and ops[0x348].writes == {"r9"}
    ldr = ops[0x34c]  # post-index: the base written back, not loaded
    assert ldr.kind == "load" and ldr.loaded == {"r14"} and ldr.address == {"r12"} and ldr.writes == {"r14", "r12"}
    assert ops[0x350].kind == "alu" and ops[0x350].base == "sxtb16"
    assert ops[0x358].kind == "multiple" and ops[0x358].registers == 4 and ops[0x358].writes >= {"r10", "r4"}
    assert ops[0x35c].kind == "mul" and ops[0x35c].accumulator == {"r3"}
    assert ops[0x3b4].kind == "branch" and ops[0x3b4].conditional and ops[0x3b4].target == 0x348
    assert ops[0x3b6].address == frozenset()  # a literal load's address is the PC
    assert ops[0x714].kind == "mve" and ops[0x714].pipe == "ls"
    assert ops[0x72e].kind == "mve" and ops[0x72e].pipe == "mul"
    assert ops[0x738].kind == "loop" and ops[0x738].branch == "loop_end" and ops[0x738].target == 0x70e


@pytest.mark.parametrize("mnemonic,expected", [
    ("addseq.w", ("add", True, True, "")), ("bne.n", ("b", False, True, "")), ("bls", ("b", False, True, "")),
    ("bl", ("bl", False, False, "")), ("bics", ("bic", True, False, "")), ("mls", ("mls", False, False, "")),
    ("teq", ("teq", False, False, "")), ("ldrsb.w", ("ldrsb", False, False, "")),
    ("strd", ("strd", False, False, "")), ("itete", ("it", False, False, "")), ("movge.w", ("mov", False, True, "")),
    ("vldrb.u8", ("vldrb", False, False, "u8")), ("bkpt", ("bkpt", False, False, "")), ("le", ("le", False, False, "")),
])
def test_mnemonics_split(mnemonic, expected):
    assert T.split_mnemonic(mnemonic) == expected


@pytest.mark.parametrize("line,kind,extra", [
    ("pop {r4, r5, r6, pc}", "branch", dict(branch="indirect", registers=4)),
    ("push {r4, lr}", "multiple", dict(registers=2)),
    ("bx lr", "branch", dict(branch="indirect")),
    ("ldr.w pc, [sp], #4", "branch", dict(branch="indirect")),
    ("mov pc, lr", "branch", dict(branch="indirect")),
    ("tbb [pc, r3]", "branch", dict(branch="table")),
    ("cbz r3, 5e8 <f+0x10>", "branch", dict(branch="direct", target=0x5e8)),
    ("str r3, [r2, r1, lsl #2]", "store", dict(shifted=True)),
    ("str r3, [r2, #4]", "store", dict(shifted=False)),
    ("ldrd r2, r4, [sp, #8]", "double", dict(words=2)),
    ("sdiv r0, r1, r2", "div", {}),
    ("smlal r0, r1, r2, r3", "mul", dict(accumulator=frozenset({"r0", "r1"}))),
    ("vadd.f32 s0, s1, s2", "fp_alu", dict(writes=frozenset({"s0"}))),
    ("vmla.f32 s0, s1, s2", "fp_mac", dict(accumulator=frozenset({"s0"}))),
    ("vmul.f64 d0, d1, d2", "fp_alu", dict(fp64=True, writes=frozenset({"s0", "s1"}))),
    ("vmov s0, r1", "fp_move_core", {}),
    ("vldr d8, [r0, #8]", "fp_load", dict(fp64=True)),
    ("vpush {d8-d9}", "fp_multiple", dict(words=4)),
    ("vctp.8 r2", "mve_predicate", {}),
    ("vstrbt.32 q3, [r1], #4", "mve", dict(pipe="ls")),
    ("vmul.i32 q4, q4, q5", "mve", dict(pipe="mul")),
    ("vadd.i32 q4, q5, q4", "mve", dict(pipe="int")),
    ("dls lr, r3", "loop", dict(branch="loop_start")),
    ("itt eq", "it", {}),
])
def test_classify(line, kind, extra):
    (op,) = block(line)
    assert op.kind == kind, op
    for key, value in extra.items():
        assert getattr(op, key) == value, (key, op)


# ---------------------------------------------------------------- the Cortex-M4's rules

def test_m4_load_store_pairs_are_the_manuals_examples():
    """DDI 0439D 3.3.2's examples, each "normally" so many cycles in total."""
    assert sum(m4("ldr r0, [r1]", "ldr r1, [r2]").per_insn) == 3
    assert sum(m4("ldr r0, [r1, r2]", "str r0, [r3, #20]").per_insn) == 3
    assert sum(m4("ldr r0, [r1, r2]", "str r1, [r3, r2]").per_insn) == 3
    assert sum(m4("ldr r0, [r1, r5]", "ldr r1, [r2]", "ldr r2, [r3, #4]").per_insn) == 4
    assert sum(m4("stmia.w r0, {r1, r2, r3, r4, r5, r6, r7, r8}").per_insn) == 9  # an eight-element store
    assert sum(m4("ldrd r0, r1, [r2]").per_insn) == 3
    # not pipelined: a load after a store, a load whose address the load before made, after an LDM
    assert m4("str r0, [r1, #4]", "ldr r2, [r3]").per_insn == (1, 2)
    assert m4("ldr r0, [r1]", "ldr r2, [r0]").per_insn == (2, 2)
    assert m4("ldm r0, {r1, r2}", "ldr r3, [r4]").per_insn == (3, 2)
    assert m4("str r0, [r1, r2]").per_insn == (2,)  # register offset


def test_m4_stalls_folds_and_refills():
    assert m4("adds r1, #4", "ldr r0, [r1]").per_insn == (1, 3)  # address from the ALU: +1
    assert m4("adds r1, #4", "ldr r0, [r2]").per_insn == (1, 2)
    assert m4("vadd.f32 s0, s1, s2", "vmul.f32 s3, s0, s4").per_insn == (1, 2)  # FP result consumed next
    assert m4("vadd.f32 s0, s1, s2", "vmla.f32 s0, s3, s4").per_insn == (1, 3)  # ... as a MAC's addend: no
    assert m4("movs r0, #1/2", "it eq/2", "moveq r0, #2/2").per_insn == (1, 0, 1)  # folded after 16-bit
    assert m4("mov.w r0, #1", "it eq/2", "moveq r0, #2/2").per_insn == (1, 1, 1)
    assert m4("subs r0, #1/2", "bne.n 100 <f>/2") == T.BlockCost((1, 1), 2, 0)  # P = 2 when taken
    assert m4("bx lr/2") == T.BlockCost((1,), 3, 0)
    assert m4("pop {r4, pc}/2") == T.BlockCost((3,), 3, 0)  # 1 + N + P
    assert m4("tbb [pc, r3]") == T.BlockCost((3,), 3, 0)  # at least six
    assert m4("ldr.w pc, [sp], #4") == T.BlockCost((2,), 3, 0)  # at least five
    assert sum(m4("sdiv r0, r1, r2").per_insn) == 7


# ---------------------------------------------------------------- the Cortex-M7's pairs

def test_m7_pairs():
    assert m7("ldr r0, [r1]", "ldr r2, [r3]").per_insn == (1, 0)  # two load pipes
    assert m7("str r0, [r1]", "str r2, [r3]").per_insn == (1, 1)  # one store pipe
    assert m7("ldr r0, [r1]", "str r2, [r3]").per_insn == (1, 0)
    assert m7("adds r0, #1", "adds r1, #1").per_insn == (1, 0)
    assert m7("adds r0, #1", "adds r0, #1").per_insn == (1, 1)  # dependent
    assert m7("smlad r0, r1, r2, r0", "smlad r3, r1, r2, r3").per_insn == (1, 1)  # one MAC pipe
    assert m7("adds r0, #1", "sxtb16 r1, r2").per_insn == (1, 1)  # SIMD: the older of a pair only
    assert m7("sxtb16 r1, r2", "adds r0, #1").per_insn == (1, 0)
    assert m7("add r0, r1, r2, lsl #2", "add r3, r4, r5, lsl #2").per_insn == (1, 1)  # one early shifter
    assert m7("sdiv r0, r1, r2", "adds r3, #1").per_insn == (7, 1)


def test_m7_latencies_and_branches():
    assert m7("ldrb r0, [r1]", "adds r2, r0, #1").per_insn == (1, 2)  # a byte load's latency 2
    assert m7("ldr r0, [r1]", "adds r2, r0, #1").per_insn == (1, 1)  # a word's 1
    assert m7("adds r1, #4", "ldr r0, [r1]").per_insn == (1, 2)  # addresses read a cycle early
    assert m7("smlad r0, r1, r2, r0", "smlad r0, r1, r2, r0").per_insn == (1, 1)  # accumulator forwarded
    assert m7("smlad r0, r1, r2, r0", "adds r3, r0, #1").per_insn == (1, 2)
    assert m7("subs r0, #1", "bne.n 100 <f>", start=0x100) == T.BlockCost((1, 0), 0, 4)  # backward
    assert m7("subs r0, #1", "bne.n 200 <f>", start=0x100) == T.BlockCost((1, 0), 4, 0)  # forward
    assert m7("bl 400 <f>") == T.BlockCost((1,), 0, 0)
    assert m7("bx lr") == T.BlockCost((1,), 4, 0)


# ---------------------------------------------------------------- the Cortex-M55's beats

def test_m55_beats_overlap_on_different_pipes():
    # ARMScheduleM55.td's examples: VLDR;VADD;VMUL;VSTR five cycles, VLDR;VLDRB;VADD;VSTR six
    assert sum(m55("vldrw.u32 q0, [r0]", "vadd.i32 q1, q0, q0", "vmul.i32 q2, q1, q1",
                   "vstrw.32 q2, [r1]").per_insn) == 5
    assert sum(m55("vldrw.u32 q0, [r0]", "vldrb.u32 q1, [r2]", "vadd.i32 q1, q0, q1",
                   "vstrw.32 q1, [r1]").per_insn) == 6
    assert m55("adds r0, #1", "vldrb.u8 q0, [r0]").per_insn == (1, 2)  # after a scalar one: no overlap
    assert m55("vctp.8 r2", "vpst", "vldrbt.u8 q3, [r1]").per_insn == (1, 1, 2)
    assert m55("vldrb.u8 q0, [r0], #16", "vmladava.s8 r2, q0, q0", "le lr, 100 <f>") == T.BlockCost((2, 1, 0), 0, 1)


# ---------------------------------------------------------------- traces

BLOCKS = """0 100 108 10 0 10 4 100 102 104 106
3 108 10c 5 4 1 2 108 10a
7 200 202 1 1 0 1 200
"""
SEGMENTS = """mark 0
0 4 0 4
mark 1
0 6 0 6
3 5 4 1
7 1 1 0
"""
INSNS = """
     100:\t2001      \tmovs\tr0, #1
     102:\t6809      \tldr\tr1, [r1, #0]
     104:\t6812      \tldr\tr2, [r2, #0]
     106:\t3001      \tadds\tr0, #1
     108:\t3801      \tsubs\tr0, #1
     10a:\td1fd      \tbne.n\t108 <f+0x8>
     200:\t4770      \tbx\tlr
"""


def test_blocks_and_segments_are_read_and_the_estimate_adds_up():
    blocks, segments = C.parse_blocks(BLOCKS), C.parse_segments(SEGMENTS)
    assert blocks[3] == C.Block(3, 0x108, 0x10c, (0x108, 0x10a), 5, 4, 1)
    assert len(segments) == 2 and segments[1][3] == (5, 4, 1)
    est = T.Estimator(T.load_table("cortex-m4"), T.parse_objdump(INSNS))
    by_address = est.by_address(C.block_runs(blocks))
    # 10 x (MOVS 1 + LDR 2 + LDR 1 pipelined + ADDS 1); 5 x (SUBS 1 + BNE 1) + 4 taken x P 2; BX 1 + 3
    assert sum(by_address.values()) == 10 * 5 + 5 * 2 + 4 * 2 + (1 + 3)
    assert by_address[0x10a] == 5 * 1 + 4 * 2 and by_address[0x104] == 10
    # the segments partition the counts: their estimates add up to the whole
    assert sum(est.total(C.segment_runs(blocks, s)) for s in segments) == sum(by_address.values())
    assert C.branch_counts(blocks, 0x10a) == (4, 1)
    assert qemu.per_function(by_address, [(0x100, 0x10c, "f"), (0x200, 0x202, "g")]) == \
        {"f": 10 * 5 + 5 * 2 + 4 * 2, "g": 1 + 3}
    with pytest.raises(ValueError):
        C.parse_blocks("0 100 104 1 0 1 2 100")


def test_unknown_addresses_are_counted_not_dropped():
    est = T.Estimator(T.load_table("cortex-m4"), {})
    assert est.total([((0x10, 0x12), 3, 0, 3)]) == 6 and est.unknown == {0x10, 0x12}


# ---------------------------------------------------------------- the product's words

class _Dep:
    def __init__(self, target):
        self.backend = BACKENDS[target]
        self.macs = 1000


def test_timing_fields_take_the_clock_from_the_flag_then_the_preset():
    r = C.timing_fields(2_000_000, _Dep("stm32f446"), None)
    assert r["clock_mhz"] == 180 and r["clock_source"] == "the stm32f446 preset"
    assert r["estimated_ms"] == pytest.approx(2_000_000 / 180_000, abs=1e-4) and r["cycles_per_mac"] == 2000
    assert r["cycle_model"]["table"] == "cortex_m4.toml" and r["cycle_model"]["leaves_out"]
    r = C.timing_fields(2_000_000, _Dep("stm32f446"), 100.0)
    assert (r["clock_mhz"], r["clock_source"], r["estimated_ms"]) == (100.0, "--clock", 20.0)
    r = C.timing_fields(2_000_000, _Dep("cortex-m7"), None)
    assert r["clock_mhz"] is None and r["estimated_ms"] is None
    text = C.timing_text({**r, "target": "cortex-m7"})
    assert "no clock for target 'cortex-m7': --clock MHz" in text and "leaves out" in text
    assert "ms at 100 MHz (--clock)" in C.timing_text({**C.timing_fields(10**6, _Dep("cortex-m4"), 100.0),
                                                      "target": "cortex-m4"})


def test_per_layer_rows_carry_cycles_and_milliseconds():
    rows = [LayerTime(0, "CONV_2D", "a", "conv", "conv_s8", False, 100, 150, 140, 300),
            LayerTime(1, "RESHAPE", "b", None, "reshape", False, 0, 6, None, 10)]
    table = per_layer_table(rows, 100.0)
    assert "est. cycles" in table and "310 estimated cycles, 0.003 ms at 100 MHz" in table
    assert "est. cycles" not in per_layer_table([LayerTime(0, "CONV_2D", "a", "conv", "c", False, 1, 1, 1)])
    layers = per_layer_json(rows, 100.0)["layers"]
    assert layers[0]["estimated_cycles"] == 300 and layers[0]["estimated_ms"] == 0.003
    assert per_layer_json(rows)["layers"][1]["estimated_ms"] is None
