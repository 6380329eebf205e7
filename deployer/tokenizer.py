"""GPT-2's byte-level BPE from a model folder's ``vocab.json`` and ``merges.txt``, through the
``tokenizers`` library. The files are read once, checked, and handed to the library (and to the
output folder) as read: nothing opens them a second time."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from network_parser.errors import DeployError, ModelFormatError, UsageError
from network_parser.side_files import MAX_ID, TOKENIZER_BYTES, brief, decode_text, is_id, parse_json, read_side_file

FILES = ("vocab.json", "merges.txt")


@dataclass(frozen=True)
class Gpt2Files:
    vocab: dict[str, int]  # token -> id
    merges: list[tuple[str, str]]  # in rank order
    raw: dict[str, bytes]  # file name -> the bytes read and checked, to copy as they are

    @property
    def size(self) -> int:
        """The vocabulary's size: one past its largest id."""
        return max(self.vocab.values()) + 1


def present(folder: Path) -> bool:
    return all((Path(folder) / name).exists() for name in FILES)


def read_gpt2_files(folder: str | Path, given: bool = False) -> Gpt2Files:
    """vocab.json (a JSON object token -> id) and merges.txt (a '#version' line, then one merge a
    line: two tokens of the vocabulary whose joining is one too), checked. ``given``: the folder
    came from --tokenizer (its faults are then the user's: UsageError)."""
    folder = Path(folder)
    error: type[DeployError] = UsageError if given else ModelFormatError
    label = (lambda n: f"--tokenizer {folder / n}") if given else (lambda n: str(folder / n))
    if not present(folder):
        raise error(f"{'--tokenizer ' if given else ''}{folder}: the GPT-2 tokenizer needs vocab.json and merges.txt"
                    + ("" if given else "; pass --tokenizer DIR"))
    raw = {name: read_side_file(folder / name, what=f"the tokenizer's {what}", max_bytes=TOKENIZER_BYTES, error=error,
                                name=label(name)) for name, what in zip(FILES, ("vocabulary", "merges"))}
    vocab = parse_json(raw["vocab.json"], where=label("vocab.json"), error=error)
    if not isinstance(vocab, dict) or not vocab:
        raise error(f"{label('vocab.json')}: expected a non-empty JSON object of token -> id, got {brief(vocab, 16)}")
    for token, i in vocab.items():
        if not is_id(i) or not 0 <= i <= MAX_ID:
            raise error(f"{label('vocab.json')}: token {brief(token, 16)} has the id {brief(i, 16)}; ids are "
                        f"integers from 0 to {MAX_ID}")
    text = decode_text(raw["merges.txt"], where=label("merges.txt"), error=error)
    merges = []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line or (n == 1 and line.startswith("#version")):
            continue
        pair = line.split(" ")
        if len(pair) != 2 or not all(t in vocab for t in pair) or pair[0] + pair[1] not in vocab:
            raise error(f"{label('merges.txt')}: line {n} is not two tokens of vocab.json that join into a third")
        merges.append((pair[0], pair[1]))
    return Gpt2Files(vocab, merges, raw)


class Gpt2Tokenizer:
    def __init__(self, folder: str | Path, given: bool = False):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        files = read_gpt2_files(folder, given)
        try:
            self._tok = Tokenizer(models.BPE(files.vocab, files.merges))
        except Exception as e:  # noqa: BLE001 - the library's own checks
            raise (UsageError if given else ModelFormatError)(f"{folder}: unusable tokenizer files "
                                                              f"({brief(str(e))})") from None
        self._tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self._tok.decoder = decoders.ByteLevel()
        self.size = files.size

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)
