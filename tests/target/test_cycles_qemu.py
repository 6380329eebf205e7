"""The cycle estimate (backends/cortexm_timing.py, deployer/cycles.py) on hand-written Thumb micro-kernels run on QEMU's
boards: for each kernel the estimator's cycles, from the instructions QEMU executed and the
taken/fall-through counts our plugin records, equal a count made by hand from the core's timing
table (backends/timing/*.toml). The hand counts are written out below as arithmetic, each term
naming the table figure it uses; test_hand_counts_use_the_tables_figures pins those figures,
so a change to a table shows here. The kernels: tests/target/cycles_kernels.S."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backends import cortexm_timing
from deployer import cycles, qemu

TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-nm", "arm-none-eabi-objdump", "qemu-system-arm")
pytestmark = pytest.mark.skipif(bool(qemu.missing_tools(TOOLS)),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools(TOOLS)} (tests/install.sh)")
KERNELS = Path(__file__).resolve().parent / "cycles_kernels.S"
# core -> (QEMU board, where code starts, where RAM starts): the backends' boards
BOARDS = {"cortex-m4": ("mps2-an386", 0x00000000, 0x20000000), "cortex-m7": ("mps2-an500", 0x00000000, 0x20000000),
          "cortex-m33": ("mps2-an505", 0x10000000, 0x38000000), "cortex-m55": ("mps3-an547", 0x00000000, 0x20000000)}

# The figures the hand counts below use, as the tables give them.
M4_FIGURES = {"alu": 1, "mul": 1, "nop": 1, "branch": 1, "load": 2, "load_pipelined": 1, "store_imm": 1,
              "address_stall": 1, "multiple_base": 1, "multiple_per_register": 1, "refill_direct": 2,
              "refill_indirect": 3}
M7_FIGURES = {"issue": 1, "latency_alu": 1, "latency_load": 1, "latency_mac": 2, "accumulator_forward": 1,
              "early_operand": 1, "late_store_data": 1, "words_per_cycle": 2, "mispredict": 4, "load_pipes": 2,
              "alu_pipes": 2, "mac_pipes": 1}
M55_FIGURES = {"mve": 2, "mve_overlap": 1, "loop_start": 1, "loop_end": 0, "loop_exit": 1}

# Cortex-M4 (ARM DDI 0439D), and the M33 and the M55's scalar core, timed alike.
M4_HAND = {
    # LDR 2 (load); three LDRs pipelined behind it, 1 each (load_pipelined); BX LR 1 + P (branch +
    # refill_indirect)
    "k_loads_independent": 2 + 1 + 1 + 1 + (1 + 3),
    # each LDR's address is the one before's result: no pipelining, 2 each (load); BX LR 1 + 3
    "k_loads_dependent": 2 + 2 + 2 + (1 + 3),
    # MOVS 1; ten times SUBS 1, CMP 1, BEQ 1 (alu, alu, branch); BEQ taken once: + P 2 (refill_direct);
    # the NOP the nine untaken BEQs reach, 1 (nop); ten times CMP 1, BNE 1; BNE taken nine times:
    # + 2 each; BX LR 1 + 3
    "k_branches": 1 + 10 * (1 + 1 + 1) + 1 * 2 + 9 * 1 + 10 * (1 + 1) + 9 * 2 + (1 + 3),
    # LDR 2, LDR 1 (pipelined), MOVS 1, four SMLAD 1 each (mul), BX LR 1 + 3
    "k_smlad": 2 + 1 + 1 + 4 * 1 + (1 + 3),
    # PUSH {4 registers} 1 + 4, LDM {3} 1 + 3, STM {2} 1 + 2 (multiple_base + multiple_per_register);
    # POP {r4, r5, r6, pc} 1 + 4 + P 3
    "k_multiple": (1 + 4) + (1 + 3) + (1 + 2) + (1 + 4 + 3),
    # ADDS 1; LDR 2 + 1, its address from the ADDS (address_stall); STR [#imm] 1 (store_imm,
    # pipelined after the LDR); BX LR 1 + 3
    "k_address_stall": 1 + (2 + 1) + 1 + (1 + 3),
}

# Cortex-M7: the dual-issue approximation (cortex_m7.toml). A "cycle" is one issue slot pair.
M7_HAND = {
    # LDR+LDR issue together (two load pipes), LDR+LDR again: 1 + 1; BX LR alone 1; an indirect
    # branch pays the mispredict penalty 4
    "k_loads_independent": 1 + 1 + 1 + 4,
    # LDR 1; the next LDR waits for the address: latency_load 1 + early_operand 1, so it issues a
    # cycle late (2), the third likewise (2); BX LR pairs with the last LDR (0); mispredict 4
    "k_loads_dependent": 1 + 2 + 2 + 0 + 4,
    # blocks: [MOVS, SUBS, CMP, BEQ] once: 1 + 1 + 1 (each reads the one before) with BEQ paired (0);
    # [SUBS, CMP, BEQ] nine times: 1 + 1 + 0; [NOP, CMP, BNE] nine times: NOP+CMP paired 1, BNE 1;
    # [CMP, BNE] once: paired, 1; BEQ is forward (predicted not taken): its one taken exit pays 4;
    # BNE is backward (predicted taken): its one fall-through pays 4; BX LR 1 + 4
    "k_branches": 3 * 1 + 2 * 9 + 2 * 9 + 1 * 1 + 4 + 4 + (1 + 4),
    # LDR+LDR 1; MOVS 1 (the first SMLAD reads its result); four SMLAD, one a cycle: each reads the
    # accumulator the one before wrote (latency_mac 2 less accumulator_forward 1), one MAC pipe;
    # BX LR pairs with the last SMLAD (0); mispredict 4
    "k_smlad": 1 + 1 + 4 * 1 + 0 + 4,
    # single issue, two words a cycle (words_per_cycle): PUSH {4} 2, LDM {3} 2, STM {2} 1,
    # POP {4 with pc} 2; the POP's return mispredicts: 4
    "k_multiple": 2 + 2 + 1 + 2 + 4,
    # ADDS 1; LDR waits for the ADDS's result as an address (1 + 1): issues a cycle late, 2; STR
    # reads the loaded data late (late_store_data), 1; BX LR pairs with it (0); mispredict 4
    "k_address_stall": 1 + 2 + 1 + 0 + 4,
}

# Cortex-M55 Helium (cortex_m55.toml): an MVE instruction 2 cycles (mve), 1 after one on another pipe.
M55_HAND = {
    **M4_HAND,
    # MOVS 1; VLDRB 2; VLDRB 2 (same load/store pipe: no overlap); VMLADAVA 2 - 1 (after a load: other
    # pipe, mve_overlap); VLDRB 2 - 1; VMLADAVA 2 - 1; BX LR 1 + 3
    "k_mve": 1 + 2 + 2 + (2 - 1) + (2 - 1) + (2 - 1) + (1 + 3),
    # PUSH {lr} 1 + 1; MOVS 1, MOVS 1; DLS 1 (loop_start); four iterations of VLDRB 2 and VMLADAVA
    # 2 - 1; the three taken LEs 0 (loop_end), the last one falls through: 1 (loop_exit);
    # POP {pc} 1 + 1 + 3
    "k_mve_loop": (1 + 1) + 1 + 1 + 1 + 4 * (2 + (2 - 1)) + 3 * 0 + 1 + (1 + 1 + 3),
}

HAND = {"cortex-m4": M4_HAND, "cortex-m33": M4_HAND, "cortex-m7": M7_HAND, "cortex-m55": M55_HAND}


def board_available(machine: str) -> bool:
    proc = subprocess.run(["qemu-system-arm", "-M", "help"], capture_output=True, text=True)
    return any(line.split()[:1] == [machine] for line in proc.stdout.splitlines())


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """core -> (ELF, blocks that ran, cycles per kernel), each core built and run once."""
    done = {}

    def get(core: str):
        if core not in done:
            machine, code, ram = BOARDS[core]
            if not board_available(machine):
                pytest.skip(f"this QEMU has no {machine} board")
            folder = tmp_path_factory.mktemp(core)
            elf = folder / "kernels.elf"
            mve = ["-DMVE"] if core == "cortex-m55" else []
            subprocess.run(["arm-none-eabi-gcc", f"-mcpu={core}", "-mthumb", "-nostdlib", "-nostartfiles",
                            "-x", "assembler-with-cpp", f"-DSTACK_TOP={ram + 0x4000}", f"-DDATA={ram + 0x1000}", *mve,
                            f"-Wl,-Ttext={code:#x}", "-Wl,-ereset", "-o", str(elf), str(KERNELS)], check=True)
            so = str(qemu.plugin()).replace(",", ",,")
            blocks_file = str(folder / "blocks.txt").replace(",", ",,")
            histogram = str(folder / "histogram.txt").replace(",", ",,")
            proc = subprocess.run(["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none", "-serial",
                                   "none", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf),
                                   "-plugin", f"{so},out={histogram},blocks={blocks_file}", "-d", "plugin"],
                                  capture_output=True, timeout=60)
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
            blocks = cycles.parse_blocks((folder / "blocks.txt").read_text())
            est = cortexm_timing.Estimator.for_elf(elf, core)
            per = qemu.per_function(est.by_address(cycles.block_runs(blocks)), qemu.functions(elf))
            assert not est.unknown, [est.op(a).text for a in est.unknown]
            done[core] = (elf, blocks, {k: v for k, v in per.items() if k.startswith("k_")})
        return done[core]

    return get


def test_hand_counts_use_the_tables_figures():
    for core, figures in (("cortex-m4", M4_FIGURES), ("cortex-m33", M4_FIGURES), ("cortex-m55", M4_FIGURES),
                          ("cortex-m7", M7_FIGURES), ("cortex-m55", M55_FIGURES)):
        table = cortexm_timing.load_table(core)
        assert {k: table[k] for k in figures} == figures, core


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55"])
def test_micro_kernels_take_the_hand_counted_cycles(traced, core):
    _, _, measured = traced(core)
    assert measured == HAND[core]


def symbol(elf: Path, name: str) -> int:
    return next(start for start, _, n in qemu.functions(elf) if n == name)


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m7"])
def test_the_plugin_counts_taken_and_untaken_branches(traced, core):
    """k_branches: BEQ (forward) taken once and not nine times, BNE (backward) taken nine times
    and not once; each BEQ/BNE is the last instruction of the blocks that end with it."""
    elf, blocks, _ = traced(core)
    start = symbol(elf, "k_branches")
    # MOVS, SUBS, CMP, BEQ, NOP, CMP, BNE, BX: all 16-bit
    beq, bne = start + 3 * 2, start + 6 * 2
    assert cycles.branch_counts(blocks, beq) == (1, 9)
    assert cycles.branch_counts(blocks, bne) == (9, 1)
    histogram = {}
    for b in blocks.values():
        for a in b.addrs:
            histogram[a] = histogram.get(a, 0) + b.count
    assert histogram[beq] == histogram[bne] == 10 and histogram[start + 4 * 2] == 9  # the NOP


def test_the_low_overhead_loop_is_counted(traced):
    elf, blocks, _ = traced("cortex-m55")
    start = symbol(elf, "k_mve_loop")
    le = next(a for b in blocks.values() for a in b.addrs if cortexm_timing.Estimator.for_elf(elf, "cortex-m55").op(a).base
              == "le" and a > start)
    assert cycles.branch_counts(blocks, le) == (3, 1)


# ---------------------------------------------------------------- deploy verify --qemu

KWS = "mlperf_tiny/kws_ref_model.tflite"


def test_verify_prints_and_carries_cycles_and_milliseconds(tmp_path):
    """--json: the estimate beside the instructions, milliseconds at --clock, per layer too (the
    layers' cycles add up to the inference's, up to the marks' own calls); the report shows them."""
    import json

    from tests.models import shared_model
    from tests.unit.test_cli import run_clirunner
    report = tmp_path / "where.html"
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "cortex-m4", "--qemu", "--seeds", "1",
                                   "--clock", "120", "--per-layer", "--json", "--report", report)
    assert code == 0, err
    r = json.loads(out)
    cycles_ = r["estimated_cycles"]
    assert r["instructions"] < cycles_ < 3 * r["instructions"]  # loads, branches: more cycles than instructions
    assert (r["clock_mhz"], r["clock_source"]) == (120.0, "--clock")
    assert r["estimated_ms"] == pytest.approx(cycles_ / 120_000, abs=1e-3)
    assert r["cycle_model"]["table"] == "cortex_m4.toml" and "wait states" in r["cycle_model"]["leaves_out"]
    layers = r["per_layer"]["layers"]
    assert all(x["estimated_cycles"] >= x["instructions"] > 0 for x in layers if x["macs"])
    assert sum(x["estimated_cycles"] for x in layers) == pytest.approx(cycles_, rel=0.01)
    assert all(x["estimated_ms"] == pytest.approx(x["estimated_cycles"] / 120_000, abs=1e-3) for x in layers)
    html = report.read_text()
    assert 'id="time-estimate"' in html and "at 120 MHz (--clock)" in html and "leaves out" in html
    assert all(f"<td>{x['estimated_cycles']:,}</td>" in html for x in layers)


def test_verify_takes_the_presets_clock_or_says_there_is_none():
    from tests.models import shared_model
    from tests.unit.test_cli import run_clirunner
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "stm32f446", "--qemu", "--seeds", "1")
    assert code == 0, err
    assert "instructions per inference" in out and "estimated" in out and "at 180 MHz (the stm32f446 preset)" in out
    assert "cycle model: cortex_m4.toml" in out and "leaves out" in out
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "cortex-m7", "--qemu", "--seeds", "1")
    assert code == 0, err
    assert "no clock for target 'cortex-m7': --clock MHz gives milliseconds" in out and "dual-issue" in out
    code, _, err = run_clirunner("verify", shared_model(KWS), "--clock", "100")
    assert code == 2 and "--clock needs --qemu" in err
