"""A model's tokenizer through the ``tokenizers`` library: its own ``tokenizer.json`` (LLaMA-family
checkpoints), or GPT-2's byte-level BPE from ``vocab.json`` and ``merges.txt``. The files are read
once, checked, and handed to the library (and to the output folder) as read: nothing opens them
a second time.

    tok = open_tokenizer(folder)       # tokenizer.json when the folder has one, else GPT-2's files
    tok, files = open_tokenizer_and_files(folder)   # and name -> bytes, to copy beside the engine
    table = token_texts(tok)           # every token's bytes (the on-device detokenizer)
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


def open_tokenizer_and_files(folder: str | Path, given: bool = False) -> tuple[JsonTokenizer | Gpt2Tokenizer,
                                                                                   dict[str, bytes]]:
    """The tokenizer (open_tokenizer) and the files to copy beside the engine (name -> bytes),
    each read and checked by the library first."""
    tok = open_tokenizer(folder, given)
    if isinstance(tok, JsonTokenizer):
        return tok, {JSON_FILE: tok.raw}
    return tok, read_gpt2_files(folder, given).raw


# ---- every token's bytes (the on-device detokenizer's table) ---------------------------------

def byte_level_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the character that stands for it in a token string.
    The visible bytes of Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other
    68 (control characters, space, DEL, no-break space, soft hyphen) take U+0100, U+0101, ... in
    byte order."""
    visible = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    moved = iter(range(0x100, 0x200))
    return {b: chr(b) if b in visible else chr(next(moved)) for b in range(256)}


_CHAR_BYTE = {ch: b for b, ch in byte_level_chars().items()}

# Decoder steps whose effect on a text is token by token (so a token's bytes are its own), in the
# library's names. "fused": after Fuse or ByteLevel the tokens are one text; only its edges may
# change then (Strip), which a table of tokens cannot say: the header tells the application.
_PER_TOKEN = ("ByteLevel", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip")


def _decoder_steps(spec) -> list[dict] | None:
    """The decoder's steps in order (a Sequence's flattened), or None when one of them is not a
    token-by-token step this table can reproduce exactly (WordPiece's '##', BPEDecoder's end-of-
    word suffix, CTC, a regular-expression Replace, no decoder at all: the library then joins
    tokens with spaces)."""
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "Sequence":
        steps = []
        for part in spec.get("decoders") or ():
            inner = _decoder_steps(part)
            if inner is None:
                return None
            steps += inner
        return steps
    if spec.get("type") not in _PER_TOKEN:
        return None
    if spec["type"] == "Replace" and not (isinstance(spec.get("pattern"), dict)
                                          and isinstance(spec["pattern"].get("String"), str)
                                          and spec["pattern"]["String"] and isinstance(spec.get("content"), str)):
        return None
    if spec["type"] == "Metaspace" and not (isinstance(spec.get("replacement"), str) and len(spec["replacement"]) == 1):
        return None
    counts = ("start", "stop")
    if spec["type"] == "Strip" and not (isinstance(spec.get("content"), str) and len(spec["content"]) == 1
                                        and all(isinstance(spec.get(k), int) and spec[k] >= 0 for k in counts)):
        return None
    return [spec]


def _checked_steps(steps: list[dict]) -> tuple[list[dict], list[str]] | None:
    """The steps applied to each token alone, and the text-level effects left out (for the
    header); None when a step acts on bytes or on the joined text in a way a table cannot
    reproduce."""
    state, per_token, edges = "text", [], []  # text: per-token strings; bytes: after ByteFallback; fused
    for s in steps:
        kind = s["type"]
        if kind == "Fuse":
            state = "fused"
        elif kind == "Strip":
            if state == "fused" and s["stop"] == 0:
                if s["start"]:
                    edges.append("strip")  # the joined text's first characters: the text's start
            elif state == "text":
                per_token.append(s)
            else:
                return None
        elif state != "text":
            return None  # a per-token step after the tokens were joined or turned into bytes
        elif kind == "ByteLevel":
            per_token.append(s)
            state = "fused"  # the library joins the bytes of all tokens into one text here
        elif kind == "ByteFallback":
            per_token.append(s)
            state = "bytes"
        else:
            if kind == "Metaspace" and s.get("prepend_scheme", "always") != "never" and s.get("add_prefix_space", True):
                edges.append("metaspace")  # the first token's replacement characters are dropped
            per_token.append(s)
    return per_token, edges


def _strip(token: str, content: str, start: int, stop: int) -> str:
    lead = 0
    while lead < min(start, len(token)) and token[lead] == content:
        lead += 1
    end = len(token)
    while len(token) - end < stop and end > lead and token[end - 1] == content:
        end -= 1
    return token[lead:end]


def _fallback_byte(token: str) -> int | None:
    """A byte-fallback token '<0xNN>' -> NN, as the library reads it (six bytes, two hex digits)."""
    if len(token) == 6 and token.isascii() and token.startswith("<0x") and token.endswith(">"):
        digits = token[3:5]
        if all(ch in "0123456789abcdefABCDEF" for ch in digits.lstrip("+")) and digits.lstrip("+"):
            return int(digits.lstrip("+"), 16)
    return None


def _token_bytes(token: str, steps: list[dict]) -> bytes:
    """One token through the decoder's per-token steps, as the bytes it stands for."""
    piece: str | bytes = token
    for s in steps:
        if isinstance(piece, bytes):
            break  # ByteLevel and ByteFallback give the token's final bytes
        kind = s["type"]
        if kind == "Replace":
            piece = piece.replace(s["pattern"]["String"], s["content"])
        elif kind == "Metaspace":
            piece = piece.replace(s["replacement"], " ")
        elif kind == "Strip":
            piece = _strip(piece, s["content"], s["start"], s["stop"])
        elif kind == "ByteFallback":
            b = _fallback_byte(piece)
            piece = piece if b is None else bytes([b])
        elif kind == "ByteLevel":  # a token with a character outside the alphabet stays as it is
            piece = (bytes(_CHAR_BYTE[ch] for ch in piece) if all(ch in _CHAR_BYTE for ch in piece)
                     else piece.encode("utf-8"))
    return piece if isinstance(piece, bytes) else piece.encode("utf-8")


@dataclass(frozen=True)
class TokenTexts:
    texts: list[bytes]  # tokenizer id -> the bytes it stands for (b"" for special tokens and unused ids)
    edges: tuple[str, ...]  # text-level effects of the decoder left out: "metaspace", "strip"


def token_texts(tok: JsonTokenizer | Gpt2Tokenizer) -> TokenTexts | None:
    """Every token id's bytes, as the library's decoder makes them (byte-level BPE's alphabet back
    to bytes, SentencePiece's '▁' to a space, '<0xNN>' byte-fallback tokens to their byte), so
    that the bytes of a sequence of ids, one token after another, are the UTF-8 of
    ``tok.decode(ids)`` wherever that is valid UTF-8 (and edges is empty; see TokenTexts).
    Special tokens (added tokens marked special, which decode skips) and ids no token has: no
    bytes. None when the tokenizer's decoder is not token by token (see _decoder_steps)."""
    lib = tok._tok
    steps = _decoder_steps(_decoder_spec(tok))
    checked = _checked_steps(steps) if steps is not None else None
    if checked is None:
        return None
    per_token, edges = checked
    special = {t.content for t in lib.get_added_tokens_decoder().values() if t.special}
    texts = []
    for i in range(tok.size):
        token = lib.id_to_token(i)
        texts.append(b"" if token is None or token in special else _token_bytes(token, per_token))
    return TokenTexts(texts, tuple(dict.fromkeys(edges)))


def _decoder_spec(tok: JsonTokenizer | Gpt2Tokenizer):
    """The library's decoder as tokenizer.json writes it; None without one, "?" for one the
    library cannot serialise (not one _decoder_steps knows)."""
    import json

    if tok._tok.decoder is None:
        return None
    try:
        return json.loads(tok._tok.decoder.__getstate__())
    except Exception:  # noqa: BLE001 - whatever the library raises
        return "?"


def decoder_name(tok: JsonTokenizer | Gpt2Tokenizer) -> str:
    """The decoder's kind as tokenizer.json names it (its steps' for a Sequence), for messages."""
    spec = _decoder_spec(tok)
    if not isinstance(spec, dict):
        return "none" if spec is None else "unknown"
    if spec.get("type") == "Sequence":
        return "Sequence of " + ", ".join(str(d.get("type")) for d in spec.get("decoders") or () if isinstance(d, dict))
    return str(spec.get("type"))
