"""The GPT-Neo engine and the numpy executor agree exactly on the quantized integer parts: given
the same float input, the C matvec (activation blocks, integer block sums, the float
multiply-add per block) returns the same float32 bits as ``decoder_quant.matvec``, and the KV
cache holds the same codes and scales as ``quantize_blocks``. A probe C file includes the
generated engine (its functions are static) and calls them on vectors from stdin."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from deployer import build_cache
from deployer import decoder_quant as Q
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy
from deployer.verify import files_digest, write_files
from tests.unit.test_gptneo import TINY, shared

PROBE = r"""
#include <stdio.h>
#include "ENGINE"

int main(void)
{
    static float x[D], y[ROWS];
    if (fread(x, sizeof x, 1, stdin) != 1) {
        return 3;
    }
    WHICH_MATVEC;
    fwrite(y, sizeof y, 1, stdout);
    store_kv(0, 0, x, x);
    fwrite(kv_keys[0][0], sizeof kv_keys[0][0], 1, stdout);
    KV_SCALES;
    return 0;
}
"""


def probe(dep, c):
    engine = next(n for n in dep.files if n.endswith("_engine.c"))
    # a quantized matvec reads the blocks the engine's QuantizeInput op made
    call = ("quantize_input(x, {d}); matvec_{d}x{d}(H0_Q_PROJ, H0_Q_PROJ_S, x, (const float *)0, y)"
            .format(d=c.d_model)
            if dep.options.language.weights != "f32" else f"matvec_{c.d_model}x{c.d_model}(H0_Q_PROJ, x, (const float *)0, y)")
    scales = ("fwrite(kv_key_scales[0][0], sizeof kv_key_scales[0][0], 1, stdout)" if dep.options.language.kv != "f32"
              else "(void)0")
    src = (PROBE.replace("ENGINE", engine).replace("WHICH_MATVEC", call).replace("KV_SCALES", scales)
           .replace("ROWS", str(c.d_model)).replace("D]", f"{c.d_model}]"))
    files = {**dep.files, "probe.c": src}
    digest = files_digest(files).hexdigest()[:24]

    def build(folder: Path) -> None:
        write_files(files, folder)
        subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-w", "-I", str(folder), str(folder / "probe.c"),
                        "-o", str(folder / "probe")], check=True, capture_output=True, text=True)

    return build_cache.cached(f"llm-probe-{digest}", "probe", build)


@pytest.mark.parametrize("weights, kv", [("q4_0", "int4"), ("int8", "int8")])
def test_matvec_and_kv_codes_are_bit_exact(weights, kv):
    m = shared(TINY)
    c = m.config
    dep = deploy(TINY / "model.safetensors", Options(language=LanguageFlags(weights=weights, kv=kv)))
    exe = probe(dep, c)
    quant = Q.quantize_q4_0 if weights == "q4_0" else Q.quantize_int8_rows
    levels = {"int8": 127, "int4": 7}[kv]
    for seed in range(5):
        x = np.random.default_rng(seed).normal(0, 2, c.d_model).astype(np.float32)
        out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout
        y = np.frombuffer(out[:4 * c.d_model], np.float32)
        assert np.array_equal(y.view(np.uint32), Q.matvec(quant(m.blocks[0].q), x).view(np.uint32))
        codes, scales = Q.quantize_blocks(x, levels, dep.graph.kv.group)
        codes = codes.reshape(-1)
        row = np.frombuffer(out[4 * c.d_model:4 * c.d_model + (c.d_model // 2 if kv == "int4" else c.d_model)],
                            np.uint8 if kv == "int4" else np.int8)
        if kv == "int4":  # two signed nibbles per byte, element 2i low
            got = np.stack([((row & 15).astype(np.int8) ^ 8) - 8, ((row >> 4).astype(np.int8) ^ 8) - 8], 1).reshape(-1)
        else:
            got = row
        assert np.array_equal(got, codes)
        got_scales = np.frombuffer(out[4 * c.d_model + len(row):], np.float32)
        assert np.array_equal(got_scales.view(np.uint32), scales.view(np.uint32))
