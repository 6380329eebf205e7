"""Compare the arena planners on one problem, and the tilers layer by layer: plain-text tables
(deployer.report_html draws the same plans).

    plans = compare_planners(problem)                # one checked ArenaPlan per method
    print(comparison_table(plans, lower_bound(problem)))
"""
from __future__ import annotations

from dataclasses import replace

from solver.arena import ArenaProblem, SolverConfig, plan_arena
from solver.arena_bound import live_per_op

from solver import progress

METHODS = ("cpsat", "first-fit", "best-fit", "bidirectional")


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
            with progress.step(f"arena ({method}, {len(problem.buffers)} buffers)",
                               limit_s=config.time_limit_s if method == "cpsat" else None):
                plans.append(plan_arena(problem, method, config))
        except (ImportError, NotImplementedError) as e:
            skipped[method] = f"not available ({type(e).__name__}{': ' if str(e) else ''}{e})"
    return Comparison(plans, skipped)


def live_bytes(problem: ArenaProblem) -> list[int]:
    """Bytes of live buffers (unaligned sizes) at each op index 0..last op; an output over the
    input it consumes counts, while both live, as the least the two span."""
    n_ops = max((b.last + 1 for b in problem.buffers), default=0)
    return live_per_op(replace(problem, alignment=1), problem.pairs)[:n_ops]


# ---- the summary table (shared by the text and the HTML forms) -------------------------

COLUMNS = ("method", "arena B", "gap B", "gap %", "time ms", "status")


def plan_rows(plans, bound: int) -> list[tuple[str, ...]]:
    return [(p.method, f"{p.peak:,}", f"{p.peak - bound:,}",
             f"{100 * (p.peak - bound) / bound:.1f}%" if bound else "-",
             f"{1000 * p.wall_s:,.1f}", p.status) for p in plans]


def bound_line(bound: int) -> str:
    return f"max-live lower bound: {bound:,} B (gap % is relative to the bound)"


def solver_line(problem: ArenaProblem, plans) -> str | None:
    """Where CP-SAT stands against its greedy twins on this problem, in bytes, and what the
    problem holds beyond disjoint blocks (overlap pairs, stepped buffers) that it placed."""
    cpsat = next((p for p in plans if p.method == "cpsat"), None)
    greedy = [p for p in plans if p.method in ("first-fit", "best-fit")]
    if cpsat is None or not greedy:
        return None
    best = min(greedy, key=lambda p: (p.peak, p.method))
    pairs, steps = len(problem.pairs), sum(1 for b in problem.buffers if b.steps)
    holds = ", ".join(x for x in (f"{pairs} output-over-input pairs" if pairs else "",
                                  f"{steps} stepped buffers" if steps else "") if x)
    verdict = (f"beats the best greedy plan ({best.method}) by {best.peak - cpsat.peak:,} B" if cpsat.peak < best.peak
               else f"equals the best greedy plan ({best.method})" if cpsat.peak == best.peak
               else f"ends {cpsat.peak - best.peak:,} B above the best greedy plan ({best.method}) within its limit")
    return f"CP-SAT {verdict}" + (f" on a problem with {holds}" if holds else "") + f" ({cpsat.status})."


def skipped_lines(plans) -> list[str]:
    return [f"{m}: skipped, {note}" for m, note in getattr(plans, "skipped", {}).items()]


def comparison_table(plans, lower_bound: int, problem: ArenaProblem | None = None) -> str:
    rows = [COLUMNS, *plan_rows(plans, lower_bound)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    solver = solver_line(problem, plans) if problem is not None else None
    return "\n".join([*lines, bound_line(lower_bound), *([solver] if solver else []), *skipped_lines(plans)])


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


# ---- a language model's arena: the activations of one token --------------------------------

def compare_language_model(model, options, config: SolverConfig = SolverConfig()):
    """(plan, problem, plans): the plan deploy makes with these flags (budgets kept, no budget
    error), the arena problem of its activations and every planner's plan of it. The KV cache is
    state beside the arena: no planner changes it."""
    from .pipeline import deployment_problem, plan_deployment

    dep = plan_deployment(model, options)
    problem = deployment_problem(dep)
    return dep, problem, compare_planners(problem, config=config)


def language_model_sram_lines(dep, plans) -> list[str]:
    """Each planner's SRAM: the KV cache and its arena, against --sram (the flag, or the part's)."""
    kv, sram = dep.memory.state_bytes, dep.options.sram
    return [f"{p.method:<14} {kv + p.peak:>12,} B of SRAM (KV cache {kv:,} + arena {p.peak:,})"
            + ("" if sram is None else f"  {'fits' if kv + p.peak <= sram else 'OVER'} --sram {sram:,}") for p in plans]


def language_model_report_html(dep, problem, plans) -> str:
    """deployer.report_html's page of a language model, its plan CP-SAT's of ``plans`` (so that the
    pictures are the plans the table gives: the greedy ones are deterministic)."""
    from .language_model import measure
    from .report_html import language_model_report

    cpsat = next((p for p in plans if p.method == "cpsat"), None)
    return language_model_report(measure(dep.but(arena=cpsat)) if cpsat is not None else dep, problem)
