"""One network across RAM banks, end to end: engines built from a memory map are bit-exact on the
host (whole, with L1 tiles, with patch stages), the manifest and report show each bank within
its size, an impossible map says which bank is short, and stm32h743 spreads a network whose
activations outgrow its AXI SRAM over its other banks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from deployer.cli import main
from deployer.memory_map import read_memory_map, with_memory_map
from deployer.pipeline import Options, deploy, plan_deployment
from deployer.verify import random_inputs, verify
from network_parser.errors import InfeasibleBudget, UsageError
from tests.models import shared_model
from tests.tflite_builder import ModelBuilder

REPO = Path(__file__).resolve().parents[2]
K = 1024


def example(tmp: Path) -> Path:
    path = REPO / "examples" / "tiny_kws.tflite"
    if not path.exists():
        path = tmp / "tiny_kws.tflite"
        subprocess.run([sys.executable, str(REPO / "examples" / "make_example.py"), str(path)], check=True, cwd=REPO)
    return path


def two_branches(folder: Path) -> Path:
    """Two branches of 278,528 B activations meeting in an ADD before a global mean: at the ADD
    both live (557,056 B, more than stm32h743's 512 KiB AXI SRAM), each fits any of its banks
    but the DTCM and SRAM4; patch stages fit only by recomputing the 3x3 branch's halo."""
    mb = ModelBuilder(7)
    x = mb.input((1, 128, 136, 16))
    a = mb.conv2d(mb.conv2d(x, 16, (3, 3), activation="RELU"), 16, (3, 3))
    b = mb.conv2d(x, 16, (1, 1))
    mb.output(mb.fully_connected(mb.reshape(mb.mean(mb.add(a, b)), (1, 16)), 4))
    path = folder / "two_branches.tflite"
    mb.save(path)
    return path


def memory_map(tmp: Path, *banks, name="map.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps({"banks": [dict(name=n, size=s, cost=c, **extra) for n, s, c, *more in banks
                                          for extra in (more[0] if more else {},)]}))
    return path


def options(tmp: Path, *banks, **fields) -> Options:
    return with_memory_map(Options(**fields), read_memory_map(memory_map(tmp, *banks)))


def exact(dep, model: Path, count: int = 2) -> None:
    result = verify(dep, model, [random_inputs(dep.graph, s) for s in range(count)])
    assert all(o["max_abs_diff"] == 0 for o in result["outputs"]), result["outputs"]


@pytest.mark.parametrize("case", ["whole", "tiles", "patches"])
def test_two_banks_bit_exact(tmp_path, case):
    model = example(tmp_path)
    banks = [("SRAM1", "5K", 1), ("SRAM2", "4K", 2)]
    if case == "tiles":  # the map's L1 bank is --l1
        banks.append(("TCM", "2K", 0.5, {"use": "l1", "kind": "tcm"}))
    fields = {"patch": "2x2@0"} if case == "patches" else {}
    dep = deploy(model, options(tmp_path, *banks, **fields))
    used = dict(zip((m.name for m in dep.banks.memories), dep.banks.used))
    assert 0 < used["SRAM1"] <= 5 * K and 0 < used["SRAM2"] <= 4 * K  # both banks, each within its size
    if case == "tiles":
        assert dep.options.l1 == 2 * K and dep.tilings
    if case == "patches":
        assert dep.patches
    engine = next(text for name, text in dep.files.items() if name.endswith("_engine.c"))
    assert "static uint8_t arena_sram1[" in engine and "static uint8_t arena_sram2[" in engine
    assert "static uint8_t arena[" not in engine
    exact(dep, model)


def test_manifest_and_report_show_the_banks(tmp_path):
    model = example(tmp_path)
    dep = deploy(model, options(tmp_path, ("SRAM1", "5K", 1), ("SRAM2", "4K", 2)))
    manifest = json.loads(dep.files["manifest.json"])
    banks = manifest["arena"]["banks"]
    assert [(b["name"], b["size"]) for b in banks] == [("SRAM1", 5 * K), ("SRAM2", 4 * K)]
    assert all(0 < b["used"] <= b["size"] for b in banks)
    for t in manifest["arena"]["tensors"]:
        bank = next(b for b in banks if b["name"] == t["bank"])
        assert t["offset"] == bank["base"] + t["bank_offset"] and t["bank_offset"] + t["size"] <= bank["used"]
    assert 'id="banks"' in dep.files["report.html"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(manifest, json.loads((REPO / "deployer" / "manifest.schema.json").read_text()))


def test_vww_in_two_banks_of_40k_and_24k(tmp_path):
    model = shared_model("mlperf_tiny/vww_96_int8.tflite")
    dep = deploy(model, options(tmp_path, ("SRAM1", "40K", 1), ("SRAM2", "24K", 1)))
    assert all(u <= m.size for m, u in zip(dep.banks.memories, dep.banks.used))
    exact(dep, model, 1)


def test_an_impossible_map_names_the_short_bank(tmp_path):
    with pytest.raises(InfeasibleBudget, match="bank SRAM1 needs .* bytes but holds 3,072"):
        deploy(example(tmp_path), options(tmp_path, ("SRAM1", "3K", 1), ("SRAM2", "3K", 1)))


def test_the_cli_refuses_a_map_beside_the_flags_it_replaces(tmp_path):
    path = memory_map(tmp_path, ("SRAM1", "8K", 1))
    model = str(example(tmp_path))
    for extra, words in ((["--sram", "8K"], "not both"), (["--debug-guards"], "one arena")):
        result = CliRunner().invoke(main, [model, "--memory-map", str(path), *extra, "-o", str(tmp_path / "o")])
        assert result.exit_code == 2 and words in result.output, result.output
    (tmp_path / "bad.json").write_text('{"banks": [{"name": "x y", "size": "1K"}]}')
    result = CliRunner().invoke(main, [model, "--memory-map", str(tmp_path / "bad.json"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "bad.json: bank 0: name must be a C identifier" in result.output


def test_stm32h743_spreads_what_outgrows_its_axi_sram(tmp_path):
    model = two_branches(tmp_path)
    plan = plan_deployment(model, Options(target="stm32h743"))
    assert plan.banks is not None and not plan.patches  # no MAC recomputed
    used = {m.name: u for m, u in zip(plan.banks.memories, plan.banks.used) if u}
    assert max(used.values()) <= 512 * K < sum(used.values()) and set(used) >= {"AXI_SRAM", "SRAM123"}
    assert any("span the part's RAM banks" in n for n in plan.notes)
    # a budget the user gives is one bank: patch stages then
    assert plan_deployment(model, Options(target="stm32h743", sram=512 * K)).banks is None


def test_a_map_beside_a_budget_flag_is_a_usage_error():
    from deployer.cli import _options
    with pytest.raises(UsageError, match="--l1"):
        _options("host", "8K", None, None, memory_map="whatever.json")


def test_inputs_and_outputs_pinned_to_a_bank(tmp_path):
    model = example(tmp_path)
    banks = [("SRAM1", "5K", 1), ("SRAM2", "4K", 2)]
    dep = deploy(model, options(tmp_path, *banks, input_bank="SRAM2", output_bank="SRAM2"))
    names = [m.name for m in dep.banks.memories]
    for t in (*dep.graph.inputs, *dep.graph.outputs):
        assert names[dep.banks.bank_of[t]] == "SRAM2"
    free = deploy(model, options(tmp_path, *banks))
    assert names[free.banks.bank_of[free.graph.inputs[0]]] == "SRAM1"  # the cheaper bank, unpinned
    exact(dep, model)
    with pytest.raises(UsageError, match="--input-bank DTCM: no such bank"):
        deploy(model, options(tmp_path, *banks, input_bank="DTCM"))
    with pytest.raises(UsageError, match="name banks of a memory map"):
        deploy(model, Options(output_bank="SRAM1"))


def test_suggest_knows_the_banks(tmp_path):
    from deployer.suggest import suggest
    s = suggest(example(tmp_path), options(tmp_path, ("SRAM1", "5K", 1), ("SRAM2", "4K", 2)))
    rec = next(r for r in s.recommendations if r.name == "RAM banks")
    assert rec.on and "SRAM2 4,000 of 4,096 B" in rec.detail and "the fullest is SRAM2" in rec.detail
    s = suggest(two_branches(tmp_path), Options(target="stm32h743", sram=512 * K))
    rec = next(r for r in s.recommendations if r.name == "RAM banks")
    assert not rec.on and rec.saving > 0 and rec.flags == ("--memory-map examples/memory_maps/stm32h743.json",)


def test_a_bank_dma_cannot_reach_is_refused_where_tiles_move_by_dma(tmp_path):
    banks = [("L2", "64K", 1), ("TCM", "16K", 0.5, {"masters": ["cpu"]}), ("L1", "8K", 0.25, {"use": "l1"})]
    with pytest.raises(UsageError, match="bank TCM is not reached by DMA"):
        plan_deployment(example(tmp_path), options(tmp_path, *banks, target="gap8"))
    assert plan_deployment(example(tmp_path), options(tmp_path, *banks, target="cortex-m7")).banks is not None  # the core copies
