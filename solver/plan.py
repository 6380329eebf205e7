"""The plan: every decision of one deployment in one frozen record, and what each decision
costs in every memory.

    plan = Plan(model, options, backend)   # the flags and the target, nothing decided yet
    plan = tile(plan)                      # every pass returns a new plan (deployer.pipeline lists them)
    plan.layers[k].variant                 # the kernel variant op k runs (conv_s8, a family's own, ...)
    plan.layers[k].tiling                  # its L1 tiles, if any
    plan.memory.sram_bytes                 # what the plan needs of each memory

The C files, the manifest, the report, the ELF step, ``deploy suggest`` and ``deploy compare``
read a plan; none of them re-reads the model or the files we wrote to learn what was decided.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from layer_analyzer import kernels as K

FROZEN_EMPTY = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Memory:
    """Bytes per memory, as planned (the manifest's ``memory``, for every kind of model).
    ``sram_bytes``: the arena, the state kept across inferences, the L1 tile buffer when it is
    carved out of SRAM, and weights and code on parts that run from L2."""
    arena_bytes: int = 0
    scratch_bytes: int = 0  # L1 tile buffer in SRAM (parts without a scratchpad or TCM)
    state_bytes: int = 0  # kept across inferences outside the arena (.bss): a KV cache, recurrent layers' state
    sram_bytes: int = 0
    weights_bytes: int = 0  # .rodata in the kernels' layouts
    code_bytes_estimate: int = 0
    flash_bytes: int = 0
    flash_sections: tuple[tuple[str, int], ...] = ()  # weights, biases, parameters, code estimate
    l3_bytes: int = 0
    l3_weights_bytes: int = 0
    l3_arena_bytes: int = 0

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["flash_sections"] = dict(self.flash_sections)
        return d


@dataclass(frozen=True, slots=True)
class LayerPlan:
    """What was decided for one op."""
    index: int
    kernel: Any  # its lowered record (layer_analyzer.kernels)
    variant: Any = None  # backends.Variant: which kernel runs it, chosen among the target's
    tiling: Any = None  # (TileGeometry, LayerTiling) when it runs tile by tile in L1
    in_stage: bool = False  # runs region by region, patch by patch (the patch stage)
    reuse: Any = None  # network_parser.inplace.Reuse: it writes over an input that dies
    # layer_analyzer.overlap.OutputOverInput: its output (a patch stage's, on the stage's last op) may
    # start inside an input that dies here, walking in an order that reads every byte before it is overwritten
    overlap: Any = None
    l3_weights: bool = False  # its weights stream from L3
    keep_portable: bool = False  # runs the portable kernels whatever the target has (their weights take less flash)
    bank: str = "arena"  # the memory its output lives in (one L2 arena today)


@dataclass(frozen=True)
class Plan:
    model: Path
    options: Any  # deployer.pipeline.Options, resolved against the target
    backend: Any  # backends.Backend
    kind: str = "network"  # the frontend's kind of model: "network" | "language_model"
    graph: Any = None  # network_parser.ir.Graph after the rewrites (a transformer IR for a language model)
    # solver.op_order.OpOrder when the layers run in another order than the file's (graph.layers is
    # that order; each Layer.index stays the file's)
    order: Any = None
    layers: tuple[LayerPlan, ...] = ()
    notes: tuple[str, ...] = ()  # what the reader, the rewrites and the passes decided that a user should read
    patches: tuple = ()  # solver.patch_split.PatchPlan of each stage run patch by patch, in op order
    fusion: Any = None  # solver.fusion.FusionChoice: how those stages were chosen (None: no split was asked for)
    lives: tuple = ()  # network_parser.lifetimes.Lifetime of every buffer of the L2 arena
    l3: Any = None  # solver.l3_placement.L3Layout: what lives in L3, how the layers touching it stream
    arena: Any = None  # solver.arena.ArenaPlan of the L2 arena (over several banks: its offsets lay them end to end)
    banks: Any = None  # solver.banks.BankLayout when the arena spans several RAM banks (--memory-map, a part's banks)
    offsets: MappingProxyType = field(default_factory=lambda: FROZEN_EMPTY)  # tensor (or scratch key) -> offset
    memory: Memory = field(default_factory=Memory)
    relaxed: tuple[str, ...] = ()  # what the memory search turned on to meet the budgets, in order
    language: Any = None  # deployer.language_model.LanguagePlan: what a language model's passes decided
    elf: Any = None  # the linked image's memory (targets with a QEMU board), when measured
    files: MappingProxyType = field(default_factory=lambda: FROZEN_EMPTY, repr=False)  # out/: name -> text or bytes

    def but(self, **changes) -> Plan:
        """This plan with ``changes`` (a pass's result)."""
        for name in ("offsets", "files"):
            if name in changes and not isinstance(changes[name], MappingProxyType):
                changes[name] = MappingProxyType(dict(changes[name]))
        return replace(self, **changes)

    def with_layers(self, update) -> Plan:
        """Every layer through ``update(layer) -> layer``."""
        return replace(self, layers=tuple(update(layer) for layer in self.layers))

    @property
    def tile_objective(self) -> str:
        """What the CP-SAT tiler minimises: the option's, or with "auto" the target's."""
        objective = self.options.tile_objective
        return self.backend.tile_objective if objective == "auto" else objective

    @property
    def kernels(self) -> tuple:
        return tuple(layer.kernel for layer in self.layers)

    @property
    def macs(self) -> int:
        """One inference's multiply-accumulates (a language model's: one token's, over a full cache)."""
        if self.kind == "language_model":
            from network_parser.transformer_ir import op_macs
            return sum(op_macs(layer.kernel, self.graph) for layer in self.layers)
        return sum(K.macs(layer.kernel) for layer in self.layers)

    @property
    def tilings(self) -> dict:
        """op -> (TileGeometry, LayerTiling) of every tiled op."""
        return {layer.index: layer.tiling for layer in self.layers if layer.tiling is not None}

    @property
    def reuses(self) -> tuple:
        return tuple(layer.reuse for layer in self.layers if layer.reuse is not None)

    @property
    def overlaps(self) -> tuple:
        return tuple(layer.overlap for layer in self.layers if layer.overlap is not None)

    @property
    def stage(self) -> frozenset:
        """The ops of the patch stages."""
        return frozenset(layer.index for layer in self.layers if layer.in_stage)
