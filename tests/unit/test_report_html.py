"""out/report.html: written by every deploy, self-contained, byte-identical run to run, and
drawing what the plan decided (live bytes per layer, flash, every planner, tiles, patches)."""
from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from deployer.pipeline import Options, deploy
from tests.unit.test_cli import builder_model, run_subprocess
from tests.unit.test_suggest import stem_model

VOID = {"meta", "br", "hr", "img", "input", "link", "line", "polyline"}


class Page(HTMLParser):
    """Every <svg> with its id/class and the classes of its rects; every table's rows of cells;
    tags must close in order."""

    def __init__(self):
        super().__init__()
        self.stack, self.svgs, self.tables, self.ids = [], [], {}, set()
        self._table, self._row, self._cell = None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "svg":
            self.svgs.append(dict(id=a.get("id"), cls=a.get("class"), rects=[]))
        elif tag == "rect":
            self.svgs[-1]["rects"].append(a.get("class"))
        elif tag == "table":
            self._table = self.tables.setdefault(a.get("id") or f"table{len(self.tables)}", [])
        elif tag == "tr" and self._table is not None:
            self._row = dict(cls=a.get("class"), cells=[])
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        if tag == "rect":
            self.svgs[-1]["rects"].append(dict(attrs).get("class"))

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            self._row["cells"].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def page(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    assert p.stack == [], f"unclosed tags {p.stack}"
    assert "<script" not in html and "http" not in html.replace('lang="en"', "")  # nothing fetched or run
    return p


def svg(p: Page, ident: str) -> dict:
    return next(s for s in p.svgs if s["id"] == ident)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    return dict(builder=builder_model(d / "builder.tflite"), stem=stem_model(d / "stem.tflite"))


def test_every_deploy_writes_the_report_and_it_is_byte_identical(models):
    a = deploy(models["builder"], Options(sram=64 * 1024, flash=256 * 1024))
    b = deploy(models["builder"], Options(sram=64 * 1024, flash=256 * 1024))
    assert a.files["report.html"] == b.files["report.html"]
    p = page(a.files["report.html"])
    assert {"summary", "memory", "curve", "flash", "planner-table", "layers", "solvers"} <= p.ids
    memory = {row["cells"][0]: row["cells"] for row in p.tables["memory"][1:]}
    assert memory["SRAM"][1] == f"{a.memory.sram_bytes:,}" and memory["SRAM"][-1] == "OK"
    assert memory["flash"][1] == f"{a.memory.flash_bytes:,}" and memory["flash"][3] == f"{256 * 1024:,}"
    # one bar per layer; the budget left for the arena is drawn
    assert svg(p, "curve")["rects"].count("bar") == len(a.graph.layers)
    assert 'class="budget"' in a.files["report.html"]
    # one stacked part per flash section
    assert len(svg(p, "flash")["rects"]) == len(a.memory.flash_sections)
    # every planner: the table's rows and one picture each, one rectangle per buffer
    methods = [row["cells"][0] for row in p.tables["planner-table"][1:]]
    assert methods == ["cpsat", "first-fit", "best-fit", "bidirectional"]
    arenas = [s for s in p.svgs if s["cls"] == "arena"]
    assert len(arenas) == 4 and all(len(s["rects"]) == len(arenas[0]["rects"]) > 0 for s in arenas)
    assert "time ms" not in p.tables["planner-table"][0]["cells"]  # no wall times in out/
    assert [row["cells"][0] for row in p.tables["layers"][1:]] == [str(k) for k in range(len(a.graph.layers))]


def test_a_greedy_deployment_does_not_solve_cpsat_for_the_report(models):
    dep = deploy(models["builder"], Options(planner="best-fit"))
    p = page(dep.files["report.html"])
    assert [row["cells"][0] for row in p.tables["planner-table"][1:]] == ["first-fit", "best-fit", "bidirectional"]
    assert "cpsat: skipped, not run (--planner best-fit" in dep.files["report.html"]


def test_the_patch_stage_is_drawn(models):
    dep = deploy(models["stem"], Options(patch="2x3@1"))
    p = page(dep.files["report.html"])
    grid = svg(p, "patch-1")["rects"]
    assert grid.count("region") == 6 and grid.count("image") == 1
    stage_rows = [row for row in p.tables["layers"][1:] if row["cls"] == "stage"]
    assert [row["cells"][0] for row in stage_rows] == [str(k) for k in dep.patches[0].layers]
    assert svg(p, "curve")["rects"].count("band") == 1
    assert "Stage 1: ops 0..1 run in 2x3 patches" in dep.files["report.html"]


def test_tiles_are_listed_per_layer(models):
    dep = deploy(models["stem"], Options(l1=8 * 1024, patch="off"))
    p = page(dep.files["report.html"])
    head = p.tables["layers"][0]["cells"]
    tile, tiles = head.index("tile"), head.index("tiles")
    for k, (_, t) in dep.tilings.items():
        row = p.tables["layers"][1 + k]["cells"]
        assert (row[tile], row[tiles]) == (t.label, str(t.tiles))
    memory = {row["cells"][0]: row["cells"] for row in p.tables["memory"][1:]}
    assert memory["L1 (largest tile)"][3] == f"{8 * 1024:,}"


def test_cli_json_summary_and_quiet(models, tmp_path):
    code, out, err = run_subprocess(models["builder"], "--sram", "64K", "-o", tmp_path / "o", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert "report.html" in j["files"] and (tmp_path / "o" / "report.html").stat().st_size == j["files"]["report.html"]
    assert j["solvers"]["arena"]["wall_s"] >= 0 and j["wall_s"] > 0 and j["memory"]["sram_bytes"] <= 64 * 1024
    assert j["budgets"]["sram_bytes"] == 64 * 1024
    code, out, err = run_subprocess(models["builder"], "-o", tmp_path / "q", "-q")
    assert (code, out, err) == (0, "", "") and (tmp_path / "q" / "report.html").exists()


def test_layers_streaming_from_l3_are_listed(models):
    dep = deploy(models["stem"], Options(target="gap8", sram=48 * 1024, l1=8 * 1024, patch="off"))
    assert dep.l3 is not None and dep.l3.placement.slabs
    p = page(dep.files["report.html"])
    head = p.tables["layers"][0]["cells"]
    l3 = head.index("L3")
    for k, row in enumerate(p.tables["layers"][1:]):
        s = dep.l3.placement.slabs.get(k)
        assert (row["cells"][l3] != "") == (s is not None)
        if s is not None:
            assert row["cells"][l3].endswith(f"{s.slabs} slab{'s' if s.slabs > 1 else ''}, {s.l3_traffic:,} B")
    memory = {row["cells"][0]: row["cells"] for row in p.tables["memory"][1:]}
    assert memory["L3"][1] == f"{dep.memory.l3_bytes:,}"
