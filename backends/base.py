"""What a target is, as data: memories, toolchain, templates."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .family import KernelFamily


@dataclass(frozen=True, slots=True)
class Emulation:
    """The target's runtime emulated on this machine, so that ``deploy verify`` can build its
    engines with the host gcc against it and run them here (the engine's C is the target's)."""
    folder: Path  # the emulation's headers and sources
    sources: tuple[str, ...]  # compiled with every engine
    cflags: tuple[str, ...]
    l3_sources: tuple[str, ...] = ()  # an engine using L3: the start-up that fills the emulated L3
    l3_setup: str = ""  # that start-up's function, run by the harness before the first inference


@dataclass(frozen=True, slots=True)
class MemoryBank:
    """One RAM bank of a part: where it is, what it costs to reach and who reaches it."""
    name: str  # a C identifier (the engine's buffer in it is arena_<name>)
    size: int
    section: str  # the linker section its buffer goes to
    cost: float = 1.0  # relative access cost (a TCM 0.5, on-chip SRAM 1, external RAM more)
    kind: str = "sram"  # "tcm" | "sram" | "external"
    masters: tuple[str, ...] = ("cpu", "dma")  # who reaches it (the H743's DMA1/2 cannot reach its DTCM)
    zeroed: bool = True  # the start-up code zeroes it
    address: int | None = None  # its first byte on the part (the linker-script fragment places it there)
    use: str = "arena"  # "arena" (activations) | "l1" (the tiles' scratchpad) | "l3" (external, by DMA)


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    description: str
    template_dir: str  # folder under templates/ holding this target's whole-file templates
    cc: str  # C compiler that builds the engine for the target
    cflags: tuple[str, ...]
    cores: int = 1
    l1_bytes: int | None = None  # default scratchpad size, when the part has one
    sram_bytes: int | None = None  # default L2/SRAM budget
    flash_bytes: int | None = None
    l3_bytes: int | None = None  # external memory behind L2, reached by DMA only
    weights_in_sram: bool = False  # resident weights and code live in L2 (loaded there at boot)
    l3_init: str = ""  # prototype of the start-up call an engine using L3 needs on this target
    alignment: int = 16
    runs_on_host: bool = False  # its engines can be built with this machine's gcc and run here
    l1_attribute: str = ""  # placed before the L1 buffer's declaration (e.g. a section macro)
    l1_in_sram: bool = False  # the L1 buffer of tiled layers is carved out of SRAM (no scratchpad or TCM)
    async_dma: bool = False  # a DMA engine moves tiles while the cores compute (else the copies are the core's)
    engine_note: str = ""  # how to call the engine on this target, for the engine's header comment
    # Tiling: soft rules for tile shapes (solver.tiling_cpsat.add_heuristics keys) and the
    # cost model's parameters (solver.tiling_cost.DEFAULTS keys), as plain data.
    tile_heuristics: tuple[tuple[str, int], ...] = ()
    cost_model: tuple[tuple[str, float], ...] = ()
    tile_objective: str = "l1"  # the CP-SAT tiler's objective by default (--tile-objective auto)
    # Folder under templates/ searched after template_dir: a target overrides only the
    # templates that differ (e.g. DMA, tile schedule, engine entry) and reuses the rest.
    template_fallback: str | None = None
    # Kernel families (backends.family), in order of preference: each layer runs the first variant
    # that takes it (every other layer the portable kernels, backends.variants)
    families: tuple[KernelFamily, ...] = ()
    # Arm Cortex-M: the core, the board QEMU emulates it on, the part's tightly-coupled memory
    # (usable as L1 when --l1 asks for tiling) and the stack the start-up code reserves.
    cpu: str | None = None
    qemu_machine: str | None = None
    qemu_system: str | None = None  # the QEMU that emulates that board (its binary)
    tool_packages: tuple[str, ...] = ()  # the Debian packages of its cross toolchain and QEMU
    # where the QEMU board's memories the harness links into start: code and constants, then RAM
    qemu_flash_origin: int = 0x00000000
    qemu_ram_origin: int = 0x20000000
    qemu_flash_bytes: int = 4 * 1024 * 1024  # the mps2 boards' SSRAM halves
    qemu_ram_bytes: int = 4 * 1024 * 1024
    # where the board's reset reads the vector table (QEMU's init-svtor) when the code is elsewhere:
    # the harness's .isr_vector alone goes there (None: at qemu_flash_origin, with the code)
    qemu_vector_origin: int | None = None
    # the board's memory that stands in for external flash or PSRAM (origin, bytes): a language
    # model's --l3 image is linked there (None: into the flash region, when it fits)
    qemu_l3: tuple[int, int] | None = None
    tcm_bytes: int | None = None
    stack_bytes: int = 0
    emulation: Emulation | None = None  # deploy verify builds against it and runs here
    part: bool = False  # a real part (a board preset, GAP8): its SRAM and flash are the default --sram and --flash
    # The part's RAM banks (a memory map: --memory-map describes another part's). The first
    # arena bank is the --sram default; the others join when the activations do not fit it.
    banks: tuple[MemoryBank, ...] = ()
    # double arithmetic is the C library's software (a single-precision or no FPU): the
    # reference's double-precision requantization (fully connected layers) takes an exact integer
    # estimate first, falling back to double only within the estimate's error of a rounding boundary
    soft_double: bool = False
    bank_sections: bool = False  # a bank's buffer goes to the bank's linker section (a part's image; not the host's)
    # its vector unit's float instructions flush denormals to zero where its scalar FPU and the
    # reference keep them: float loops of the language-model engine must not become vector code
    vector_float_flushes: bool = False
    clock_mhz: float | None = None  # the part's core clock (a preset's; --clock gives another): milliseconds from cycles

    @property
    def binutils_prefix(self) -> str:
        """The cross toolchain's prefix of its size, nm and objdump (``cc`` less its ``gcc``)."""
        return self.cc[:-len("gcc")] if self.cc.endswith("gcc") else ""

    @property
    def variants(self) -> tuple:
        """Its families' variant rules, in order of preference."""
        return tuple(rule for family in self.families for rule in family.rules)

    @property
    def kernels(self) -> str:
        """Its kernels in a word: the families' names ("plain" without one)."""
        return "+".join(f.name for f in self.families) or "plain"

    def family(self, name: str) -> KernelFamily | None:
        return next((f for f in self.families if f.name == name), None)

    @property
    def costs(self) -> dict[str, float]:
        """The tiling cost model: its families' kernel costs (the first family's where two give
        one), then the target's own (copies, DMA, tile setup)."""
        merged = {}
        for family in reversed(self.families):
            merged.update(family.cost_model)
        merged.update(self.cost_model)
        return merged
