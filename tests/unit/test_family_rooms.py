"""Kernel families live in their own rooms: their instructions, headers and template folders are
named only under backends/ and their own templates/ folder, never by the shared code (the
pipeline, the solver, the analyzer, the shared engine templates)."""
from __future__ import annotations

import re
from pathlib import Path

from backends import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("deployer", "solver", "layer_analyzer", "network_parser", "templates/host", "templates/llm")
# the families' headers, feature macros and names, and the instructions their kernels are made of
ISA_WORDS = re.compile(r"__ARM_FEATURE|arm_acle|arm_mve|helium|\bmve\b|\b_*(smla\w*|smul\w*|smmla\w*|sxta?b16|"
                       r"uxta?b16|ssat16|pkhbt|pkhtb|vmladav\w*|vmlaldav\w*|vctp\w*|vldr[bhw]\w*|vstr[bhw]\w*|"
                       r"vqrdmulh\w*|vrmulh\w*|vmulh\w*|vqmovn\w*|vdupq\w*|vaddq\w*|vmlaq?\w*)\b", re.IGNORECASE)


def shared_files():
    for folder in SHARED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".j2"):
                yield path


def test_shared_code_names_no_instruction_set():
    named = [f"{p.relative_to(ROOT)}:{n}" for p in shared_files()
             for n, line in enumerate(p.read_text().splitlines(), 1) if ISA_WORDS.search(line)]
    assert not named, "instruction-set knowledge outside a family's room:\n" + "\n".join(named)


def test_each_family_template_folder_is_named_only_by_its_family():
    families = {f.templates: f for b in BACKENDS.values() for f in b.families}
    assert families, "no target lists a kernel family"
    for folder in families:
        assert (ROOT / "templates" / folder / "kernels.c.j2").is_file()
        pattern = re.compile(rf"""["'/]{re.escape(folder)}/""")
        named = [str(p.relative_to(ROOT)) for p in shared_files() if pattern.search(p.read_text())]
        assert not named, f"templates/{folder}/ named outside its family: {named}"


def test_the_qemu_runner_takes_its_tools_from_the_target(monkeypatch):
    """Another board's toolchain and QEMU are the target's data: the runner names what it lacks."""
    from dataclasses import replace

    import pytest

    from deployer import qemu
    other = replace(BACKENDS["cortex-m4"], name="rv", cc="riscv64-unknown-elf-gcc", qemu_system="qemu-system-riscv32",
                    tool_packages=("gcc-riscv64-unknown-elf", "qemu-system-misc"))
    assert qemu.board_tools(other) == ("riscv64-unknown-elf-gcc", "riscv64-unknown-elf-size",
                                       "riscv64-unknown-elf-nm", "make", "qemu-system-riscv32")
    monkeypatch.setattr("deployer.qemu.shutil.which", lambda tool: None)
    with pytest.raises(qemu.QemuError, match="qemu-system-riscv32.*apt-get install gcc-riscv64-unknown-elf"):
        qemu.require_board_tools(other)
