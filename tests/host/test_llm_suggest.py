"""deploy suggest and deploy compare on language models (.safetensors): the --weights, --kv-cache,
--context and --logits alternatives measured by planning them (the longest context by bisection),
ranked, the output's change said; nothing fitting is exit 1 with the smallest budgets; compare
plans the activation arena with every planner and writes the report."""
from __future__ import annotations

import html
import json
import re

import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.language_model import plan_as
from deployer.llm_passes import LanguageFlags
from deployer.pipeline import Options, deploy, plan_deployment, read, start
from network_parser.errors import InfeasibleBudget
from tests.unit.test_gptneo import TALK, TINY
from tests.unit.test_llama import LLAMA

K = 1024


def model_of(folder):
    path = folder / "model.safetensors"
    if not path.exists():
        pytest.skip(f"model {folder} is not present")
    return path


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def suggest_json(*args):
    code, out, err = run("suggest", *args, "--json")
    return code, json.loads(out), err


def flags_of(c: dict, **changes) -> LanguageFlags:
    values = dict(weights=c["weights"], kv=c["kv_cache"], context=c["context"], logits=c["logits"])
    return LanguageFlags(**{**values, **changes})


@pytest.fixture(scope="module")
def talk_128k():
    return suggest_json(model_of(TALK), "--sram", "128K")


def test_tinytalk_at_128k_recommends_argmax_and_says_the_output_changes(talk_128k):
    code, s, _ = talk_128k
    assert code == 0 and s["fits"] and s["estimate"]["over"][0]["flag"] == "--sram"
    top = s["candidates"][0]
    assert top["logits"] == "argmax" and top["changes_output"] and "CHANGES THE OUTPUT" in top["why"]
    assert "token id" in top["output"] and top["sram_bytes"] <= 128 * K
    # every candidate fits, as deploy plans it
    for c in s["candidates"]:
        assert c["sram_bytes"] <= 128 * K and c["context"] >= 1
    model = model_of(TALK)
    # measured, not estimated: deploy with the recommended flags fits; one position more does not;
    # full logits at that context do not either (the budget needs argmax), and the budget error agrees
    dep = deploy(model, Options(sram=128 * K, language=flags_of(top)))
    assert dep.memory.sram_bytes == top["sram_bytes"] and dep.memory.flash_bytes == top["flash_bytes"]
    with pytest.raises(InfeasibleBudget):
        deploy(model, Options(sram=128 * K, language=flags_of(top, context=top["context"] + 1)))
    with pytest.raises(InfeasibleBudget, match="--logits argmax needs"):
        deploy(model, Options(sram=128 * K, language=flags_of(top, logits="full")))
    full = [c for c in s["candidates"] if (c["weights"], c["kv_cache"], c["logits"]) ==
            (top["weights"], top["kv_cache"], "full")]
    assert full and full[0]["context"] < top["context"] and not full[0]["changes_output"]


def test_the_quality_figure_is_measured_on_named_tokens(talk_128k):
    _, s, _ = talk_128k
    q = s["quality"]
    assert q["measured"] and "seeded" in q["method"] and "executor" in q["method"]
    assert len(q["tokens"]) == 3 and all(len(t) == 16 for t in q["tokens"]) and q["predictions"] == 48
    quantized = [c for c in s["candidates"] if (c["weights"], c["kv_cache"]) != ("f32", "f32")]
    assert quantized and all(0 <= c["top1_agreement"] <= 1 for c in quantized)
    assert all("measured over 48 predictions" in c["why"] for c in quantized)


def test_full_logits_at_40_positions_need_180_kb_so_argmax_is_recommended():
    """tinytalk, Q4_0, int8 KV of 40 positions: full logits need about 180 KB; at --sram 128K the
    recommendation keeps the 40 positions with --logits argmax, and says the output changes."""
    code, out, _ = run("suggest", model_of(TALK), "--sram", "128K", "--context", "40", "-q")
    assert code == 0, out
    need = int(re.search(r"needs\s+SRAM ([\d,]+) B", out).group(1).replace(",", ""))
    assert 170 * K < need < 190 * K and "over SRAM" in out
    recommended = next(line for line in out.splitlines() if line.startswith("recommended:"))
    assert "--context 40 --logits argmax" in recommended and "changes the output" in recommended
    assert "CHANGES THE OUTPUT" in out and "CHANGED" in out


def test_a_generous_budget_keeps_the_full_logits():
    code, s, _ = suggest_json(model_of(TALK), "--sram", "1M")
    assert code == 0 and not s["estimate"]["over"]
    top = s["candidates"][0]
    assert top["logits"] == "full" and not top["changes_output"] and top["context"] == 256
    assert "keeps the output" in top["why"] and any("--logits argmax is not needed" in n for n in s["notes"])
    assert not [c for c in s["candidates"] if c["context"] == 256 and c["changes_output"]]


def test_nothing_fits_exits_1_naming_the_smallest_budget():
    model = model_of(LLAMA)
    code, out, _ = run("suggest", model, "--sram", "1K", "-q")
    assert code == 1 and "nothing fits" in out
    m = re.search(r"the smallest --sram that works is (\d+) \(\d+K\), with (--weights \S+ --kv-cache \S+ --context 1 "
                  r"--logits \S+)", out)
    assert m, out
    need, flags = int(m.group(1)), m.group(2).split()
    language = LanguageFlags(weights=flags[1], kv=flags[3], context=1, logits=flags[7])
    assert deploy(model, Options(sram=need, language=language)).memory.sram_bytes == need  # it is the smallest
    with pytest.raises(InfeasibleBudget):
        deploy(model, Options(sram=need - 1, language=language))
    code, s, _ = suggest_json(model, "--sram", "1K", "-q")
    assert code == 1 and not s["fits"] and not s["candidates"] and s["smallest"]["--sram"]["bytes"] == need


def test_a_flash_no_format_fits_names_the_smallest_flash():
    code, out, _ = run("suggest", model_of(LLAMA), "--flash", "20K", "-q")
    assert code == 1 and "the smallest --flash that works is" in out and "--weights q4_0" in out


def report_rows(text: str) -> dict:
    """method -> arena bytes of the report's planner table."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", text, re.S):
        cells = [html.unescape(re.sub(r"<.*?>", "", c)).strip()
                 for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        if cells and cells[0] in ("cpsat", "first-fit", "best-fit", "bidirectional"):
            rows[cells[0]] = int(cells[1].replace(",", ""))
    return rows


@pytest.mark.parametrize("folder, flags", [(TALK, ("--sram", "128K")),
                                           (LLAMA, ("--logits", "argmax", "--kv-cache", "int4"))])
def test_compare_writes_every_planners_peak(folder, flags, tmp_path):
    model, report = model_of(folder), tmp_path / "r.html"
    code, out, err = run("compare", model, *flags, "--report", report)
    assert code == 0, err
    table = r"^(cpsat|first-fit|best-fit|bidirectional)\s+([\d,]+)\s+[\d,]+\s+[\d.]+%"  # method, arena B, gap B, gap %
    printed = {m: int(p.replace(",", "")) for m, p in re.findall(table, out, re.M)}
    assert set(printed) == {"cpsat", "first-fit", "best-fit", "bidirectional"}, out
    assert report_rows(report.read_text()) == printed
    dep = plan_deployment(model, Options(sram=128 * K if "--sram" in flags else None,
                                         language=LanguageFlags(**({"logits": "argmax", "kv": "int4"}
                                                                   if "--logits" in flags else {}))))
    assert printed["cpsat"] == dep.arena.peak  # the activations of the plan deploy makes
    for method, peak in printed.items():
        assert f"{dep.memory.state_bytes + peak:,} B of SRAM" in out
    assert f"wrote {report}" in out


@pytest.mark.parametrize("args, named", [
    (("suggest", "--l1", "64K"), "--l1"), (("suggest", "--front"), "--front"), (("suggest", "--patch", "off"), "--patch"),
    (("compare", "--tiling"), "--tiling"), (("compare", "--order", "file"), "--order"),
    (("suggest", "--tokenizer", "."), "--tokenizer"), (("compare", "--tokenizer", "."), "--tokenizer")])
def test_flags_that_do_not_apply_are_refused_by_name(args, named, tmp_path):
    command, *rest = args
    code, _, err = run(command, model_of(LLAMA), *rest, *(("--report", tmp_path / "r.html") if command == "compare"
                                                          else ()))
    assert code == 2 and f"error: UsageError: {named}" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("folder", [TINY, LLAMA])
def test_the_alternatives_are_the_plans_deploy_makes(folder):
    """plan_as (the checkpoint read and quantized once) gives deploy's plan for every flag set."""
    model, quantized = model_of(folder), {}
    front = read(start(model, Options(sram=64 * K)))
    for flags in (LanguageFlags(), LanguageFlags(weights="int8", kv="int4", context=17, logits="argmax"),
                  LanguageFlags(weights="f32", kv="f32", context=5), LanguageFlags(kv="int4", logits="topk:3")):
        want = plan_deployment(model, Options(sram=64 * K, language=flags))
        got = plan_as(front, flags, quantized)
        assert got.memory == want.memory and got.arena.peak == want.arena.peak
