"""Human-readable summaries printed by the CLI."""
from __future__ import annotations

from layer_analyzer import kernels as K

from .emit import shape_text


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f} KiB"


def summary_table(dep) -> str:
    g = dep.graph
    rows = [f"{'op':>4}  {'type':<18} {'output':<18} {'MACs':>12}"]
    for k, (layer, kern) in enumerate(zip(g.layers, dep.kernels)):
        rows.append(f"{k:>4}  {layer.op:<18} {shape_text(g.tensors[layer.outputs[0]]):<18} {K.macs(kern):>12,}")
    rows.append(f"{'':>4}  {'total':<18} {'':<18} {dep.macs:>12,}")
    m, p = dep.memory, dep.plan
    budgets = dict(sram=dep.options.sram, flash=dep.options.flash)
    rows += [
        "",
        f"arena ({p.method}): {m['arena_bytes']:,} B; lower bound {p.lower_bound:,} B ({p.status})",
        f"{'memory':<8} {'needed':>12} {'budget':>12}",
        f"{'SRAM':<8} {_kib(m['sram_bytes']):>12} {_kib(budgets['sram']):>12}",
        f"{'flash':<8} {_kib(m['flash_bytes']):>12} {_kib(budgets['flash']):>12}"
        f"   (weights {m['weights_bytes']:,} B + code estimate {m['code_bytes_estimate']:,} B)",
    ]
    if dep.tilings:
        used = max(t.l1_bytes for _, t in dep.tilings.values())
        tiles = sum(t.tiles for _, t in dep.tilings.values())
        rows.append(f"{'L1':<8} {_kib(used):>12} {_kib(dep.options.l1):>12}   ({len(dep.tilings)} layers in "
                    f"{tiles} double-buffered tiles)")
    return "\n".join(rows)
