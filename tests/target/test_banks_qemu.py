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
