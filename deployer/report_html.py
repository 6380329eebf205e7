"""report.html: one self-contained page (inline SVG and CSS; no script, no network) that shows
how memory was planned and why the model does or does not fit.

    deployment_report(dep, problem)            # out/report.html, written by every deploy
    planners_report(name, problem, plans, curve)  # the arena planners alone (deploy compare)

Every coordinate and every figure is computed here; templates/report/report.html.j2 only
places them. The same deployment always renders to the same bytes: no timestamps, no wall
times (``timings=True`` adds the planners' times, for ``deploy compare``), rounded floats.
"""
from __future__ import annotations


import colorsys
import hashlib
import json
import math

import jinja2

from layer_analyzer import kernels as K
from solver.arena import GREEDY, ArenaPlan, ArenaProblem, lower_bound, plan_arena

from .compare import COLUMNS, Comparison, bound_line, live_bytes, plan_rows, skipped_lines, solver_line
from .emit import shape_text
from .manifest import solver_statistics
from .render import environment

# One arena picture: SVG size and the margins around the plot area, in pixels.
WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 16, 36
CURVE_HEIGHT = 300  # the memory-per-layer chart
FLASH_WIDTH, FLASH_HEIGHT = 760, 64
GRID_SIZE = 320  # the patch grid's picture (longest side)
PARTS = {"in": "input", "in2": "input 2", "w": "weights", "out": "output"}  # what a layer streams from L3


def _colour(name: str) -> str:
    """A stable pastel per buffer name (md5, not hash(): the latter is salted per process)."""
    hue = int(hashlib.md5(name.encode()).hexdigest()[:6], 16) % 360
    r, g, b = colorsys.hls_to_rgb(hue / 360, 0.72, 0.60)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _nice_step(top: int, count: int) -> int:
    """The round step (1, 2 or 5 times a power of ten) that cuts 0..top into at most ``count`` parts."""
    raw = max(top / count, 1)
    power = 10 ** math.floor(math.log10(raw))
    return next(int(m * power) for m in (1, 2, 5, 10) if m * power >= raw)


def _ticks(top: int, count: int) -> list[int]:
    step = _nice_step(top, count)
    return list(range(0, top + 1, step))


def _axis_top(value: int, count: int = 5) -> int:
    """The y axis' top: the first round tick at or above ``value`` plus a little headroom, so the
    largest plan's peak line and label stay inside the picture."""
    want = max(int(value * 1.06), 1)
    step = _nice_step(want, count)
    return -(-want // step) * step


class _Axes:
    """x = op index (one column per op), y = bytes, inside the margins of one picture."""

    def __init__(self, n_ops: int, y_max: int, height: int = HEIGHT):
        self.n_ops, self.y_max, self.height = max(n_ops, 1), max(y_max, 1), height
        self.plot_w, self.plot_h = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM
        self.dx, self.sy = self.plot_w / self.n_ops, self.plot_h / self.y_max

    def x(self, op: float) -> float:
        return round(LEFT + op * self.dx, 2)

    def y(self, value: float) -> float:
        return round(TOP + self.plot_h - value * self.sy, 2)

    def frame(self) -> dict:
        return dict(left=LEFT, right=WIDTH - RIGHT, top=TOP, bottom=self.height - BOTTOM, width=WIDTH,
                    height=self.height, x_ticks=[(round(self.x(k + 0.5), 2), k) for k in _ticks(self.n_ops - 1, 12)],
                    y_ticks=[(self.y(v), f"{v:,}") for v in _ticks(self.y_max, 5)])

    def steps(self, values) -> str:
        """A step curve through one value per op."""
        pts = [(self.x(k + e), self.y(v)) for k, v in enumerate(values) for e in (0, 1)]
        pts = [pt for i, pt in enumerate(pts) if i == 0 or pt != pts[i - 1]]
        return " ".join(f"{px},{py}" for px, py in pts)


def arena_figure(problem: ArenaProblem, plan: ArenaPlan, curve: list[int], axes: _Axes,
                 before: list[int] | None = None) -> dict:
    """One plan: every buffer a rectangle (x = its ops, y = its bytes), the live-bytes curve
    over them and a dashed line at the plan's peak."""
    rects = [dict(x=axes.x(first), y=axes.y(o + size), w=round((last - first + 1) * axes.dx, 2),
                  h=round(size * axes.sy, 2), fill=_colour(b.name),
                  title=f"{b.name}: {size:,} B, ops [{first}, {last}], offset {o:,}")
             for b, o in zip(problem.buffers, plan.offsets) for first, last, size in b.segments()]
    return dict(axes.frame(), method=plan.method, peak=f"{plan.peak:,}", status=plan.status, note=plan.note,
                rects=rects, curve=axes.steps(curve), before=axes.steps(before) if before else None,
                peak_y=axes.y(plan.peak))


def _environment() -> jinja2.Environment:
    return environment(("report",))


def _planners(name: str, problem: ArenaProblem, plans, curve: list[int], before=None, timings=True) -> dict:
    bound = lower_bound(problem)
    n_ops = max(len(curve), max((b.last + 1 for b in problem.buffers), default=0), 1)
    ends = [max((o + b.size for b, o in zip(problem.buffers, p.offsets)), default=0) for p in plans]  # banks: past the peak
    axes = _Axes(n_ops, _axis_top(max([bound, *curve, *(before or ()), *(p.peak for p in plans), *ends, 1])))
    columns = COLUMNS if timings else tuple(c for c in COLUMNS if c != "time ms")
    rows = [r if timings else tuple(c for c, h in zip(r, COLUMNS) if h != "time ms") for r in plan_rows(plans, bound)]
    return dict(n_buffers=len(problem.buffers), alignment=problem.alignment, columns=columns, rows=rows,
                bound_line=bound_line(bound), solver_line=solver_line(problem, plans), skipped=skipped_lines(plans),
                figures=[arena_figure(problem, p, curve, axes, before) for p in plans])


def planners_report(model_name: str, problem: ArenaProblem, plans, curve: list[int],
                    before: list[int] | None = None, patch_line: str | None = None) -> str:
    """The arena planners alone: their table and one picture each, on a shared y scale; with a
    patch split, ``before`` is the live-bytes curve without it, drawn grey."""
    return _environment().get_template("report.html.j2").render(
        title=f"Arena planners: {model_name}", deployment=None, patch_line=patch_line,
        planners=_planners(model_name, problem, plans, curve, before))


# ---- the whole deployment -----------------------------------------------------------------

def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f} KiB"


def _memory_rows(dep) -> list[dict]:
    m, o = dep.memory, dep.options
    elf = dep.elf if isinstance(dep.elf, dict) else None
    used_l1 = max((t.l1_bytes for _, t in dep.tilings.values()), default=None)
    rows = [("SRAM", m.sram_bytes, o.sram, elf and elf["sram_bytes"]),
            ("flash", m.flash_bytes, o.flash, elf and elf["flash_bytes"])]
    if m.state_bytes:
        rows.insert(1, ("  state kept across inferences (.bss)", m.state_bytes, None, None))
    if dep.tilings:
        rows.append(("L1 (largest tile)", used_l1, o.l1, None))
    if dep.l3 is not None:
        rows.append(("L3", m.l3_bytes, o.l3, None))
    return [dict(name=name, need=f"{need:,}", kib=_kib(need), budget=f"{budget:,}" if budget is not None else "-",
                 state="-" if budget is None else ("OVER" if need > budget else "OK"),
                 share=f"{100 * need / budget:.1f}%" if budget else "-",
                 elf=f"{measured:,}" if measured is not None else None)
            for name, need, budget, measured in rows]


def _arena_budget(dep) -> int | None:
    """The part of --sram left for the arena (on parts running from L2, weights and code take the rest)."""
    if dep.options.sram is None:
        return None
    m = dep.memory
    return dep.options.sram - (m.sram_bytes - m.arena_bytes)


def _layer_names(dep) -> list[str]:
    return [f"op {k} {layer.op} '{layer.name}'" for k, layer in enumerate(dep.graph.layers)]


def curve_figure(dep, curve: list[int]) -> dict:
    """Bytes live at each op as bars, the arena's peak, the budget left for the arena, the patch
    stage as a band (and its estimated peak unsplit)."""
    n_ops = len(dep.graph.layers)
    budget = _arena_budget(dep)
    fusion = dep.fusion if dep.patches else None
    tops = [*curve, dep.arena.peak, budget or 0, fusion.unsplit_peak if fusion else 0]
    axes = _Axes(n_ops, _axis_top(max(tops)), CURVE_HEIGHT)
    names = _layer_names(dep)
    bars = [dict(x=axes.x(k) + 0.5, y=axes.y(v), w=max(round(axes.dx - 1, 2), 0.5), h=round(v * axes.sy, 2),
                 title=f"{names[k]}: {v:,} B live") for k, v in enumerate(curve)]
    # labels: the budget's at the left end of its line, the others at the right end, so that
    # lines close to each other keep readable labels
    lines = [dict(y=axes.y(dep.arena.peak), cls="peak", label=f"arena {dep.arena.peak:,} B ({dep.arena.method})",
                  x=WIDTH - RIGHT, anchor="end")]
    if budget is not None:
        lines.append(dict(y=axes.y(max(budget, 0)), cls="budget", label=f"--sram left for the arena {budget:,} B",
                          x=LEFT + 4, anchor="start"))
    bands = [dict(x=axes.x(p.stage.start), w=round((p.stage.end - p.stage.start + 1) * axes.dx, 2),
                  label=f"{p.grid[0]}x{p.grid[1]}") for p in dep.patches]
    if fusion is not None:
        lines.append(dict(y=axes.y(fusion.unsplit_peak), cls="unsplit",
                          label=f"estimated peak without the split {fusion.unsplit_peak:,} B", x=WIDTH - RIGHT,
                          anchor="end"))
    return dict(axes.frame(), bars=bars, lines=lines, bands=bands)


def flash_figure(dep) -> dict:
    """Flash by section as one stacked bar, the budget as a mark."""
    sections = dict(dep.memory.flash_sections)
    total = max(sum(sections.values()), 1)
    scale_to = max(total, dep.options.flash or 0)
    plot_w = FLASH_WIDTH - LEFT - RIGHT
    x, parts = float(LEFT), []
    for name, size in sections.items():
        w = plot_w * size / scale_to
        parts.append(dict(x=round(x, 2), w=round(w, 2), fill=_colour(f"flash:{name}"), name=name,
                          title=f"{name}: {size:,} B ({100 * size / total:.1f}%)"))
        x += w
    mark = None if not dep.options.flash else round(LEFT + plot_w * dep.options.flash / scale_to, 2)
    return dict(width=FLASH_WIDTH, height=FLASH_HEIGHT if mark is not None else 44, parts=parts, budget_x=mark,
                budget=f"{dep.options.flash:,}" if dep.options.flash else None)


def short_name(name: str, width: int = 48) -> str:
    """A tensor or layer name for a table cell: its first ';'-separated part, cut to ``width``
    (TFLite names join every fused op's; the whole name is the cell's tooltip)."""
    head = name.split(";")[0]
    return head if len(head) <= width else head[:width - 1] + "\u2026"


def _layer_rows(dep, curve: list[int]) -> list[dict]:
    g, stage = dep.graph, {k: n for n, p in enumerate(dep.patches) for k in p.layers}
    slabs = dep.l3.placement.slabs if dep.l3 is not None else {}
    rows = []
    for k, (layer, kern) in enumerate(zip(g.layers, dep.kernels)):
        t = dep.tilings.get(k, (None, None))[1]
        s = slabs.get(k)
        rows.append(dict(
            index=k, op=layer.op, name=short_name(layer.name), full_name=layer.name, output=shape_text(g.tensors[layer.outputs[0]]),
            macs=f"{K.macs(kern):,}", live=f"{curve[k]:,}" if k < len(curve) else "-",
            tile=t.label if t else "", tiles=str(t.tiles) if t else "", l1=f"{t.l1_bytes:,}" if t else "",
            cycles=f"{t.modeled_cycles:,}" if t else "", solver=f"{t.solver} {t.status}" if t else "",
            l3=f"{'+'.join(PARTS.get(x, x) for x in s.streamed)}: {s.slabs} slab{'s' if s.slabs > 1 else ''}, "
               f"{s.l3_traffic:,} B" if s else "",
            patch=f"stage {stage[k] + 1}" if k in stage else ""))
    return rows


def patch_figures(dep) -> list[dict]:
    """Per stage, its patch grid over the stage's input: each patch's input region (halos overlap)."""
    figures = []
    for n, p in enumerate(dep.patches):
        st, o = p.stage, p.option
        src = st.inputs[0]
        shape = dep.graph.tensors[src].shape
        h, w = (shape[1], shape[2]) if len(shape) == 4 else (shape[0], shape[1])
        scale = GRID_SIZE / max(h, w)
        regions = []
        for i, rows in enumerate(p.rows.intervals):
            for j, cols in enumerate(p.cols.intervals):
                (r0, r1), (c0, c1) = rows[src], cols[src]
                r0, r1, c0, c1 = max(r0, 0), min(r1, h), max(c0, 0), min(c1, w)
                regions.append(dict(x=round(8 + c0 * scale, 2), y=round(8 + r0 * scale, 2),
                                    w=round((c1 - c0) * scale, 2), h=round((r1 - r0) * scale, 2),
                                    fill=_colour(f"patch:{i}:{j}"),
                                    title=f"patch ({i}, {j}): input rows [{r0}, {r1}), columns [{c0}, {c1})"))
        figures.append(dict(
            id=f"patch-{n + 1}", width=round(w * scale + 16, 2), height=round(h * scale + 16, 2),
            image_w=round(w * scale, 2), image_h=round(h * scale, 2), regions=regions,
            text=(f"Stage {n + 1}: ops {st.start}..{st.end} run in {p.grid[0]}x{p.grid[1]} patches: estimated peak "
                  f"{o.peak:,} B while it runs; {o.macs_extra:,} MACs recomputed "
                  f"({100 * o.macs_extra / max(dep.macs, 1):.1f}% of the network's)."),
            input=f"{dep.graph.tensors[src].name} {shape_text(dep.graph.tensors[src])}",
            buffers=[dict(tensor=short_name(dep.graph.tensors[t].name), full_name=dep.graph.tensors[t].name,
                          bytes=f"{b:,}") for t, b in sorted(p.buffers.items())]))
    return figures


def fusion_text(dep) -> str | None:
    """How the stages were chosen, for the report's patch section."""
    c = dep.fusion
    if c is None or not dep.patches:
        return None
    how = {"dp": "the exact search over every stage of the network", "single": "one stage at the network's head",
           "forced": "--patch RxC@LAYER"}[c.method]
    return (f"{len(dep.patches)} stage{'s' if len(dep.patches) > 1 else ''} run patch by patch ({how}): estimated "
            f"peak {c.unsplit_peak:,} B unsplit, {c.peak:,} B split; {c.macs_extra:,} MACs recomputed "
            f"({100 * c.overhead:.1f}% of the network's).")


def _solver_rows(dep) -> list[tuple[str, str]]:
    rows = []
    for name, stats in solver_statistics(dep).items():
        if stats is None:
            continue
        rows.append((name, ", ".join(f"{k} {json.dumps(v) if isinstance(v, dict) else v}" for k, v in stats.items())))
    return rows


def report_plans(plan: ArenaPlan, problem: ArenaProblem) -> Comparison:
    """The deployment's own plan and the greedy planners' on the same problem (CP-SAT runs only
    when it planned the deployment: its answer is then the one used, not solved again)."""
    plans = [plan if m == plan.method else plan_arena(problem, m) for m in ("cpsat", *GREEDY)
             if m != "cpsat" or plan.method == "cpsat"]
    skipped = {} if plan.method == "cpsat" else {
        "cpsat": f"not run (--planner {plan.method}; deploy compare runs every planner)"}
    return Comparison(plans, skipped)


def _time_rows(times, estimate: dict | None = None) -> dict | None:
    """Measured instructions beside modeled cycles (deployer.profile rows), and the model's fit;
    with ``estimate`` (deploy verify --qemu's cycle fields) each layer's estimated cycles, its
    milliseconds at the clock, and what the estimate leaves out."""
    if times is None:
        return None
    from .profile import fit_text
    clock = (estimate or {}).get("clock_mhz")
    timed = estimate is not None and any(r.cycles is not None for r in times)

    def ms(cycles):
        return f"{cycles / (clock * 1000.0):.3f}" if clock and cycles is not None else "-"

    rows = [dict(index=r.index, op=r.op, name=short_name(r.name), full_name=r.name, kernel=r.variant,
                 tiled="yes" if r.tiled else "", macs=f"{r.macs:,}", instructions=f"{r.instructions:,}",
                 per_mac=f"{r.per_mac:.2f}" if r.macs else "", modeled=f"{r.modeled:,}" if r.modeled else "-",
                 ratio=f"{r.ratio:.2f}" if r.modeled else "",
                 cycles=f"{r.cycles:,}" if r.cycles is not None else "-", ms=ms(r.cycles)) for r in times]
    result = dict(rows=rows, total=f"{sum(r.instructions for r in times):,}", fit=fit_text(times), timed=timed,
                  clocked=timed and bool(clock))
    if timed:
        cycles = sum(r.cycles or 0 for r in times)
        model = estimate["cycle_model"]
        result.update(cycles=f"{cycles:,}", ms=ms(cycles), clock=f"{clock:g} MHz ({estimate['clock_source']})"
                      if clock else None, model=f"{model['table']} ({model['title']})",
                      leaves_out=model["leaves_out"], expected_error=model["expected_error"])
    return result


def _bank_rows(dep) -> list[dict] | None:
    b = dep.banks
    if b is None:
        return None
    count = [sum(1 for lt in dep.lives if b.bank_of[lt.tensor] == k) for k in range(len(b.memories))]
    return [dict(name=m.name, section=m.section, size=f"{m.size:,}", used=f"{u:,}", share=f"{u / m.size:.0%}",
                 cost=f"{m.cost:g}", tensors=n) for m, u, n in zip(b.memories, b.used, count)]


def deployment_report(dep, problem: ArenaProblem, plans=None, timings: bool = False, times=None,
                      estimate: dict | None = None) -> str:
    """The deployment: budgets and what each memory needs, bytes live per layer, flash by
    section, every arena planner's picture, the per-layer table (tiling, L3 slabs, patch
    stage), the patch grid and the solvers' statistics; with ``times`` (deployer.profile rows
    from QEMU) each layer's instructions beside its modeled cycles."""
    plans = report_plans(dep.arena, problem) if plans is None else plans
    curve = live_bytes(problem)
    o = dep.options
    deployment = dict(
        model=dep.graph.name, target=dep.backend.name, target_description=dep.backend.description,
        layers=len(dep.graph.layers), macs=f"{dep.macs:,}", arena=f"{dep.arena.peak:,}",
        arena_method=dep.arena.method, lower_bound=f"{dep.arena.lower_bound:,}", arena_status=dep.arena.status,
        budgets=", ".join(f"{flag} {v:,}" for flag, v in (("--l1", o.l1), ("--sram", o.sram), ("--flash", o.flash),
                                                          ("--l3", o.l3)) if v is not None) or "none",
        memory=_memory_rows(dep), curve=curve_figure(dep, curve), flash=flash_figure(dep),
        layer_rows=_layer_rows(dep, curve), patches=patch_figures(dep), fusion=fusion_text(dep),
        solvers=_solver_rows(dep), banks=_bank_rows(dep),
        bank_cost=None if dep.banks is None else (
            f"Modeled access cost (bytes the layers move times each bank's relative cost): {dep.banks.plan.cost:,.0f} by "
            f"{dep.banks.plan.method}, at least {dep.banks.plan.cost_bound:,.0f}; QEMU counts instructions, not wait "
            f"states, so it shows none of it."),
        notes=list(dep.notes), tiled=bool(dep.tilings), streamed=dep.l3 is not None,
        times=_time_rows(times, estimate))
    return _environment().get_template("report.html.j2").render(
        title=f"{dep.graph.name} on {dep.backend.name}", deployment=deployment, patch_line=None,
        planners=_planners(dep.graph.name, problem, plans, curve, timings=timings))


# ---- a language model ---------------------------------------------------------------------

def language_model_report(dep, problem: ArenaProblem) -> str:
    """A decoder's engine: the memory against the budgets (KV cache, arena, weights), the ops of one
    token with their live bytes, the per-matrix quantization error and every arena planner's
    picture (the deployment's plan beside the greedy ones on the same problem). No wall times:
    the page is byte-identical run to run."""
    from network_parser.transformer_ir import op_macs, op_summary

    graph, memory, options = dep.graph, dep.memory, dep.options
    quant_report, target_description = dep.language.quantization, dep.backend.description
    c, kv = graph.config, graph.kv
    plans = report_plans(dep.arena, problem)
    curve = live_bytes(problem)
    rows = [("SRAM", memory.sram_bytes, options.sram), ("  KV cache (.bss)", memory.state_bytes, None),
            ("  activation arena", memory.arena_bytes, None), ("flash", memory.flash_bytes, options.flash),
            ("  weights (.rodata)", memory.weights_bytes, None),
            ("  code (estimate)", memory.code_bytes_estimate, None)]
    memory_rows = [dict(name=name, need=f"{need:,}", kib=_kib(need), budget=f"{b:,}" if b is not None else "-",
                        share=f"{100 * need / b:.1f}%" if b else "-",
                        state="-" if b is None else ("OVER" if need > b else "OK"), elf=None)
                   for name, need, b in rows]
    lm = dict(
        summary=(f"{target_description}. {c.summary()}. Weights {graph.weight_format}, KV "
                 f"cache {kv.format} x {kv.context} positions" + (f" (one scale per {kv.group} values)" if kv.group
                                                                   else "") + f"; {len(graph.ops)} ops per token."),
        memory=memory_rows,
        ops=[dict(index=k, op=type(op).__name__, text=op_summary(op), kernel=lp.variant.name,
                  macs=f"{op_macs(op, graph):,}" if op_macs(op, graph) else "-",
                  live=f"{curve[k]:,}" if k < len(curve) else "-")
             for k, (op, lp) in enumerate(zip(graph.ops, dep.layers))],
        quant=[dict(matrix=n, rmse=f"{r:.3g}", snr="exact" if s == float("inf") else f"{s:.1f}")
               for n, r, s in quant_report])
    return _environment().get_template("report.html.j2").render(
        title=f"{graph.name} on {target_description.split(' (')[0]}", deployment=None, patch_line=None,
        language_model=lm, planners=_planners(graph.name, problem, plans, curve, timings=False))
