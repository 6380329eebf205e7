"""Targets by name. The pipeline looks a target up here and never branches on its name."""
from .base import Backend
from .host import HOST

BACKENDS: dict[str, Backend] = {b.name: b for b in (HOST,)}

__all__ = ["Backend", "BACKENDS"]
