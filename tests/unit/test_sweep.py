"""deploy sweep's parts: axes from flags and files, the points and their keys, the folder's
marker, the journal a kill cuts, the Pareto front and the smallest part."""
from __future__ import annotations

import json

import pytest

from deployer.sweep import journal
from deployer.sweep.axes import AXES, MAX_POINTS, parse_values, read_spec
from deployer.sweep.point import COLUMNS, Point, empty_row, normalised
from deployer.sweep.report import pareto, smallest_parts
from network_parser.errors import UsageError


def test_lists_and_ranges():
    assert parse_values("sram", "64K..512K:x2") == (65536, 131072, 262144, 524288)
    assert parse_values("sram", "64K..256K:+64K") == (65536, 131072, 196608, 262144)
    assert parse_values("l1", "none,16K,64K") == (None, 16384, 65536)
    assert parse_values("sram", ["64K", 1000, None]) == (65536, 1000, None)
    assert parse_values("target", "stm32f446, nrf52840,stm32f446") == ("stm32f446", "nrf52840")
    assert parse_values("max_overhead", "10%,0.35") == (0.1, 0.35)
    assert parse_values("patch", "auto,off,4x4@3") == ("auto", "off", "4x4@3")
    # a range that does not land on its end stops below it
    assert parse_values("flash", "100..1000:x3") == (100, 300, 900)


@pytest.mark.parametrize("axis,text,words", [
    ("sram", "64K..512K:x1", "above 1"), ("sram", "512K..64K:x2", "low <= high"), ("sram", "1..10M:+1", "more than"),
    ("target", "stm32f999", "not one of"), ("planner", "64K..128K:x2", "only sizes take ranges"),
    ("patch", "4x4", "RxC@LAYER"), ("sram", "8192M", "4 GiB"), ("sram", "64K,,128K", "empty value"),
    ("time_limit", "0", "time limit"), ("colour", "red", "unknown sweep axis"), ("sram", [True], "not a value"),
])
def test_bad_axis_values_are_usage_errors(axis, text, words):
    with pytest.raises(UsageError, match=words):
        parse_values(axis, text)


def test_spec_from_a_file_then_flags(tmp_path):
    (tmp_path / "sweep.toml").write_text('models = ["a.tflite"]\nverify = "host"\n[axes]\n'
                                         'target = ["stm32f446", "stm32h743"]\nsram = "64K..128K:x2"\norder = ["auto", "file"]\n')
    spec = read_spec(("b.tflite",), {"sram": "32K", "target": None}, tmp_path / "sweep.toml")
    assert [m.name for m in spec.models] == ["a.tflite", "b.tflite"] and spec.models[0].parent == tmp_path
    axes = dict(spec.axes)
    assert list(axes) == list(AXES)  # every axis, in one order
    assert axes["target"] == ("stm32f446", "stm32h743") and axes["sram"] == (32768,) and axes["order"] == ("auto", "file")
    assert axes["planner"] == ("cpsat",) and spec.verify == "host" and spec.size == 2 * 2 * 2
    (tmp_path / "s.json").write_text(json.dumps({"models": ["a.tflite"], "axes": {"l1": [None, "16K"]}}))
    assert dict(read_spec((), {}, tmp_path / "s.json").axes)["l1"] == (None, 16384)


@pytest.mark.parametrize("text,words", [
    ('{"models": ["a"], "colour": 1}', "unknown key 'colour'"), ('{"models": "a"}', "list of file names"),
    ('{"models": ["a"], "axes": []}', "table of axis"), ("[1]", "is a table"), ("{", "not a valid JSON"),
    ('{"models": ["a"], "axes": {"sram": []}}', "no values"), ('{"models": ["a"], "verify": "board"}', "verify"),
])
def test_bad_sweep_files(tmp_path, text, words):
    (tmp_path / "s.json").write_text(text)
    with pytest.raises(UsageError, match=words):
        read_spec((), {}, tmp_path / "s.json")


def test_sizes_of_sweeps():
    with pytest.raises(UsageError, match="at least one model"):
        read_spec((), {"sram": "64K"})
    with pytest.raises(UsageError, match=f"more than {MAX_POINTS:,}"):
        read_spec(("m.tflite",), {"sram": "1K..1000K:+1K", "flash": "1K..200K:+1K"})


def test_a_key_covers_model_axes_checks_and_sources():
    p = Point(0, "m.tflite", "ab" * 32, (("target", "host"), ("sram", 1024)), "none")
    k = p.key("src1")
    assert k == Point(7, "other_name.tflite", "ab" * 32, p.settings, "none").key("src1")  # place and name aside
    assert len({k, p.key("src2"), Point(0, "m", "cd" * 32, p.settings).key("src1"),
                Point(0, "m", "ab" * 32, (("target", "host"), ("sram", 2048))).key("src1"),
                Point(0, "m", "ab" * 32, p.settings, "host").key("src1")}) == 5


def test_messages_lose_the_paths_a_run_made(tmp_path):
    model = tmp_path / "deploy-sweep-x1" / "abc" / "m.tflite"
    text = normalised(f"{model}: op 3 CONV_2D; see /tmp/deploy-verify-q2/engine.c\nline", model, "m.tflite")
    assert text == "m.tflite: op 3 CONV_2D; see <tmp> line"


def test_the_folder_needs_the_marker(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a sweep's"):
        journal.open_folder(tmp_path / "other")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / journal.MARKER).write_text("{}")
    with pytest.raises(UsageError, match="not a sweep's marker"):
        journal.open_folder(tmp_path / "bad")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        journal.open_folder(tmp_path / "file")
    folder = journal.open_folder(tmp_path / "new" / "sweep")
    assert (folder / journal.MARKER).is_file()
    assert journal.open_folder(folder) == folder  # ours: reused


def test_a_line_cut_by_a_kill_is_dropped_and_cut_off(tmp_path):
    folder = journal.open_folder(tmp_path / "s")
    rows = [empty_row(Point(i, "m", "0" * 64, (("target", "host"),)), f"k{i}") for i in range(3)]
    log = journal.Journal(folder)
    for r in rows[:2]:
        log.append(r)
    log.close()
    with open(folder / journal.JOURNAL, "a") as f:
        f.write(json.dumps(rows[2])[:40])  # killed while writing
    assert set(journal.read_journal(folder)) == {"k0", "k1"}
    log = journal.Journal(folder)
    log.append(rows[2])
    log.close()
    assert set(journal.read_journal(folder)) == {"k0", "k1", "k2"}
    assert len((folder / journal.JOURNAL).read_text().splitlines()) == 3


def _row(**values):
    row = {name: None for name, _ in COLUMNS}
    row.update(status="fits", **values)
    return row


def test_pareto_front():
    rows = [_row(sram_need=10, flash_need=10, modeled_cycles=10), _row(sram_need=5, flash_need=20, modeled_cycles=10),
            _row(sram_need=12, flash_need=12, modeled_cycles=12), _row(sram_need=10, flash_need=10, modeled_cycles=10),
            _row(sram_need=20, flash_need=5, modeled_cycles=30)]
    front = pareto(rows, "modeled_cycles")
    assert [(r["sram_need"], r["flash_need"]) for r in front] == [(5, 20), (10, 10), (20, 5)]
    assert front[1] is rows[0]  # the first of equal points


def test_smallest_part_is_the_one_with_least_ram_that_fits():
    common = dict(model="m", sram=None, flash=None, l1=None, l3=None, planner="cpsat", tiler="cpsat", patch="auto",
                  kernels="auto", order="auto", overlap="on", max_overhead=None, time_limit=5.0, flash_need=1000)
    rows = [_row(target="stm32h743", sram_need=200_000, **common),
            _row(target="nrf52840", sram_need=200_000, **common),
            dict(_row(target="stm32f446", sram_need=200_000, **common), status="over budget", over="SRAM by 68,928 B"),
            _row(target="host", sram_need=100, **common)]
    parts = smallest_parts(rows)
    assert [p["target"] for p in parts] == ["stm32f446", "nrf52840", "stm32h743"]  # host is no part
    assert [p["fits"] for p in parts] == [False, True, True]
    assert [p["smallest"] for p in parts] == [False, True, False]
    assert parts[0]["over"] == "SRAM by 68,928 B"
