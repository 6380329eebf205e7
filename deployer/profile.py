"""Where time goes: each layer's measured instructions (QEMU) beside the cycles the tiling cost
model gives it, and how far the model is from the measurement (rank correlation, and the
measured/modeled ratio per layer kind)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layer_analyzer import kernels as K
from layer_analyzer.tiling import geometry
from solver.plan import Plan
from solver.tiling_cost import compute_cycles, cost_params, modeled_cycles

from .render import display


@dataclass(frozen=True)
class LayerTime:
    index: int  # the op (the first one of the patch stage)
    op: str
    name: str
    kind: str | None  # the tiling view's kind (conv, depthwise, fc, pool, eltwise), None for moves
    variant: str  # the kernel it runs
    tiled: bool
    macs: int
    instructions: int
    modeled: int | None  # cycles of the tiling cost model (None: a layer the model has no view of)
    cycles: int | None = None  # cycles estimated from the executed instructions (deployer.cycles), if known

    @property
    def per_mac(self) -> float | None:
        return self.instructions / self.macs if self.macs else None

    @property
    def ratio(self) -> float | None:
        """Measured over modeled."""
        return self.instructions / self.modeled if self.modeled else None


def modeled_layer_cycles(plan: Plan) -> list[int | None]:
    """The cost model's cycles per layer: a tiled layer's schedule, an untiled one's compute."""
    cost = plan.backend.costs
    result = []
    for lp in plan.layers:
        if lp.tiling is not None:
            g, t = lp.tiling
            result.append(modeled_cycles(g, t.tile_h, t.tile_w, t.tile_c, cost))
            continue
        g = geometry(lp.kernel, lp.index)
        result.append(None if g is None else compute_cycles(g, g.out_h, g.out_w, g.out_c, cost_params(cost)))
    return result


def layer_times(plan: Plan, instructions: list[int], cycles: list[int] | None = None) -> list[LayerTime]:
    """One row per layer; a patch stage, which runs its layers region by region (the first
    stage op's mark sees them all), is one row of its own with the MACs it recomputes, and the
    tiling cost model has no figure for it. ``cycles``: each layer's estimated cycles."""
    modeled = modeled_layer_cycles(plan)
    estimated = cycles if cycles is not None else [None] * len(instructions)
    rows = []
    for lp, n, m, c in zip(plan.layers, instructions, modeled, estimated):
        if lp.in_stage:
            p = next(p for p in plan.patches if lp.index in p.layers)
            if lp.index == p.stage.start:
                stage = list(p.layers)
                macs = sum(K.macs(plan.layers[k].kernel) for k in stage) + p.option.macs_extra
                rows.append(LayerTime(lp.index, "patch stage", f"ops {stage[0]}..{stage[-1]}", "stage",
                                      f"regions of {p.grid[0]}x{p.grid[1]} patches", False, macs,
                                      sum(instructions[k] for k in stage), None,
                                      None if cycles is None else sum(cycles[k] for k in stage)))
            continue
        layer = plan.graph.layers[lp.index]
        g = lp.tiling[0] if lp.tiling is not None else geometry(lp.kernel, lp.index)
        rows.append(LayerTime(lp.index, layer.op, layer.name, None if g is None else g.kind,
                              lp.variant.name if lp.variant is not None else "portable", lp.tiling is not None,
                              K.macs(lp.kernel), n, m, c))
    return rows


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman's convention)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def rank_correlation(a, b) -> float | None:
    """Spearman's rank correlation of two sequences (None with fewer than 3 or no spread)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def model_fit(rows: list[LayerTime]) -> dict:
    """How far the model is from the measurement, over the layers it models."""
    modeled = [r for r in rows if r.modeled]
    kinds = {}
    for kind in sorted({r.kind for r in modeled}):
        of = [r for r in modeled if r.kind == kind]
        kinds[kind] = dict(layers=len(of), ratio=round(sum(r.instructions for r in of) / sum(r.modeled for r in of), 3))
    rho = rank_correlation([r.instructions for r in modeled], [r.modeled for r in modeled])
    return dict(rank_correlation=None if rho is None else round(rho, 3), layers=len(modeled),
                measured_over_modeled=kinds)


def per_layer_json(rows: list[LayerTime], clock_mhz: float | None = None) -> dict:
    """With estimated cycles, each layer's and (at ``clock_mhz``) its milliseconds."""
    def timing(r: LayerTime) -> dict:
        if r.cycles is None:
            return {}
        ms = r.cycles / (clock_mhz * 1000.0) if clock_mhz else None
        return dict(estimated_cycles=r.cycles, estimated_ms=None if ms is None else round(ms, 4))

    return dict(layers=[dict(index=r.index, op=r.op, name=r.name, kind=r.kind, variant=r.variant, tiled=r.tiled,
                             macs=r.macs, instructions=r.instructions, modeled_cycles=r.modeled,
                             instructions_per_mac=None if r.per_mac is None else round(r.per_mac, 3), **timing(r))
                        for r in rows],
                fit=model_fit(rows))


def fit_text(rows: list[LayerTime]) -> str:
    """The model's fit in one line: its rank correlation and measured/modeled per layer kind."""
    fit = model_fit(rows)
    rho = fit["rank_correlation"]
    kinds = ", ".join(f"{k} {v['ratio']:g} ({v['layers']})" for k, v in fit["measured_over_modeled"].items())
    return (f"rank correlation {'n/a' if rho is None else f'{rho:.2f}'} over {fit['layers']} modeled layers; "
            f"measured/modeled per kind (layers): {kinds or 'none'}")


def per_layer_table(rows: list[LayerTime], clock_mhz: float | None = None) -> str:
    """The table ``deploy verify --qemu --per-layer`` prints, then the model's fit; with
    estimated cycles a column of them, and of milliseconds at ``clock_mhz``."""
    timed = any(r.cycles is not None for r in rows)
    ms = timed and bool(clock_mhz)
    lines = [f"{'op':>4}  {'layer':<20} {'kernel':<30} {'MACs':>11} {'instructions':>13} {'/MAC':>6} "
             + (f"{'est. cycles':>12} " if timed else "") + (f"{'ms':>8} " if ms else "")
             + f"{'modeled':>11} {'ratio':>6}"]
    for r in rows:
        per_mac = f"{r.per_mac:6.2f}" if r.macs else f"{'':>6}"
        modeled = f"{r.modeled:>11,}" if r.modeled else f"{'-':>11}"
        ratio = f"{r.ratio:6.2f}" if r.modeled else f"{'':>6}"
        kernel = r.variant + (" (tiled)" if r.tiled else "")
        est = (f"{r.cycles:>12,} " if r.cycles is not None else f"{'-':>12} ") if timed else ""
        est += (f"{r.cycles / (clock_mhz * 1000.0):>8.3f} " if r.cycles is not None else f"{'-':>8} ") if ms else ""
        lines.append(f"{r.index:>4}  {display(r.op)[:20]:<20} {kernel[:30]:<30} {r.macs:>11,} {r.instructions:>13,} "
                     f"{per_mac} {est}{modeled} {ratio}")
    total = f"total {sum(r.instructions for r in rows):,} instructions"
    if timed:
        cycles = sum(r.cycles or 0 for r in rows)
        total += f", {cycles:,} estimated cycles" + (f", {cycles / (clock_mhz * 1000.0):.3f} ms at {clock_mhz:g} MHz"
                                                     if ms else "")
    lines.append(total)
    lines.append(f"cost model: {fit_text(rows)}")
    return "\n".join(lines)
