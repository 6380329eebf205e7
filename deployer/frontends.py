"""The model formats the deployer reads, by file suffix: the kind of model each makes, how it is
read into that kind's IR, and the commands that take that kind. Every command looks a model up
here, so a format is added in one place and a command that does not handle a kind says so by name.

    front = frontend_for(path, "build")
    graph = front.read(path, options)   # network_parser.ir.Graph or a transformer IR
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from network_parser.errors import ModelFormatError, UsageError


def _read_tflite(path: Path, options):
    from network_parser.tflite_reader import read_tflite
    return read_tflite(path, options.cut)


def _read_onnx(path: Path, options):
    from network_parser.onnx_reader import read_onnx
    return read_onnx(path, options.input_layout, options.output_layout, options.input_type, options.cut)


def _read_safetensors(path: Path, options):
    from network_parser.decoders import read_decoder
    from network_parser.transformer_ir import lower
    return lower(read_decoder(path))


@dataclass(frozen=True)
class Frontend:
    suffix: str
    kind: str  # "network": a layer graph (network_parser.ir); "language_model": a transformer IR
    commands: tuple[str, ...]  # the deploy commands that take this kind
    read: Callable  # (path, pipeline.Options) -> the kind's IR, as the file holds it

    @property
    def label(self) -> str:
        """The kind in prose: "network", "language model"."""
        return self.kind.replace("_", " ")


NETWORK_COMMANDS = ("build", "verify", "suggest", "compare")
FRONTENDS = {f.suffix: f for f in (
    Frontend(".tflite", "network", NETWORK_COMMANDS, _read_tflite),
    Frontend(".onnx", "network", NETWORK_COMMANDS, _read_onnx),  # integer (NEMO, RequantShift) and QDQ graphs
    Frontend(".safetensors", "language_model", ("build", "verify", "suggest", "compare"), _read_safetensors),  # GPT-Neo, LLaMA family; `deploy generate` runs it
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
        raise UsageError(f"{path}: deploy {command} takes {takes} models, not {front.label}s (a {suffix} model: "
                         f"deploy {' / '.join(front.commands)})")
    return front
