"""sweep/report.html: per model, the points on the Pareto front of SRAM x flash x time (QEMU's
instructions where the sweep ran it, else the target's modeled cycles), the smallest board
preset that fits, and where the CP-SAT planner and tiler differ from the greedy ones. One page,
inline SVG and CSS, no script; the same rows render to the same bytes (no wall times)."""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from ..render import environment
from ..report_html import _axis_top, _ticks
from .journal import _write_whole

WIDTH, HEIGHT = 520, 300
LEFT, RIGHT, TOP, BOTTOM = 84, 16, 16, 40
GREEDY_PLANNERS = ("first-fit", "best-fit", "bidirectional")


def dominated(a: tuple, b: tuple) -> bool:
    """Is ``a`` no better than ``b`` everywhere and worse somewhere (smaller is better)?"""
    return all(y <= x for x, y in zip(a, b)) and a != b


def pareto(rows: list[dict], metric: str) -> list[dict]:
    """The rows no other row beats on SRAM, flash and ``metric`` at once (one row per distinct
    triple, the first in the sweep's order)."""
    seen, front = set(), []
    triples = [(r["sram_need"], r["flash_need"], r[metric]) for r in rows]
    for r, t in zip(rows, triples):
        if t not in seen and not any(dominated(t, u) for u in triples):
            seen.add(t)
            front.append(r)
    return sorted(front, key=lambda r: (r["sram_need"], r["flash_need"], r[metric]))


def scatter(rows: list[dict], front: list[dict], x: str, y: str, xlabel: str, ylabel: str, ident: str) -> dict:
    """One picture: every fitting point grey, the front's points red and joined by a step line.
    Byte axes (the needs) count KiB."""
    def unit(name):
        return 1024 if name.endswith("_need") else 1
    xs, ys = [r[x] / unit(x) for r in rows], [r[y] / unit(y) for r in rows]
    x_top, y_top = _axis_top(math.ceil(max(xs))), _axis_top(math.ceil(max(ys)))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(r):
        return round(LEFT + r[x] / unit(x) * pw / x_top, 2), round(TOP + ph - r[y] / unit(y) * ph / y_top, 2)
    dots = sorted({at(r) for r in rows})
    on_front = sorted({at(r) for r in front})
    line = []  # the lower-left envelope of the front in this projection
    for cx, cy in on_front:
        if not line or cy < line[-1][1]:
            line.append((cx, cy))
    return dict(id=ident, width=WIDTH, height=HEIGHT, left=LEFT, right=WIDTH - RIGHT, top=TOP,
                bottom=HEIGHT - BOTTOM, dots=dots, front=on_front, line=" ".join(f"{a},{b}" for a, b in line),
                xlabel=xlabel + (" (KiB)" if unit(x) > 1 else ""), ylabel=ylabel + (" (KiB)" if unit(y) > 1 else ""),
                x_ticks=[(round(LEFT + v * pw / x_top, 2), f"{v:,}") for v in _ticks(x_top, 5)],
                y_ticks=[(round(TOP + ph - v * ph / y_top, 2), f"{v:,}") for v in _ticks(y_top, 5)])


def value_text(v) -> str:
    """An axis value as a flag would say it: sizes in K where they are whole KiB."""
    if v is None:
        return "none"
    if isinstance(v, int) and v and v % 1024 == 0:
        return f"{v // 1024}K"
    return str(v)


def _axes_text(row: dict, skip=()) -> str:
    from .axes import AXES
    parts = []
    for name, axis in AXES.items():
        if name in skip or row[name] == axis.default:
            continue
        parts.append(f"{name} {value_text(row[name])}")
    return ", ".join(parts) or "defaults"


def ram_of(backend) -> int:
    """The RAM a preset's cores reach: its SRAM, its tightly-coupled memory and an L1 of its own."""
    return (backend.sram_bytes or 0) + (backend.tcm_bytes or 0) + \
        (backend.l1_bytes or 0 if not backend.l1_in_sram else 0)


def smallest_parts(rows: list[dict]) -> list[dict]:
    """Per board preset swept, smallest RAM (then flash) first: does any point fit, with the least
    SRAM which settings, else by how much the best point is over."""
    from backends import BACKENDS
    out = []
    for target in sorted({r["target"] for r in rows}, key=lambda t: (ram_of(BACKENDS[t]), BACKENDS[t].flash_bytes or 0, t)):
        b = BACKENDS[target]
        if not b.part:
            continue
        mine = [r for r in rows if r["target"] == target]
        fits = sorted((r for r in mine if r["status"] == "fits"), key=lambda r: (r["sram_need"], r["flash_need"]))
        over = sorted((r for r in mine if r["status"] == "over budget" and r["sram_need"] is not None),
                      key=lambda r: (r["sram_need"], r["flash_need"] or 0))
        best = fits[0] if fits else over[0] if over else None
        out.append(dict(target=target, ram=f"{ram_of(b):,}", flash=f"{b.flash_bytes or 0:,}", fits=bool(fits),
                        sram_need=f"{best['sram_need']:,}" if best and best["sram_need"] is not None else "",
                        flash_need=f"{best['flash_need']:,}" if best and best["flash_need"] is not None else "",
                        how=_axes_text(best, skip=("target",)) if best else "",
                        over=best["over"] if best and not fits and best["over"] else ""))
    smallest = next((p for p in out if p["fits"]), None)
    for p in out:
        p["smallest"] = p is smallest
    return out


def solver_differences(rows: list[dict]) -> list[dict]:
    """Points that differ only in the planner (or the tiler), where the CP-SAT one's arena (or
    modeled cycles) differs from a greedy one's."""
    out = []
    for axis, metric, cpsat, others in (("planner", "arena_bytes", "cpsat", GREEDY_PLANNERS),
                                        ("tiler", "modeled_cycles", "cpsat", ("greedy",))):
        groups = defaultdict(dict)
        for r in rows:
            if r["status"] != "failed" and r[metric] is not None:
                groups[(r["model"], _axes_text(r, skip=(axis,)))][r[axis]] = r[metric]
        for (model, where), by in sorted(groups.items()):
            if cpsat not in by:
                continue
            for other in others:
                if other in by and by[other] != by[cpsat]:
                    out.append(dict(model=model, where=where, what=metric.replace("_", " "), cpsat=f"{by[cpsat]:,}",
                                    other=other, value=f"{by[other]:,}",
                                    change=f"{(by[cpsat] - by[other]) / by[other]:+.1%}" if by[other] else ""))
    return out


def model_section(n: int, model: str, rows: list[dict]) -> dict:
    """The ``n``th model's part of the page: its counts, its two pictures and its front."""
    fits = [r for r in rows if r["status"] == "fits"]
    metric = "instructions" if fits and all(r["instructions"] is not None for r in fits) else "modeled_cycles"
    label = "instructions (QEMU)" if metric == "instructions" else "modeled cycles"
    section = dict(model=model, points=len(rows), fits=len(fits), metric=label,
                   over=sum(r["status"] == "over budget" for r in rows), failed=sum(r["status"] == "failed" for r in rows),
                   charts=[], front=[])
    if not fits:
        return section
    front = pareto(fits, metric)
    section["charts"] = [scatter(fits, front, "sram_need", metric, "SRAM", label, f"front-{n}-time"),
                         scatter(fits, front, "sram_need", "flash_need", "SRAM", "flash", f"front-{n}-flash")]
    section["front"] = [dict(target=r["target"], how=_axes_text(r, skip=("target",)), sram=f"{r['sram_need']:,}",
                             flash=f"{r['flash_need']:,}", cost=f"{r[metric]:,}",
                             exact="" if r["bit_exact"] is None else ("yes" if r["bit_exact"] else "NO"))
                        for r in front]
    return section


def sweep_report(rows: list[dict], spec) -> str:
    by_model = defaultdict(list)
    for r in rows:
        by_model[r["model"]].append(r)
    failures = defaultdict(list)
    for r in rows:
        if r["status"] == "failed":
            failures[r["error_type"]].append(r)
    context = dict(
        title=f"deploy sweep: {len(rows):,} points",
        summary=(f"{len(rows):,} points over {len(by_model)} model{'s' if len(by_model) != 1 else ''}: "
                 f"{sum(r['status'] == 'fits' for r in rows):,} fit, "
                 f"{sum(r['status'] == 'over budget' for r in rows):,} over budget, "
                 f"{sum(r['status'] == 'failed' for r in rows):,} failed; checked: {spec.verify}."),
        axes=[(name, ", ".join(map(value_text, values))) for name, values in spec.axes
              if len(values) > 1],
        models=[model_section(n, m, rs) for n, (m, rs) in enumerate(by_model.items())],
        parts={m: smallest_parts(rs) for m, rs in by_model.items()},
        differences=solver_differences(rows),
        failures=[dict(type=t, count=len(rs), example=f"{rs[0]['model']} ({_axes_text(rs[0])}): {rs[0]['error_message']}")
                  for t, rs in sorted(failures.items())],
        watchdog=sum(bool(r["watchdog"]) for r in rows))
    return environment(("report",)).get_template("sweep.html.j2").render(context)


def write_report(folder: Path, rows: list[dict], spec) -> None:
    _write_whole(folder / "report.html", sweep_report(rows, spec).encode())
