"""Targets by name. The pipeline looks a target up here and never branches on its name."""
from .base import Backend
from .cortexm import CORTEX_M
from .gap8 import GAP8
from .host import HOST

BACKENDS: dict[str, Backend] = {b.name: b for b in (HOST, GAP8, *CORTEX_M)}

__all__ = ["Backend", "BACKENDS"]
