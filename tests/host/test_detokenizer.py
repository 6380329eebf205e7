"""The on-device detokenizer, <ident>_tokens.c and .h beside the engine: every engine token id's
bytes from const tables, through inference_token_text(id, &text). A small C program built with
the host gcc (-std=c99 -Wall -Wextra -Werror) prints the bytes of a sequence of ids; they must be
the tokenizer library's decode of those ids (as UTF-8) wherever that is valid UTF-8, and for any
sequence the per-token bytes this test computes on its own from the tokenizer's files (the
byte-level alphabet written here from its definition and checked against the library's
pre-tokenizer). Special tokens have no bytes, ids outside the vocabulary give -1, two runs write
the same files, and token texts made to break C (quotes, backslashes, comment ends, newlines,
NUL, trigraphs) reach the C file only as numbers."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy

ROOT = Path(__file__).resolve().parents[2]
ST = ROOT / "tests" / "model_files" / "safetensors"
LLAMA, TALK, GPT2 = ST / "llama_tiny_random", ST / "tinytalk_gptneo_3m", ST / "gpt2_tokenizer"
FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no host gcc")

SENTENCES = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.",
             'The dog said: "Can I have a ball?" Tom smiled and gave him one!',
             "Mom was happy.\n\nThe end.")

# reads int32 ids from stdin; for each writes the int32 count inference_token_text returns, then
# that many bytes
MAIN = r"""#include <stdint.h>
#include <stdio.h>

#include "@HEADER@"

int main(void)
{
    int32_t id;
    while (fread(&id, sizeof id, 1, stdin) == 1) {
        const uint8_t *text = 0;
        int32_t n = inference_token_text(id, &text);
        if (inference_token_text(id, 0) != n || (n >= 0 && text == 0) || (n < 0 && text != 0)) {
            return 3;
        }
        if (n > INFERENCE_TOKEN_TEXT_MAX) {
            return 4;
        }
        fwrite(&n, sizeof n, 1, stdout);
        if (n > 0) {
            fwrite(text, 1, (size_t)n, stdout);
        }
    }
    return 0;
}
"""


# ---- what the tables must hold, from the tokenizer's files -------------------------------------

def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: a byte whose Latin-1 character is visible
    (printable, not the space) is that character; the others, in byte order, are U+0100 onwards."""
    out, spare = {}, 0x100
    for b in range(256):
        if chr(b).isprintable() and b != 0x20:
            out[chr(b)] = b
        else:
            out[chr(spare)] = b
            spare += 1
    return out


def test_the_byte_alphabet_is_the_librarys():
    """Every byte that valid UTF-8 holds, through the library's ByteLevel pre-tokenizer, is the
    character byte_alphabet gives it (and so is deployer.tokenizer's)."""
    from tokenizers import pre_tokenizers

    from deployer.tokenizer import byte_level_chars
    to_char = {b: ch for ch, b in byte_alphabet().items()}
    assert len(to_char) == 256 and to_char == byte_level_chars()
    texts = [bytes([b]) for b in range(0x80)] + [bytes([lead, 0x80]) for lead in range(0xC2, 0xE0)]
    texts += [bytes([0xC2, c]) for c in range(0x80, 0xC0)]
    texts += [bytes([lead, 0xA0 if lead == 0xE0 else 0x80, 0x80]) for lead in range(0xE0, 0xF0)]
    texts += [bytes([lead, 0x90 if lead == 0xF0 else 0x80, 0x80, 0x80]) for lead in range(0xF0, 0xF5)]
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    seen = set()
    for raw in texts:
        got = "".join(piece for piece, _ in pre.pre_tokenize_str(raw.decode("utf-8")))
        assert got == "".join(to_char[b] for b in raw)
        seen |= set(raw)
    assert len(seen) == 256 - 13  # C0, C1, F5..FF never occur in UTF-8


def byte_level_texts(token_of: dict[int, str], special: set[str]) -> dict[int, bytes]:
    """Tokenizer id -> bytes for a byte-level BPE: each character back to its byte (a token with
    a character outside the alphabet: its UTF-8, as the library's decoder does); special: none."""
    alpha = byte_alphabet()
    return {i: b"" if t in special else bytes(alpha[c] for c in t) if all(c in alpha for c in t) else t.encode()
            for i, t in token_of.items()}


def gpt2_texts() -> dict[int, bytes]:
    vocab = json.loads((GPT2 / "vocab.json").read_text(encoding="utf-8"))
    return byte_level_texts({i: t for t, i in vocab.items()}, set())


def json_texts(path: Path) -> dict[int, bytes]:
    """A tokenizer.json with a ByteLevel decoder: its model's vocabulary and its added tokens."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    assert spec["decoder"]["type"] == "ByteLevel"
    tokens = {i: t for t, i in spec["model"]["vocab"].items()}
    tokens.update({a["id"]: a["content"] for a in spec["added_tokens"]})
    return byte_level_texts(tokens, {a["content"] for a in spec["added_tokens"] if a["special"]})


# ---- the C side ------------------------------------------------------------------------------

def tokens_files(files: dict) -> tuple[str, str]:
    names = sorted(n for n in files if n.endswith(("_tokens.c", "_tokens.h")) and "/" not in n)
    assert len(names) == 2, sorted(files)
    return names[0], names[1]  # .c, .h


def build_printer(files: dict, folder: Path) -> Path:
    c, h = tokens_files(files)
    folder.mkdir(parents=True, exist_ok=True)
    for name in (c, h):
        (folder / name).write_text(files[name])
    (folder / "main.c").write_text(MAIN.replace("@HEADER@", h))
    exe = folder / "print_tokens"
    proc = subprocess.run(["gcc", *FLAGS, "-O2", "-I", str(folder), str(folder / "main.c"), str(folder / c), "-o",
                           str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def token_bytes(exe: Path, ids) -> list[bytes | None]:
    """Per id: its bytes, or None where inference_token_text returned -1."""
    proc = subprocess.run([str(exe)], input=np.asarray(list(ids), "<i4").tobytes(), capture_output=True, check=True)
    out, at, got = proc.stdout, 0, []
    while at < len(out):
        (n,) = struct.unpack_from("<i", out, at)
        at += 4
        assert n >= -1
        got.append(None if n == -1 else out[at:at + n])
        at += max(n, 0)
    assert len(got) == len(list(ids))
    return got


def printed(exe: Path, ids) -> bytes:
    got = token_bytes(exe, ids)
    assert None not in got
    return b"".join(got)


OUTSIDE = (-1, -2, -(1 << 31), (1 << 31) - 1)


class Engine:
    def __init__(self, dep, folder: Path, tokenizer, to_tokenizer: list[int], expected: dict[int, bytes]):
        self.files, self.tokenizer, self.to_tokenizer = dep.files, tokenizer, to_tokenizer
        self.vocab = dep.graph.config.vocab
        self.exe = build_printer(dep.files, folder)
        self.expected = [expected.get(t, b"") for t in to_tokenizer]  # engine id -> bytes
        self.to_engine = {t: i for i, t in enumerate(to_tokenizer)}

    def engine_ids(self, text: str) -> list[int]:
        return [self.to_engine[t] for t in self.tokenizer.encode(text)]

    def decoded(self, ids) -> bytes:
        return self.tokenizer.decode([self.to_tokenizer[i] for i in ids]).encode("utf-8")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from deployer.tokenizer import JsonTokenizer
    if not (LLAMA / "model.safetensors").exists():
        pytest.skip(f"{LLAMA} is not present")
    dep = deploy(LLAMA / "model.safetensors", Options())
    return Engine(dep, tmp_path_factory.mktemp("llama"), JsonTokenizer(LLAMA), list(range(dep.graph.config.vocab)),
                  json_texts(LLAMA / "tokenizer.json"))


@pytest.fixture(scope="module")
def talk(tmp_path_factory):
    from deployer.tokenizer import Gpt2Tokenizer
    if not (TALK / "model.safetensors").exists() or not (GPT2 / "vocab.json").exists():
        pytest.skip(f"{TALK} or {GPT2} is not present")
    dep = deploy(TALK / "model.safetensors", Options(language=LanguageFlags(tokenizer=GPT2)))
    to_gpt2 = json.loads((TALK / "pruned_to_gpt2_ids.json").read_text())
    assert json.loads(dep.files["token_ids.json"]) == to_gpt2
    return Engine(dep, tmp_path_factory.mktemp("talk"), Gpt2Tokenizer(GPT2), to_gpt2, gpt2_texts())


@pytest.fixture(params=["llama", "talk"])
def engine(request):
    return request.getfixturevalue(request.param)


def test_every_token_is_its_bytes_and_outside_ids_give_minus_one(engine):
    got = token_bytes(engine.exe, [*range(engine.vocab), engine.vocab, engine.vocab + 1, *OUTSIDE])
    assert got[:engine.vocab] == engine.expected
    assert got[engine.vocab:] == [None] * (2 + len(OUTSIDE))


def test_sentences_print_as_the_tokenizer_decodes_them(engine):
    for text in SENTENCES:
        ids = engine.engine_ids(text)
        assert printed(engine.exe, ids) == engine.decoded(ids) == text.encode()


def test_characters_split_across_tokens_come_out_whole(engine):
    """Multi-byte characters with their bytes in separate tokens (the byte tokens: both engines
    keep all 256): the printed bytes are the text's UTF-8, as decode gives it; a token alone is
    not valid UTF-8."""
    text = 'Lily said: "I like the caf\u00e9!" \U0001F600 \u2603 \u65e5\u672c, 100% */ \\ ok\ttab'
    to_char = {b: c for c, b in byte_alphabet().items()}
    by_token = engine.tokenizer._tok.get_vocab()
    ids = [engine.to_engine[by_token[to_char[b]]] for b in text.encode()]
    assert printed(engine.exe, ids) == engine.decoded(ids) == text.encode()
    assert any(len(engine.expected[i]) == 1 and engine.expected[i][0] >= 0x80 for i in ids)
    own = engine.tokenizer.encode(text)
    if all(t in engine.to_engine for t in own):  # llama: its own BPE on the same text
        assert printed(engine.exe, [engine.to_engine[t] for t in own]) == text.encode()


def test_arbitrary_sequences_are_the_tokens_bytes_one_after_another(engine):
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5, 8, 64, 500, 500):
        ids = rng.integers(0, engine.vocab, n).tolist()
        got = printed(engine.exe, ids)
        assert got == b"".join(engine.expected[i] for i in ids)
        # decode is the bytes as UTF-8, each broken sequence one U+FFFD (the same bytes where valid)
        assert engine.decoded(ids) == got.decode("utf-8", "replace").encode()


def test_special_tokens_give_no_bytes(llama):
    spec = json.loads((LLAMA / "tokenizer.json").read_text(encoding="utf-8"))
    special = sorted(a["id"] for a in spec["added_tokens"] if a["special"])
    assert special == [0, 1, 2]
    assert token_bytes(llama.exe, special) == [b"", b"", b""]
    ids = [1, *llama.engine_ids(SENTENCES[0]), 2, 0]
    assert printed(llama.exe, ids) == llama.decoded(ids) == SENTENCES[0].encode()
    c, _ = tokens_files(llama.files)
    assert "3 of the 512 ids have none" in llama.files[c.replace(".c", ".h")]


def test_the_table_is_packed_with_an_index_as_narrow_as_the_text_allows(llama, talk):
    """A length byte a token and a start per group of 16 tokens, each as narrow as it can be."""
    for engine, stype in ((llama, "uint16_t"), (talk, "uint32_t")):
        c, h = tokens_files(engine.files)
        total = sum(map(len, engine.expected))
        assert f"static const uint8_t token_bytes[{total}] = {{" in engine.files[c]
        assert f"static const uint8_t token_length[{engine.vocab}] = {{" in engine.files[c]
        assert f"static const {stype} group_start[{-(-engine.vocab // 16)}] = {{" in engine.files[c]
        assert f"#define INFERENCE_TOKEN_TEXT_MAX {max(map(len, engine.expected))} " in engine.files[h]
        assert ("uint32_t" if total - len(engine.expected[-1]) > 0xFFFF else "uint16_t") == stype


def test_the_table_needs_no_libc(engine, tmp_path):
    """Freestanding, no library: the object file has no undefined symbol."""
    c, h = tokens_files(engine.files)
    for name in (c, h):
        (tmp_path / name).write_text(engine.files[name])
    obj = tmp_path / "tokens.o"
    proc = subprocess.run(["gcc", *FLAGS, "-pedantic", "-ffreestanding", "-fno-builtin", "-O2", "-c",
                           str(tmp_path / c), "-o", str(obj)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    nm = shutil.which("nm")
    if nm:
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        assert undefined.strip() == ""


def test_two_runs_write_the_same_files(llama, talk, tmp_path):
    """The same bytes from a second deploy in this process, and from the CLI in fresh processes
    with other string hash seeds."""
    again = deploy(TALK / "model.safetensors", Options(language=LanguageFlags(tokenizer=GPT2)))
    for name in tokens_files(talk.files):
        assert again.files[name] == talk.files[name]
    for seed in ("1", "2"):
        out = tmp_path / f"out{seed}"
        proc = subprocess.run([sys.executable, "-c", "import sys; from deployer.cli import main; sys.exit(main())",
                               str(LLAMA / "model.safetensors"), "-o", str(out)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for name in tokens_files(llama.files):
            assert (out / name).read_bytes() == llama.files[name].encode()


# ---- tokenizers made here ----------------------------------------------------------------------

HOSTILE = ('"', "\\", "*/", "/*", "//", "??/", "\n", "\r\n", "\x00", "\\\n", '"); }; int x = 1; /*',
           "*/ #include <stdio.h>\n#define X \"", "??=??(??)", "\u2028\u202e", "'\\x41'", "caf\u00e9\n\u00e9",
           "\u00e9\u00e8")


def hostile_tokenizer(folder: Path) -> dict[int, bytes]:
    """A byte-level BPE tokenizer.json whose vocabulary and added tokens (special and not) are
    text made to break C; returns the bytes each id stands for."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    alpha = byte_alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alpha, key=alpha.get))}
    for t in HOSTILE:
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken("*/ not special \"\\\n\x00", special=False)])
    tok.add_special_tokens([AddedToken("<|*/ special \"\\\n\x00|>", special=True)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    special = {"<|*/ special \"\\\n\x00|>"}
    expected = {i: b"" if (t := tok.id_to_token(i)) in special else
                bytes(alpha[c] for c in t) if all(c in alpha for c in t) else t.encode()
                for i in range(tok.get_vocab_size(with_added_tokens=True))}
    assert expected[vocab["\u00e9\u00e8"]] == b"\xe9\xe8"  # in the alphabet: its bytes, not its UTF-8
    assert expected[vocab["caf\u00e9\n\u00e9"]] == "caf\u00e9\n\u00e9".encode()  # a newline: the UTF-8
    return expected


def only_numbers(c_text: str) -> None:
    """Past its header comment, the C file holds no text of the model: ASCII, no quote but the
    #include's, no backslash, no comment opener, no trigraph."""
    body = c_text[c_text.index("*/") + 2:]
    assert c_text.isascii() and "\x00" not in c_text and "\\" not in c_text and "??" not in c_text
    assert "/*" not in body and "//" not in body
    assert [ln for ln in body.splitlines() if '"' in ln] in ([], [ln for ln in body.splitlines()
                                                                  if ln.startswith('#include "')])


def test_hostile_token_texts_cannot_break_the_c_file(llama, tmp_path):
    from deployer.tokenizer import JsonTokenizer
    expected = hostile_tokenizer(tmp_path / "tok")
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(tokenizer=tmp_path / "tok")))
    c, h = tokens_files(dep.files)
    only_numbers(dep.files[c])
    for name in (c, h):
        assert dep.files[name].isascii() and not any(ch in dep.files[name] for ch in "\\\0\r")
        assert not any(t in dep.files[name] for t in HOSTILE if len(t) > 2)
    # the header holds counts, never token text: the same as the model's own tokenizer's, numbers aside
    assert re.sub(r"[0-9]+", "N", dep.files[h]) == re.sub(r"[0-9]+", "N", llama.files[h])
    exe = build_printer(dep.files, tmp_path / "c")
    vocab = dep.graph.config.vocab
    want = [expected.get(i, b"") for i in range(vocab)]  # the model's ids past the tokenizer's: none
    assert token_bytes(exe, [*range(vocab), vocab, -1]) == [*want, None, None]
    tok = JsonTokenizer(tmp_path / "tok")
    checked = 0
    for t in (*HOSTILE, "*/ not special \"\\\n\x00"):  # one token each: decode's text where it is UTF-8
        i = tok._tok.token_to_id(t)
        if expected[i].decode("utf-8", "replace").encode() == expected[i]:
            assert printed(exe, [i]) == tok.decode([i]).encode() == expected[i]
            checked += 1
    assert checked == len(HOSTILE)  # all but the Latin-1 pair, and the added token
    assert printed(exe, [len(expected) - 1]) == b""  # the special token


def sentencepiece_tokenizer(folder: Path, decoder) -> None:
    """A SentencePiece-style BPE (U+2581 for spaces, <0xNN> byte fallback, <unk> <s> </s>
    special), with the given decoder."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    words = ["\u2581", "\u2581Hello", "\u2581world", "\u2581the", "\u2581a\u2581b", "He", "llo", "e", "l", "o", "H",
             "w", "r", "d", "t", "h", "a", "b", "\u2581w", "\u2581t", "\u2581H", "or", "ld", "\u2581\u2581"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))


@pytest.mark.parametrize("kind", ["llama2-sequence", "metaspace"])
def test_sentencepiece_spaces_and_byte_fallback(kind, tmp_path):
    """U+2581 is a space; with a ByteFallback decoder a <0xNN> token is its byte (without one,
    the library leaves it as text, and so does the table). The text's first token keeps its
    space, where the library's decode drops it: the header says so."""
    if not (LLAMA / "model.safetensors").exists():
        pytest.skip(f"{LLAMA} is not present")
    from tokenizers import decoders

    from deployer.tokenizer import JsonTokenizer
    decoder = (decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                  decoders.Strip(" ", 1, 0)]) if kind == "llama2-sequence" else decoders.Metaspace())
    sentencepiece_tokenizer(tmp_path / "tok", decoder)
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(tokenizer=tmp_path / "tok")))
    c, h = tokens_files(dep.files)
    assert "the first token of a text keeps that space here" in dep.files[h]
    exe = build_printer(dep.files, tmp_path / "c")
    tok = JsonTokenizer(tmp_path / "tok")
    vocab = tok._tok.get_vocab()
    fallback = kind == "llama2-sequence"
    want = {i: b"" if t in ("<unk>", "<s>", "</s>") else
            bytes([int(t[3:5], 16)]) if fallback and t.startswith("<0x") else t.replace("\u2581", " ").encode()
            for t, i in vocab.items()}
    got = token_bytes(exe, range(dep.graph.config.vocab))
    assert got == [want.get(i, b"") for i in range(dep.graph.config.vocab)]
    assert got[vocab["\u2581Hello"]] == b" Hello" and got[vocab["<0xE2>"]] == (b"\xe2" if fallback else b"<0xE2>")
    text = "Hello world \u20ac the \U0001F600"
    ids = [1, *tok.encode(text), 2]
    assert vocab["<0xE2>"] in ids  # the euro sign by byte fallback
    decoded = tok.decode(ids)
    if fallback:
        assert decoded == text and printed(exe, ids) == b" " + text.encode()
    else:  # the library's Metaspace alone: byte tokens stay '<0xNN>'
        assert printed(exe, ids) == b" " + decoded.encode()


def test_a_decoder_not_token_by_token_gets_no_table(tmp_path):
    """WordPiece's '##' joins a token to the one before and spaces the others: no per-token bytes
    say that, so no table (the tokenizer is still copied)."""
    if not (LLAMA / "model.safetensors").exists():
        pytest.skip(f"{LLAMA} is not present")
    from tokenizers import Tokenizer, decoders, models
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "hello": 1, "##s": 2}, unk_token="[UNK]"))
    tok.decoder = decoders.WordPiece()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    dep = deploy(LLAMA / "model.safetensors", Options(language=LanguageFlags(tokenizer=tmp_path / "tok")))
    assert "tokenizer/tokenizer.json" in dep.files
    assert not any(n.endswith(("_tokens.c", "_tokens.h")) for n in dep.files)
    assert "_tokens.c" not in dep.files["CMakeLists.txt"]
    assert json.loads(dep.files["manifest.json"])["language_model"]["detokenizer"] is None
    assert [n for n in dep.notes if "detokenizer" in n] == [
        "no on-device detokenizer (llama_tiny_random_tokens.c): the tokenizer's decoder (WordPiece) does not turn "
        "each token into its own bytes"]


def test_the_library_and_the_manifest_name_the_table(engine):
    c, _ = tokens_files(engine.files)
    assert f"    {c}\n" in engine.files["CMakeLists.txt"]
    assert json.loads(engine.files["manifest.json"])["language_model"]["detokenizer"] == c
