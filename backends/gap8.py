"""GAP8 / PULP: a RISC-V cluster of 8 cores sharing a 64 KiB L1 scratchpad, fed by the
cluster DMA from 512 KiB of L2 (8 MiB of L3 HyperRAM/flash behind it). Tiled layers move
their tiles with PMSIS cluster DMA and split each tile's outputs across the cores with
``pi_cl_team_fork``; the other layers run on the cluster's master core."""
from pathlib import Path

from .base import Backend, Emulation, MemoryBank

# PMSIS emulated with pthreads (8 cores, barriers) and queued copies (cluster DMA, HyperRAM): a
# schedule that reads a tile before waiting for it reads stale bytes and fails verification.
EMULATION = Emulation(
    folder=Path(__file__).resolve().parent / "gap8_emulation",
    sources=("pmsis_emu.c",),
    cflags=("-std=gnu99", "-Wall", "-Wextra", "-Werror", "-pthread", "-O2"),
    l3_sources=("l3_loader.c",),
    l3_setup="l3_setup",
)

GAP8 = Backend(
    name="gap8",
    description="GAP8 / PULP cluster (8 x RV32IMC cores, PMSIS API), L1 tiles via cluster DMA",
    template_dir="gap8",
    template_fallback="host",
    cc="riscv64-unknown-elf-gcc",
    cflags=("-march=rv32imc", "-mabi=ilp32", "-std=c99", "-ffreestanding", "-Os",
            "-Wall", "-Wextra", "-Werror"),
    cores=8,
    l1_attribute="PI_L1 ",  # the cluster's shared L1
    engine_note=("Call inference_run() on the cluster's master core (from a cluster task): tiled layers "
                 "fork the whole team of cores over each L1 tile; the other layers run on the master."),
    l1_bytes=64 * 1024,
    sram_bytes=512 * 1024,  # L2: the default --sram budget (part=True)
    flash_bytes=8 * 1024 * 1024,  # HyperFlash: the boot image
    l3_bytes=8 * 1024 * 1024,  # HyperRAM
    part=True,
    # its levels as banks: the cluster's L1 (tiles), L2 (the arena) and HyperRAM (L3, by DMA)
    banks=(MemoryBank("L2", 512 * 1024, ".l2", 1.0, "sram", ("fc", "cluster", "udma"), True, 0x1C000000),
           MemoryBank("L1", 64 * 1024, ".l1", 0.25, "tcm", ("cluster", "cluster_dma"), False, 0x10000000, use="l1"),
           MemoryBank("HYPERRAM", 8 * 1024 * 1024, ".l3", 8.0, "external", ("udma",), False, 0, use="l3")),
    emulation=EMULATION,
    soft_double=True,  # RV32IMC: no FPU
    weights_in_sram=True,
    async_dma=True,
    l3_init="int inference_l3_init(struct pi_device *ram, uint32_t base);",
    # The kernels split tile rows over the 8 cores and produce 2 pixels x 4 channels per
    # inner loop (packed SIMD): tiles whose sizes are multiples of those keep every core
    # and lane busy.
    tile_heuristics=(("tile_h_multiple", 8), ("tile_w_multiple", 2), ("tile_c_multiple", 4)),
    cost_model=(
        ("macs_per_cycle", 8.0),  # 8 cores, ~1 MAC/cycle each on int8 with the SIMD dot products
        ("dma_bytes_per_cycle", 8.0),  # cluster DMA, 64-bit L2 <-> L1
        ("dma_setup_cycles", 30),  # programming one mchan command and its event
        ("leftover_penalty", 200),  # a partial row group idles cores for a whole pass
        ("tile_setup_cycles", 150),  # team fork/barrier and pointer arithmetic per tile
        ("h_multiple", 8),
        ("w_multiple", 2),
        ("c_multiple", 4),
        ("dma_dims", 2),  # 2-D transfers in hardware; 3-D boxes are a loop of 2-D ones
        ("double_buffer", True),
    ),
)
