"""report.html in a real browser: Debian's Chromium (/usr/bin/chromium), driven by playwright,
opens the reports of three real deployments (the example model; the shared VWW model split
into 4x4 patches; the same model tiled for a 32 KiB L1) and checks that each page renders
offline, that every SVG picture has something drawn in it, and that the figures the report is
for appear on the page. The browser is the system one: `playwright install` is never needed
(it downloads a browser of its own; tests/install.sh installs Debian's `chromium`)."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from deployer.output import write_output
from deployer.pipeline import Options, deploy
from solver.plan import Plan
from solver.arena import GREEDY
from tests.models import shared_model

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is not installed (tests/install.sh installs Debian's chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
Image = pytest.importorskip("PIL.Image", reason="pillow is not installed (pip install -e '.[test]')")

# The network is closed: these keep Chromium from trying to reach Google (updates, sync, QUIC).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny_kws.tflite"

# The blank check. A picture is "drawn" when at least MIN_INK of its pixels are not near-white
# and at least MIN_COLOURS colours each cover MIN_COLOUR_SHARE of it (anti-aliasing makes many
# rare shades; those do not count). Measured on these three reports (Chromium 156, 1x scale):
#   ink share:     12.0% (patched arena pictures) .. 91.6% (patch grid); flash bar 40.9%,
#                  curve 21.5-39.8%, arenas 12.0-29.2%; the empty <svg> 0%. With every <rect>
#                  removed (only axes, ticks, labels and lines left) the pictures measure
#                  1.8-3.1%: 6% sits about 2x from both sides, so a picture whose data
#                  rectangles went missing fails too, not only a fully white one.
#   colours covering >= 0.2%: 4 (curve of the tiled report) .. 51 (patch grid); the empty
#                  <svg> 1. A picture of one flat colour (a failed render filled grey or black,
#                  or its fill plus one outline) has at most 2: 3 is needed.
MIN_INK = 0.06
MIN_COLOURS = 3
MIN_COLOUR_SHARE = 0.002
NEAR_WHITE = 240  # a pixel with every channel >= this is background


def picture_stats(png: bytes) -> tuple[float, int]:
    """(share of non-white pixels, number of colours covering MIN_COLOUR_SHARE) of a screenshot."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    n = image.width * image.height
    colours = image.getcolors(maxcolors=n) or []
    ink = sum(count for count, rgb in colours if min(rgb) < NEAR_WHITE) / max(n, 1)
    return ink, sum(1 for count, _ in colours if count >= MIN_COLOUR_SHARE * n)


def is_blank(png: bytes) -> bool:
    ink, colours = picture_stats(png)
    return ink < MIN_INK or colours < MIN_COLOURS


def example_model(tmp: Path) -> Path:
    if EXAMPLE.exists():
        return EXAMPLE
    out = tmp / "tiny_kws.tflite"  # not into examples/: the checkout may be shared
    subprocess.run([sys.executable, str(REPO / "examples" / "make_example.py"), str(out)], check=True, cwd=REPO)
    return out


def vww(_tmp: Path) -> Path:
    return shared_model("mlperf_tiny/vww_96_int8.tflite")


CASES = {
    "tiny_kws": (example_model, Options()),
    "vww_patched": (vww, Options(patch="4x4@3")),
    "vww_tiled": (vww, Options(target="host", l1=32 * 1024, patch="off")),
}


@dataclass
class Report:
    dep: Plan
    path: Path
    page: object  # playwright Page, loaded with the report
    requests: list[str]
    errors: list[str]  # console errors and uncaught page errors


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module", params=list(CASES))
def report(request, browser, tmp_path_factory):
    model, options = CASES[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    dep = deploy(model(tmp), options)
    write_output(dep.files, tmp / "out")
    path = tmp / "out" / "report.html"
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    # Anything but the file itself is refused (and still recorded by the request event below).
    context.route(re.compile(r"^(?!file:)"), lambda route: route.abort())
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.goto(path.as_uri())
    yield Report(dep, path, page, requests, errors)
    context.close()


def cells(page, selector: str) -> list[list[str]]:
    """A table's rows (header first), each as the text of its cells."""
    return page.eval_on_selector_all(
        f"{selector} tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")


def test_renders_offline(report):
    page = report.page
    assert page.title().strip()
    assert report.errors == []
    assert page.locator("p#summary").is_visible()
    assert report.requests == [report.path.as_uri()]


def test_every_picture_is_drawn(report):
    page, dep = report.page, report.dep
    svgs = page.locator("svg")
    ids = [svgs.nth(i).evaluate("s => s.id || s.getAttribute('class')") for i in range(svgs.count())]
    n_arena = ids.count("arena")
    assert ids == ["curve", "flash", *["arena"] * n_arena, *(f"patch-{n + 1}" for n in range(len(dep.patches)))]
    assert n_arena == len({dep.arena.method, *GREEDY})  # the deployment's planner and the greedy ones
    for i, name in enumerate(ids):
        svg = svgs.nth(i)
        box = svg.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0, name
        ink, colours = picture_stats(svg.screenshot())
        assert ink >= MIN_INK and colours >= MIN_COLOURS, (
            f"svg {i} ({name}) looks blank: {ink:.1%} non-white pixels, {colours} colours")
    assert page.locator("svg#curve rect.bar").count() == len(dep.graph.layers)


def test_blank_check_can_fail(browser):
    page = browser.new_page()
    try:
        page.set_content("<!DOCTYPE html><body><svg width=200 height=100></svg></body>")
        png = page.locator("svg").screenshot()
        assert Image.open(io.BytesIO(png)).size == (200, 100)
        assert picture_stats(png) == (0.0, 1)
        assert is_blank(png)
        # ... and passes a drawn one: the same box with a few coloured bars and an axis.
        page.set_content("<!DOCTYPE html><body><svg width=200 height=100>"
                         "<rect x=10 y=20 width=40 height=70 fill='#5b8fd6'/>"
                         "<rect x=60 y=50 width=40 height=40 fill='#e28dc0'/>"
                         "<line x1=5 y1=90 x2=195 y2=90 stroke='#444'/></svg></body>")
        assert not is_blank(page.locator("svg").screenshot())
    finally:
        page.close()


def test_key_figures(report):
    page, dep = report.page, report.dep
    text = page.inner_text("body")
    m = dep.memory.as_dict()
    for figure in (f"{dep.arena.peak:,}", f"{m['sram_bytes']:,}", f"{m['flash_bytes']:,}", dep.graph.name):
        assert figure in text
    assert f"Arena {dep.arena.peak:,} B by {dep.arena.method}" in page.inner_text("p#summary")
    memory = {row[0]: row for row in cells(page, "table#memory")[1:]}
    assert memory["SRAM"][1] == f"{m['sram_bytes']:,}" and memory["flash"][1] == f"{m['flash_bytes']:,}"
    assert dep.graph.name in page.title()

    planners = cells(page, "table#planner-table")
    methods = [row[0] for row in planners[1:]]
    assert set(methods) == {dep.arena.method, *GREEDY}
    headings = page.locator("h3").all_inner_texts()
    for method in methods:
        assert method in text
        assert any(h.startswith(f"{method}: ") for h in headings), method
    assert page.locator("table#solvers tr").count() >= 1


def test_one_arena_picture_per_planner(report):
    page = report.page
    assert page.locator("svg.arena").count() == page.locator("table#planner-table tr").count() - 1


def test_patch_grid(report):
    page, dep = report.page, report.dep
    text = page.inner_text("p#patch-text")
    if not dep.patches:
        assert "no patch split" in text and page.locator("svg#patch-1").count() == 0
        return
    (p,), c = dep.patches, dep.fusion
    grid = f"{p.grid[0]}x{p.grid[1]}"
    assert grid == "4x4"  # as asked: Options(patch="4x4@3")
    assert text.startswith("1 stage run patch by patch (--patch RxC@LAYER)")
    assert f"estimated peak {c.unsplit_peak:,} B unsplit, {c.peak:,} B split" in text
    assert page.inner_text("p#patch-1-text").startswith(f"Stage 1: ops {p.stage.start}..{p.stage.end} run in {grid} patches")
    assert f"patch stage {grid}" in page.text_content("svg#curve")
    assert page.locator("svg#patch-1 rect.region").count() == p.grid[0] * p.grid[1]
    assert page.locator("table#layers tr.stage").count() == len(p.layers)


def test_tiles_per_layer(report):
    page, dep = report.page, report.dep
    rows = cells(page, "table#layers")
    header, body = rows[0], rows[1:]
    assert len(body) == len(dep.graph.layers)
    if not dep.tilings:
        assert "tiles" not in header
        return
    tiles, tile = header.index("tiles"), header.index("tile")
    for k, row in enumerate(body):
        assert row[0] == str(k)
        if k in dep.tilings:
            t = dep.tilings[k][1]
            assert row[tiles] == str(t.tiles) and row[tile] == t.label, row
            assert int(row[tiles]) >= 1
        else:
            assert row[tiles] == "" and row[tile] == "", row
    assert any(int(row[tiles]) > 1 for row in body if row[tiles]), "nothing split into several tiles"
