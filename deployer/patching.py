"""Patch-based inference, planning side: the split tables of every candidate stage, built
from the network's lifetimes and the receptive fields of its first ops, and the split the
solver picks (solver.patching)."""
from __future__ import annotations

from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import Stage, axis_plan, stage_macs, stages
from network_parser.ir import Graph
from network_parser.lifetimes import Lifetime
from solver.patching import SplitChoice, StageTable, exhaustive, plan_split_cpsat

from .placement import data_inputs

MAX_PARTS = 8  # patches per axis considered


def live_profile(lives: list[Lifetime], n_ops: int) -> list[int]:
    """Bytes live at every op: per owner of bytes, the largest of its members alive."""
    groups: dict[int, list[Lifetime]] = {}
    for lt in lives:
        groups.setdefault(lt.tensor if lt.alias_of is None else lt.alias_of, []).append(lt)
    live = [0] * n_ops
    for members in groups.values():
        for k in range(min(m.first_op for m in members), max(m.last_op for m in members) + 1):
            live[k] += max((m.size for m in members if m.first_op <= k <= m.last_op), default=0)
    return live


def stage_table(stage: Stage, graph: Graph, live: list[int]) -> StageTable:
    full = sum(graph.tensors[t].nbytes for t in (*stage.inputs, stage.output))
    rest = max(live[stage.end + 1:], default=0)
    patch = stage.patch_tensors

    def axis(name, extent):
        options = {}
        for parts in range(1, min(MAX_PARTS, extent) + 1):
            plan = axis_plan(stage, parts, name)
            if plan.parts in options:
                continue
            options[plan.parts] = ({t: plan.largest(t) for t in patch}, {t: plan.total(t) for t in patch}, plan.size)
        return options

    return StageTable(stage.end, full, rest, stage_macs(stage), {t: stage.channels[t] for t in patch},
                      {t: stage.span[t] for t in patch}, tuple((s.layer, s.output, s.macs_per_pixel) for s in stage.layers),
                      axis("rows", stage.out_h), axis("cols", stage.out_w))


def split_tables(graph: Graph, kernels, lives: list[Lifetime]) -> tuple[list[StageTable], int]:
    """Tables of every candidate stage and the unsplit peak (live bytes, the arena's lower bound)."""
    live = live_profile(lives, len(graph.layers))
    return [stage_table(s, graph, live) for s in stages(graph, kernels, data_inputs)], max(live, default=0)


def plan_split(graph: Graph, kernels, lives: list[Lifetime], method: str = "cpsat", max_overhead: float = 0.2,
               sram: int | None = None, time_limit_s: float = 1.0) -> SplitChoice:
    tables, unsplit = split_tables(graph, kernels, lives)
    macs = sum(K.macs(k) for k in kernels)
    if method == "exhaustive":
        return exhaustive(tables, macs, unsplit, max_overhead, sram)
    return plan_split_cpsat(tables, macs, unsplit, max_overhead, sram, time_limit_s)
