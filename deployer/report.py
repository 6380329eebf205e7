"""Human-readable summaries printed by the CLI."""
from __future__ import annotations


from layer_analyzer import kernels as K

from .emit import shape_text
from .manifest import fusion_entry, order_entry, solver_statistics
from .render import display
from .qemu import build_tools, install_hint, missing_tools

ABSENT = object()  # a manifest without an ``elf`` key: the target has no QEMU board


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f} KiB"


def _elf_column(elf, key: str, budget: int | None) -> str:
    if not isinstance(elf, dict):
        return ""
    over = budget is not None and elf[key] > budget
    return f" {_kib(elf[key]):>12}" + (" OVER the budget (harness and stack included)" if over else "")


def _elf_lines(dep, elf) -> list[str]:
    """What the ELF column measured, or how to get it measured."""
    if elf is ABSENT:
        return []
    if elf is None:
        return [f"ELF: not linked ({', '.join(missing_tools(build_tools(dep.backend)))} missing); to see its flash "
                f"and SRAM beside the estimates, install them (Debian: {install_hint(dep.backend)})"]
    return [f"ELF: linked by the qemu/ Makefile for {dep.backend.qemu_machine} with {elf['toolchain']}; its flash "
            f"and SRAM include the QEMU harness and its {dep.backend.stack_bytes:,} B stack",
            "     sections: " + ", ".join(f"{name} {size:,} B" for name, size in elf["sections"].items())]


def summary_table(dep) -> str:
    g = dep.graph
    rows = [f"{'op':>4}  {'type':<18} {'output':<18} {'MACs':>12}"]
    for k, (layer, kern) in enumerate(zip(g.layers, dep.kernels)):
        rows.append(f"{k:>4}  {layer.op:<18} {shape_text(g.tensors[layer.outputs[0]]):<18} {K.macs(kern):>12,}")
    rows.append(f"{'':>4}  {'total':<18} {'':<18} {dep.macs:>12,}")
    m, p = dep.memory.as_dict(), dep.arena
    budgets = dict(sram=dep.options.sram, flash=dep.options.flash)
    elf = ABSENT if dep.elf is None else (dep.elf or None)  # measured, None (no Arm tools) or not linked
    rows += [
        "",
        f"arena ({p.method}): {m['arena_bytes']:,} B; lower bound {p.lower_bound:,} B ({p.status})",
        f"{'memory':<8} {'needed':>12} {'budget':>12}" + (f" {'ELF':>12}" if isinstance(elf, dict) else ""),
        f"{'SRAM':<8} {_kib(m['sram_bytes']):>12} {_kib(budgets['sram']):>12}{_elf_column(elf, 'sram_bytes', budgets['sram'])}"
        + "".join(f"   (arena {m['arena_bytes']:,} B" + (f" + L1 tile buffer {m['scratch_bytes']:,} B" if m["scratch_bytes"] else "")
                  + (f" + state {m['state_bytes']:,} B kept across inferences" if m["state_bytes"] else "") + ")"
                  for _ in [0] if m["scratch_bytes"] or m["state_bytes"]),
        f"{'flash':<8} {_kib(m['flash_bytes']):>12} {_kib(budgets['flash']):>12}{_elf_column(elf, 'flash_bytes', budgets['flash'])}"
        f"   (weights {m['weights_bytes']:,} B + code estimate {m['code_bytes_estimate']:,} B)",
        *_elf_lines(dep, elf),
    ]
    if dep.patches:
        c = dep.fusion
        stages = ", ".join(f"ops {p.stage.start}..{p.stage.end} in {p.grid[0]}x{p.grid[1]}" for p in dep.patches)
        rows.append(f"patches: {len(dep.patches)} stage{'s' if len(dep.patches) > 1 else ''} ({c.method}): {stages}; "
                    f"estimated peak {c.unsplit_peak:,} -> {c.peak:,} B; MAC overhead {c.macs_extra:,} "
                    f"({100 * c.overhead:.1f}%)")
    if dep.l3 is not None:
        pl = dep.l3.placement
        moved = sum(s.l3_traffic for s in pl.slabs.values())
        rows.append(f"{'L3':<8} {_kib(m['l3_bytes']):>12} {_kib(dep.options.l3):>12}   (weights of "
                    f"{len(pl.weights)} layers {m['l3_weights_bytes']:,} B + {len(pl.tensors)} activations "
                    f"{m['l3_arena_bytes']:,} B; {len(pl.slabs)} layers stream {moved:,} B per inference)")
    if dep.tilings:
        used = max(t.l1_bytes for _, t in dep.tilings.values())
        tiles = sum(t.tiles for _, t in dep.tilings.values())
        rows.append(f"{'L1':<8} {_kib(used):>12} {_kib(dep.options.l1):>12}   ({len(dep.tilings)} layers in "
                    f"{tiles} double-buffered tiles)")
    if dep.relaxed:
        rows.append(f"memory search took: {', '.join(dep.relaxed)}")
    rows += [f"note: {display(n)}" for n in dep.notes]  # what the reader and the rewrites decided
    return "\n".join(rows)


def dump_graph(graph) -> str:
    """The IR after rewrites: one line per layer with its typed attributes and tensor shapes."""
    def tensor(t: int) -> str:
        if t < 0:
            return "-"
        x = graph.tensors[t]
        q = f" q({x.quant.scale[0]:.6g},{x.quant.zero_point[0]})" if x.quant and not x.quant.per_channel else ""
        return f"t{t}:{shape_text(x)}:{x.dtype}{' const' if x.is_const else ''}{q}"
    lines = [f"graph {display(graph.name)}: inputs {[tensor(t) for t in graph.inputs]} outputs "
             f"{[tensor(t) for t in graph.outputs]}"]
    for k, layer in enumerate(graph.layers):
        lines.append(f"{k:>4} {layer.op:<18} {layer.attrs} ({', '.join(tensor(t) for t in layer.inputs)}) -> "
                     f"{', '.join(tensor(t) for t in layer.outputs)}")
    return "\n".join(lines)


def dump_arena_plan(dep) -> str:
    """Every tensor's bytes and lifetime, what shares them, and each tiled layer's tiles."""
    p = dep.arena
    lines = [f"arena {p.peak} B by {p.method} ({p.status}, lower bound {p.lower_bound} B, {p.wall_s:.3f} s)"
             f"{': ' + p.note if p.note else ''}"]
    for r in dep.reuses:
        lines.append(f"  in place: op {r.layer} {r.rule}: t{r.output} over t{r.input}"
                     f"{f' (+{r.scratch_bytes} B scratch)' if r.scratch_bytes else ''}")
    tensors = dep.graph.tensors
    for o in dep.overlaps:  # the outputs the arena put over the inputs they consume
        shift = dep.offsets.get(o.output, 0) - dep.offsets.get(o.input, 0)
        if o.input in dep.offsets and o.output in dep.offsets and \
                -tensors[o.output].nbytes < shift < tensors[o.input].nbytes:
            lines.append(f"  overlap: op {o.layer} walks its {o.order} {'backward' if o.reverse else 'forward'}: "
                         f"t{o.output} at {shift:+} B from t{o.input} (window <= {o.window:+}, or >= {o.rise:+} "
                         f"backward)")
    for lt in sorted(dep.lives, key=lambda lt: (dep.offsets[lt.tensor], lt.first_op)):
        alias = f" alias of t{lt.alias_of}" if lt.alias_of is not None else ""
        lines.append(f"  [{dep.offsets[lt.tensor]:>9}, {dep.offsets[lt.tensor] + lt.size:>9}) ops "
                     f"{lt.first_op:>3}..{lt.last_op:<3} {display(lt.name)}{alias}")
    for k, (_, t) in sorted(dep.tilings.items()):
        lines.append(f"  tiles: op {k} {t.label} x{t.tiles}, {t.l1_bytes} B of L1, "
                     f"{t.solver} {t.status}, {t.modeled_cycles} modeled cycles")
    if dep.l3 is not None:
        l3 = dep.l3
        lines.append(f"L3 {l3.bytes} B: weight image {l3.image_bytes} B, then activations")
        for k, addr in sorted(l3.weights.items()):
            lines.append(f"  [{addr:>9}, ...) weights of op {k}")
        for lt in sorted(l3.lives, key=lambda lt: l3.offsets[lt.tensor]):
            lines.append(f"  [{l3.offsets[lt.tensor]:>9}, {l3.offsets[lt.tensor] + lt.size:>9}) ops "
                         f"{lt.first_op:>3}..{lt.last_op:<3} {display(lt.name)}")
        for k, s in sorted(l3.placement.slabs.items()):
            lines.append(f"  slabs: op {k} streams {'+'.join(s.streamed)} in {s.slabs} slabs of {s.rows} rows x "
                         f"{s.chans} channels, {s.l2_bytes} B of L2 staging, {s.l3_traffic} B moved")
    return "\n".join(lines)


def _size(n: int | None) -> str:
    """64K, 1M, or bytes when not a whole number of K."""
    if n is None:
        return "-"
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def target_info(b) -> dict:
    """One backend's memories, kernels and QEMU board (``deploy targets --json``)."""
    return dict(name=b.name, description=b.description, l1_bytes=b.l1_bytes, tcm_bytes=b.tcm_bytes,
                sram_bytes=b.sram_bytes, flash_bytes=b.flash_bytes, l3_bytes=b.l3_bytes, kernels=b.kernels,
                qemu_machine=b.qemu_machine)


def targets_table(infos: list[dict]) -> str:
    """``deploy targets``: one row per target; a TCM is the L1 that --l1 may use."""
    head = ("target", "description", "L1", "SRAM", "flash", "L3", "kernels", "QEMU board")
    rows = [(t["name"], t["description"],
             f"TCM {_size(t['tcm_bytes'])} (--l1)" if t["tcm_bytes"] else _size(t["l1_bytes"]),
             _size(t["sram_bytes"]), _size(t["flash_bytes"]), _size(t["l3_bytes"]), t["kernels"],
             t["qemu_machine"] or "-") for t in infos]
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in (head, *rows))


def build_summary(dep, out_dir, wall_s: float, steps=()) -> dict:
    """``deploy --json``: what was written and planned, the solvers' statistics with their wall
    times (which the output folder leaves out, to stay byte-identical run to run)."""
    solvers = solver_statistics(dep)
    solvers["arena"] = dict(solvers["arena"], wall_s=round(dep.arena.wall_s, 4))
    if solvers.get("fusion") is not None:
        solvers["fusion"] = dict(solvers["fusion"], wall_s=round(dep.fusion.wall_s, 4))
    return {
        "model": dep.graph.name, "target": dep.backend.name, "output": str(out_dir),
        "files": {name: len(text if isinstance(text, bytes) else text.encode()) for name, text in sorted(dep.files.items())},
        "kind": dep.kind, "layers": len(dep.layers), "macs": dep.macs,
        "budgets": {"l1_bytes": dep.options.l1, "sram_bytes": dep.options.sram, "flash_bytes": dep.options.flash,
                    "l3_bytes": dep.options.l3},
        "memory": dep.memory.as_dict(), "elf": dep.elf or None,
        "solvers": solvers, "fusion": fusion_entry(dep), "order": order_entry(dep),
        "auto_optimize": [{"name": st.recommendation.name, "flags": list(st.recommendation.flags),
                           "sram_bytes": [st.before.sram_bytes, st.after.sram_bytes],
                           "flash_bytes": [st.before.flash_bytes, st.after.flash_bytes]} for st in steps],
        "notes": list(dep.notes), "wall_s": round(wall_s, 3),
    }
