"""`deploy generate OUT_DIR "prompt"`: build a language-model engine from its output folder for
this machine, tokenize the prompt with the GPT-2 BPE files, decode greedily, time it."""
from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

from network_parser.errors import DeployError, UsageError

from .tokenizer import Gpt2Tokenizer
from .verify import BuildError, compile_files

HARNESS = Path(__file__).resolve().parent / "harness" / "generate_main.c"
CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")


def _manifest(out_dir: Path) -> dict:
    try:
        manifest = json.loads((out_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"{out_dir}: not a deploy output folder (no readable manifest.json)") from None
    if manifest.get("kind") != "gpt_neo":
        raise UsageError(f"{out_dir}: holds a {manifest.get('kind', 'CNN')} engine; deploy generate runs language "
                         f"models (deploy MODEL.safetensors -o {out_dir})")
    return manifest


def build(out_dir: Path, manifest: dict) -> Path:
    """The engine and the generation harness compiled with the host gcc (cached by their sources)."""
    names = (f"{manifest['library']}_engine.c", "inference_api.h")
    return compile_files({n: (out_dir / n).read_bytes() for n in names}, "gcc", CFLAGS, HARNESS)


def generate(out_dir: Path, prompt: str, max_tokens: int, tokenizer: Path | None = None) -> dict:
    out_dir = Path(out_dir)
    manifest = _manifest(out_dir)
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be positive, got {max_tokens}")
    tok = Gpt2Tokenizer(tokenizer or out_dir / "tokenizer")
    to_gpt2 = json.loads((out_dir / "token_ids.json").read_text()) if (out_dir / "token_ids.json").exists() else None
    to_model = {g: i for i, g in enumerate(to_gpt2)} if to_gpt2 is not None else None
    gpt2_ids = tok.encode(prompt)
    if not gpt2_ids:
        raise UsageError("the prompt is empty")
    try:
        ids = [to_model[g] for g in gpt2_ids] if to_model is not None else gpt2_ids
    except KeyError as e:
        raise DeployError(f"the prompt's GPT-2 token {e.args[0]} ({tok.decode([e.args[0]])!r}) is not in the "
                          f"model's pruned vocabulary") from None
    positions = manifest["config"]["max_positions"]
    if len(ids) >= positions:
        raise UsageError(f"the prompt has {len(ids)} tokens; the model has {positions} positions")
    eos = manifest.get("eos_token_id", -1)
    exe = build(out_dir, manifest)
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
