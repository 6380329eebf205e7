"""sweep/report.html in Debian's Chromium (as tests/host/test_report_browser.py does for a
deployment's report): it renders offline, every picture has its points drawn (the grey ones
and the red front's), and the tables hold the figures of the rows."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from deployer.sweep.axes import read_spec
from deployer.sweep.run import run_sweep
from tests.host.test_report_browser import CHROMIUM, CHROMIUM_ARGS, Image, browser, cells, example_model, sync_api  # noqa: F401
from tests.models import shared_model

pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install -e '.[sweep]')")

FRONT = (0xD6, 0x5B, 0x5B)  # circle.front's fill
POINT = (0xBB, 0xBB, 0xBB)  # circle.point's fill


def pixels_near(png: bytes, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(count for count, c in image.getcolors(maxcolors=image.width * image.height)
               if all(abs(a - b) <= tolerance for a, b in zip(c, rgb)))


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    models = (example_model(tmp), shared_model("mlperf_tiny/kws_ref_model.tflite"))
    spec = read_spec(models, dict(target="host,stm32f446,stm32h743", sram="4K,32K,128K", planner="cpsat,first-fit",
                                  l1="none,8K"))
    outcome = run_sweep(spec, tmp / "sweep", "pool", 2)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    context.route(re.compile(r"^(?!file:)"), lambda route: route.abort())
    p = context.new_page()
    requests, errors = [], []
    p.on("request", lambda r: requests.append(r.url))
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.goto((tmp / "sweep" / "report.html").as_uri())
    yield p, outcome, requests, errors, tmp / "sweep" / "report.html"
    context.close()


def test_renders_offline(page):
    p, outcome, requests, errors, path = page
    assert errors == [] and requests == [path.as_uri()]
    assert f"{len(outcome.rows)} points" in p.inner_text("p#summary")


def test_every_picture_has_its_points_drawn(page):
    p, outcome, *_ = page
    svgs = p.locator("svg.front")
    assert svgs.count() == 4  # two per model
    for i in range(svgs.count()):
        svg = svgs.nth(i)
        png = svg.screenshot()
        fronts, dots = svg.locator("circle.front").count(), svg.locator("circle.point").count()
        assert fronts >= 1 and dots >= fronts
        # a circle of radius 6 covers about 113 pixels, one of radius 5 about 78: most of each shows
        assert pixels_near(png, FRONT) >= 60 * fronts, f"svg {i}: the front's points are not drawn"
        assert pixels_near(png, POINT) + pixels_near(png, FRONT) >= 40 * dots


def test_tables_hold_the_rows_figures(page):
    p, outcome, *_ = page
    fits = [r for r in outcome.rows if r["status"] == "fits"]
    fronts = p.locator("table.front-table")
    assert fronts.count() == 2
    for n, model in enumerate(("tiny_kws.tflite", "kws_ref_model.tflite")):
        least = min(r["sram_need"] for r in fits if r["model"] == model)
        rows = cells(p, f"table#front-{n}")[1:]
        assert f"{least:,}" in [row[2] for row in rows]  # the least SRAM is on the front
    parts = cells(p, "table.parts")
    assert parts[0][:1] == ["preset"] and any("(smallest)" in row[0] for row in parts[1:])
    assert p.locator("table#differences tr").count() >= 1 or "gave the same arena" in p.inner_text("body")
