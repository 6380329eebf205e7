"""The model formats the deployer reads, by file suffix: the kind of model each makes and the
commands that take that kind. Every command looks a model up here, so a format is added in one
place and a command that does not handle a kind says so by name."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from network_parser.errors import ModelFormatError, UsageError


@dataclass(frozen=True)
class Frontend:
    suffix: str
    kind: str  # "network": a layer graph (network_parser.ir); "language model": a transformer IR
    commands: tuple[str, ...]  # the deploy commands that take this kind


NETWORK_COMMANDS = ("build", "verify", "suggest", "compare")
FRONTENDS = {f.suffix: f for f in (
    Frontend(".tflite", "network", NETWORK_COMMANDS),  # network_parser.tflite_reader
    Frontend(".onnx", "network", NETWORK_COMMANDS),  # network_parser.onnx_reader / onnx_qdq: integer, QDQ
    Frontend(".safetensors", "language model", ("build",)),  # GPT-Neo; then `deploy generate` runs the folder
)}


def frontend_for(path: Path, command: str | None = None) -> Frontend:
    """The frontend of ``path`` by its suffix; a model error for an unknown one, a usage error
    when ``command`` does not take that kind of model."""
    suffix = Path(path).suffix.lower()
    front = FRONTENDS.get(suffix)
    if front is None:
        raise ModelFormatError(f"{path}: unknown model format '{suffix}' (supported: "
                               f"{', '.join(FRONTENDS)})")
    if command is not None and command not in front.commands:
        takes = ", ".join(s for s, f in FRONTENDS.items() if command in f.commands)
        raise UsageError(f"{path}: deploy {command} takes {takes} models, not {front.kind}s (a {suffix} model: "
                         f"deploy {' / '.join(front.commands)})")
    return front
