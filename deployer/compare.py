"""Compare the arena planners on one problem: a plain-text table and a self-contained HTML report.

    plans = compare_planners(problem)                # one checked ArenaPlan per method
    print(comparison_table(plans, lower_bound(problem)))
    html = render_report_html("tiny_kws", problem, plans, live_bytes(problem))

Every coordinate of the report is computed here; templates/report/report.html.j2 only places
them. The same plans always render to the same bytes (no timestamps, rounded floats).
"""
from __future__ import annotations

import colorsys
import hashlib
import math

import jinja2

from solver.arena import ArenaPlan, ArenaProblem, SolverConfig, lower_bound, plan_arena

from .emit import TEMPLATES

METHODS = ("cpsat", "first-fit", "best-fit", "bidirectional")

# One picture: SVG size and the margins around the plot area, in pixels.
WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 16, 36


class Comparison(list):
    """The plans, in the order asked for, plus why any method was left out (method -> note)."""

    def __init__(self, plans=(), skipped: dict[str, str] | None = None):
        super().__init__(plans)
        self.skipped = dict(skipped or {})


def compare_planners(problem: ArenaProblem, methods=METHODS, config: SolverConfig = SolverConfig()) -> Comparison:
    """Run every method through plan_arena (which checks each plan). A planner that is not
    available (cannot be imported, e.g. no ortools, or still a NotImplementedError stub)
    is left out, with a note in ``.skipped``."""
    plans, skipped = [], {}
    for method in methods:
        try:
            plans.append(plan_arena(problem, method, config))
        except (ImportError, NotImplementedError) as e:
            skipped[method] = f"not available ({type(e).__name__}{': ' if str(e) else ''}{e})"
    return Comparison(plans, skipped)


def live_bytes(problem: ArenaProblem) -> list[int]:
    """Bytes of live buffers (unaligned sizes) at each op index 0..last op."""
    n_ops = max((b.last + 1 for b in problem.buffers), default=0)
    curve = [0] * n_ops
    for b in problem.buffers:
        for first, last, size in b.segments():
            for k in range(first, last + 1):
                curve[k] += size
    return curve


# ---- the summary table (shared by the text and the HTML forms) -------------------------

COLUMNS = ("method", "arena B", "gap B", "gap %", "time ms", "status")


def _rows(plans, bound: int) -> list[tuple[str, ...]]:
    return [(p.method, f"{p.peak:,}", f"{p.peak - bound:,}",
             f"{100 * (p.peak - bound) / bound:.1f}%" if bound else "-",
             f"{1000 * p.wall_s:,.1f}", p.status) for p in plans]


def _bound_line(bound: int) -> str:
    return f"max-live lower bound: {bound:,} B (gap % is relative to the bound)"


def _skipped_lines(plans) -> list[str]:
    return [f"{m}: skipped, {note}" for m, note in getattr(plans, "skipped", {}).items()]


def comparison_table(plans, lower_bound: int) -> str:
    rows = [COLUMNS, *_rows(plans, lower_bound)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    return "\n".join([*lines, _bound_line(lower_bound), *_skipped_lines(plans)])


# ---- the HTML report -------------------------------------------------------------------

def _colour(name: str) -> str:
    """A stable pastel per buffer name (md5, not hash(): the latter is salted per process)."""
    hue = int(hashlib.md5(name.encode()).hexdigest()[:6], 16) % 360
    r, g, b = colorsys.hls_to_rgb(hue / 360, 0.72, 0.60)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _ticks(top: int, count: int) -> list[int]:
    step = max(1, math.ceil(top / count))
    return list(range(0, top + 1, step))


def _figure(problem: ArenaProblem, plan: ArenaPlan, curve: list[int], n_ops: int, y_max: int,
            before: list[int] | None = None) -> dict:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    dx, sy = plot_w / n_ops, plot_h / y_max

    def x(op: float) -> float:
        return round(LEFT + op * dx, 2)

    def y(offset: float) -> float:
        return round(TOP + plot_h - offset * sy, 2)

    # a buffer whose height changes over time (in-place ops) is drawn one rectangle per step
    rects = [dict(x=x(first), y=y(o + size), w=round((last - first + 1) * dx, 2),
                  h=round(size * sy, 2), fill=_colour(b.name),
                  title=f"{b.name}: {size:,} B, ops [{first}, {last}], offset {o:,}")
             for b, o in zip(problem.buffers, plan.offsets) for first, last, size in b.segments()]
    def polyline(values):
        steps = [(x(k + e), y(v)) for k, v in enumerate(values) for e in (0, 1)]
        steps = [pt for i, pt in enumerate(steps) if i == 0 or pt != steps[i - 1]]
        return " ".join(f"{px},{py}" for px, py in steps)

    return dict(method=plan.method, peak=f"{plan.peak:,}", status=plan.status, note=plan.note,
                rects=rects, curve=polyline(curve), before=polyline(before) if before else None,
                peak_y=y(plan.peak), left=LEFT, right=WIDTH - RIGHT, top=TOP, bottom=HEIGHT - BOTTOM,
                x_ticks=[(round(x(k + 0.5), 2), k) for k in _ticks(n_ops - 1, 12)],
                y_ticks=[(y(v), f"{v:,}") for v in _ticks(y_max, 5)])


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES / "report")),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=True)


def render_report_html(model_name: str, problem: ArenaProblem, plans, live_bytes_curve: list[int],
                       before: list[int] | None = None, patch_line: str | None = None) -> str:
    """One page: the summary table, then per plan the buffers as rectangles (x = op, y = offset),
    a dashed line at the plan's peak and the live-bytes curve over them, on a shared y scale;
    with a patch split, ``before`` is the live-bytes curve without it, drawn grey."""
    bound = lower_bound(problem)
    n_ops = max(len(live_bytes_curve), max((b.last + 1 for b in problem.buffers), default=0), 1)
    y_max = max([bound, *live_bytes_curve, *(before or ()), *(p.peak for p in plans), 1])
    return _environment().get_template("report.html.j2").render(
        model_name=model_name, n_buffers=len(problem.buffers), alignment=problem.alignment,
        columns=COLUMNS, rows=_rows(plans, bound), bound_line=_bound_line(bound),
        skipped=_skipped_lines(plans), width=WIDTH, height=HEIGHT, patch_line=patch_line,
        figures=[_figure(problem, p, live_bytes_curve, n_ops, y_max, before) for p in plans])


# ---- tiling: the CP-SAT tiler against the greedy one, layer by layer --------------------

def tiling_table(rows: list[tuple]) -> str:
    """rows: (layer, op, greedy LayerTiling, cpsat LayerTiling) per tiled layer."""
    head = ("op", "type", "greedy tile", "tiles", "L1 B", "cycles", "cpsat tile", "tiles", "L1 B", "cycles",
            "status")
    body = [(str(k), op, g.label, str(g.tiles), f"{g.l1_bytes:,}",
             f"{g.modeled_cycles:,}", c.label, str(c.tiles), f"{c.l1_bytes:,}",
             f"{c.modeled_cycles:,}", c.status) for k, op, g, c in rows]
    total_g = sum(g.modeled_cycles for _, _, g, _ in rows)
    total_c = sum(c.modeled_cycles for _, _, _, c in rows)
    body.append(("", "total", "", str(sum(g.tiles for _, _, g, _ in rows)), "", f"{total_g:,}", "",
                 str(sum(c.tiles for _, _, _, c in rows)), "", f"{total_c:,}",
                 f"{total_c / total_g:.3f}x" if total_g else ""))
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i in (1, 10) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     .rstrip() for r in (head, *body))
