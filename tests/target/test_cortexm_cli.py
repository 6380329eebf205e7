"""The CLI on Cortex-M targets with the Arm tools: `deploy verify --qemu` (bit-exact on the QEMU
board, instructions per inference, the ELF's memory beside the planner's) and the ELF's memory
in `deploy`'s manifest, deterministic across runs that each compile the engine afresh."""
from __future__ import annotations

import json

import pytest

from deployer import qemu
from tests.models import shared_model
from tests.unit.test_cli import run_clirunner, run_subprocess, snapshot

pytestmark = pytest.mark.skipif(bool(qemu.missing_tools()),
                                reason=f"Cortex-M tools missing: {qemu.missing_tools()} (tests/install.sh)")

KWS = "mlperf_tiny/kws_ref_model.tflite"


def test_verify_qemu_json():
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "cortex-m4", "--qemu", "--json",
                                   "--seeds", "2")
    assert code == 0, err
    r = json.loads(out)
    assert r["target"] == "cortex-m4" and r["qemu_machine"] == "mps2-an386" and r["samples"] == 2
    assert [o["max_abs_diff"] for o in r["outputs"]] == [0] and r["reference"]
    assert r["instructions"] > 0 and r["instructions_per_mac"] == pytest.approx(r["instructions"] / r["macs"], 1e-3)
    assert r["planned_sram_bytes"] > 0 and r["planned_flash_bytes"] > 0
    # the ELF holds the planned arena, plus the harness and its stack; its flash the weights and code
    assert r["sram_bytes"] > r["planned_sram_bytes"] and r["flash_bytes"] > 0


def test_verify_qemu_summary():
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "cortex-m7", "--qemu", "--seeds", "1",
                                   "--kernels", "plain", "--per-layer")
    assert code == 0, err
    assert "instructions per inference" in out and "mps2-an500" in out and "ELF flash" in out
    assert "every layer matches" in out and out.rstrip().endswith("bit-exact")


def test_verify_qemu_per_layer_counts_each_layer_beside_the_model():
    """--per-layer on QEMU: each layer's instructions between the engine's marks; they add up to
    the inference's count (up to the marks' own calls), the modeled layers have modeled cycles,
    and the model's fit is stated."""
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "stm32h743", "--l1", "32K", "--qemu",
                                   "--seeds", "1", "--per-layer", "--json")
    assert code == 0, err
    r = json.loads(out)
    layers = r["per_layer"]["layers"]
    assert [x["index"] for x in layers] == list(range(len(layers))) and all(x["instructions"] > 0 for x in layers)
    marks = 4 * (len(layers) + 1)  # a call and a return per mark, and the arguments
    assert r["instructions"] <= sum(x["instructions"] for x in layers) <= r["instructions"] + marks
    convs = [x for x in layers if x["kind"] == "conv"]
    assert convs and all(x["tiled"] and x["modeled_cycles"] > 0 and "smlad" in x["variant"] for x in convs)
    fit = r["per_layer"]["fit"]
    assert fit["layers"] == sum(1 for x in layers if x["modeled_cycles"]) and -1 <= fit["rank_correlation"] <= 1
    code, text, err = run_clirunner("verify", shared_model(KWS), "--target", "stm32h743", "--l1", "32K", "--qemu",
                                    "--seeds", "1", "--per-layer")
    assert code == 0, err
    assert "cost model: rank correlation" in text and "(tiled)" in text


def test_verify_qemu_per_layer_report_shows_measured_beside_modeled(tmp_path):
    report = tmp_path / "where.html"
    code, out, err = run_clirunner("verify", shared_model(KWS), "--target", "stm32h743", "--l1", "32K", "--qemu",
                                   "--seeds", "1", "--per-layer", "--json", "--report", report)
    assert code == 0, err
    html = report.read_text()
    r = json.loads(out)
    assert 'id="times"' in html and "rank correlation" in html
    assert all(f"<td>{x['instructions']:,}</td>" in html for x in r["per_layer"]["layers"])
    code, _, err = run_clirunner("verify", shared_model(KWS), "--report", tmp_path / "x.html")
    assert code == 2 and "--report needs --qemu --per-layer" in err


def test_verify_qemu_per_layer_shows_the_patch_stage_as_one_row():
    """A split run: the stage's layers run region by region, so the stage is one row (its MACs
    with the recomputed ones), left out of the cost model's fit."""
    code, out, err = run_clirunner("verify", shared_model("mlperf_tiny/vww_96_int8.tflite"), "--target", "cortex-m7",
                                   "--sram", "32K", "--qemu", "--seeds", "1", "--per-layer", "--json")
    assert code == 0, err
    r = json.loads(out)
    layers = r["per_layer"]["layers"]
    stages = [x for x in layers if x["kind"] == "stage"]
    assert len(stages) == 1 and stages[0]["modeled_cycles"] is None and stages[0]["instructions"] > 0
    assert sum(x["macs"] for x in layers) > r["macs"]  # the network's MACs and those the halos recompute
    assert r["instructions"] <= sum(x["instructions"] for x in layers) <= r["instructions"] + 4 * 64
    assert r["per_layer"]["fit"]["layers"] == sum(1 for x in layers if x["modeled_cycles"])


def test_deploy_records_the_elf(tmp_path):
    """Two processes, each with its own build cache (the ELF linked twice), write identical files."""
    for name, seed in (("a", "1"), ("b", "2")):
        env = {"PYTHONHASHSEED": seed, "DEPLOY_BUILD_CACHE": str(tmp_path / f"cache-{name}")}
        code, out, err = run_subprocess(shared_model(KWS), "--target", "cortex-m7", "-o", tmp_path / name, env=env)
        assert code == 0, err
        assert any(line.startswith("ELF: ") and "QEMU harness" in line for line in out.splitlines())
        assert any(line.split()[:1] == ["memory"] and line.split()[-1] == "ELF" for line in out.splitlines())
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert sorted(a) == sorted(b) and all(a[n] == b[n] for n in a), [n for n in a if a[n] != b.get(n)]
    m = json.loads(a["manifest.json"])
    elf = m["elf"]
    assert elf["flash_bytes"] > 0 and elf["sram_bytes"] > 0 and elf["toolchain"].startswith("arm-none-eabi-gcc")
    assert elf["sections"][".bss"] >= m["memory"]["arena_bytes"]
    assert elf["sram_bytes"] == sum(elf["sections"].get(s, 0) for s in (".data", ".bss", ".stack"))


@pytest.mark.parametrize("kind,target", [("upsample", "cortex-m7"), ("heads", "cortex-m4")])
def test_onnxruntime_float_kernels_on_the_board(tmp_path, kind, target):
    """onnxruntime's float32 arithmetic (linear Resize, QLinearSoftmax's table) on the boards'
    single-precision FPUs, against onnxruntime on the host."""
    pytest.importorskip("onnxruntime")
    from tests.onnx_builder import quantized_model
    model = quantized_model(tmp_path, kind, kind == "heads", "int8")
    code, out, err = run_clirunner("verify", str(model), "--target", target, "--qemu", "--seeds", "2")
    assert code == 0, err
    assert out.rstrip().endswith("bit-exact")


@pytest.mark.parametrize("rel,target", [("tflm/trained_lstm_int8.tflite", "cortex-m4"),
                                        ("tflm/micro_speech_lstm.tflite", "cortex-m7")])
def test_lstm_stream_on_the_board(rel, target):
    """The integer LSTM's state carried over three inferences and reset before a fourth, on the
    board, against LiteRT run as the same stream."""
    code, out, err = run_clirunner("verify", shared_model(rel), "--target", target, "--qemu", "--seeds", "3")
    assert code == 0, err
    assert "then a reset" in out and out.rstrip().endswith("bit-exact")


@pytest.mark.parametrize("target,time_major,cifg,peephole,projection", [("cortex-m4", False, False, True, None),
                                                                         ("cortex-m7", True, True, False, 6)])
def test_lstm_dsp_cell_and_input_tails_on_the_board(tmp_path, target, time_major, cifg, peephole, projection):
    """The SMLAD LSTM's four-cell passes with a cell tail (13 cells) and input tails (7 values;
    5 cells of a second layer reading 13 or 6), batch 2, with peepholes, or without an input gate
    and with a projection, against LiteRT as one stream."""
    from tests.host.test_recurrent import lstm_model
    shape = (5, 2, 7) if time_major else (2, 5, 7)
    model = lstm_model(tmp_path, 11, shape, 13, time_major, -11, 4.0, 3, stacked=5, cifg=cifg, peephole=peephole,
                       projection=projection)
    code, out, err = run_clirunner("verify", str(model), "--target", target, "--qemu", "--seeds", "3")
    assert code == 0, err
    assert out.rstrip().endswith("bit-exact")


@pytest.mark.parametrize("target,cifg,peephole", [("cortex-m4", False, True), ("cortex-m7", True, False)])
def test_layer_normalized_lstm_on_the_board(tmp_path, target, cifg, peephole):
    """A layer-normalized LSTM on the SMLAD kernel (every cell's gate sums four cells at a time, a
    cell tail of one, then each gate's row normalized) with peepholes or without an input gate,
    one with coarse gate sums (the variance floor), against LiteRT as one stream."""
    from tests.host.test_recurrent import lstm_model
    for n, coarse in enumerate((1.0, 30000.0)):
        model = lstm_model(tmp_path, 5 + n, (2, 4, 7), 13, False, -11, 4.0, 3, cifg=cifg, peephole=peephole,
                           layer_norm=True, coarse_sums=coarse, wide_coefficients=20.0 if n else 1.0)
        code, out, err = run_clirunner("verify", str(model), "--target", target, "--qemu", "--seeds", "3")
        assert code == 0, err
        assert out.rstrip().endswith("bit-exact")


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_svdf_keyword_spotter_on_the_board(tmp_path, target):
    """The SMLAD SVDF (filters 32 and 32: no filter tail; 40 and 32 inputs) streaming frames, and
    a small one with a filter tail, odd memory and no bias, against LiteRT as one stream."""
    from tests.host.test_recurrent import svdf_kws_model
    from tests.tflite_builder import ModelBuilder
    b = ModelBuilder(seed=5)
    b.output(b.svdf(b.input((2, 11)), 3, rank=2, memory=5, bias=False))
    small = tmp_path / "svdf_small.tflite"
    b.save(small)
    for model in (svdf_kws_model(tmp_path), small):
        code, out, err = run_clirunner("verify", str(model), "--target", target, "--qemu", "--seeds", "5")
        assert code == 0, err
        assert out.rstrip().endswith("bit-exact")
