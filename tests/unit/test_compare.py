"""deployer.compare: the planner comparison table and the HTML report."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

import solver.arena
from deployer.compare import METHODS, compare_planners, comparison_table, live_bytes
from deployer.report_html import planners_report
from deployer.pipeline import Options, arena_problem, deploy
from solver.arena import ArenaProblem, Buffer, SolverConfig, lower_bound

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_kws.tflite"
FAST = SolverConfig(time_limit_s=2.0)
VOID = {"meta", "br", "hr", "img", "input", "link"}


def problem(*specs, alignment=16) -> ArenaProblem:
    """specs: (size, first, last) triples."""
    return ArenaProblem(tuple(Buffer(f"b{i}", s, f, l) for i, (s, f, l) in enumerate(specs)), alignment)


SMALL = problem((64, 0, 1), (32, 1, 2), (48, 2, 4), (16, 3, 4), (100, 0, 0))


class Structure(HTMLParser):
    """Checks that every tag closes in order; counts the rectangles inside each <svg>."""

    def __init__(self):
        super().__init__()
        self.stack, self.rects_per_svg, self.titles = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "svg":
            self.rects_per_svg.append(0)
        if tag == "rect":
            self.rects_per_svg[-1] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        if tag == "rect":
            self.rects_per_svg[-1] += 1

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "title" and "svg" in self.stack:
            self.titles.append(data)


def parse(html: str) -> Structure:
    s = Structure()
    s.feed(html)
    s.close()
    assert s.stack == [], f"unclosed tags {s.stack}"
    return s


def check_report(name: str, p: ArenaProblem, plans) -> str:
    html = planners_report(name, p, plans, live_bytes(p))
    assert html == planners_report(name, p, plans, live_bytes(p))
    assert "http" not in html and "<script" not in html
    s = parse(html)
    assert s.rects_per_svg == [len(p.buffers)] * len(plans)
    return html


# ---- compare_planners ------------------------------------------------------------------

def test_compare_runs_every_available_method_in_order():
    plans = compare_planners(SMALL, config=FAST)
    assert [p.method for p in plans] == [m for m in METHODS if m not in plans.skipped]
    assert set(plans.skipped) <= {"cpsat"}
    assert all(p.peak >= lower_bound(SMALL) for p in plans)


def test_unavailable_planner_is_skipped_with_a_note(monkeypatch):
    def missing(*_):
        raise ImportError("No module named 'solver.arena_cpsat'")

    monkeypatch.setitem(solver.arena.METHODS, "cpsat", missing)
    plans = compare_planners(SMALL, config=FAST)
    assert [p.method for p in plans] == ["first-fit", "best-fit", "bidirectional"]
    assert "arena_cpsat" in plans.skipped["cpsat"]
    assert "cpsat: skipped" in comparison_table(plans, lower_bound(SMALL))
    assert "cpsat: skipped" in planners_report("m", SMALL, plans, live_bytes(SMALL))


def test_live_bytes_sums_live_sizes_per_op():
    assert live_bytes(SMALL) == [164, 96, 80, 64, 64]
    assert live_bytes(problem()) == []


# ---- comparison_table ------------------------------------------------------------------

def test_table_lists_every_method_and_the_bound():
    plans = compare_planners(SMALL, ("first-fit", "best-fit", "bidirectional"))
    bound = lower_bound(SMALL)
    table = comparison_table(plans, bound)
    lines = table.splitlines()
    assert lines[0].split() == ["method", "arena", "B", "gap", "B", "gap", "%", "time", "ms", "status"]
    assert [ln.split()[0] for ln in lines[1:4]] == ["first-fit", "best-fit", "bidirectional"]
    assert f"max-live lower bound: {bound:,} B" in lines[4]
    for line, p in zip(lines[1:4], plans):
        assert f"{p.peak:,}" in line and f"{p.peak - bound:,}" in line and p.status in line


# ---- planners_report ------------------------------------------------------------------

def test_report_on_a_small_problem():
    plans = compare_planners(SMALL, ("first-fit", "bidirectional"))
    html = check_report("small", SMALL, plans)
    assert html.count("<svg") == 2 and html.count('class="peak"') == 2 and html.count('class="live"') == 2


def test_report_escapes_names_and_colours_are_stable():
    p = ArenaProblem((Buffer("a<b>&c", 32, 0, 1), Buffer("d", 16, 1, 2)), 16)
    plans = compare_planners(p, ("first-fit", "best-fit"))
    html = check_report("x<y", p, plans)
    assert "a<b>" not in html and "a&lt;b&gt;&amp;c" in html
    titles = parse(html).titles
    assert titles[0].startswith("a<b>&c: 32 B, ops [0, 1], offset ")
    fills = [line.split('fill="')[1].split('"')[0] for line in html.splitlines() if line.startswith("<rect")]
    assert fills[:2] == fills[2:]  # the same buffer gets the same colour in every picture


@pytest.fixture(scope="module")
def tiny_kws():
    dep = deploy(EXAMPLE, Options())
    p, _ = arena_problem(dep.lives, 16)
    return p, compare_planners(p, config=FAST)


def test_real_model_table_and_report(tiny_kws):
    p, plans = tiny_kws
    table = comparison_table(plans, lower_bound(p))
    for m in METHODS:
        assert m in table
    assert f"max-live lower bound: {lower_bound(p):,} B" in table
    html = check_report("tiny_kws", p, plans)
    assert html.count("<svg") == len(plans) >= 3
    assert len(parse(html).titles) == len(p.buffers) * len(plans)


def test_the_solver_line_says_by_how_many_bytes_cpsat_beats_greedy():
    """A chain of outputs over inputs the greedy planners place apart at one point and CP-SAT
    at each pair's least span: the table says so, in bytes."""
    from solver.arena_types import Overlap
    buffers = tuple(Buffer(f"t{i}", s, i, i + 1) for i, s in enumerate((1024, 1024, 512, 2048)))
    pairs = (Overlap(0, 1, -64, 64), Overlap(1, 2, 0, 1024), Overlap(2, 3, -512))
    chain = ArenaProblem(buffers, 16, pairs=pairs)
    plans = compare_planners(chain, config=FAST)
    best = min(p.peak for p in plans if p.method in ("first-fit", "best-fit"))
    cpsat = next(p for p in plans if p.method == "cpsat")
    text = comparison_table(plans, lower_bound(chain), chain)
    line = next(x for x in text.splitlines() if x.startswith("CP-SAT "))
    assert cpsat.peak <= best and "3 output-over-input pairs" in line
    assert (f"by {best - cpsat.peak:,} B" in line) if cpsat.peak < best else "equals the best greedy plan" in line
    assert "CP-SAT" not in comparison_table(plans, lower_bound(chain))  # without the problem: the table alone
