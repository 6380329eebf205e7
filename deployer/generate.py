"""`deploy generate OUT_DIR "prompt"`: build a language-model engine from its output folder for
this machine, tokenize the prompt with the model's tokenizer (its tokenizer.json, or GPT-2's BPE
files), decode greedily or sample with a seed, time it.

Sampling happens where the tokens are picked, in the C harness (harness/generate_main.c, which
documents the procedure); ``Sampler`` below is the same procedure in numpy, for reproducing a
run from the engine's logits (the tests hold the two to the same ids). It is specified so that
the two cannot drift apart by rounding: its only float steps are IEEE float32 operations and the
engine's own exp_f32 (which ``decoder_executor.c_exp`` already mirrors bit for bit), turned into
integer weights; the random draws and the choice are integer arithmetic."""
from __future__ import annotations

import hashlib
import re
import struct
import subprocess
import time
from pathlib import Path

import numpy as np

from network_parser.errors import DeployError, UsageError
from network_parser.side_files import (ENGINE_SOURCE_BYTES, MANIFEST_BYTES, MAX_ID, TOKEN_IDS_BYTES, brief, is_id,
                                       read_json, read_json_object, read_side_file, token_ids)

from .output import MARKER, read_marker, would_lose
from .tokenizer import open_tokenizer
from .verify import BuildError, compile_files

HARNESS = Path(__file__).resolve().parent / "harness" / "generate_main.c"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOGITS = re.compile(r"full|argmax|topk:[1-9][0-9]{0,9}")
STOP_REASONS = {-1: "eos", -2: "stop", -3: "max_tokens", -4: "positions"}  # the harness's last int32
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
            and (eos is None or is_id(eos) and 0 <= eos < config["vocab"])
            and isinstance(section.get("logits", "full"), str) and _LOGITS.fullmatch(section.get("logits", "full"))):
        raise UsageError(f"{path}: not a manifest deploy wrote (library, language_model.config.vocab, "
                         f"language_model.config.max_positions, language_model.eos_token_id or "
                         f"language_model.logits is missing or wrong)")
    return {"logits": "full", **section, "library": manifest["library"]}  # the model's part, the engine's name


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
    image = f"{manifest['library']}_l3_image.c"  # an engine streaming from --l3 reads its image from this array
    names = (f"{manifest['library']}_engine.c", "inference_api.h", *([image] if image in digests else []))
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


MASK64 = (1 << 64) - 1


class Sampler:
    """The harness's seeded sampling, step for step (harness/generate_main.c says how): from the
    same logits, the same ids. ``pick(logits)`` for an engine of full logits (output 0),
    ``pick(logits, ids)`` for a ``topk:K`` engine (output 1, the logits, and output 0, the ids)."""

    def __init__(self, temperature: float, top_k: int = 0, seed: int = 0):
        self.temperature = np.float32(struct.unpack("<f", struct.pack("<f", temperature))[0])
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature {temperature}: not a positive float32")
        self.top_k = top_k
        self.state = seed & MASK64

    def draw(self) -> int:
        """SplitMix64: the next 64-bit value."""
        self.state = z = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def candidates(self, logits, ids=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept candidates in increasing id order: their ids, logits and integer weights."""
        from .decoder_executor import c_exp
        logits = np.asarray(logits, np.float32).ravel()
        ids = np.arange(len(logits), dtype=np.int64) if ids is None else np.asarray(ids, np.int64).ravel()
        if 0 < self.top_k < len(ids):  # the higher logit first, then the lower id; NaN last
            nan = np.isnan(logits)
            keep = np.lexsort((ids, -np.where(nan, np.float32(0), logits), nan))[:self.top_k]
            ids, logits = ids[keep], logits[keep]
        order = np.argsort(ids, kind="stable")
        ids, logits = ids[order], logits[order]
        finite = logits[~np.isnan(logits)]  # the harness: the largest above -FLT_MAX, else -FLT_MAX
        top = max(np.float32(-np.finfo(np.float32).max), finite.max() if finite.size else -np.inf)
        with np.errstate(all="ignore"):
            x = ((logits - top) / self.temperature).astype(np.float32)
            kept = x >= np.float32(-87)
            p = (c_exp(np.where(kept, x, np.float32(0))) * np.float32(1 << 24)).astype(np.float32)
        return ids, logits, np.where(kept, p.astype(np.uint32), 0).astype(np.uint64)

    def pick(self, logits, ids=None) -> int:
        ids, _, weights = self.candidates(logits, ids)
        total = int(weights.sum())
        if total == 0:
            raise ValueError("no candidate weighs anything: the logits are not finite")
        below = ((1 << 64) - total) % total
        draw = self.draw()
        while draw < below:
            draw = self.draw()
        return int(ids[int(np.searchsorted(np.cumsum(weights), draw % total, side="right"))])


def _sampling(out_dir: Path, manifest: dict, temperature: float, top_k: int, seed: int) -> tuple[bytes, dict | None]:
    """The request's sampling part (the temperature's float32 bits, top_k, the seed's two halves)
    and its record for the result; refuses what this folder's engine cannot sample."""
    try:
        t32 = struct.unpack("<f", struct.pack("<f", temperature))[0] if temperature >= 0 else -1.0
    except OverflowError:
        t32 = -1.0
    if not (t32 >= 0 and (t32 > 0) == (temperature > 0) and t32 != float("inf")):
        raise UsageError(f"--temperature {temperature}: expected 0 (greedy) or a positive number a float32 holds")
    if top_k < 0:
        raise UsageError(f"--top-k {top_k}: expected 0 (every candidate) or a positive count")
    if not 0 <= seed <= MASK64:
        raise UsageError(f"--seed {seed}: expected an integer from 0 to 2**64 - 1")
    if top_k and not temperature:
        raise UsageError(f"--top-k {top_k} picks among sampled tokens: give a --temperature above 0 too "
                         f"(--temperature 0 decodes greedily)")
    mode, vocab = manifest["logits"], manifest["config"]["vocab"]
    if mode == "argmax" and temperature > 0:
        raise UsageError(f"--temperature {temperature}: {out_dir} holds an engine deployed with --logits argmax, "
                         f"which gives one token id a step and no logits: nothing to sample among; deploy again "
                         f"with --logits topk:K or --logits full to sample")
    k = vocab if mode == "full" else 1 if mode == "argmax" else int(mode[5:])
    if top_k > k:
        raise UsageError(f"--top-k {top_k}: {out_dir} holds an engine deployed with --logits {mode}, which gives "
                         f"{'the ' + str(k) + ' most likely' if mode != 'full' else 'all ' + str(k)} tokens a step; "
                         f"--top-k {k} at most")
    request = struct.pack("<fiII", temperature, top_k, seed & 0xFFFFFFFF, seed >> 32)
    return request, (dict(temperature=temperature, top_k=top_k, seed=seed) if temperature > 0 else None)


def generate(out_dir: Path, prompt: str, max_tokens: int, tokenizer: Path | None = None, *,
             temperature: float = 0.0, top_k: int = 0, seed: int = 0, stop: tuple[int, ...] = ()) -> dict:
    """The continuation of ``prompt``: greedy (``temperature`` 0), or sampled from
    softmax(logits / temperature) over every candidate or the ``top_k`` most likely, seeded
    (``Sampler`` reproduces it). Ends at the model's end-of-text id, at a ``stop`` id (the
    engine's ids, as the result's ``ids`` are: both stay in ``ids``, not in ``text``), after
    ``max_tokens``, or when the prompt and the tokens fill the model's positions: the result's
    ``stop_reason`` is "eos", "stop", "max_tokens" or "positions"."""
    check_prompt(prompt)
    out_dir = Path(out_dir)
    digests = _check_ours(out_dir)
    manifest = _manifest(out_dir)
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be positive, got {max_tokens}")
    vocab = manifest["config"]["vocab"]
    sampling, sampling_record = _sampling(out_dir, manifest, temperature, top_k, seed)
    for s in stop:
        if not (is_id(s) and 0 <= s < vocab):
            raise UsageError(f"--stop {s}: not a token id of the model's vocabulary of {vocab}")
    stop = sorted(set(stop))
    tok = open_tokenizer(tokenizer or out_dir / "tokenizer", given=tokenizer is not None)
    to_gpt2 = _token_ids(out_dir, vocab, tok.size)
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
    if is_id(bos) and 0 <= bos < vocab and ids[:1] != [bos]:
        ids = [bos, *ids]  # a LLaMA-family prompt starts with the model's BOS token
    outside = [i for i in ids if i >= vocab]
    if outside:
        raise UsageError(f"the prompt's token {outside[0]} is outside the model's vocabulary of "
                         f"{vocab} (a pruned vocabulary needs its token_ids.json)")
    positions = manifest["config"]["max_positions"]
    if len(ids) >= positions:
        raise UsageError(f"the prompt has {len(ids)} tokens; the model has {positions} positions")
    eos = manifest.get("eos_token_id", -1)
    exe = build(out_dir, manifest, digests)
    payload = struct.pack(f"<i{len(ids)}iiii{len(stop)}i", len(ids), *ids, min(max_tokens, positions),
                          -1 if eos is None else eos, len(stop), *stop) + sampling
    start = time.perf_counter()
    proc = subprocess.run([str(exe)], input=payload, capture_output=True, timeout=3600)
    wall = time.perf_counter() - start
    written = list(struct.unpack(f"<{len(proc.stdout) // 4}i", proc.stdout[:len(proc.stdout) // 4 * 4]))
    if proc.returncode == 5:
        raise DeployError(f"the engine's logits for generated token {len(written) + 1} are not finite: nothing to "
                          f"sample from")
    if proc.returncode != 0:
        raise BuildError(f"the engine exited with status {proc.returncode}")
    if not written or written[-1] not in STOP_REASONS or any(t < 0 for t in written[:-1]):
        raise BuildError("the generation harness did not end its output with why it stopped")
    out, reason = written[:-1], STOP_REASONS[written[-1]]
    shown = out[:-1] if reason in ("eos", "stop") else out  # the ending token is not text
    text_ids = [to_gpt2[t] for t in shown] if to_gpt2 is not None else shown
    steps = len(ids) + max(len(out) - 1, 0)  # inference_run calls: the prompt, then each fed-back token
    return dict(prompt=prompt, text=tok.decode(text_ids), ids=out, prompt_tokens=len(ids),
                tokens=len(out), stop_reason=reason, sampling=sampling_record, wall_s=wall,
                tokens_per_s=steps / wall if wall > 0 else float("inf"))
