"""The memory search, declared: what the deployer may give up to meet the budgets, in the order
it gives it up. Each relaxation trades something (recomputed MACs, DMA traffic, the DSP kernels'
speed) for bytes of a memory; the flags say which ones the search may take.

``deploy`` takes them in this order (pipeline.plan_memory: the in-place rules and outputs over
the inputs they consume, which cost nothing and are always taken when allowed; pipeline.plan_in_order:
on a branched graph the order with the least peak when it plans to less; then while SRAM
is over the fused stages aimed lower until they fit, then L3 streaming of what still does not
fit; pipeline.fit_flash: while flash is over, plain kernels for the layers whose packed weights
cost most), and records in
``Plan.relaxed`` which ones the plan took. ``deploy suggest`` measures each one
against the plan (and the choices that are not relaxations: the arena planner, tiling), and
``--auto-optimize`` turns on, most useful first, those a flag keeps off."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from solver.plan import Plan


@dataclass(frozen=True)
class Relaxation:
    name: str  # as plans, suggest and reports name it
    memory: str  # the memory it saves
    cost: str  # what it gives up for that
    allowed: Callable  # Options -> bool: the flags let the search take it (a plan takes no other)
    flag: str  # the flag that allows it, for people
    taken: Callable[[Plan], bool]  # did the plan take it


RELAXATIONS = (
    Relaxation("in-place ops", "SRAM", "nothing: a layer writes over an input that dies there",
               lambda o: o.in_place, "on unless --no-in-place",
               lambda p: any(r.rule != "zero-copy-reshape" for r in p.reuses)),  # reshapes alias always
    Relaxation("outputs over inputs", "SRAM", "nothing: a layer writes its output over the input it consumes, "
               "walking forwards or backwards so that no byte is overwritten before its last read",
               lambda o: o.overlap and o.in_place, "--overlap on (unless --no-in-place)",
               lambda p: any(_shares(p, o) for o in p.overlaps)),
    Relaxation("operator order", "SRAM", "nothing: on a branched graph the ops run in another order it allows, "
               "the one with the least peak (errors about the model name the file's op)",
               lambda o: o.order == "auto", "--order auto", lambda p: p.order is not None),
    Relaxation("patch inference", "SRAM", "recomputed MACs (the patches' halos), within --max-overhead",
               lambda o: o.patch != "off", "--patch auto", lambda p: bool(p.patches)),
    Relaxation("L3 streaming", "SRAM and flash", "DMA traffic per inference, through the L1 tiles",
               lambda o: o.l3 is not None, "--l3 SIZE (with --l1)", lambda p: p.l3 is not None),
    Relaxation("plain kernels", "flash", "the DSP kernels' speed on the layers kept plain",
               lambda o: o.kernels == "auto", "--kernels auto",
               lambda p: any(lp.keep_portable for lp in p.layers)),
)

BY_NAME = {r.name: r for r in RELAXATIONS}


def _shares(plan: Plan, o) -> bool:
    """Whether the arena put output ``o.output`` over (part of) input ``o.input``."""
    from deployer.pipeline import shares_bytes
    return shares_bytes(plan, o)


def taken(plan: Plan) -> tuple[str, ...]:
    """The relaxations ``plan`` took, in the search's order."""
    return tuple(r.name for r in RELAXATIONS if r.taken(plan))
