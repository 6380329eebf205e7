"""Portable C99 for the build machine: the reference target every other one is checked against."""
from .base import Backend

HOST = Backend(
    name="host",
    description="portable C99, built and run with the host gcc",
    template_dir="host",
    cc="gcc",
    cflags=("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"),
)
