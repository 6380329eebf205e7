"""Small random GPT-Neo checkpoints written as .safetensors + config.json (mixed F32, F16 and
BF16 tensors), for the reader's tests and the fuzzers' seeds."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from deployer.decoder_quant import to_bf16

CODES = {"F32": ("<f4", None), "F16": ("<f2", None), "BF16": (None, "bf16")}


def encode(tensors: dict[str, tuple[str, np.ndarray]], metadata: dict | None = None) -> bytes:
    """name -> (dtype, float array) as safetensors bytes (8-byte header length, JSON, data)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        arr = np.asarray(arr, np.float32)
        raw = to_bf16(arr).astype("<u2").tobytes() if dtype == "BF16" else arr.astype(CODES[dtype][0]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def config(vocab=64, d=32, heads=4, layers=2, inner=64, positions=16, window=4) -> dict:
    return {"model_type": "gpt_neo", "activation_function": "gelu_new", "vocab_size": vocab, "hidden_size": d,
            "num_heads": heads, "num_layers": layers, "intermediate_size": inner,
            "max_position_embeddings": positions, "window_size": window, "layer_norm_epsilon": 1e-5,
            "attention_layers": (["global", "local"] * layers)[:layers], "tie_word_embeddings": True}


def tensors(cfg: dict, seed: int = 0, dtypes=("F32", "F16", "BF16")) -> dict[str, tuple[str, np.ndarray]]:
    """Every GPT-Neo tensor for ``cfg``, random; matrices cycle through ``dtypes``."""
    rng = np.random.default_rng(seed)
    d, n, v, p = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["max_position_embeddings"]
    out, k = {}, 0

    def mat(name, shape, scale=0.2):
        nonlocal k
        out[name] = (dtypes[k % len(dtypes)], rng.normal(0, scale, shape).astype(np.float32))
        k += 1

    def vec(name, size, mean=0.0):
        out[name] = ("F32", (mean + rng.normal(0, 0.05, size)).astype(np.float32))
    mat("transformer.wte.weight", (v, d))
    mat("transformer.wpe.weight", (p, d), 0.05)
    for i in range(cfg["num_layers"]):
        h, a = f"transformer.h.{i}", f"transformer.h.{i}.attn.attention"
        vec(f"{h}.ln_1.weight", d, 1.0)
        vec(f"{h}.ln_1.bias", d)
        for proj in ("q", "k", "v"):
            mat(f"{a}.{proj}_proj.weight", (d, d))
        mat(f"{a}.out_proj.weight", (d, d))
        vec(f"{a}.out_proj.bias", d)
        vec(f"{h}.ln_2.weight", d, 1.0)
        vec(f"{h}.ln_2.bias", d)
        mat(f"{h}.mlp.c_fc.weight", (n, d))
        vec(f"{h}.mlp.c_fc.bias", n)
        mat(f"{h}.mlp.c_proj.weight", (d, n))
        vec(f"{h}.mlp.c_proj.bias", d)
    vec("transformer.ln_f.weight", d, 1.0)
    vec("transformer.ln_f.bias", d)
    return out


def write(folder: Path, cfg: dict | None = None, seed: int = 0, data: bytes | None = None) -> Path:
    """folder/model.safetensors and folder/config.json; ``data`` replaces the encoded tensors."""
    cfg = cfg or config()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    path = folder / "model.safetensors"
    path.write_bytes(encode(tensors(cfg, seed), {"format": "pt"}) if data is None else data)
    return path
