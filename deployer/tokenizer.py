"""A model's tokenizer through the ``tokenizers`` library: its own ``tokenizer.json`` (LLaMA-family
checkpoints), or GPT-2's byte-level BPE from ``vocab.json`` and ``merges.txt``. The files are read
once, checked, and handed to the library (and to the output folder) as read: nothing opens them
a second time.

    tok = open_tokenizer(folder)       # tokenizer.json when the folder has one, else GPT-2's files
    files = tokenizer_files(folder)    # name -> bytes, to copy beside the engine
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from network_parser.errors import DeployError, ModelFormatError, UsageError
from network_parser.side_files import MAX_ID, TOKENIZER_BYTES, brief, decode_text, is_id, parse_json, read_side_file

FILES = ("vocab.json", "merges.txt")
JSON_FILE = "tokenizer.json"


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
    """The folder holds a tokenizer: its tokenizer.json or GPT-2's two files."""
    folder = Path(folder)
    return (folder / JSON_FILE).exists() or all((folder / name).exists() for name in FILES)


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


class JsonTokenizer:
    """A ``tokenizer.json`` as the library reads it (its model, pre-tokenizer, decoder and added
    tokens: what the checkpoint's authors shipped)."""

    def __init__(self, folder: str | Path, given: bool = False):
        self.raw = read_json_tokenizer(folder, given)
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_str(decode_text(self.raw, where=str(Path(folder) / JSON_FILE)))
        except DeployError:
            raise
        except Exception as e:  # noqa: BLE001 - the library's own checks
            raise (UsageError if given else ModelFormatError)(f"{Path(folder) / JSON_FILE}: not a tokenizer the "
                                                              f"tokenizers library reads ({brief(str(e))})") from None
        self.size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


def read_json_tokenizer(folder: str | Path, given: bool = False) -> bytes:
    folder = Path(folder)
    error: type[DeployError] = UsageError if given else ModelFormatError
    name = f"--tokenizer {folder / JSON_FILE}" if given else str(folder / JSON_FILE)
    raw = read_side_file(folder / JSON_FILE, what="the tokenizer", max_bytes=TOKENIZER_BYTES, error=error, name=name)
    if not isinstance(parse_json(raw, where=name, error=error), dict):
        raise error(f"{name}: expected a JSON object")
    return raw


def open_tokenizer(folder: str | Path, given: bool = False) -> JsonTokenizer | Gpt2Tokenizer:
    folder = Path(folder)
    if (folder / JSON_FILE).exists() or (folder / JSON_FILE).is_symlink():
        return JsonTokenizer(folder, given)
    return Gpt2Tokenizer(folder, given)


def tokenizer_files(folder: str | Path, given: bool = False) -> dict[str, bytes]:
    """The files to copy beside the engine, each read and checked by the library first."""
    tok = open_tokenizer(folder, given)
    if isinstance(tok, JsonTokenizer):
        return {JSON_FILE: tok.raw}
    return read_gpt2_files(folder, given).raw
