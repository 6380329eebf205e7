"""The transformer IR: GPT-Neo lowered to typed ops, their buffer lifetimes, the passes
(--prune-vocab, --weights, --kv-cache) as graph rewrites, and the executor that interprets them."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.decoder_executor import Executor
from deployer.llm_passes import cache_kv, kv_cache_bytes, prune_vocabulary, quantize_weights
from network_parser.errors import UsageError
from network_parser.gptneo import read_gptneo
from network_parser.transformer_ir import (Add, Attention, Embedding, Gelu, LayerNorm, MatMul, PositionEmbedding,
                                           lifetimes, lower, op_buffers, op_summary)
from tests import gptneo_builder as gb
from tests.cli_output import one_error

WRITES = {Embedding: ("out",), PositionEmbedding: ("x",), LayerNorm: ("out",), MatMul: ("out",), Gelu: ("x",),
          Attention: ("out",), Add: ("x",)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return read_gptneo(gb.write(tmp_path_factory.mktemp("gptneo"), gb.config(window=4, positions=16)))


def test_lowering_lists_gpt_neos_ops_in_order(model):
    c = model.config
    g = lower(model.as_checkpoint())
    kinds = Counter(type(op).__name__ for op in g.ops)
    assert kinds == {"Embedding": 1, "PositionEmbedding": 1, "LayerNorm": 2 * c.layers + 1,
                     "MatMul": 6 * c.layers + 1, "Attention": c.layers, "Gelu": c.layers, "Add": 2 * c.layers}
    assert isinstance(g.ops[0], Embedding) and isinstance(g.ops[1], PositionEmbedding)
    head = g.ops[-1]
    assert isinstance(head, MatMul) and head.weight == "wte" and (head.rows, head.cols) == (c.vocab, c.d_model)
    windows = [op.window for op in g.ops if isinstance(op, Attention)]
    assert windows == [c.window if a == "local" else None for a in c.attention]
    for op in g.ops:  # every weight named is there, with the shape the op expects
        if isinstance(op, MatMul):
            assert g.weights[op.weight].shape == (op.rows, op.cols)
            assert op.bias is None or g.weights[op.bias].shape == (op.rows,)
    assert op_summary(g.ops[-1]) == f"MatMul(x=H, out=LOGITS, weight=wte, rows={c.vocab}, cols={c.d_model})"


def test_every_buffer_is_written_before_it_is_read(model):
    g = lower(model.as_checkpoint())
    written = {g.token}
    for k, op in enumerate(g.ops):
        outs = {getattr(op, f) for f in WRITES[type(op)]}
        reads = set(op_buffers(op)) - (outs - ({op.x} if isinstance(op, (PositionEmbedding, Gelu, Add)) else set()))
        assert reads <= written, (k, op_summary(op), reads - written)
        written |= outs
    assert g.logits in written


def test_lifetimes_follow_the_ops(model):
    c = model.config
    g = quantize_weights(cache_kv(lower(model.as_checkpoint()), "int4", 8), "q4_0")[0]
    spans = {a.name: (a.nbytes, first, last) for a, first, last in lifetimes(g)}
    last = len(g.ops) - 1
    assert spans["TOKEN"] == (4, 0, 0)
    assert spans["X"] == (4 * c.d_model, 0, last - 2)  # the final LayerNorm reads it last, then its blocks are made
    # the int8 blocks are made once per input: q, k and v share H's; then ATT, H again, FF; then the head's
    assert [type(op).__name__ for op in g.ops].count("QuantizeInput") == 4 * c.layers + 1
    assert spans["LOGITS"] == (4 * c.vocab, last, last)
    assert spans["SCORES"][0] == 4 * 8  # one head's scores over the cached positions
    assert spans["XQ"] == (max(c.d_model, c.inner), 3, last)  # made by the QuantizeInput after the first LayerNorm
    assert "XQ" not in {a.name for a, *_ in lifetimes(lower(model.as_checkpoint()))}  # float matmuls need none


def test_quantize_pass_reports_every_matrix_and_keeps_the_rest_float(model):
    c = model.config
    g, report = quantize_weights(lower(model.as_checkpoint()), "q4_0")
    assert [r[0] for r in report] == g.matrices() and len(report) == 6 * c.layers + 1
    assert all(np.isfinite(rmse) and snr > 10 for _, rmse, snr in report)
    assert isinstance(g.weights["wpe"], np.ndarray) and isinstance(g.weights["h.0.ln_1.weight"], np.ndarray)
    assert not isinstance(g.weights["wte"], np.ndarray) and g.weight_format == "q4_0"
    assert quantize_weights(lower(model.as_checkpoint()), "f32")[1] == []
    with pytest.raises(UsageError, match="--weights q8"):
        quantize_weights(lower(model.as_checkpoint()), "q8")


def test_kv_pass_sizes_the_cache(model):
    c = model.config
    g = cache_kv(lower(model.as_checkpoint()), "int4", 8)
    assert (g.kv.format, g.kv.context, g.kv.group) == ("int4", 8, 32)
    assert kv_cache_bytes(g) == 2 * c.layers * 8 * (c.d_model // 2 + 4 * c.d_model // 32)
    with pytest.raises(UsageError, match="--context 17: the model has 16 positions"):
        cache_kv(lower(model.as_checkpoint()), "int8", 17)


def test_prune_pass_keeps_the_listed_rows(model):
    """The pruned graph's logits are the full graph's at the kept ids."""
    ids = [7, 3, 60, 3, 0]
    full = lower(model.as_checkpoint())
    pruned, kept = prune_vocabulary(full, ids)
    assert kept == sorted(set(ids)) and pruned.config.vocab == len(kept) == pruned.ops[-1].rows
    assert pruned.activation("LOGITS").elements == len(kept)
    a, b = Executor(full), Executor(pruned)
    for old in (3, 60, 7):
        np.testing.assert_allclose(b.step(kept.index(old)), a.step(old)[kept], rtol=1e-6, atol=1e-6)
    with pytest.raises(UsageError, match="token 99999 is outside"):
        prune_vocabulary(full, [1, 99999])


def test_dump_ir_prints_one_op_per_line(tmp_path):
    path = gb.write(tmp_path / "m", gb.config())
    r = CliRunner().invoke(main, [str(path), "--weights", "f32", "--kv-cache", "f32", "-o", str(tmp_path / "o"),
                                  "--dump-ir", "-q"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    g = lower(read_gptneo(path).as_checkpoint())
    assert len(lines) == len(g.ops) and lines[-1].split(None, 1)[1] == op_summary(g.ops[-1])


def _deploy(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_budgets_name_the_smallest_that_works_and_what_fits(tmp_path):
    """--sram / --flash: over budget, one InfeasibleBudget line per memory with the need, the
    smallest budget, the longest context and the lighter formats that fit; each suggestion,
    rerun, deploys within that budget."""
    import json
    path = gb.write(tmp_path / "m", gb.config(positions=16))
    base = [path, "--weights", "int8", "--kv-cache", "f32", "-q"]
    r = _deploy([*base, "-o", tmp_path / "full"])
    assert r.exit_code == 0, r.output
    memory = json.loads((tmp_path / "full" / "manifest.json").read_text())["memory"]
    sram = memory["sram_bytes"] // 2
    r = _deploy([*base, "--sram", sram, "--flash", memory["flash_bytes"] - 1, "-o", tmp_path / "o"])
    assert r.exit_code == 1 and not (tmp_path / "o").exists()
    line = one_error(r.stderr)
    assert line.startswith("error: InfeasibleBudget: the plan needs "  # as a network's
                                                     f"{memory['sram_bytes']} bytes of SRAM but --sram is {sram}")
    assert f"the smallest --sram that works is {memory['sram_bytes']} " in line
    assert f"the smallest --flash that works is {memory['flash_bytes']} " in line
    context = int(line.split("--context ")[1].split()[0])
    assert 1 <= context < 16 and "--kv-cache int4 needs" in line and "--weights q4_0 needs" in line
    r = _deploy([*base, "--sram", sram, "--context", context, "-o", tmp_path / "shorter"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "shorter" / "manifest.json").read_text())["memory"]["sram_bytes"] <= sram
    r = _deploy([*base, "--sram", sram, "--context", context + 1, "-o", tmp_path / "longer"])
    assert r.exit_code == 1, "the context named is the longest that fits"
    r = _deploy([*base, "--sram", memory["sram_bytes"], "--flash", memory["flash_bytes"], "-o", tmp_path / "exact"])
    assert r.exit_code == 0, r.output
    q4 = int(line.split("--weights q4_0 needs ")[1].split()[0].rstrip(";,").replace(",", ""))
    r = _deploy([path, "--weights", "q4_0", "--kv-cache", "f32", "-q", "--flash", q4, "-o", tmp_path / "q4"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "q4" / "manifest.json").read_text())["memory"]["flash_bytes"] == q4


def test_cortex_m_targets_get_their_qemu_folder_and_board_budgets(tmp_path):
    path = gb.write(tmp_path / "m", gb.config())
    r = _deploy([path, "--target", "cortex-m7", "-q", "-o", tmp_path / "m7"])
    assert r.exit_code == 0, r.output
    import json
    assert json.loads((tmp_path / "m7" / "manifest.json").read_text())["target"] == "cortex-m7"
    assert (tmp_path / "m7" / "qemu" / "Makefile").exists()
    big = gb.write(tmp_path / "big", gb.config(vocab=4096))  # 512 KiB of float32 embedding
    r = _deploy([big, "--target", "stm32f446", "--weights", "f32", "-o", tmp_path / "f4"])
    assert r.exit_code == 1 and "--flash is 524288" in r.stderr  # the board's flash by default
    r = _deploy([big, "--target", "stm32f446", "--weights", "q4_0", "-q", "-o", tmp_path / "f4"])
    assert r.exit_code == 0, r.output
    r = _deploy([path, "--target", "gap8", "-o", tmp_path / "g"])
    assert r.exit_code == 2 and "host or a Cortex-M target" in r.stderr


def test_the_same_flags_give_byte_identical_files(tmp_path):
    path = gb.write(tmp_path / "m", gb.config())
    outs = []
    for k in range(2):
        r = _deploy([path, "--weights", "q4_0", "--kv-cache", "int4", "--context", 8, "--debug-guards", "-q",
                     "-o", tmp_path / f"o{k}"])
        assert r.exit_code == 0, r.output
        outs.append({p.relative_to(tmp_path / f"o{k}"): p.read_bytes()
                     for p in sorted((tmp_path / f"o{k}").rglob("*")) if p.is_file()})
    assert outs[0] == outs[1] and len(outs[0]) >= 3


def test_report_html_shows_the_memory_the_ops_and_every_planner(tmp_path):
    """out/report.html of a language model: self-contained, the memory against the budgets,
    one row per op, the quantization of every matrix and one picture per arena planner."""
    from tests.unit.test_report_html import page
    path = gb.write(tmp_path / "m", gb.config())
    r = _deploy([path, "--weights", "q4_0", "--kv-cache", "int4", "--sram", "64K", "-q", "-o", tmp_path / "o"])
    assert r.exit_code == 0, r.output
    p = page((tmp_path / "o" / "report.html").read_text())
    g = quantize_weights(lower(read_gptneo(path).as_checkpoint()), "q4_0")[0]
    memory = {row["cells"][0]: row["cells"] for row in p.tables["memory"][1:]}
    assert memory["SRAM"][3] == "65,536" and memory["SRAM"][5] == "OK"
    assert len(p.tables["ops"]) == 1 + len(g.ops)
    assert p.tables["ops"][-1]["cells"][2] == op_summary(g.ops[-1])
    assert [row["cells"][0] for row in p.tables["quantization"][1:]] == g.matrices()
    planners = [row["cells"][0] for row in p.tables["planner-table"][1:]]
    assert planners == ["cpsat", "first-fit", "best-fit", "bidirectional"]
    assert len([s for s in p.svgs if s["cls"] == "arena"]) == 4
