"""Arm Cortex-M4 and M7 (Armv7E-M with the DSP extension), M33 (Armv8-M) and M55 (Armv8.1-M with
Helium), as generic cores and as board presets with their memories. Engines are built with
arm-none-eabi-gcc for the hard-float ABI; the int8 conv and fc layers use the cores' kernel
families (SMLAD: two MACs per instruction; Helium: sixteen). Each core has a QEMU board it runs
on before flashing: mps2-an386 (M4), mps2-an500 (M7), mps2-an505 (M33), mps3-an547 (M55)."""
from dataclasses import replace

from . import mve, smlad
from .base import Backend, MemoryBank

K = 1024
WARNINGS = ("-Wall", "-Wextra", "-Werror")
COMMON = ("-mthumb", "-mfloat-abi=hard", "-std=c99", "-ffreestanding", "-O2", "-ffunction-sections",
          "-fdata-sections", *WARNINGS)

CORTEX_M4 = Backend(
    name="cortex-m4",
    description="Arm Cortex-M4F (DSP extension, single-precision FPU), SMLAD kernels; QEMU mps2-an386",
    template_dir="cortexm",
    template_fallback="host",
    cc="arm-none-eabi-gcc",
    cflags=("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", *COMMON),
    families=(smlad.FAMILY,),
    cpu="cortex-m4",
    qemu_machine="mps2-an386",
    qemu_system="qemu-system-arm",
    tool_packages=("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "qemu-system-arm"),
    qemu_l3=(0x21000000, 16 * 1024 * K),  # the board's PSRAM
    stack_bytes=4 * K,
    alignment=16,
    l1_in_sram=True,  # with --l1, the tiles' buffer is a static array in SRAM (.bss)
    bank_sections=True,  # a memory map's banks: each buffer in its section (qemu/link.ld maps them)
    soft_double=True,  # the M4F's FPU is single precision
    # The cost model in instructions (the kernels' share is their family's), fitted by least
    # squares to the per-layer counts of `deploy verify --qemu --per-layer`: the core copies the
    # tiles itself (no DMA engine to overlap with), a call per contiguous run.
    cost_model=(
        ("tile_setup_cycles", 160),  # the tile loop: descriptors, the window kernel's call
        ("dma_bytes_per_cycle", 0.38),
        ("dma_setup_cycles", 25),
        ("dma_dims", 1),
        ("double_buffer", False),
    ),
    # the cost model is fitted to the cores' counted instructions: the CP-SAT tiler minimises it
    # (measured on QEMU, bench/cost_model_bench.py: fewer instructions in total than greedy's tiles
    # on kws, vww_96 and resnet8 at --l1 64K and 32K, where maximising L1 use ran up to 0.3% more)
    tile_objective="cycles",
    engine_note="Call inference_run() from a thread or the main loop (no interrupts are used).",
)

CORTEX_M7 = replace(
    CORTEX_M4,
    name="cortex-m7",
    description="Arm Cortex-M7 (DSP extension, double-precision FPU), SMLAD kernels; QEMU mps2-an500",
    cflags=("-mcpu=cortex-m7", "-mfpu=fpv5-d16", *COMMON),
    cpu="cortex-m7",
    qemu_machine="mps2-an500",
    qemu_l3=(0x60000000, 16 * 1024 * K),  # AN500's PSRAM
    soft_double=False,  # fpv5-d16: double precision in hardware
)

# Board presets: the core plus the part's memories (the defaults of --sram and --flash).
CORTEX_M33 = replace(
    CORTEX_M4,
    name="cortex-m33",
    description="Arm Cortex-M33 (Armv8-M Mainline, DSP extension, single-precision FPU), SMLAD kernels; "
                "QEMU mps2-an505",
    cflags=("-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16", *COMMON),
    cpu="cortex-m33",
    qemu_machine="mps2-an505",
    # AN505 boots the core in the Secure state at 0x10000000: the secure aliases of its SSRAM1
    # (code) and SSRAM2/3 (data, at 0x38000000)
    qemu_flash_origin=0x10000000,
    qemu_ram_origin=0x38000000,
    qemu_l3=(0x80000000, 16 * 1024 * K),  # AN505's PSRAM
)

CORTEX_M55 = replace(
    CORTEX_M4,
    name="cortex-m55",
    description="Arm Cortex-M55 (Armv8.1-M, Helium MVE, DSP extension, double-precision FPU), Helium kernels "
                "then SMLAD; QEMU mps3-an547",
    cflags=("-mcpu=cortex-m55", *COMMON),
    families=(mve.FAMILY, smlad.FAMILY),  # the core has both: Helium first, SMLAD for the layers it leaves
    cpu="cortex-m55",
    qemu_machine="mps3-an547",
    # AN547 (QEMU 7.2 hw/arm/mps2-tz.c an547_raminfo, SSE-300): ITCM 512 KiB at 0 (init-svtor: the
    # reset's vector table), SRAM 2 MiB at 0x01000000, DTCM 512 KiB at 0x20000000, SRAM 4 MiB at
    # 0x21000000, QSPI flash 8 MiB at 0x28000000 (a ROM), DDR 2 GiB at 0x60000000. Code and constants
    # in the QSPI flash (mcunet_vww's 527 KB or MobileNetV2-224's 3.7 MB outgrow the ITCM), data in
    # 16 MiB of the DDR (room for a preset's banks, e.g. alif-e7-hp's 7.5 MiB), the vectors in the ITCM.
    # The core boots Secure with its SAU off: every address is Secure, the MPCs' reset state lets
    # Secure through, so the non-secure aliases serve. QEMU counts instructions, not wait states:
    # where the image sits changes no count.
    qemu_vector_origin=0x00000000,
    qemu_flash_origin=0x28000000,
    qemu_flash_bytes=8 * 1024 * K,
    qemu_ram_origin=0x60000000,
    qemu_ram_bytes=16 * 1024 * K,
    qemu_l3=(0x70000000, 64 * 1024 * K),  # further up the board's DDR
    stack_bytes=8 * K,  # the Helium im2col columns of 4 pixels
    soft_double=False,  # its FPU has double precision (gcc's cortex-m55: __ARM_FP 14)
    # Helium's float lanes flush denormals (QEMU's mps3-an547: 2^-100 * 2^-30 is 0 on a vector,
    # 2^-130 on the scalar FPU); gcc -O2 vectorizes the LM engine's norms and RoPE otherwise
    vector_float_flushes=True,
)

# Alif Ensemble E7, its high-performance M55 (datasheet): 400 MHz, 256 KiB ITCM, 1 MiB DTCM at
# 0x20000000, the shared SRAM0 (4 MiB at 0x02000000) and SRAM1 (2.5 MiB at 0x08000000), 5.5 MiB MRAM.
# Alif white paper AWPR0003 "RAM Regions and Linker Files": SRAM0 0x02000000 4096 KB and SRAM1
# 0x08000000 2560 KB at 400 MHz (rev B), SRAM2 256 KB / SRAM3 1024 KB at 0x50000000 / 0x50800000 (global
# addresses) the RTSS-HP's ITCM / DTCM (its local 0x00000000 / 0x20000000); MRAM from 0x80000000
# (Alif's app_mem_regions.h: the HP core's image up to 0x580000 B).
ALIF_E7_HP = replace(
    CORTEX_M55, name="alif-e7-hp", part=True, clock_mhz=400, sram_bytes=1024 * K, flash_bytes=5632 * K,
    description="Alif Ensemble E7 HP core (Cortex-M55, 400 MHz): 1 MiB DTCM, 4 + 2.5 MiB shared SRAM, 5.5 MiB MRAM",
    banks=(MemoryBank("DTCM", 1024 * K, ".dtcm_arena", 0.5, "tcm", ("cpu", "dma"), True, 0x20000000),
           MemoryBank("SRAM0", 4096 * K, ".sram0", 1.0, "sram", ("cpu", "dma"), True, 0x02000000),
           MemoryBank("SRAM1", 2560 * K, ".sram1", 1.0, "sram", ("cpu", "dma"), True, 0x08000000)))

STM32U585 = replace(
    CORTEX_M33, name="stm32u585", part=True, clock_mhz=160, sram_bytes=768 * K, flash_bytes=2048 * K,
    description="ST STM32U585 (Cortex-M33, 160 MHz): 768 KiB SRAM1-3, 16 KiB SRAM4, 2 MiB flash",
    # RM0456: SRAM1 (192 K), SRAM2 (64 K) and SRAM3 (512 K) lie back to back from 0x20000000, one
    # region to a linker; SRAM4 sits in the low-power domain
    banks=(MemoryBank("SRAM123", 768 * K, ".sram123", 1.0, "sram", ("cpu", "dma"), True, 0x20000000),
           MemoryBank("SRAM4", 16 * K, ".sram4", 1.5, "sram", ("cpu", "lpdma"), True, 0x28000000)))

NRF5340 = replace(CORTEX_M33, name="nrf5340", part=True, clock_mhz=128, sram_bytes=512 * K, flash_bytes=1024 * K,
                  description="Nordic nRF5340 application core (Cortex-M33, 128 MHz): 512 KiB RAM, 1 MiB flash")
RP2350 = replace(
    CORTEX_M33, name="rp2350", part=True, clock_mhz=150, sram_bytes=512 * K, flash_bytes=4096 * K,
    description="Raspberry Pi RP2350 (Cortex-M33, 150 MHz): 520 KiB SRAM, 4 MiB QSPI flash (Pico 2)",
    # RP2350 datasheet, 2.2: SRAM0-7 (eight striped 64 KiB banks, one region to a linker) from
    # 0x20000000, SRAM8 and SRAM9 (4 KiB each, non-striped) from 0x20080000; no flash on the chip,
    # code and weights run in place from the board's QSPI flash (the Pico 2's 4 MiB)
    banks=(MemoryBank("SRAM0_7", 512 * K, ".sram0_7", 1.0, "sram", ("cpu", "dma"), True, 0x20000000),
           MemoryBank("SRAM8_9", 8 * K, ".sram8_9", 1.0, "sram", ("cpu", "dma"), True, 0x20080000)))

STM32F446 = replace(CORTEX_M4, name="stm32f446", part=True, clock_mhz=180, sram_bytes=128 * K, flash_bytes=512 * K,
                    description="ST STM32F446 (Cortex-M4F, 180 MHz): 128 KiB SRAM, 512 KiB flash")
NRF52840 = replace(CORTEX_M4, name="nrf52840", part=True, clock_mhz=64, sram_bytes=256 * K, flash_bytes=1024 * K,
                   description="Nordic nRF52840 (Cortex-M4F, 64 MHz): 256 KiB RAM, 1 MiB flash")
STM32H743 = replace(
    CORTEX_M7, name="stm32h743", part=True, clock_mhz=480, sram_bytes=512 * K, flash_bytes=2048 * K, tcm_bytes=128 * K,
    # With --l1 the L1 tiles are staged in the DTCM (the linker script's .dtcm section), not in SRAM.
    l1_attribute='__attribute__((section(".dtcm"))) ', l1_in_sram=False,
    description="ST STM32H743 (Cortex-M7, 480 MHz): 512 KiB AXI SRAM, 128 KiB DTCM as L1 (--l1), 2 MiB flash",
    # RM0433's memory map: the DTCM (CPU and MDMA only), AXI SRAM (D1), SRAM1-3 (D2, one block of
    # 288 KiB) and SRAM4 (D3); the D2/D3 banks cross the bus matrix: slower for the core
    banks=(MemoryBank("AXI_SRAM", 512 * K, ".axisram", 1.0, "sram", ("cpu", "dma"), True, 0x24000000),
           MemoryBank("DTCM", 128 * K, ".dtcm", 0.5, "tcm", ("cpu", "mdma"), True, 0x20000000, use="l1"),
           MemoryBank("SRAM123", 288 * K, ".sram123", 1.5, "sram", ("cpu", "dma"), True, 0x30000000),
           MemoryBank("SRAM4", 64 * K, ".sram4", 1.5, "sram", ("cpu", "dma"), True, 0x38000000)))

CORTEX_M = (CORTEX_M4, CORTEX_M7, CORTEX_M33, CORTEX_M55, STM32F446, STM32H743, NRF52840, STM32U585, NRF5340,
            RP2350, ALIF_E7_HP)
