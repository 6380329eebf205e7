"""`deploy generate OUT_DIR "prompt"`: build a language-model engine from its output folder for
this machine, tokenize the prompt with the model's tokenizer (its tokenizer.json, or GPT-2's BPE
files), decode greedily, time it."""
from __future__ import annotations

import hashlib
import re
import struct
import subprocess
import time
from pathlib import Path

from network_parser.errors import DeployError, UsageError
from network_parser.side_files import (ENGINE_SOURCE_BYTES, MANIFEST_BYTES, MAX_ID, TOKEN_IDS_BYTES, brief, is_id,
                                       read_json, read_json_object, read_side_file, token_ids)

from .output import MARKER, read_marker, would_lose
from .tokenizer import open_tokenizer
from .verify import BuildError, compile_files

HARNESS = Path(__file__).resolve().parent / "harness" / "generate_main.c"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")


def _check_ours(out_dir: Path) -> dict[str, str]:
    """What is compiled and run here must be what deploy wrote: its marker present and one deploy
    wrote, nothing added or changed since. A marker that is missing, unreadable or not ours fails
    closed: the folder is not ours. Returns the marker's digests (name -> sha256)."""
    if not out_dir.is_dir():
        what = "not a folder" if out_dir.exists() else "no such folder"
        raise UsageError(f"{out_dir}: not a deploy output folder ({what})")
    marker = read_marker(out_dir)
    if marker is None:
        why = f"no {MARKER}" if not (out_dir / MARKER).exists() and not (out_dir / MARKER).is_symlink() else \
            f"its {MARKER} is not one deploy wrote"
        raise UsageError(f"{out_dir}: not a deploy output as deploy wrote it ({why}); deploy generate builds only "
                         f"what deploy wrote: run deploy again")
    if would_lose(out_dir) != []:
        raise UsageError(f"{out_dir}: not a deploy output as deploy wrote it (files added or changed since); deploy "
                         f"generate builds only what deploy wrote: run deploy again")
    return marker["files"]


def _manifest(out_dir: Path) -> dict:
    path = out_dir / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"{out_dir}: not a deploy output folder (no manifest.json)")
    manifest = read_json_object(path, what="the output folder's manifest", max_bytes=MANIFEST_BYTES, error=UsageError)
    if manifest.get("kind") != "language_model":
        raise UsageError(f"{out_dir}: holds a {brief(manifest.get('kind', 'CNN'), 16)} engine (says its manifest.json); "
                         f"deploy generate runs language models (deploy MODEL.safetensors -o {out_dir})")
    section = manifest.get("language_model")
    section = section if isinstance(section, dict) else {}
    config, eos = section.get("config"), section.get("eos_token_id")
    # what the harness is built from and fed: a C identifier (it names files), positive sizes
    if not (isinstance(manifest.get("library"), str) and _IDENTIFIER.fullmatch(manifest["library"])
            and isinstance(config, dict)
            and all(is_id(config.get(k)) and 0 < config[k] <= MAX_ID for k in ("vocab", "max_positions"))
            and (eos is None or is_id(eos) and 0 <= eos < config["vocab"])):
        raise UsageError(f"{path}: not a manifest deploy wrote (library, language_model.config.vocab, "
                         f"language_model.config.max_positions or language_model.eos_token_id is missing or wrong)")
    return {**section, "library": manifest["library"]}  # the language model's part, and the engine's name


def _token_ids(out_dir: Path, vocab: int, gpt2_vocab: int) -> list[int] | None:
    """token_ids.json: engine id i is GPT-2 id map[i], one for each of the engine's ``vocab`` ids."""
    path = out_dir / "token_ids.json"
    if not path.exists() and not path.is_symlink():
        return None
    ids = read_json(path, what="the engine's GPT-2 token ids", max_bytes=TOKEN_IDS_BYTES)
    return token_ids(ids, where=str(path), what="GPT-2 token ids", vocab=gpt2_vocab, length=vocab)


def build(out_dir: Path, manifest: dict, digests: dict[str, str]) -> Path:
    """The engine and the generation harness compiled with the host gcc (cached by their sources).
    The bytes compiled are checked against the marker's ``digests`` once read: a file changed
    after _check_ours looked is never compiled."""
    names = (f"{manifest['library']}_engine.c", "inference_api.h")
    sources = {n: read_side_file(out_dir / n, what="the engine's source", max_bytes=ENGINE_SOURCE_BYTES,
                                 error=UsageError) for n in names}
    for n, data in sources.items():
        if hashlib.sha256(data).hexdigest() != digests.get(n):
            raise UsageError(f"{out_dir / n}: changed since deploy wrote it (not the digest {MARKER} lists); deploy "
                             f"generate builds only what deploy wrote: run deploy again")
    return compile_files(sources, "gcc", CFLAGS, HARNESS)


def check_prompt(prompt: str) -> None:
    """A prompt is text: bytes the command line could not decode as UTF-8 reach Python as lone
    surrogates (surrogateescape), which the tokenizer cannot take."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raw = prompt[e.start:e.end].encode("utf-8", "surrogateescape")
        raise UsageError(f"the prompt is not UTF-8 text (byte 0x{raw[:1].hex()} at character {e.start + 1})") from None


def generate(out_dir: Path, prompt: str, max_tokens: int, tokenizer: Path | None = None) -> dict:
    check_prompt(prompt)
    out_dir = Path(out_dir)
    digests = _check_ours(out_dir)
    manifest = _manifest(out_dir)
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be positive, got {max_tokens}")
    tok = open_tokenizer(tokenizer or out_dir / "tokenizer", given=tokenizer is not None)
    to_gpt2 = _token_ids(out_dir, manifest["config"]["vocab"], tok.size)
    to_model = {g: i for i, g in enumerate(to_gpt2)} if to_gpt2 is not None else None
    gpt2_ids = tok.encode(prompt)
    if not gpt2_ids:
        raise UsageError("the prompt is empty")
    try:
        ids = [to_model[g] for g in gpt2_ids] if to_model is not None else gpt2_ids
    except KeyError as e:
        raise DeployError(f"the prompt's GPT-2 token {e.args[0]} ({tok.decode([e.args[0]])!r}) is not in the "
                          f"model's pruned vocabulary") from None
    bos = manifest.get("bos_token_id")
    if is_id(bos) and 0 <= bos < manifest["config"]["vocab"] and ids[:1] != [bos]:
        ids = [bos, *ids]  # a LLaMA-family prompt starts with the model's BOS token
    outside = [i for i in ids if i >= manifest["config"]["vocab"]]
    if outside:
        raise UsageError(f"the prompt's token {outside[0]} is outside the model's vocabulary of "
                         f"{manifest['config']['vocab']} (a pruned vocabulary needs its token_ids.json)")
    positions = manifest["config"]["max_positions"]
    if len(ids) >= positions:
        raise UsageError(f"the prompt has {len(ids)} tokens; the model has {positions} positions")
    eos = manifest.get("eos_token_id", -1)
    exe = build(out_dir, manifest, digests)
    payload = struct.pack(f"<i{len(ids)}iii", len(ids), *ids, min(max_tokens, positions - len(ids)),
                          -1 if eos is None else eos)
    start = time.perf_counter()
    proc = subprocess.run([str(exe)], input=payload, capture_output=True, timeout=3600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise BuildError(f"the engine exited with status {proc.returncode}")
    out = list(struct.unpack(f"<{len(proc.stdout) // 4}i", proc.stdout))
    text_ids = [to_gpt2[t] for t in out] if to_gpt2 is not None else out
    steps = len(ids) + max(len(out) - 1, 0)  # inference_run calls: the prompt, then each fed-back token
    return dict(prompt=prompt, text=tok.decode(text_ids), ids=out, prompt_tokens=len(ids),
                tokens=len(out), wall_s=wall, tokens_per_s=steps / wall if wall > 0 else float("inf"))
