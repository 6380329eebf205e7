"""``deploy suggest``: what a model is, what it needs against the budgets, and what to turn on.

    report = suggest(model, options)        # Suggestion: signature, estimate, recommendations
    options, steps, planned = auto_optimize(model, options)   # apply them until the budgets are met

The estimate is the plan ``deploy`` makes with the same flags (the same pipeline, without
the C files). Every recommendation's saving is measured by planning its alternative: the
knob off where the estimate has it on, on where it is off.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from layer_analyzer import kernels as K
from layer_analyzer.tiling import geometry as tiling_geometry
from network_parser.errors import InfeasibleBudget, UnsupportedOperator
from network_parser.inventory import Inventory, inventory
from network_parser.cut import float_edges
from solver.arena import GREEDY, SolverConfig, plan_arena

from solver import progress
from .render import display
from solver.plan import Memory, Plan

from .pipeline import (Options, deployment_problem, floor, floor_text, max_overhead, over_budget, plan_deployment,
                       plan_front, replan, resolve_options, shares_bytes)

PRIORITIES = ("HIGH", "MED", "LOW", "SKIP")
MED_SHARE = 0.10  # a saving of at least this share of the memory's need is worth a MED
OVERHEADS = (0.5, 1.0, 2.0)  # --max-overhead steps tried when the default split does not fit --sram
HYPOTHETICAL_L1, HYPOTHETICAL_L3 = 32 * 1024, 8 * 1024 * 1024  # external memory a target may add


# ---- what the model is ------------------------------------------------------------------

@dataclass(frozen=True)
class Signature:
    inventory: Inventory
    macs: int | None  # None when the readers cannot lower the model
    conv_kinds: dict  # kind -> (layers, MACs): regular, pointwise, depthwise, fully connected, recurrent
    unsupported: str | None = None  # why deploy stops on this model


def _conv_kind(kern) -> str | None:
    if isinstance(kern, K.Conv):
        if kern.depthwise:
            return "depthwise"
        return "pointwise" if (kern.k_h, kern.k_w) == (1, 1) else "regular"
    if isinstance(kern, K.FullyConnected):
        return "fully connected"
    if isinstance(kern, (K.Lstm, K.Svdf)):
        return "recurrent"
    return None


def signature(inv: Inventory, dep: Plan | None, unsupported: str | None) -> Signature:
    kinds: dict[str, list[int]] = {}
    for kern in dep.kernels if dep else ():
        kind = _conv_kind(kern)
        if kind is not None:
            entry = kinds.setdefault(kind, [0, 0])
            entry[0] += 1
            entry[1] += K.macs(kern)
    return Signature(inv, dep.macs if dep else None, {k: tuple(v) for k, v in kinds.items()}, unsupported)


# ---- what to turn on --------------------------------------------------------------------

@dataclass(frozen=True)
class Recommendation:
    name: str  # in-place ops, CP-SAT arena, patch inference, tiling, weight placement
    memory: str  # the memory it saves: "SRAM", "flash" or "L1"
    on: bool  # applied in the estimate
    saving: int  # bytes of ``memory`` it saves (measured: the estimate against its alternative)
    detail: str  # the measured figures and the cost
    flags: tuple[str, ...] = ()  # what turns it on (when off)
    changes: tuple = ()  # the same as Options fields, for --auto-optimize
    needs_hardware: bool = False  # only with memory the target does not declare
    priority: str = "SKIP"
    why: str = ""


@dataclass(frozen=True)
class Suggestion:
    model: str
    target: str
    options: Options  # the estimate's (the target's memories filled in; an --l1 too small raised to work)
    signature: Signature
    deployment: Plan | None  # the estimate's plan (None when the model cannot be deployed)
    l1_need: int | None = None  # smallest --l1 that works, when the given one is too small
    l1_budget: int | None = None  # the --l1 asked for
    recommendations: tuple[Recommendation, ...] = field(default=())
    front: Plan | None = field(default=None, repr=False)  # the model read and lowered: alternatives replan it
    sram_front: tuple = ()  # FrontPoint per MAC budget: the SRAM x recomputed-MACs front (with --front)

    @property
    def memory(self) -> Memory:
        return self.deployment.memory if self.deployment else Memory()

    def over(self) -> list[tuple[str, str, int, int]]:
        """(flag, memory, need, budget) of every budget the estimate exceeds."""
        if self.deployment is None:
            return []
        over = over_budget(self.memory, self.options)
        if self.l1_need is not None:
            over.insert(0, ("--l1", "L1", self.l1_need, self.l1_budget))
        return over

    @property
    def fits(self) -> bool:
        return self.deployment is not None and not self.over()


MEMORY_KEYS = {"SRAM": ("sram_bytes", "sram"), "flash": ("flash_bytes", "flash")}


def _prioritize(rec: Recommendation, s: Suggestion) -> Recommendation:
    """HIGH: needed to fit (on), or fits alone (off); MED: a large saving (at least MED_SHARE of
    the memory), or helps where the memory is over; LOW: saves a little, or is not needed;
    SKIP: saves nothing here."""
    if rec.saving <= 0:
        return replace(rec, priority="SKIP", why="no saving here")
    if rec.memory == "L1":
        budget, need = s.l1_budget, (s.l1_need or 0)
    else:
        key, field_ = MEMORY_KEYS[rec.memory]
        budget, need = getattr(s.options, field_), getattr(s.memory, key)
    if rec.on:
        without = need + rec.saving
        fits = budget is None or need <= budget
        if fits and budget is not None and without > budget:
            return replace(rec, priority="HIGH", why=f"needed: without it {rec.memory} is {without:,} B, over "
                                                     f"the budget {budget:,} B")
        return replace(rec, priority="MED" if rec.saving >= MED_SHARE * without else "LOW",
                       why=f"saves {100 * rec.saving / without:.1f}% of {rec.memory}" + ("" if fits else
                                                                                       " (still over)"))
    if budget is not None and need > budget:
        if rec.needs_hardware:
            return replace(rec, priority="MED", why=f"would fit {rec.memory}, with memory the target does not declare"
                           if need - rec.saving <= budget else f"helps {rec.memory}, with memory the target does "
                                                               f"not declare")
        fixes = need - rec.saving <= budget
        return replace(rec, priority="HIGH" if fixes else "MED",
                       why=f"{rec.memory} is over by {need - budget:,} B; this "
                           f"{'brings it within the budget' if fixes else f'saves {rec.saving:,} B of it'}")
    return replace(rec, priority="LOW", why=f"{rec.memory} fits without it")


def _measure(s: Suggestion, options: Options) -> Plan | None:
    """The plan with ``options`` (the model as read once), or None when it cannot be made (an L1
    too small)."""
    try:
        return replan(s.front, options)
    except InfeasibleBudget:
        return None


def _in_place(model: Path, s: Suggestion) -> Recommendation:
    base = s.deployment
    alt = _measure(s, replace(s.options, in_place=not s.options.in_place))
    on = s.options.in_place
    with_, without = (base, alt) if on else (alt, base)
    if with_ is None or without is None:
        return Recommendation("in-place ops", "SRAM", on, 0, "not measurable with this L1")
    rules = sorted({r.rule for r in with_.reuses})
    detail = (f"{len(with_.reuses)} layers write over an input that dies ({', '.join(rules) or 'none'}); "
              f"SRAM {without.memory.sram_bytes:,} B without, {with_.memory.sram_bytes:,} B with")
    saving = without.memory.sram_bytes - with_.memory.sram_bytes
    if on and saving < 0:  # the reuses kept buffers alive that the L3 placement or a split would move
        return Recommendation("no in-place ops", "SRAM", False, -saving, detail + "; here they cost SRAM",
                              ("--no-in-place",), (("in_place", False),))
    return Recommendation("in-place ops", "SRAM", on, saving,
                          detail, () if on else ("(drop --no-in-place)",), () if on else (("in_place", True),))


def _overlap(model: Path, s: Suggestion) -> Recommendation:
    base = s.deployment
    on = s.options.overlap and s.options.in_place
    if not s.options.in_place:
        return Recommendation("outputs over inputs", "SRAM", False, 0, "needs the in-place ops (--no-in-place is on)")
    alt = _measure(s, replace(s.options, overlap=not s.options.overlap))
    with_, without = (base, alt) if on else (alt, base)
    if with_ is None or without is None:
        return Recommendation("outputs over inputs", "SRAM", on, 0, "not measurable with this L1")
    taken = [o for o in with_.overlaps if shares_bytes(with_, o)]
    backward = sum(o.reverse for o in taken)
    detail = (f"{len(taken)} layers write their output over the input they consume ({backward} walking backwards), "
              f"no MAC recomputed; SRAM {without.memory.sram_bytes:,} B without, {with_.memory.sram_bytes:,} B with")
    return Recommendation("outputs over inputs", "SRAM", on, without.memory.sram_bytes - with_.memory.sram_bytes,
                          detail, () if on else ("--overlap on",), () if on else (("overlap", True),))


def _order(model: Path, s: Suggestion) -> Recommendation:
    base = s.deployment
    on = s.options.order == "auto"
    alt = _measure(s, replace(s.options, order="file" if on else "auto"))
    with_, without = (base, alt) if on else (alt, base)
    if with_ is None or without is None:
        return Recommendation("operator order", "SRAM", on, 0, "not measurable with this L1")
    found = with_.order
    detail = (f"the ops run in the order with the least peak ({found.peak:,} B modelled, the file's {found.file_peak:,} B)"
              if found is not None else "the file's order (no other order plans to less)")
    detail += f"; SRAM {without.memory.sram_bytes:,} B in the file's order, {with_.memory.sram_bytes:,} B with --order auto"
    return Recommendation("operator order", "SRAM", on, without.memory.sram_bytes - with_.memory.sram_bytes,
                          detail, () if on else ("--order auto",), () if on else (("order", "auto"),))


def _arena_planner(model: Path, s: Suggestion) -> Recommendation:
    base = s.deployment
    problem = deployment_problem(base)
    greedy = [plan_arena(problem, m) for m in GREEDY]
    best = min(greedy, key=lambda p: (p.peak, p.method))
    on = base.arena.method == "cpsat"
    cpsat = base.arena if on else plan_arena(problem, "cpsat", SolverConfig(time_limit_s=s.options.time_limit_s))
    gap = "" if cpsat.status == "OPTIMAL" else f"; {cpsat.peak - cpsat.lower_bound:,} B above the lower bound " \
                                               f"(--time-limit longer may close it)"
    detail = (f"CP-SAT {cpsat.peak:,} B ({cpsat.status}){gap}; best greedy {best.method} {best.peak:,} B; "
              f"lower bound {cpsat.lower_bound:,} B")
    reference = best.peak if on else base.arena.peak
    return Recommendation("CP-SAT arena", "SRAM", on, reference - cpsat.peak, detail,
                          () if on else ("--planner cpsat",), () if on else (("planner", "cpsat"),))


def stages_text(plan: Plan) -> str:
    """The patch stages of a plan in a line: each stage's ops and grid, the MACs recomputed."""
    c = plan.fusion
    stages = ", ".join(f"ops {p.stage.start}..{p.stage.end} in {p.grid[0]}x{p.grid[1]} patches" for p in plan.patches)
    return f"{stages}; recomputes {c.macs_extra:,} MACs ({100 * c.overhead:.1f}%){_dsp_note(plan)}"


def _patch(model: Path, s: Suggestion) -> Recommendation:
    base = s.deployment
    o = s.options
    over = o.sram is not None and base.memory.sram_bytes > o.sram
    if base.patches:
        more = _more_overhead(model, s) if over and o.patch == "auto" else None  # allow more recompute
        if more is not None:
            return more
        alt = _measure(s, replace(o, patch="off"))
        saving = alt.memory.sram_bytes - base.memory.sram_bytes if alt else 0
        return Recommendation("patch inference", "SRAM", True, saving, stages_text(base))
    if o.patch not in ("auto", "off"):
        return Recommendation("patch inference", "SRAM", False, 0, f"--patch {o.patch} gives no split")
    share = max_overhead(o)
    # the least SRAM within --max-overhead (with --sram the search would stop at the first fit)
    alt = _measure(s, replace(o, patch="auto", max_overhead=share, sram=None))
    if alt is None or not alt.patches or alt.memory.sram_bytes >= base.memory.sram_bytes:
        more = _more_overhead(model, s) if over else None
        if more is not None:
            return more
        return Recommendation("patch inference", "SRAM", False, 0,
                              f"no split within --max-overhead {100 * share:g}% lowers the peak")
    flags = (("--patch auto",) if o.patch != "auto" else ()) + \
        ((f"--max-overhead {100 * share:g}%",) if o.sram is None and o.max_overhead is None else ())
    return Recommendation("patch inference", "SRAM", False, base.memory.sram_bytes - alt.memory.sram_bytes,
                          f"SRAM {alt.memory.sram_bytes:,} B: {stages_text(alt)}", flags,
                          (("patch", "auto"), ("max_overhead", share)))


def _more_overhead(model: Path, s: Suggestion) -> Recommendation | None:
    """The smallest larger --max-overhead whose stages fit --sram (else the one that saves most)."""
    base, o = s.deployment, s.options
    best = None
    for share in (x for x in OVERHEADS if x > max_overhead(o)):
        alt = _measure(s, replace(o, patch="auto", max_overhead=share))
        if alt is None or not alt.patches:
            continue
        saving = base.memory.sram_bytes - alt.memory.sram_bytes
        if best is None or saving > best[0]:
            best = (saving, share, alt)
        if alt.memory.sram_bytes <= o.sram:
            break
    if best is None or best[0] <= 0:
        return None
    saving, share, alt = best
    return Recommendation("patch inference", "SRAM", False, saving,
                          f"with --max-overhead {100 * share:g}%: SRAM {alt.memory.sram_bytes:,} B; {stages_text(alt)}",
                          (f"--max-overhead {100 * share:g}%",), (("patch", "auto"), ("max_overhead", share)))


def _integer_io(model: Path, s: Suggestion) -> Recommendation:
    """--io int8: the engine takes and gives the int8 tensors beside the model's float edges
    (the float ones are 4 bytes an element). It changes what the application passes, so it is
    recommended, never applied by --auto-optimize."""
    base, o = s.deployment, s.options
    on = o.cut.io == "int8"
    edges = float_edges(s.front.graph) if not on else ()
    if not on and not edges:
        return Recommendation("int8 I/O", "SRAM", False, 0, "no float input or output to move inward")
    other = replace(o, cut=replace(o.cut, io=None if on else "int8"))
    try:
        alt, _ = _plan_estimate(plan_front(model, other), other)
    except (InfeasibleBudget, UnsupportedOperator):
        return Recommendation("int8 I/O", "SRAM", on, 0, "not measurable with these flags")
    with_, without = (base, alt) if on else (alt, base)
    names = ", ".join(f"'{display(s.front.graph.tensors[t].name)}'" for t in edges)
    detail = (f"SRAM {without.memory.sram_bytes:,} B with float edges, {with_.memory.sram_bytes:,} B with int8 ones"
              + (f" (float {names})" if names else "") + "; the application then quantizes its input "
              "and dequantizes the output itself")
    return Recommendation("int8 I/O", "SRAM", on, without.memory.sram_bytes - with_.memory.sram_bytes, detail,
                          () if on else ("--io int8",))


def _dsp_note(dep: Plan) -> str:
    return f"; the stage runs the {_family_label(dep)} kernels region by region" if _dsp(dep) else ""


def _dsp(dep: Plan) -> bool:
    """Has the target kernel families whose variants this plan may use?"""
    return bool(dep.backend.variants) and dep.options.kernels != "plain"


def _family_label(dep: Plan) -> str:
    """How prose names the kernels of the plan's families (its label)."""
    named = dep.backend.family(dep.options.kernels)
    return " and ".join(f.label for f in ((named,) if named else dep.backend.families))


def _tiling(model: Path, s: Suggestion) -> Recommendation:
    base, o = s.deployment, s.options
    whole = [(g.l1_bytes(g.out_h, g.out_w, g.out_c), k) for k, kern in enumerate(base.kernels)
             for g in [tiling_geometry(kern, k)] if g is not None]
    need, layer = max(whole, default=(0, None))
    if o.l1 is None:
        tcm = base.backend.tcm_bytes
        hint = (f"the part's {tcm // 1024}K tightly-coupled memory can hold L1 tiles (--l1 up to {tcm // 1024}K), "
                f"each tile run by the layer's own kernel" if tcm else "the target has no L1 scratchpad; --l1 N "
                "tiles layers for one")
        return Recommendation("tiling", "L1", False, 0, f"{hint}; the largest layer (op {layer}) needs {need:,} B "
                              f"of L1 untiled" if layer is not None else hint)
    used = max((t.l1_bytes for _, t in base.tilings.values()), default=0)
    tiles = sum(t.tiles for _, t in base.tilings.values())
    detail = (f"{len(base.tilings)} layers in {tiles} double-buffered tiles, the largest {used:,} B of --l1 "
              f"{o.l1:,}; untiled, op {layer} alone needs {need:,} B")
    if s.l1_need is not None:
        detail = (f"--l1 {s.l1_budget:,} is below the smallest tile: the smallest --l1 that works is "
                  f"{s.l1_need:,} (measured with it); " + detail)
    return Recommendation("tiling", "L1", True, max(need - used, 0), detail)


def _weight_placement(model: Path, s: Suggestion) -> Recommendation:
    base, o = s.deployment, s.options
    resident = "SRAM" if base.backend.weights_in_sram else "flash"
    key = MEMORY_KEYS[resident][0]
    if base.l3 is not None:  # already streaming from L3: what it saves against none
        alt = _measure(s, replace(o, l3=0))
        saving = getattr(alt.memory, key) - getattr(base.memory, key) if alt else 0
        pl = base.l3.placement
        return Recommendation("weight placement", resident, True, saving,
                              f"weights of {len(pl.weights)} layers ({base.memory.l3_weights_bytes:,} B) and "
                              f"{len(pl.tensors)} activations in L3; {sum(x.l3_traffic for x in pl.slabs.values()):,} "
                              f"B streamed per inference")
    if _dsp(base):
        alt = _measure(s, replace(o, kernels="plain"))
        saving = base.memory.flash_bytes - alt.memory.flash_bytes if alt else 0
        plain = sum(1 for lp in base.layers if not lp.variant.dsp)
        return Recommendation("weight placement", "flash", False, saving,
                              f"int8 weights for the plain kernels instead of the {_family_label(base)} kernels' "
                              f"packed weights (flash {alt.memory.flash_bytes if alt else 0:,} B; {plain} layers already "
                              f"plain); costs their speed", ("--kernels plain",), (("kernels", "plain"),))
    if o.l3 is None and getattr(o, MEMORY_KEYS[resident][1]) is not None and \
            getattr(base.memory, key) > getattr(o, MEMORY_KEYS[resident][1]):
        # Nothing on the part holds the weights: measure an external memory it could add.
        l1 = o.l1 or HYPOTHETICAL_L1
        alt = _measure(s, replace(o, l1=l1, l3=HYPOTHETICAL_L3, tiler="greedy"))  # flash, not tile quality
        if alt is not None and alt.l3 is not None:
            l3_need = -(-alt.memory.l3_bytes // 1024)
            flags = (*(() if o.l1 else (f"--l1 {l1 // 1024}K",)), f"--l3 {l3_need}K")
            return Recommendation("weight placement", resident, False, getattr(base.memory, key) - getattr(alt.memory, key),
                                  f"weights streamed from an external memory of {l3_need:,} KiB "
                                  f"({alt.memory.l3_weights_bytes:,} B of weights, "
                                  f"{alt.memory.l3_arena_bytes:,} B of activations); with it flash "
                                  f"{alt.memory.flash_bytes:,} B, SRAM {alt.memory.sram_bytes:,} B", flags,
                                  needs_hardware=True)
    return Recommendation("weight placement", resident, False, 0,
                          f"weights stay in {resident} ({base.memory.weights_bytes:,} B); "
                          f"{'they fit' if not over_budget(base.memory, o) else 'the target has no external memory'}")


def _banks(model: Path, s: Suggestion) -> Recommendation:
    """RAM banks: with a memory map, how full each bank is and which limits the plan; on a part
    with several banks and no map, what spreading the activations over them would save."""
    from .pipeline import part_banks
    base, o = s.deployment, s.options
    if base.banks is not None:
        fill = ", ".join(f"{m.name} {u:,} of {m.size:,} B ({u / m.size:.0%})"
                         for m, u in zip(base.banks.memories, base.banks.used))
        full = max(zip(base.banks.memories, base.banks.used), key=lambda mu: mu[1] / mu[0].size)[0]
        return Recommendation("RAM banks", "SRAM", True, 0, f"{fill}; the fullest is {full.name}; access cost "
                              f"{base.banks.plan.cost:,.0f} by {base.banks.plan.method} (at least "
                              f"{base.banks.plan.cost_bound:,.0f})")
    banks = part_banks(base.backend, o)
    if len(banks) < 2 or o.sram is None:
        return Recommendation("RAM banks", "SRAM", False, 0, "the target declares one RAM bank (--memory-map "
                              "describes more)")
    alt = _measure(s, replace(o, banks=banks, sram=sum(b.size for b in banks)))
    if alt is None or alt.banks is None or alt.banks.plan.over:
        return Recommendation("RAM banks", "SRAM", False, 0, f"{base.backend.name}'s banks hold no better plan")
    main = alt.banks.used[0]
    uses = ", ".join(f"{m.name} {u:,} B" for m, u in zip(alt.banks.memories, alt.banks.used) if u)
    return Recommendation("RAM banks", "SRAM", False, base.memory.sram_bytes - main,
                          f"the activations over {base.backend.name}'s banks ({uses}): {banks[0].name} holds "
                          f"{main:,} B of them; access cost {alt.banks.plan.cost:,.0f}",
                          (f"--memory-map examples/memory_maps/{base.backend.name}.json",))


# Each relaxation of the memory search (deployer.relaxations) measured by the knob that names it,
# in the search's order; then the choices that are not relaxations (the arena planner, tiling).
KNOBS = ((("in-place ops",), _in_place), (("outputs over inputs",), _overlap), (("operator order",), _order),
         (("patch inference",), _patch),
         (("L3 streaming", "plain kernels"), _weight_placement), ((), _arena_planner), ((), _tiling),
         ((), _integer_io), ((), _banks))


def _plan_estimate(front: Plan, options: Options) -> tuple[Plan, int | None]:
    """The plan deploy makes; with an --l1 below the smallest tile, the plan at that smallest L1."""
    try:
        return replan(front, options), None
    except InfeasibleBudget as e:
        if "--l1" not in e.needs:
            raise
        return replan(front, replace(options, l1=e.needs["--l1"])), e.needs["--l1"]


def suggest(model: Path, options: Options, recommend: bool = True, front: Plan | None = None,
            with_front: bool = False) -> Suggestion:
    """The model's signature, the estimate with ``options`` and (``recommend``) every knob
    measured; ``front``: the model as plan_front read it (read here when not given);
    ``with_front``: the SRAM x MAC-overhead front too (a plan per MAC budget)."""
    model = Path(model)
    inv = inventory(model)
    resolved, _ = resolve_options(options)
    try:
        with progress.step("estimate"):
            front = front or plan_front(model, options)
            dep, l1_need = _plan_estimate(front, options)
    except UnsupportedOperator as e:
        return Suggestion(model.stem, resolved.target, resolved, signature(inv, None, str(e)), None)
    s = Suggestion(model.stem, resolved.target, dep.options, signature(inv, dep, None), dep, l1_need, resolved.l1,
                   front=front)
    s = recommendations(model, s) if recommend else s
    return replace(s, sram_front=sram_front(s)) if with_front else s


FRONT_OVERHEADS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0)


@dataclass(frozen=True)
class FrontPoint:
    """One plan of the SRAM x MAC-overhead front: the least SRAM within ``max_overhead``."""
    max_overhead: float
    sram_bytes: int
    macs_recomputed: int
    overhead: float
    stages: str


def sram_front(s: Suggestion) -> tuple[FrontPoint, ...]:
    """The least SRAM each MAC budget buys, every point planned as deploy plans it
    (--max-overhead X without --sram), the points that need fewer bytes than the one before."""
    points: list[FrontPoint] = []
    with progress.step("SRAM x MAC front", total=len(FRONT_OVERHEADS)) as step:
        for share in FRONT_OVERHEADS:
            alt = _measure(s, replace(s.options, sram=None, patch="auto" if share else "off", max_overhead=share))
            step.advance()
            if alt is None or (points and alt.memory.sram_bytes >= points[-1].sram_bytes):
                continue
            split = alt.fusion if alt.patches else None
            points.append(FrontPoint(share, alt.memory.sram_bytes, split.macs_extra if split else 0,
                                     split.overhead if split else 0.0, stages_text(alt) if split else "runs whole"))
    return tuple(points)


def recommendations(model: Path, s: Suggestion) -> Suggestion:
    """``s`` with every knob measured against its estimate, most useful first."""
    recs = []
    with progress.step("measuring the optimisations", total=len(KNOBS)) as step:
        for _, knob in KNOBS:
            recs.append(_prioritize(knob(Path(model), s), s))
            step.advance()
    recs.sort(key=lambda r: (PRIORITIES.index(r.priority), -r.saving))  # stable: ties keep the search's order
    return replace(s, recommendations=tuple(recs))


# ---- --auto-optimize ----------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    recommendation: Recommendation
    before: Memory  # memory before the step
    after: Memory


def _applicable(rec: Recommendation, s: Suggestion) -> bool:
    """A step --auto-optimize may take: it changes options, saves bytes of a memory over its
    budget, and needs no memory the target does not declare."""
    over = {name for _, name, _, _ in s.over()}
    return bool(rec.changes) and not rec.needs_hardware and rec.saving > 0 and rec.memory.upper() in over


def auto_optimize(model: Path, options: Options, rounds: int = 6) -> tuple[Options, list[Step], Plan]:
    """Apply the measured recommendations, most useful first, until the budgets are met.
    Returns the options that fit, the steps taken and the plan with those options (ready for
    ``emit_deployment``); raises InfeasibleBudget naming what is still over, by how much,
    after the steps taken."""
    steps: list[Step] = []
    s = suggest(model, options, recommend=False)
    for _ in range(rounds):
        if s.deployment is None or s.fits:
            break
        s = recommendations(model, s)  # measure what to turn on only when over
        rec = next((r for r in s.recommendations if _applicable(r, s)), None)
        if rec is None:
            break
        options = replace(options, **dict(rec.changes))
        after = suggest(model, options, recommend=False, front=s.front)
        steps.append(Step(rec, s.memory, after.memory))
        s = after
    if s.deployment is not None and not s.fits:
        applied = ", ".join(" ".join(st.recommendation.flags) for st in steps) or "nothing (no measured option helps)"
        still = "; ".join(f"{name} needs {need:,} B, {need - budget:,} B over {flag} {budget:,} (the smallest "
                          f"{flag} that works is {need} ({-(-need // 1024)}K))" for flag, name, need, budget in s.over())
        recs = s.recommendations or recommendations(model, s).recommendations
        left = [f"{' '.join(r.flags)} (saves {r.saving:,} B of {r.memory}: {r.name} changes what the engine takes "
                f"and gives, so it is for you to choose)" for r in recs
                if r.flags and not r.changes and not r.needs_hardware and r.saving > 0]
        still += "; not applied: " + "; ".join(left) if left else ""
        raise InfeasibleBudget(f"--auto-optimize applied {applied}; still over: {still}",
                               s.over()[0][2], needs={flag: need for flag, _, need, _ in s.over()})
    if s.deployment is None:  # an unsupported operator: deploy's own error
        plan_deployment(model, options)
    return options, steps, s.deployment


# ---- the report, for people and for tools ---------------------------------------------------

def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f} KiB"


def _ports(ports) -> list[dict]:
    return [dict(name=p.name, shape=list(p.shape), dtype=p.dtype) for p in ports]


def _status(s: Suggestion) -> dict:
    over = {name for _, name, _, _ in s.over()}
    budgets = {"sram": s.options.sram, "flash": s.options.flash, "l1": s.l1_budget, "l3": s.options.l3}
    return {m: (None if budgets[m] is None or s.deployment is None else "OVER" if m.upper() in over else "OK")
            for m in budgets}


def suggestion_json(s: Suggestion) -> dict:
    sig, inv = s.signature, s.signature.inventory
    m = s.memory.as_dict() if s.deployment else {}
    return {
        "model": s.model, "format": inv.format, "target": s.target,
        "signature": {
            "operators": dict(inv.ops), "layers": sum(n for _, n in inv.ops),
            "convolutions": {k: {"layers": n, "macs": macs} for k, (n, macs) in sig.conv_kinds.items()},
            "macs": sig.macs, "parameters": inv.parameters, "parameter_bytes": inv.parameter_bytes,
            "inputs": _ports(inv.inputs), "outputs": _ports(inv.outputs)},
        "unsupported": sig.unsupported,
        "budgets": {"l1_bytes": s.l1_budget, "sram_bytes": s.options.sram, "flash_bytes": s.options.flash,
                    "l3_bytes": s.options.l3},
        "estimated_sram_bytes": m.get("sram_bytes"), "estimated_flash_bytes": m.get("flash_bytes"),
        "estimated_arena_bytes": m.get("arena_bytes"), "estimated_l3_bytes": m.get("l3_bytes"),
        "estimated_l1_bytes": max((t.l1_bytes for _, t in s.deployment.tilings.values()), default=None)
        if s.deployment else None,
        "smallest_l1_bytes": s.l1_need,
        "floor": floor(s.deployment) if s.deployment else None,
        "status": _status(s), "fits": s.fits,
        "recommendations": [{"priority": r.priority, "name": r.name, "memory": r.memory, "on": r.on,
                             "saving_bytes": r.saving, "why": r.why, "detail": r.detail, "flags": list(r.flags),
                             "needs_hardware": r.needs_hardware} for r in s.recommendations],
        "front": [{"max_overhead": p.max_overhead, "sram_bytes": p.sram_bytes, "macs_recomputed": p.macs_recomputed,
                   "overhead": round(p.overhead, 6), "stages": p.stages} for p in s.sram_front],
    }


def suggestion_text(s: Suggestion) -> str:
    sig, inv = s.signature, s.signature.inventory
    lines = [f"{display(s.model)} ({inv.format}) on {s.target}",
             f"  operators     {', '.join(f'{op} x{n}' for op, n in inv.ops)}"]
    if sig.macs is not None:
        kinds = ", ".join(f"{k} {n} ({100 * macs / max(sig.macs, 1):.0f}% of MACs)"
                          for k, (n, macs) in sig.conv_kinds.items())
        lines += [f"  compute       {kinds or 'no convolution, fully connected or recurrent layer'}",
                  f"  MACs          {sig.macs:,}"]
    lines += [f"  parameters    {inv.parameters:,} ({inv.parameter_bytes:,} B)"]
    lines += [f"  {kind:<13} {display(p.name)} {'x'.join(map(str, p.shape)) or 'scalar'} {p.dtype}"
              for kind, ports in (("input", inv.inputs), ("output", inv.outputs)) for p in ports]
    if sig.unsupported:
        return "\n".join([*lines, "", f"deploy stops on this model: {display(sig.unsupported)}"])
    m, st = s.memory.as_dict(), _status(s)
    needs = [("SRAM", m["sram_bytes"], s.options.sram, st["sram"]), ("flash", m["flash_bytes"], s.options.flash,
                                                                      st["flash"])]
    if s.deployment.tilings or s.l1_budget is not None:
        used = s.l1_need or max((t.l1_bytes for _, t in s.deployment.tilings.values()), default=0)
        needs.append(("L1", used, s.l1_budget, st["l1"]))
    if s.deployment.l3 is not None:
        needs.append(("L3", m["l3_bytes"], s.options.l3, st["l3"]))
    p = s.deployment.arena
    lines += ["", f"estimate  {'needed':>12} {'budget':>12}",
              *(f"  {name:<7} {_kib(need):>12} {_kib(budget):>12}   {state or ''}".rstrip()
                for name, need, budget, state in needs),
              f"  (arena {m['arena_bytes']:,} B by {p.method}, {p.status}"
              + (f" + state {m['state_bytes']:,} B kept across inferences" if m["state_bytes"] else "")
              + f"; weights {m['weights_bytes']:,} B + code estimate {m['code_bytes_estimate']:,} B)",
              f"  floor   {floor_text(floor(s.deployment))}", "",
              "recommendations (each saving measured by planning the alternative)"]
    for r in s.recommendations:
        saving = f"saves {r.saving:,} B {r.memory}" if r.saving > 0 else "no saving"
        turn_on = "on" if r.on else (" ".join(r.flags) or "off")
        lines += [f"  {r.priority:<5} {r.name:<17} {saving:<26} {turn_on}",
                  f"        {r.detail}" if r.priority == "SKIP" else f"        {r.why}; {r.detail}"]
    if s.sram_front:
        lines += ["", "SRAM x MAC-overhead front (the least SRAM within each --max-overhead, each point planned)",
                  *(f"  {100 * p.max_overhead:>5g}%  {p.sram_bytes:>10,} B  +{100 * p.overhead:.1f}% MACs  {p.stages}"
                    for p in s.sram_front)]
    over = s.over()
    lines += ["", "fits the budgets" if not over else
              "over: " + "; ".join(f"{'flash' if name == 'FLASH' else name} by {need - budget:,} B"
                                   for _, name, need, budget in over)]
    return "\n".join(lines)


# ---- language models (.safetensors) -------------------------------------------------------
#
#     s = suggest_language_model(model, options)    # LanguageSuggestion: the alternatives that fit
#
# Every alternative is a plan: --weights x --kv-cache x --logits, each planned at the context asked
# for and, where that is over a budget, at the longest context that fits (bisection; the SRAM a
# context needs grows with it). Nothing here is a formula of bytes.

LM_WEIGHTS = ("f32", "int8", "q4_0")  # the weight formats, least quality lost first
LM_KV = ("f32", "int8", "int4")  # the KV cache formats, likewise
LM_ROWS = 10  # candidates the text shows (--json lists every one)
QUALITY_SEQUENCES = 3  # seeded token sequences the quality figure runs
QUALITY_PROMPT = 4  # random tokens opening each; the f32 executor's greedy choices follow
QUALITY_TOKENS = 16  # tokens per sequence (each a next-token prediction compared)
QUALITY_MACS = 3 * 10 ** 9  # the executor's work the figure may take (matrix MACs over every run); above: not measured
NEAR_F32 = 0.95  # a top-1 agreement at least this counts as near f32 (48 predictions: two may differ)


@dataclass(frozen=True)
class LmCandidate:
    """One set of language-model flags that fits every budget, as planned."""
    weights: str
    kv: str
    context: int
    logits: str
    memory: Memory
    changes_output: bool  # --logits differs from the one asked for: the engine's output is another type
    next_context: Memory | None = None  # the plan one position longer (over a budget), when shortened
    full_context: int | None = None  # with these formats and the --logits asked for: the longest context (0: none)
    agreement: float | None = None  # top-1 agreement with the f32 executor (measured; None: not measured)
    why: str = ""

    @property
    def flags(self) -> str:
        return f"--weights {self.weights} --kv-cache {self.kv} --context {self.context} --logits {self.logits}"


@dataclass(frozen=True)
class LanguageSuggestion:
    model: str
    target: str
    options: Options  # resolved: the target's memories fill the budgets left unset
    summary: str  # the model's configuration in a line
    flags: object  # the llm_passes.LanguageFlags asked for
    wanted: int  # the context asked for (--context, else every position the model has)
    estimate: Memory | None  # the plan with the flags asked for
    estimate_error: str | None  # why that plan could not be made (a flash no L3 placement meets)
    candidates: tuple[LmCandidate, ...]  # those that fit, best first
    smallest: dict  # nothing fits: flag -> (bytes, the flags that need the least)
    quality: dict  # how the agreement was measured, or why it was not
    notes: tuple[str, ...] = ()
    vocab: int = 0
    logits_row: int = 0  # bytes of the float logits row

    @property
    def fits(self) -> bool:
        return bool(self.candidates)


def _lm_output(mode: str, vocab: int) -> str:
    """What output 0 (and 1) of the engine is with --logits ``mode``."""
    from .llm_passes import logits_k
    k = logits_k(mode)
    if not k:
        return f"the {vocab:,} float logits"
    if k == 1:
        return "the most likely token id (int32)"
    return f"the {k} most likely token ids (int32) and their logits as output 1"


def _longest(measure, options: Options, wanted: int):
    """(context, its plan, the plan one position longer) for the longest context up to ``wanted``
    whose plan fits every budget; (0, the plan at context 1, None) when none does; (0, None,
    needs) when a plan cannot be made at all (a flash no L3 placement meets)."""
    try:
        top = measure(wanted)
    except InfeasibleBudget as e:
        return 0, None, dict(e.needs)
    if not over_budget(top.memory, options):
        return wanted, top, None
    low = measure(1) if wanted > 1 else top
    if over_budget(low.memory, options):
        return 0, low, None
    lo, hi, fit, miss = 1, wanted - 1, low, {wanted: top}
    while lo < hi:  # SRAM grows with the context (the KV cache, the scores row): bisection
        mid = (lo + hi + 1) // 2
        plan = measure(mid)
        if over_budget(plan.memory, options):
            hi, miss[mid] = mid - 1, plan
        else:
            lo, fit = mid, plan
    nxt = miss.get(lo + 1) or measure(lo + 1)
    return lo, fit, nxt


def _lm_pareto(rows: list[LmCandidate], preference) -> list[LmCandidate]:
    """The rows no other row beats: as good or better in every quality (context, output, weight
    and KV formats) and needing no more SRAM, flash or L3."""
    def quality(r):
        return r.context, -preference(r.logits), -LM_WEIGHTS.index(r.weights), -LM_KV.index(r.kv)

    def memory(r):
        return r.memory.sram_bytes, r.memory.flash_bytes, r.memory.l3_bytes

    def beats(a, b):
        qa, qb, ma, mb = quality(a), quality(b), memory(a), memory(b)
        return (all(x >= y for x, y in zip(qa, qb)) and all(x <= y for x, y in zip(ma, mb))
                and (qa, ma) != (qb, mb))
    return [r for r in rows if not any(beats(o, r) for o in rows if o is not r)]


def _quality(front: Plan, flags, quantized: dict, pairs: list[tuple[str, str]]) -> tuple[dict, dict]:
    """Top-1 agreement with the f32 executor of each (weights, KV cache) pair: the numpy executor
    (deployer.decoder_executor) runs seeded token sequences with the pair's graph and with the f32
    one; the share of positions whose most likely next token is the same."""
    from .decoder_executor import Executor
    from .language_model import lower_as
    from .verify_llm import matrix_macs

    c = front.graph.config
    tokens = min(QUALITY_TOKENS, c.max_positions)
    bare = front.but(options=replace(front.options, flash=None, l3=None))  # the float model, whatever the budgets
    ref = lower_as(bare, replace(flags, weights="f32", kv="f32", logits="full", context=tokens), quantized).graph
    pairs = [p for p in pairs if p != ("f32", "f32")]
    work = matrix_macs(ref) * tokens * QUALITY_SEQUENCES * (len(pairs) + 1)
    method = (f"top-1 agreement of the next-token choice with the f32 executor's (f32 weights, f32 KV cache, full "
              f"logits), measured by running the numpy executor (deployer/decoder_executor.py) over "
              f"{QUALITY_SEQUENCES} sequences of {tokens} tokens: {QUALITY_PROMPT} seeded random tokens (numpy "
              f"default_rng seeds 0..{QUALITY_SEQUENCES - 1}) continued by the f32 executor's greedy choices; "
              f"{QUALITY_SEQUENCES * tokens} predictions per format pair, each pair at a context of {tokens}")
    if work > QUALITY_MACS:
        return {}, dict(measured=False, method=method, why=f"not measured: {work:,} MACs of executor work, over "
                        f"the {QUALITY_MACS:,} this command spends on it (cheap models only)")
    sequences, choices = [], []
    with progress.step("quality (f32 executor)"):
        for seed in range(QUALITY_SEQUENCES):
            prompt = np.random.default_rng(seed).integers(0, ref.config.vocab, QUALITY_PROMPT)
            ex, seq, best = Executor(ref), [], []
            for i in range(tokens):
                seq.append(int(prompt[i]) if i < QUALITY_PROMPT else best[-1])
                best.append(int(np.argmax(ex.step(seq[-1]))))
            sequences.append(seq)
            choices.append(best)
    agreement = {("f32", "f32"): 1.0}
    with progress.step("quality (formats)", total=len(pairs)) as step:
        for w, kv in pairs:
            graph = lower_as(front, replace(flags, weights=w, kv=kv, logits="full", context=tokens), quantized).graph
            same = 0
            for seq, best in zip(sequences, choices):
                ex = Executor(graph)
                same += sum(int(np.argmax(ex.step(t))) == b for t, b in zip(seq, best))
            agreement[(w, kv)] = same / (len(sequences) * tokens)
            step.advance()
    return agreement, dict(measured=True, method=method, predictions=QUALITY_SEQUENCES * tokens, tokens=sequences)


def suggest_language_model(model: Path, options: Options) -> LanguageSuggestion:
    """Every --weights x --kv-cache x --logits alternative planned at the context asked for, else
    at the longest that fits; those that fit, best first (the least quality lost)."""
    from .language_model import plan_as
    from .llm_passes import KV_FORMATS, WEIGHT_FORMATS, logits_k
    from .pipeline import read, start

    flags = options.language
    logits_k(flags.logits)  # a malformed --logits: a usage error before anything is read
    front = read(start(model, options))
    opts = front.options
    quantized: dict = {}

    def measure(**changes) -> Plan:
        return plan_as(front, replace(flags, **changes), quantized)

    estimate = error = None
    with progress.step("estimate"):
        try:
            estimate = measure()  # the flags as given: a --context the model lacks is a usage error here
        except InfeasibleBudget as e:
            error = str(e)
    c = front.graph.config
    wanted = flags.context if flags.context is not None else c.max_positions
    modes = (flags.logits, *(m for m in ("full", "argmax") if m != flags.logits))

    def preference(mode: str) -> int:
        return modes.index(mode)
    found: dict = {}  # (weights, kv, logits) -> _longest's answer
    with progress.step("measuring the alternatives", total=len(WEIGHT_FORMATS) * len(KV_FORMATS) * len(modes)) as step:
        for w in WEIGHT_FORMATS:
            for kv in KV_FORMATS:
                for mode in modes:
                    found[w, kv, mode] = _longest(lambda n, w=w, kv=kv, mode=mode: measure(weights=w, kv=kv, logits=mode,
                                                                                           context=n), opts, wanted)
                    step.advance()
    some = next((p for _, p, _ in found.values() if p is not None), None)
    vocab = some.graph.config.vocab if some is not None else c.vocab
    row = 4 * vocab
    rows = []
    for w in WEIGHT_FORMATS:
        for kv in KV_FORMATS:
            reached = 0  # the longest context of a more preferred --logits with these formats
            for mode in modes:  # another output only where it buys context the preferred one cannot
                ctx, plan, nxt = found[w, kv, mode]
                if ctx and ctx > reached:
                    rows.append(LmCandidate(w, kv, ctx, mode, plan.memory, mode != flags.logits,
                                            nxt.memory if ctx < wanted else None, found[w, kv, modes[0]][0]))
                reached = max(reached, ctx)
    rows = _lm_pareto(rows, preference)
    pairs = list(dict.fromkeys((r.weights, r.kv) for r in rows))
    agreement, quality = (_quality(front, flags, quantized, pairs) if rows
                          else ({}, dict(measured=False, why="nothing fits")))
    rows = [replace(r, agreement=agreement.get((r.weights, r.kv))) for r in rows]
    rows.sort(key=lambda r: (r.context < wanted, _lossy(r), -r.context, preference(r.logits),
                             LM_WEIGHTS.index(r.weights), LM_KV.index(r.kv), r.memory.sram_bytes, r.memory.flash_bytes))
    rows = [replace(r, why=_lm_why(r, flags, wanted, c.max_positions, vocab, row, opts, quality)) for r in rows]
    smallest = {} if rows else _lm_smallest(found, opts)
    notes = []
    if opts.flash is None:
        notes.append(f"no --flash budget ({opts.target} declares none): every weight format fits; give --flash to "
                     f"weigh them against the part's")
    if rows and rows[0].changes_output and rows[0].logits == "argmax":
        notes.append("--logits topk:K instead gives the K most likely ids with their logits (for sampling), in about "
                     "the SRAM of argmax: deploy suggest --logits topk:K measures it")
    if rows and flags.logits == "full" and rows[0].logits == "full" and rows[0].context == wanted:
        notes.append(f"--logits argmax is not needed: the float logits ({row:,} B) fit beside the context asked for")
    return LanguageSuggestion(front.graph.name, opts.target, opts, c.summary(), flags, wanted,
                              estimate.memory if estimate is not None else None, error, tuple(rows), smallest,
                              quality, tuple(notes), vocab, row)


def _lossy(r: LmCandidate) -> bool:
    """Formats whose next-token choices stray from f32's: measured below NEAR_F32; unmeasured,
    an int4 KV cache (tinytalk's measured 0.90; int8's and Q4_0 weights' matched f32's)."""
    return r.agreement < NEAR_F32 if r.agreement is not None else r.kv == "int4"


def _lm_smallest(found: dict, options: Options) -> dict:
    """flag -> (bytes, flags): the least each budget must be for some alternative to fit. SRAM:
    at context 1, among the alternatives within the other budgets (none: among those needing the
    least flash and L3); flash and L3 (given only when no alternative is within them): the weight
    format needing the least (they do not change with the context, the KV cache or --logits)."""
    planned = [(key, p) for key, (_, p, _) in found.items() if p is not None]
    unplanned = [(key, needs) for key, (_, p, needs) in found.items() if p is None]
    smallest = {}

    def others(p):
        return [o for o in over_budget(p.memory, options) if o[0] != "--sram"]
    pool = [(k, p) for k, p in planned if not others(p)]
    if not pool and planned:
        least = min((p.memory.flash_bytes, p.memory.l3_bytes) for _, p in planned)
        pool = [(k, p) for k, p in planned if (p.memory.flash_bytes, p.memory.l3_bytes) == least]
    if pool:
        (w, kv, mode), p = min(pool, key=lambda kp: (kp[1].memory.sram_bytes, kp[1].memory.flash_bytes))
        smallest["--sram"] = (p.memory.sram_bytes, f"--weights {w} --kv-cache {kv} --context 1 --logits {mode}")
    for flag, field_ in (("--flash", "flash_bytes"), ("--l3", "l3_bytes")):
        if any(flag not in {o[0] for o in over_budget(p.memory, options)} for _, p in planned):
            continue  # some alternative is within this budget
        needs = [(getattr(p.memory, field_), f"--weights {k[0]}") for k, p in planned] + \
                [(n[flag], f"--weights {k[0]} (every matrix in --l3)") for k, n in unplanned if flag in n]
        if needs:
            smallest[flag] = min(needs)
    return smallest


def _lm_why(r: LmCandidate, flags, wanted: int, positions: int, vocab: int, row: int, options: Options,
            quality: dict) -> str:
    parts = []
    if r.context == wanted:
        parts.append(f"keeps the context asked for ({wanted}" + (" positions, all the model's)" if wanted == positions
                                                                 else " positions)"))
    else:
        over = over_budget(r.next_context, options) if r.next_context is not None else []
        miss = "; ".join(f"{r.context + 1} needs {need:,} B of {name if name != 'FLASH' else 'flash'}, over {flag} "
                         f"{budget:,}" for flag, name, need, budget in over)
        parts.append(f"the longest context that fits: {r.context} of {wanted} positions "
                     f"({miss or 'a longer one did not fit'})")
    if r.changes_output:
        was = _lm_output(flags.logits, vocab)
        asked = "full logits" if flags.logits == "full" else f"--logits {flags.logits}"
        gain = (f"{asked} reach{'' if flags.logits == 'full' else 'es'} {r.full_context} positions with these formats"
                if r.full_context else f"{asked} fit{'' if flags.logits == 'full' else 's'} at no context with these "
                                       f"formats")
        saved = f"; the float logits row ({row:,} B) leaves the arena" if r.logits != "full" else ""
        parts.append(f"CHANGES THE OUTPUT: --logits {r.logits} makes output 0 {_lm_output(r.logits, vocab)} instead "
                     f"of {was} ({gain}{saved})")
    else:
        parts.append(f"keeps the output ({_lm_output(r.logits, vocab)})")
    per = r.memory.state_bytes // max(r.context, 1)
    parts.append(f"KV cache {r.kv}: {per:,} B a position, {r.memory.state_bytes:,} B" +
                 ("" if r.kv == flags.kv else f" (--kv-cache {flags.kv} was asked for)"))
    budget = options.flash
    parts.append(f"weights {r.weights}: flash {r.memory.flash_bytes:,} B" +
                 (" (no --flash budget)" if budget is None else f" of --flash {budget:,}") +
                 (f", L3 {r.memory.l3_bytes:,} B" if r.memory.l3_bytes else ""))
    if (r.weights, r.kv) == ("f32", "f32"):
        parts.append("the f32 formats: nothing quantized")
    elif r.agreement is not None:
        n = quality.get("predictions", 0)
        parts.append(f"top-1 agreement with f32 {r.agreement:.3f}, measured over {n} predictions (" +
                     ("near f32" if r.agreement >= NEAR_F32 else f"below the {NEAR_F32} counted as near f32") + ")")
    else:
        parts.append("top-1 agreement not measured" + (": int4 KV counts as straying from f32" if _lossy(r) else ""))
    return "; ".join(parts)


def language_suggestion_json(s: LanguageSuggestion) -> dict:
    e = s.estimate
    return {
        "model": s.model, "kind": "language_model", "target": s.target, "summary": s.summary,
        "budgets": {"sram_bytes": s.options.sram, "flash_bytes": s.options.flash, "l3_bytes": s.options.l3},
        "asked": {"weights": s.flags.weights, "kv_cache": s.flags.kv, "context": s.wanted, "logits": s.flags.logits},
        "estimate": None if e is None else {
            "sram_bytes": e.sram_bytes, "kv_cache_bytes": e.state_bytes, "arena_bytes": e.arena_bytes,
            "flash_bytes": e.flash_bytes, "weights_bytes": e.weights_bytes, "l3_bytes": e.l3_bytes,
            "over": [{"flag": f, "memory": m, "need_bytes": n, "budget_bytes": b} for f, m, n, b in
                     over_budget(e, s.options)]},
        "estimate_error": s.estimate_error,
        "fits": s.fits,
        "candidates": [{"rank": i + 1, "flags": r.flags, "weights": r.weights, "kv_cache": r.kv, "context": r.context,
                        "logits": r.logits, "changes_output": r.changes_output,
                        "output": _lm_output(r.logits, s.vocab), "sram_bytes": r.memory.sram_bytes,
                        "kv_cache_bytes": r.memory.state_bytes, "arena_bytes": r.memory.arena_bytes,
                        "flash_bytes": r.memory.flash_bytes, "l3_bytes": r.memory.l3_bytes,
                        "top1_agreement": None if r.agreement is None else round(r.agreement, 4), "why": r.why}
                       for i, r in enumerate(s.candidates)],
        "ranking": LM_RANKING,
        "quality": s.quality,
        "smallest": {flag: {"bytes": n, "flags": f} for flag, (n, f) in s.smallest.items()},
        "notes": list(s.notes),
    }


LM_RANKING = (f"the context asked for kept, then formats near f32 (measured top-1 agreement at least {NEAR_F32}), "
              "then the longest context, then the output kept (the --logits asked for, then full, then argmax), then "
              "the weight format (f32, int8, q4_0), then the KV cache format (f32, int8, int4), then the least SRAM")


def language_suggestion_text(s: LanguageSuggestion) -> str:
    f, e, o = s.flags, s.estimate, s.options
    lines = [f"{display(s.model)} (language model) on {s.target}", f"  model       {s.summary}",
             f"  asked for   --weights {f.weights} --kv-cache {f.kv} --context {s.wanted} --logits {f.logits}"]
    if e is not None:
        over = over_budget(e, o)
        lines += [f"  needs       SRAM {e.sram_bytes:,} B (KV cache {e.state_bytes:,} + arena {e.arena_bytes:,}), "
                  f"flash {e.flash_bytes:,} B" + (f", L3 {e.l3_bytes:,} B" if e.l3_bytes else "")]
        budgets = ", ".join(f"{flag} {'-' if b is None else f'{b:,} B'}" for flag, b in
                            (("--sram", o.sram), ("--flash", o.flash), ("--l3", o.l3)) if b is not None or
                            flag != "--l3")
        lines += [f"  budgets     {budgets}: " + ("fits" if not over else "over " + "; ".join(
            f"{'flash' if name == 'FLASH' else name} by {need - b:,} B" for _, name, need, b in over))]
    else:
        lines += [f"  needs       {display(s.estimate_error)}"]
    if not s.candidates:
        lines += ["", "nothing fits the budgets, at any context, with any --weights, --kv-cache or --logits "
                      "(each planned):"]
        lines += [f"  the smallest {flag} that works is {n} ({-(-n // 1024)}K), with {fl}"
                  for flag, (n, fl) in s.smallest.items()]
        if "--flash" in s.smallest and o.l3 is None:
            lines += ["  (--l3 streams the matrices from an external memory; --prune-vocab shrinks the embedding and "
                      "the head)"]
        if e is not None:
            lines += [f"  with the flags asked for: the smallest {flag} that works is {need} ({-(-need // 1024)}K)"
                      for flag, _, need, _ in over_budget(e, o)]
        return "\n".join(lines + [f"  note: {n}" for n in s.notes])
    lines += ["", "alternatives that fit, best first (each planned as deploy plans it; the longest context by "
                  "bisection):",
              f"  {'#':>2}  {'weights':<7} {'kv-cache':<8} {'context':>7}  {'logits':<8} {'output':<8} "
              f"{'SRAM B':>10} {'flash B':>12}  {'top-1':>6}"]
    for i, r in enumerate(s.candidates[:LM_ROWS]):
        agree = "f32" if (r.weights, r.kv) == ("f32", "f32") else ("-" if r.agreement is None else f"{r.agreement:.3f}")
        lines += [f"  {i + 1:>2}  {r.weights:<7} {r.kv:<8} {r.context:>7}  {r.logits:<8} "
                  f"{'CHANGED' if r.changes_output else 'kept':<8} {r.memory.sram_bytes:>10,} "
                  f"{r.memory.flash_bytes:>12,}  {agree:>6}",
                  f"      {r.why}"]
    if len(s.candidates) > LM_ROWS:
        lines += [f"  ... and {len(s.candidates) - LM_ROWS} more (--json lists every one)"]
    best = s.candidates[0]
    lines += ["", f"recommended: {best.flags}" + (" (changes the output: " + _lm_output(best.logits, s.vocab) + ")"
                                                 if best.changes_output else ""),
              f"ranked by {LM_RANKING}"]
    q = s.quality
    lines += [f"quality: {q['method']}" if q.get("measured") else f"quality: {q.get('why', 'not measured')}"]
    return "\n".join(lines + [f"note: {n}" for n in s.notes])
