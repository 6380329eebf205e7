"""GPT-2's byte-level BPE from a model folder's ``vocab.json`` and ``merges.txt``, through the
``tokenizers`` library."""
from __future__ import annotations

from pathlib import Path

from network_parser.errors import ModelFormatError


class Gpt2Tokenizer:
    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        folder = Path(folder)
        vocab, merges = folder / "vocab.json", folder / "merges.txt"
        for f in (vocab, merges):
            if not f.exists():
                raise ModelFormatError(f"{folder}: the GPT-2 tokenizer needs {f.name} (vocab.json and merges.txt)")
        try:
            self._tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
        except Exception as e:  # noqa: BLE001 - the library's own parse errors
            raise ModelFormatError(f"{folder}: unreadable tokenizer files ({e})") from None
        self._tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self._tok.decoder = decoders.ByteLevel()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)
