"""Portable C99 for the build machine: the reference target every other one is checked against."""
from .base import Backend

HOST = Backend(
    name="host",
    description="portable C99, built and run with the host gcc",
    template_dir="host",
    cc="gcc",
    cflags=("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"),
    runs_on_host=True,
    # A scalar core copying tiles with loops: every tile and every copy has a fixed cost.
    cost_model=(("macs_per_cycle", 0.5), ("dma_bytes_per_cycle", 1.0), ("dma_setup_cycles", 40),
                ("tile_setup_cycles", 150)),
)
