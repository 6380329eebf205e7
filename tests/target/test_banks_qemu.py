"""Engines across RAM banks on QEMU's Cortex-M7 board: each bank's buffer in its own linker
section, mapped by qemu/link.ld at the bank's real size; bit-exact against the reference."""
from __future__ import annotations

import pytest

from deployer import qemu
from deployer.pipeline import Options, deploy
from deployer.verify import random_inputs
from tests.host.test_banks import example, options, two_branches

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")


def exact_on_qemu(dep, model, count=2) -> dict:
    result = qemu.verify_on_qemu(dep, model, [random_inputs(dep.graph, s) for s in range(count)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]
    return result


def test_a_memory_map_on_qemu(tmp_path):
    model = example(tmp_path)
    dep = deploy(model, options(tmp_path, ("SRAM1", "5K", 1, {"address": "0x20000000"}),
                                ("SRAM2", "4K", 2, {"address": "0x20010000", "zeroed": False}), target="cortex-m7"))
    link = dep.files["qemu/link.ld"]
    assert "BANK_SRAM1 (rw)" in link and "LENGTH = 5120" in link and "LENGTH = 4096" in link
    assert "ORIGIN = 0x20000000, LENGTH = 5120" in dep.files["memory_map.ld"]  # the part's addresses
    result = exact_on_qemu(dep, model)
    sections = qemu.elf_memory(qemu.build_elf(dep).path)["sections"]
    assert 0 < sections[".bank_sram1"] <= 5 * 1024 and 0 < sections[".bank_sram2"] <= 4 * 1024
    assert result["sram_bytes"] >= sections[".bank_sram1"] + sections[".bank_sram2"]


def test_stm32h743_banks_on_qemu(tmp_path):
    model = two_branches(tmp_path)
    dep = deploy(model, Options(target="stm32h743"))
    assert dep.banks is not None
    exact_on_qemu(dep, model, 1)


def test_vww_in_40k_and_24k_on_qemu(tmp_path):
    from tests.models import shared_model
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    dep = deploy(model, options(tmp_path, ("SRAM1", "40K", 1), ("SRAM2", "24K", 1), target="cortex-m7"))
    assert all(u <= m.size for m, u in zip(dep.banks.memories, dep.banks.used))
    exact_on_qemu(dep, model, 1)


def test_placed_by_access_cost_the_instructions_do_not_change(tmp_path):
    """The H743's map puts vww_96's activations in the DTCM (the cheapest bank): half the modeled
    access cost of the AXI SRAM, and the same instructions (QEMU models no wait states)."""
    import json
    from pathlib import Path
    from deployer.memory_map import read_memory_map, with_memory_map
    from tests.models import shared_model
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    h743 = Path(__file__).resolve().parents[2] / "examples" / "memory_maps" / "stm32h743.json"
    placed = deploy(model, with_memory_map(Options(target="stm32h743"), read_memory_map(h743)))
    manifest = json.loads(placed.files["manifest.json"])
    used = {b["name"]: b["used"] for b in manifest["arena"]["banks"]}
    assert used["DTCM"] > 0 and used["AXI_SRAM"] == 0
    plain = deploy(model, Options(target="stm32h743"))
    assert plain.banks is None
    assert exact_on_qemu(placed, model, 1)["instructions"] == exact_on_qemu(plain, model, 1)["instructions"]
