"""Kernel families: a set of kernels one kind of core runs well, as one object a target lists.

A family owns its selection rules (``VariantRule``s: which layers its kernels take and what each
costs), the template folder its kernels are written in (only it names that folder), the cost
model of its kernels, and the check its engines make that they are compiled for a core that has
its instructions. A target lists its families in order of preference; every layer no family
takes runs the portable kernels (backends.variants). ``--kernels`` chooses among a target's
families by name ("auto": all of them in order, "plain": none)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KernelFamily:
    name: str  # the --kernels choice
    label: str  # how prose names its kernels ("the {label} kernels")
    description: str
    rules: tuple = ()  # its VariantRules, in order of preference
    # its folder under templates/: kernels.c.j2 holds preamble(core_flags) (the headers and the
    # check that the core has its instructions), helpers() and one macro per variant; llm.c.j2,
    # when present, the language-model engine's matvec(rows, cols, max_blocks, weights)
    templates: str = ""
    # the weight formats ("q4_0", "int8") its language-model matvec takes (templates/<templates>/llm.c.j2)
    llm_formats: tuple[str, ...] = ()
    # how its matvec wants Q4_0 codes packed ([rows, cols] codes 0..15 -> bytes); None: two per
    # byte, element j low and j + 16 high in each block of 32 (the portable kernels' order)
    llm_q4_pack: object = None
    # its matvec reads the quantized input (the scratch XQ) as int16 pairs in the order its
    # llm.c.j2's input_pair_index() defines (twice the bytes of int8 codes): the inner loop loads
    # them as they are instead of extending bytes for every block of rows
    llm_input_pairs: bool = False
    # the cost model of its kernels (solver.tiling_cost.DEFAULTS keys): MACs per cycle by kind and
    # a per-output cost; a target's own entries (its copies and DMA) complete it
    cost_model: tuple[tuple[str, float], ...] = ()

    @property
    def kernels_template(self) -> str:
        return f"{self.templates}/kernels.c.j2"

    @property
    def llm_template(self) -> str:
        return f"{self.templates}/llm.c.j2"
