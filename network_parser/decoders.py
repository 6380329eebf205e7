"""A ``.safetensors`` decoder by its config.json's ``model_type``: the family's reader, into the
one block specification and weight names (``network_parser.decoder.Checkpoint``)."""
from __future__ import annotations

from pathlib import Path

from .decoder import Checkpoint
from .errors import ModelFormatError, UnsupportedOperator
from .gptneo import as_checkpoint, read_gptneo
from .llama import FAMILY as LLAMA_FAMILY, model_type, read_llama
from .safetensors_reader import read_safetensors
from .side_files import brief

MODEL_TYPES = ("gpt_neo", *LLAMA_FAMILY)


def read_decoder(path: str | Path) -> Checkpoint:
    path = Path(path)
    kind = model_type(path)
    if kind not in MODEL_TYPES:
        read_safetensors(path)  # the container's own faults first: it is the file the user named
    if kind is None and not path.with_name("config.json").exists():
        raise ModelFormatError(f"{path}: a decoder needs its config.json beside it "
                               f"({path.with_name('config.json')} is missing)")
    if kind == "gpt_neo":
        return as_checkpoint(read_gptneo(path))
    if kind in LLAMA_FAMILY:
        return read_llama(path)
    raise UnsupportedOperator(f"{path.with_name('config.json')}: model_type {brief(kind)}; supported: "
                              f"{', '.join(MODEL_TYPES)}")
