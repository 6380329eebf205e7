"""manifest.json: everything the engine's memory plan decided, for tools and people."""
from __future__ import annotations

import json
from pathlib import Path

from layer_analyzer import kernels as K
from network_parser.ir import Graph, Tensor

from .emit import c_identifier, guard_bytes, state_layout
from .language_model import manifest_section as language_model_section
from .relaxations import BY_NAME

# 2: each layer's kernel variant and in-place rule; the relaxations taken. 3: one schema for every
# kind of model ("kind"; a language model's own part under "language_model")
MANIFEST_VERSION = 6
SCHEMA = Path(__file__).resolve().parent / "manifest.schema.json"  # its JSON Schema, checked by the tests


def _tensor_info(t: Tensor) -> dict:
    info = dict(name=t.name, shape=list(t.shape), dtype=t.dtype)
    if t.quant is not None and not t.quant.per_channel:
        info.update(scale=t.scale, zero_point=t.zero_point)
    return info


def _tiling(tilings: dict, k: int, l3) -> dict | None:
    if k not in tilings:
        return None
    t = tilings[k][1]
    info = dict(l1_bytes=t.l1_bytes, tiles=t.tiles, tile_shape=list(t.tile_shape),
                input_channels_per_tile=t.tile_ci or None, solver=t.solver,
                status=t.status, modeled_cycles=t.modeled_cycles, l3=None)
    if l3 is not None and k in l3.placement.slabs:
        s = l3.placement.slabs[k]
        info["l3"] = dict(streamed=list(s.streamed), slab_shape=[s.rows, s.chans], slabs=s.slabs,
                          l2_bytes=s.l2_bytes, l3_traffic_bytes=s.l3_traffic)
    return info


def _l3(l3, graph: Graph) -> dict | None:
    if l3 is None:
        return None
    return {"bytes": l3.bytes, "weight_image_bytes": l3.image_bytes,
            "weights": [dict(layer=k, address=a) for k, a in sorted(l3.weights.items())],
            "tensors": [dict(name=lt.name, address=l3.offsets[lt.tensor], size=lt.size, first_op=lt.first_op,
                             last_op=lt.last_op) for lt in l3.lives],
            "planner": None if l3.plan is None else {"method": l3.plan.method, "status": l3.plan.status,
                                                     "peak": l3.plan.peak}}


def fusion_entry(plan) -> dict | None:
    """The stages run patch by patch and how they were chosen (None: no split was asked for)."""
    c = plan.fusion
    if c is None:
        return None
    return {"method": c.method,
            "stages": [{"ops": [p.stage.start, p.stage.end], "grid": list(p.grid), "macs_recomputed": p.option.macs_extra,
                        "estimated_peak": p.option.peak, "buffers": {str(t): b for t, b in sorted(p.buffers.items())}}
                       for p in plan.patches],
            "macs_recomputed": c.macs_extra, "overhead": round(c.overhead, 6), "estimated_peak": c.peak,
            "unsplit_estimated_peak": c.unsplit_peak}


def order_entry(plan) -> dict | None:
    """The order the ops run in when it is not the file's (None: the file's)."""
    o = plan.order
    if o is None:
        return None
    return {"ops": [layer.index for layer in plan.graph.layers], "modelled_peak": o.peak,
            "file_order_modelled_peak": o.file_peak, "exact": o.exact}


def _source(graph: Graph) -> dict:
    """What the reader decided at the model's edges: its format, the layouts of the engine's
    inputs and outputs against the model's own, and the notes a user should read."""
    src = graph.source
    if src is None:
        result = {"format": "tflite", "input_layout": "nhwc", "output_layout": "nhwc", "notes": []}
    elif src.format == "tflite":  # the layouts are the file's; only notes to add
        result = {"format": "tflite", "input_layout": "nhwc", "output_layout": "nhwc", "notes": list(src.notes)}
    else:
        result = {"format": src.format, "input_layout": src.input_layout, "output_layout": src.output_layout,
                  "model_input_shapes": [list(s) for s in src.input_shapes],
                  "model_output_shapes": [list(s) for s in src.output_shapes],
                  "notes": list(src.notes)}
    if graph.file_edges is not None:
        result["cut_from"] = {"inputs": [graph.tensors[t].name for t in graph.file_edges.inputs],
                              "outputs": [graph.tensors[t].name for t in graph.file_edges.outputs]}
    return result


def solver_statistics(plan) -> dict:
    """Every optimisation's statistics (wall times stay out: the files are byte-identical run
    to run; ``deploy --json`` prints them)."""
    arena, options, fusion = plan.arena, plan.options, plan.fusion
    tiled = [t for _, t in (plan.tilings or {}).values()]
    return {
        "arena": {"method": arena.method, "status": arena.status, "objective": arena.peak, "bound": arena.lower_bound,
                  "gap": round(arena.gap, 6), "time_limit_s": options.time_limit_s},
        "tiling": None if not tiled else {
            "layers": len(tiled), "method": options.tiler, "objective": plan.tile_objective,
            "by_status": {s: sum(1 for t in tiled if t.status == s) for s in sorted({t.status for t in tiled})},
            "modeled_cycles": sum(t.modeled_cycles for t in tiled), "time_limit_s": min(options.time_limit_s, 2.0)},
        "fusion": None if fusion is None else {"method": fusion.method, "objective": fusion.peak,
                                               "stages": len(fusion.stages)},
    }


def manifest_text(manifest: dict) -> str:
    """manifest.json's bytes: one formatting wherever the manifest is written or amended."""
    return json.dumps(manifest, indent=2, sort_keys=False) + "\n"


def _overlap(o, graph, offsets) -> dict | None:
    """A layer's output planned over the input it consumes: which tensors, the order it walks,
    the windows that order allows and where the output sits."""
    if o is None or o.input not in offsets or o.output not in offsets:
        return None
    return dict(input=graph.tensors[o.input].name, output=graph.tensors[o.output].name, order=o.order,
                direction="backward" if o.reverse else "forward", window=o.window, rise=o.rise,
                shift=offsets[o.output] - offsets[o.input])


def _bank_place(plan, t) -> dict:
    """A tensor's bank and offset inside it (nothing without banks)."""
    if plan.banks is None:
        return {}
    k = plan.banks.bank_of[t]
    return dict(bank=plan.banks.memories[k].name, bank_offset=plan.offsets[t] - plan.banks.bases[k])


def build_manifest(plan) -> dict:
    """manifest.json's content, read off the plan: what every kind of model has (the target, the
    budgets, the memory, the arena tensor by tensor), then its kind's own part."""
    options, backend, arena, offsets = plan.options, plan.backend, plan.arena, plan.offsets
    name = {lt.tensor: lt.name for lt in plan.lives}
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": plan.kind.replace(" ", "_"),
        "model": plan.graph.name,
        "library": c_identifier(plan.graph.name),
        "target": backend.name,
        "budgets": {"l1_bytes": options.l1, "sram_bytes": options.sram, "flash_bytes": options.flash,
                    "l3_bytes": options.l3},
        "planner": {"method": arena.method, "status": arena.status, "peak": arena.peak,
                    "lower_bound": arena.lower_bound, "tiler": options.tiler if plan.tilings else None},
        "solvers": solver_statistics(plan),
        "memory": plan.memory.as_dict(),
    }
    if plan.elf is not None:  # the linked image's memory: measured, or null without the Arm tools
        manifest["elf"] = plan.elf or None
    manifest["arena"] = {
        "bytes": arena.peak,
        "planner": arena.method,
        "lower_bound": arena.lower_bound,
        "status": arena.status,
        "alignment": backend.alignment,
        "guard_bytes": guard_bytes(options),
        "tensors": [dict(name=lt.name, offset=offsets[lt.tensor], size=lt.size, first_op=lt.first_op,
                         last_op=lt.last_op, alias_of=name[lt.alias_of] if lt.alias_of is not None else None,
                         **_bank_place(plan, lt.tensor))
                    for lt in plan.lives],
    }
    if plan.banks is not None:
        b = plan.banks
        manifest["arena"]["banks"] = [dict(name=m.name, section=m.section, size=m.size, used=u, base=base, cost=m.cost,
                                           kind=m.kind, address=m.address)
                                      for m, u, base in zip(b.memories, b.used, b.bases)]
        manifest["arena"]["access_cost"] = dict(modeled=round(b.plan.cost, 3), bound=round(b.plan.cost_bound, 3),
                                                method=b.plan.method, status=b.plan.status)
    if plan.kind == "language_model":
        manifest["language_model"] = language_model_section(plan, tokenizer=any(n.startswith("tokenizer/") for n in plan.files))
        return manifest
    graph, l3 = plan.graph, plan.l3

    def io(ts):
        return [dict(_tensor_info(graph.tensors[t]), offset=offsets.get(t), bytes=graph.tensors[t].nbytes)
                for t in ts]

    manifest.update({
        "source": _source(graph),
        "relaxations": [dict(name=r.name, memory=r.memory, cost=r.cost) for r in map(BY_NAME.get, plan.relaxed)],
        "macs": plan.macs,
        "l3": _l3(l3, graph),
        "fusion": fusion_entry(plan),
        "order": order_entry(plan),
        "input_memory": options.input_memory,
        "inputs": io(graph.inputs),
        "outputs": io(graph.outputs),
        "state": [dict(_tensor_info(graph.tensors[t]), offset=off, bytes=graph.tensors[t].nbytes)
                  for t, off in state_layout(graph)[0].items()],
        "layers": [dict(index=k, file_index=layer.index, name=layer.name, op=layer.op, macs=K.macs(lp.kernel),
                        inputs=[_tensor_info(graph.tensors[i]) for i in layer.inputs
                                if i >= 0 and not graph.tensors[i].is_const],
                        outputs=[_tensor_info(graph.tensors[o]) for o in layer.outputs],
                        tiling=_tiling(plan.tilings, k, l3),
                        patch_stage=lp.in_stage,
                        kernel=lp.variant.name if lp.variant is not None else None,
                        writes_over=lp.reuse.rule if lp.reuse is not None else None,
                        overlap=_overlap(lp.overlap, graph, offsets))
                   for k, (layer, lp) in enumerate(zip(graph.layers, plan.layers))],
    })
    return manifest
