"""The whole compiler on one screen: a model and its flags become a plan, pass by pass (each
``Plan -> Plan``, solver.plan), and the plan becomes the files of out/. Networks and language
models share the front (start, read by suffix) and the back (budgets, files, manifest, report);
between them each kind has its own passes (deployer.language_model for a language model's).

    plan = plan_deployment(model, options)   # every decision; what deploy suggest measures
    plan = deploy(model, options)            # and the files: plan.files
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from backends import BACKENDS, Backend
from backends.variants import CODE_BYTES_PORTABLE, choose
from layer_analyzer import kernels as K
from layer_analyzer.overlap import OutputOverInput, element_bytes, patch_walk, pixel_walk, tile_walk
from layer_analyzer.tiling import geometry as tiling_geometry
from layer_analyzer.tiling import window_shapes, writes_behind_reads
from network_parser.cut import CutSpec, float_edges
from network_parser.errors import InfeasibleBudget, UsageError
from network_parser.inplace import RULES, ZERO_COPY, plan_in_place
from network_parser.lifetimes import lifetimes, memory_floor
from network_parser.rewrites import apply_rewrites
from network_parser.validate import check_graph
from solver.arena import ArenaProblem
from solver.arena_types import pair_footprint
from solver.plan import LayerPlan, Memory, Plan
from solver.plan_checker import PlanError, check_schedule
from solver import progress
from solver.tensor_arena import arena_problem, plan_banked_level, plan_level
from solver.banks import BankLayout
from solver.l3_placement import layout_l3, place, staging_lifetimes
from solver.arena_bound import live_per_op
from solver.op_order import least_peak_order, reordered, worth_searching
from solver.patch_split import forced_plan, parse_patch, patch_lifetimes, plan_stages, region_windows, stage_of
from solver.tiling import TilingConfig, TilingInfeasible, plan_tiling

from . import emit, language_model, llm_emit, relaxations
from .frontends import FRONTENDS, frontend_for
from .llm_passes import LanguageFlags
from .compare import live_bytes
from .render import display
from .manifest import build_manifest, manifest_text
from .report_html import deployment_report, language_model_report

DEFAULT_MAX_OVERHEAD = 0.2
CODE_BYTES_BASE = 1024  # the engine's fixed runtime (inference_run, the API); a layer's own code: its variant's
CODE_BYTES_CALL = 32  # a layer calling a function it shares with others (its arguments, the call)


@dataclass(frozen=True)
class Options:
    target: str = "host"
    l1: int | None = None
    sram: int | None = None
    flash: int | None = None
    planner: str = "cpsat"
    time_limit_s: float = 5.0
    tiler: str = "cpsat"  # "cpsat" | "greedy": how layers are cut into L1 tiles (when --l1 is given)
    # "auto" (the target's: backends.base.Backend.tile_objective) | "l1" (use L1 well, target
    # heuristics) | "cycles" (the backend's cost model)
    tile_objective: str = "auto"
    l3: int | None = None  # external memory reached by DMA only: what does not fit streams from there
    patch: str = "auto"  # "auto" | "off" | "RxC@LAYER": run stages patch by patch (forced: the first)
    # MACs the patch stages may recompute, as a share of the network's (None: DEFAULT_MAX_OVERHEAD; given
    # without --sram, the stages that need the least SRAM within it)
    max_overhead: float | None = None
    in_place: bool = True  # in-place rules beyond zero-copy reshapes
    overlap: bool = True  # outputs over the inputs they consumed (layer_analyzer.overlap); off with in_place off
    input_memory: str = "arena"  # "arena" | "external": the network's input in the application's own buffer
    order: str = "auto"  # "auto" (branched graphs: the order with the least peak, when it plans to less) | "file"
    fuse: bool = True  # graph rewrites such as PAD folded into convolutions
    kernels: str = "auto"  # "auto" (the target's families in order) | "plain" (portable C) | one family's name
    part_budgets: bool = True  # a real part's memories fill an unset --sram / --flash
    input_layout: str = "nchw"  # ONNX graphs: the layout of the engine's 3-D/4-D inputs ("nchw" = the model's)
    output_layout: str = "nchw"  # ... and of its outputs
    input_type: str | None = None  # integer ONNX graphs: "int8" | "uint8" input values (None: guessed)
    cut: CutSpec = CutSpec()  # --inputs / --outputs / --io: the part of the model the engine runs
    rtos: str = "baremetal"  # the task glue: "baremetal" | "freertos"
    debug_guards: bool = False  # canaries around every arena buffer, checked after each layer; DMA bounds checks
    language: LanguageFlags = LanguageFlags()  # a language model's own flags (--weights, --kv-cache, ...)
    link_elf: bool = False  # targets with a QEMU board: link the engine and record the image's real memory
    resolved: bool = False  # the target's memories filled in (resolve_options): None now means none
    # RAM banks the arena spans (backends.base.MemoryBank: --memory-map's, or the part's when the
    # activations outgrow its first bank); () one arena, --sram's
    banks: tuple = ()
    user_sram: bool = False  # --sram was given (a part's banks are then not spread over)
    input_bank: str | None = None  # the bank the network's inputs must lie in (--input-bank)
    output_bank: str | None = None  # ... and its outputs (--output-bank)


GUARD_BYTES = emit.GUARD_BYTES
guard_bytes = emit.guard_bytes


# ---- the pipeline -----------------------------------------------------------------------------

def plan_deployment(model: Path, options: Options) -> Plan:
    """Every decision, pass by pass; everything but the budget check and the files."""
    return plan_back(plan_front(model, options))


def plan_front(model: Path, options: Options) -> Plan:
    """What the memory search's flags do not change: the model read, rewritten and lowered."""
    plan = start(model, options)  # the target, its memories filling the flags left unset
    plan = read(plan)  # the model file into its kind's IR, by suffix (deployer.frontends)
    if plan.kind == "language_model":
        return language_model.lower(plan)  # --prune-vocab, --weights, --kv-cache
    plan = rewrite(plan)  # graph rewrites: PAD folded into convolutions
    plan = lower(plan)  # each layer's integer kernel (layer_analyzer)
    return plan


def plan_back(plan: Plan) -> Plan:
    """The memory search (deployer.relaxations) on a lowered plan."""
    if plan.kind == "language_model":
        return language_model.plan_back(plan)  # the activation arena (checked), the KV cache as state
    plan = note_target(plan)  # what the flags cost on this target
    plan = choose_variants(plan)  # the target's kernel per layer, as if it ran whole (backends)
    plan = spread_over_banks(plan, plan_in_order(plan))  # the memory plan in the file's order and the
    # least-peak one, the better; on a part whose activations outgrow its main RAM bank, across its banks
    plan = bind_variants(plan)  # each layer's kernel as it really runs (whole, tile, region, streamed)
    plan = fit_flash(plan)  # over --flash: the layers whose packed weights cost most keep int8 ones
    plan = prove_overlaps(plan)  # every output over its input replayed at its addresses, byte by byte
    return plan.but(relaxed=relaxations.taken(plan))


# flags the front passes read: a plan replanned with others would not be the model they read
FRONT_FLAGS = ("target", "input_layout", "output_layout", "input_type", "fuse", "cut")


def replan(front: Plan, options: Options) -> Plan:
    """The memory search again, with other search flags, on a plan_front result: what suggest
    and --auto-optimize measure, without reading the model again."""
    changed = [f for f in FRONT_FLAGS if getattr(front.options, f) != getattr(options, f)]
    if changed:
        raise ValueError(f"replan cannot change {', '.join(changed)}: plan_front reads them")
    options, backend = resolve_options(options)
    return plan_back(front.but(options=options, backend=backend))


def deploy(model: Path, options: Options) -> Plan:
    """The plan, checked against its budgets, with the files of out/."""
    return finish(plan_deployment(model, options))


def finish(plan: Plan) -> Plan:
    plan = check_budgets(plan)  # every memory within its budget, or the smallest budget that works
    plan = emit_engine(plan)  # the C engine, headers, task glue, CMake, qemu/ (templates)
    plan = link_elf(plan)  # with --link-elf on a QEMU target: the linked image's real memory
    plan = document(plan)  # manifest.json and report.html, from the plan
    return plan


# ---- front passes ---------------------------------------------------------------------------

def resolve_options(options: Options, kind: str = "network") -> tuple[Options, Backend]:
    """The target's own memories fill what the flags leave unset; contradictions are usage errors."""
    backend = BACKENDS.get(options.target)
    if backend is None:
        raise UsageError(f"unknown target '{options.target}' (known: {', '.join(sorted(BACKENDS))})")
    if not options.resolved:
        options = replace(options, user_sram=options.sram is not None)
    if not options.resolved and not options.banks:  # once only: resolved options keep what they hold
        options = replace(options, l1=backend.l1_bytes) if options.l1 is None else options  # the part's own L1
        options = replace(options, l3=backend.l3_bytes) if options.l3 is None else options  # and its L3
        if backend.part and options.part_budgets:  # a part's memories are its default budgets
            options = replace(options, sram=options.sram or backend.sram_bytes,
                              flash=options.flash or backend.flash_bytes)
    options = replace(options, l3=None, resolved=True) if options.l3 == 0 else replace(options, resolved=True)
    if backend.tcm_bytes is not None and options.l1 is not None and options.l1 > backend.tcm_bytes:
        raise UsageError(f"--l1 {options.l1} exceeds the {backend.tcm_bytes} bytes of tightly-coupled memory "
                         f"of {backend.name}")
    if options.kernels not in ("auto", "plain") and backend.family(options.kernels) is None:
        owners = sorted(b.name for b in BACKENDS.values() if b.family(options.kernels) is not None)
        raise UsageError(f"--kernels {options.kernels}: target '{backend.name}' has "
                         f"{' and '.join(f.name for f in backend.families) or 'only the plain'} kernels"
                         + (f" ({options.kernels}: {', '.join(owners)})" if owners else ""))
    if (options.input_bank or options.output_bank) and not options.banks:
        raise UsageError("--input-bank and --output-bank name banks of a memory map (--memory-map)")
    if options.banks and options.l1 is not None and backend.async_dma:
        unreached = [b.name for b in options.banks if not any("dma" in m for m in b.masters)]
        if unreached:
            raise UsageError(f"bank {unreached[0]} is not reached by DMA (its masters), and {backend.name}'s tiles move "
                             f"by DMA between L1 and the arena: give it another use, or no L1")
    if options.banks and options.debug_guards:
        raise UsageError("--debug-guards checks one arena: not with the banks of a memory map")
    if options.l3 is not None and options.l1 is None and kind == "network":
        raise UsageError("--l3 needs an L1 (--l1): layers stream L3 data through their L1 tile loops")
    return options, backend


def start(model: Path, options: Options) -> Plan:
    options, backend = resolve_options(options, frontend_for(model).kind)
    return Plan(Path(model), options, backend)


def note_target(plan: Plan) -> Plan:
    options, backend = plan.options, plan.backend
    if options.l1 is None or not backend.l1_in_sram:
        return plan
    return plan.but(notes=(*plan.notes, f"{backend.name} has no scratchpad or tightly-coupled memory: the --l1 "
                           f"buffer is SRAM too, so tiling adds its {options.l1:,} B to the SRAM need and a copy of "
                           f"every tile; it saves SRAM only where tiles stream from --l3"))


def read_model(path: Path, options: Options | None = None):
    """A network's graph, checked (the commands that take networks only)."""
    front = frontend_for(path)
    if front.kind != "network":
        raise UsageError(f"{path}: a {front.label}; this command takes "
                         f"{', '.join(s for s, f in FRONTENDS.items() if f.kind == 'network')} models")
    graph = front.read(path, options or Options())
    check_graph(graph, str(path))
    return graph


def read(plan: Plan) -> Plan:
    front = frontend_for(plan.model)
    with progress.step("read"):
        graph = front.read(plan.model, plan.options)
        if front.kind != "network":
            if plan.options.input_memory == "external":  # its input is a token id, kept in its own state
                raise UsageError(f"--input-memory external: a language model takes token ids through its own API, "
                                 f"not an input buffer")
            return plan.but(kind=front.kind, graph=graph)
        check_graph(graph, str(plan.model))
    return plan.but(graph=graph, notes=(*plan.notes, *(graph.source.notes if graph.source else ())))


def rewrite(plan: Plan) -> Plan:
    graph, notes = apply_rewrites(plan.graph, plan.options.fuse)
    return plan.but(graph=graph, notes=(*plan.notes, *notes))


def lower(plan: Plan) -> Plan:
    return plan.but(layers=tuple(LayerPlan(k, kern) for k, kern in enumerate(K.lower_graph(plan.graph))))


def _rules(plan: Plan, layer: LayerPlan | None = None) -> tuple:
    """The target's variants (those of the family --kernels names), unless --kernels plain keeps
    every layer on the portable kernels (or the flash relaxation this one)."""
    keep = plan.options.kernels == "plain" or (layer is not None and layer.keep_portable)
    if keep:
        return ()
    named = plan.backend.family(plan.options.kernels)
    return named.rules if named is not None else plan.backend.variants


def _weight_bytes(plan: Plan, kern) -> int:
    w = getattr(kern, "weights", None)
    return plan.graph.tensors[w].nbytes if w is not None else 0


def choose_variants(plan: Plan, use=lambda layer: "whole") -> Plan:
    """Each layer's kernel variant among the target's, for how it runs (``use(layer)``)."""
    return plan.with_layers(lambda lp: replace(lp, variant=choose(_rules(plan, lp), lp.kernel,
                                                                   _weight_bytes(plan, lp.kernel), use(lp))))


def bind_variants(plan: Plan) -> Plan:
    """Variants for how the memory plan runs each layer: tile by tile, region by region in the
    patch stage, with weights streamed from L3, or whole; a layer kept on the portable kernels
    (to save flash) stays there."""
    def use(lp: LayerPlan) -> str:
        if lp.l3_weights:
            return "streamed"
        if lp.in_stage:
            return "region"
        return "tile" if lp.tiling is not None else "whole"
    plan = choose_variants(plan, use)
    # a tiling planned for the portable kernels (the variant's own tiles did not fit) keeps them
    portable = {lp.index for lp in plan.layers
                if lp.tiling is not None and lp.variant.stages_weights != lp.tiling[0].stage_weights}
    plan = plan.with_layers(lambda lp: replace(lp, variant=choose((), lp.kernel, _weight_bytes(plan, lp.kernel)))
                            if lp.index in portable else lp)
    return measure(plan)


def _variant_for_tiles(plan: Plan, k: int):
    return choose(_rules(plan, plan.layers[k]), plan.kernels[k], 0, "tile")


# ---- memory: the arena and what it takes ----------------------------------------------------------

def deployment_problem(plan: Plan) -> ArenaProblem:
    """The arena problem a plan's L2 arena solved."""
    return arena_problem(list(plan.lives), plan.backend.alignment, guard_bytes(plan.options), plan.overlaps)[0]


def code_estimate(layers, patches=()) -> int:
    """The engine's code: its runtime and each layer's function; a layer whose variant runs its
    tiles (or its patch-stage regions) has its tile loop and one kernel per distinct window (shared
    by layers whose windows and literals are the same, as the engine shares them)."""
    windows, total = set(), CODE_BYTES_BASE
    for lp in layers:
        v, k = lp.variant, lp.kernel
        if v is None:
            total += CODE_BYTES_PORTABLE
            continue
        literals = (v.name, type(k).__name__, *(getattr(k, f, None) for f in (
            "k_h", "k_w", "stride_h", "stride_w", "in_c", "input_offset", "output_offset", "act_min", "act_max")))
        if lp.tiling is not None and v.dsp:
            g, t = lp.tiling
            windows |= {(literals, v.code_bytes, shape) for shape in window_shapes(g, t.tile_h, t.tile_w, t.tile_c)}
            total += CODE_BYTES_PORTABLE  # the tile loop: descriptors, loads, stores
        elif v.shares_whole and lp.tiling is None and not lp.in_stage:  # one function per shape, a call per layer
            shape = (k.out_h, k.out_w, k.out_c, k.in_h, k.in_w, k.pad_t, k.pad_l, lp.reuse is not None)
            windows.add((literals, v.code_bytes, shape))
            total += CODE_BYTES_CALL
        elif lp.in_stage and v.dsp and stage_of(patches, lp.index) is not None and isinstance(k, (K.Conv, K.Pool)):
            # as emit runs regions: a region kernel computes all the layer's channels (their count is
            # one of its literals)
            channels = k.channels if isinstance(k, K.Pool) else k.out_c
            windows |= {((*literals, channels), v.code_bytes, (rows, cols, width))
                        for row in region_windows(k, stage_of(patches, lp.index), lp.index)
                        for rows, cols, _, width in row}
            total += CODE_BYTES_PORTABLE  # its region loop
        elif lp.in_stage and v.dsp and stage_of(patches, lp.index) is not None:
            # an elementwise op: a kernel per shape of its output region (its rows, and its operands'
            # row strides, one of a few per stage)
            patch = stage_of(patches, lp.index)
            out = next(view.output for view in patch.stage.layers if view.layer == lp.index)
            windows |= {((*literals, lp.index), v.code_bytes, (r[out][1] - r[out][0], c[out][1] - c[out][0]))
                        for r in patch.rows.intervals for c in patch.cols.intervals}
            total += CODE_BYTES_PORTABLE  # its region loop
        else:
            total += v.code_bytes
    return total + sum(size for _, size, _ in windows)


def l1_scratch(plan: Plan) -> int:
    """SRAM taken by the tiles' L1 buffer on parts without a scratchpad or TCM to hold it."""
    return plan.options.l1 if plan.tilings and plan.backend.l1_in_sram else 0


def measure(plan: Plan) -> Plan:
    """Bytes per memory. Resident weights count to flash, and to SRAM too on parts that run
    from L2 (the boot loader copies the image there); streamed weights count to L3 only; the
    L1 buffer carved out of SRAM counts to SRAM."""
    graph, l3, backend = plan.graph, plan.l3, plan.backend
    streamed = l3.image_bytes if l3 else 0
    sections = emit.constant_sections(graph, plan.layers)
    sections["weights"] -= sum(graph.tensors[plan.layers[k].kernel.weights].nbytes for k in (l3.weights if l3 else ()))
    weights = sum(sections.values())
    code = code_estimate(plan.layers, plan.patches)
    scratch = l1_scratch(plan)
    arena = plan.arena.peak if plan.arena is not None else 0
    _, state = emit.state_layout(graph)
    sram = arena + state + scratch + (weights + code if backend.weights_in_sram else 0)
    return plan.but(memory=Memory(
        arena_bytes=arena, scratch_bytes=scratch, state_bytes=state, sram_bytes=sram, weights_bytes=weights,
        code_bytes_estimate=code,
        flash_bytes=weights + code, flash_sections=tuple({**sections, "code_estimate": code}.items()),
        l3_bytes=l3.bytes if l3 else 0, l3_weights_bytes=streamed, l3_arena_bytes=l3.bytes - streamed if l3 else 0))


BUDGETS = (("sram_bytes", "sram", "--sram", "SRAM"), ("flash_bytes", "flash", "--flash", "FLASH"),
           ("l3_bytes", "l3", "--l3", "L3"))  # memory field, Options field, flag, name


def over_budget(memory: Memory, options) -> list[tuple[str, str, int, int]]:
    """(flag, memory name, need, budget) for every memory the plan exceeds (``options``: any
    record with the budgets it has as ``sram``, ``flash``, ``l3``; every kind of model)."""
    budgets = [(key, flag, name, getattr(options, field_, None)) for key, field_, flag, name in BUDGETS]
    return [(flag, name, getattr(memory, key), budget) for key, flag, name, budget in budgets
            if budget is not None and getattr(memory, key) > budget]


def budget_error(over: list[tuple[str, str, int, int]], details: dict | None = None) -> InfeasibleBudget:
    """One error for every memory over its budget, each with the smallest budget that works and
    (``details``: flag -> text) what its need is made of or what would fit instead."""
    details = details or {}
    return InfeasibleBudget("; ".join(f"the plan needs {need} bytes of {name} but {flag} is {budget}; the "
                                      f"smallest {flag} that works is {need} ({-(-need // 1024)}K)"
                                      + (f" ({details[flag]})" if details.get(flag) else "")
                                      for flag, name, need, budget in over),
                            over[0][2], needs={flag: need for flag, _, need, _ in over})


def floor(plan: Plan) -> dict:
    """Where the arena's lower bound is set: the op, and every buffer live there, largest first."""
    n = len(plan.graph.layers)
    problem = deployment_problem(plan) if plan.overlaps and plan.offsets else None
    per_op = (live_bytes(problem) + [0] * n)[:n] if problem else None
    op, held = memory_floor(list(plan.lives), n, per_op)
    layer, edges = plan.graph.layers[op], set(float_edges(plan.graph))
    tensors = [dict(name=lt.name, bytes=lt.size, float_edge=lt.tensor in edges) for lt in held]
    total = sum(t["bytes"] for t in tensors)
    # an output over the input it consumes counts at the least the two span
    return dict(op=layer.index, op_type=layer.op, name=layer.name, bytes=min(total, per_op[op]) if per_op else total,
                tensors=tensors, overlapped=bool(per_op) and per_op[op] < total)


def floor_text(f: dict) -> str:
    parts = ", ".join(f"'{display(t['name'])}' {t['bytes']:,} B" + (" (a float edge: see --io int8)" if t["float_edge"] else "")
                      for t in f["tensors"][:4])
    more = f" and {len(f['tensors']) - 4} more" if len(f["tensors"]) > 4 else ""
    shared = "; outputs over the inputs they consume counted at their least span" if f.get("overlapped") else ""
    return f"op {f['op']} {f['op_type']} '{display(f['name'])}': {f['bytes']:,} B live ({parts}{more}{shared})"


def check_budgets(plan: Plan) -> Plan:
    """Every memory over its budget in one error, each with the smallest budget that works (and
    for SRAM where its peak is)."""
    over = over_budget(plan.memory, plan.options)
    if over and plan.kind == "language_model":
        raise budget_error(over, language_model.budget_details(plan))
    if plan.banks is not None:  # the banks' sum is no budget of its own: each bank is one
        over = [o for o in over if o[0] != "--sram"]
    if over:
        raise budget_error(over, {"--sram": f"its peak: {floor_text(floor(plan))}"})
    if plan.banks is not None and plan.banks.plan.over:
        full = [(m, u) for m, u in zip(plan.banks.memories, plan.banks.used) if u > m.size]
        raise InfeasibleBudget("; ".join(f"bank {m.name} needs {u:,} bytes but holds {m.size:,}" for m, u in full)
                               + f" (the {plan.banks.plan.method} assignment, the best found: every buffer lies in one "
                               f"bank, the largest takes {max(lt.size for lt in plan.lives):,} B; the peak, all banks "
                               f"together: {floor_text(floor(plan))})",
                               full[0][1], {f"bank {m.name}": u for m, u in full})
    return plan


# ---- the memory plan: order -> patch split -> L1 tiles -> in-place -> lifetimes -> L3 -> arena -------

def plan_in_order(plan: Plan) -> Plan:
    """plan_memory in the file's order and, on a branched graph where another order's whole-tensor
    peak is less (solver.op_order), in that order too; the better plan is kept (within --sram: the
    fewer recomputed MACs, then the less SRAM; over it: the less SRAM), the file's on a tie. The
    file's order is the twin and the fallback, and stays with --order file and a forced --patch
    (whose op is a position in it)."""
    first = plan_memory(plan)
    options = plan.options
    if options.order == "file" or options.patch not in ("auto", "off") or not worth_searching(plan.graph):
        return first
    found = least_peak_order(plan.graph, outside_arena(plan), _order_savings(plan))
    if not found.changed:
        return first
    moved = plan.but(graph=reordered(plan.graph, found.order), order=found,
                     layers=tuple(replace(plan.layers[k], index=i) for i, k in enumerate(found.order)))
    other = plan_memory(moved)
    if _ranked(other, options) >= _ranked(first, options):
        return first
    return other.but(notes=(*other.notes, f"the ops run in the order with the least peak, not the file's: SRAM "
                                          f"{other.memory.sram_bytes:,} B against {first.memory.sram_bytes:,} B "
                                          f"(--order file keeps the file's)"))


def part_banks(backend, options: Options) -> tuple:
    """The banks of a part that may hold activations: its arena banks, and its TCM unless --l1
    reserves it for tiles."""
    return tuple(b for b in backend.banks if "cpu" in b.masters and
                 (b.use == "arena" or (b.use == "l1" and options.l1 is None)))


def spread_over_banks(unplanned: Plan, planned: Plan) -> Plan:
    """A part with several RAM banks whose activations do not fit the bank --sram defaults to
    (no --sram, no memory map): the memory plan again across every bank the core reaches, kept
    when it fits them (each buffer in one bank)."""
    options, backend = planned.options, planned.backend
    banks = part_banks(backend, options)
    if options.banks or len(banks) < 2 or options.sram is None or options.sram != backend.sram_bytes \
            or options.user_sram:
        return planned
    fits = planned.memory.sram_bytes <= options.sram
    if fits and not planned.patches:
        return planned
    spread = replace(options, banks=banks, sram=sum(b.size for b in banks))
    other = plan_in_order(unplanned.but(options=spread))
    if other.banks is None or other.banks.plan.over or (fits and _recomputed(other) >= _recomputed(planned)):
        return planned
    used = ", ".join(f"{m.name} {u:,} B" for m, u in zip(other.banks.memories, other.banks.used) if u)
    why = (f"{planned.memory.sram_bytes:,} B do not fit its {options.sram:,} B {banks[0].name}" if not fits else
           f"its {options.sram:,} B {banks[0].name} alone takes them only with patch stages recomputing "
           f"{_recomputed(planned):,} MACs")
    return other.but(notes=(*other.notes, f"the activations span the part's RAM banks ({used}): {why}"))


def _recomputed(plan: Plan) -> int:
    return plan.fusion.macs_extra if plan.fusion is not None and plan.patches else 0


def _order_savings(plan: Plan) -> dict:
    """op -> ((input, bytes), ...): what writing its output over that input, when the order lets
    the input die there, saves as the arena would place them: an in-place rule's output inside the
    input; an output over the input its whole kernel consumes, at the pair's least span."""
    graph, options = plan.graph, plan.options
    readonly = outside_arena(plan)
    lanes = _lanes(plan)
    savings: dict[int, list] = {}
    if not options.in_place:
        return savings
    for lp in plan.layers:
        k, layer = lp.index, graph.layers[lp.index]
        y = layer.outputs[0] if len(layer.outputs) == 1 else None
        if y is None or layer.op in ZERO_COPY:
            continue
        out = graph.tensors[y].nbytes
        for x in dict.fromkeys(t for t in layer.inputs if t >= 0 and not graph.tensors[t].is_const
                               and not graph.tensors[t].variable and t not in readonly):
            size = graph.tensors[x].nbytes
            reuse = next((r for _, rule in RULES[1:] if (r := rule(graph, k, lambda t, x=x: t == x, lanes.get(k, 1)))
                          is not None and r.input == x), None)
            if reuse is not None:
                savings.setdefault(k, []).append((x, min(size, out) - reuse.scratch_bytes))
                continue
            schedule = _overlap_schedule(plan, lp) if options.overlap and K.data_inputs(layer, lp.kernel) == [x] \
                else None
            if schedule is not None:
                o = _found(k, x, y, schedule)
                savings.setdefault(k, []).append((x, size + out - pair_footprint(o.window, size, out, o.rise)))
    return savings


def _ranked(plan: Plan, options: Options) -> tuple:
    need = plan.memory.sram_bytes
    if options.sram is not None and need <= options.sram:
        return 0, plan.fusion.macs_extra if plan.patches else 0, need
    return 1, need, 0


def plan_memory(plan: Plan) -> Plan:
    """patch stages -> L1 tiles -> in-place rules -> overlaps -> lifetimes -> L3 placement ->
    arena, the SRAM relaxations in the search's order (deployer.relaxations). Automatic stages
    aim at --sram from the arena's lower bound; when the planned arena is still over, they aim
    lower by the excess, and at last take the stages with the least peak (whose need is then the
    smallest --sram reported, and the one a rerun with it reaches), unless that needs more than
    the first plan. With --max-overhead alone, stages recomputing less that plan to no more SRAM
    than the least-peak ones replace them."""
    options = plan.options
    tile_cache: dict = {}
    stage_cache: dict = {}
    over = True  # depthwise tiles may write over their input (whole-row tiles)

    def attempt(target, over_input=None, stages=True):
        over_input = over if over_input is None else over_input
        p = split_patches(plan, target, stage_cache) if stages else plan
        p = tile(p, tile_cache, over_input)
        p = in_place(p, over_input)
        p = overlap(p)
        p = place_and_plan(p)
        return p

    def rewrites_tiles(p: Plan) -> bool:  # a tensor another one writes over cannot move to L3
        return options.l3 is not None and any(lp.reuse is not None and lp.tiling is not None for lp in p.layers)

    def least() -> Plan:
        """The least SRAM the stages reach, with and without tiles written over their inputs (which
        one wins depends on what L3 can then take, not on the budget: the need a rerun reaches)."""
        low = attempt(1, True)
        if rewrites_tiles(low):
            alt = attempt(1, False)
            low = alt if alt.memory.sram_bytes < low.memory.sram_bytes else low
        return low

    result = attempt(options.sram)
    need = result.memory.sram_bytes
    if options.sram is not None and need > options.sram and rewrites_tiles(result):
        # without that the placement may do better
        over = False
        alt = attempt(options.sram)
        if alt.memory.sram_bytes < need:
            result = alt
            need = result.memory.sram_bytes
        else:
            over = True
    if options.patch == "auto" and options.sram is not None and need > options.sram:
        # Over, split or not: live bytes under --sram are no promise of an arena under it.
        result = aim_lower(attempt, options.sram, result, tries=3, keep_first=True, least=least)
    if options.patch == "auto" and result.patches and (options.sram is None or result.memory.sram_bytes > options.sram):
        # stages estimated to lower the peak that the planned arena does not confirm are not taken
        whole = attempt(options.sram, stages=False)
        if whole.memory.sram_bytes <= result.memory.sram_bytes:
            return whole
    if options.patch == "auto" and result.patches and options.sram is None:
        # The least SRAM within --max-overhead: stages recomputing less may plan to the same bytes
        # (a lower estimate need not buy a byte of arena): the cheapest whose estimate is a little
        # above the chosen one's, kept when its planned SRAM is no more.
        least_sram, beside = result.memory.sram_bytes, result.memory.sram_bytes - result.memory.arena_bytes
        for slack in (1.02, 1.05, 1.1):
            cheaper = attempt(int(result.fusion.peak * slack) + beside)
            if cheaper.patches and cheaper.memory.sram_bytes <= least_sram and \
                    cheaper.fusion.macs_extra < result.fusion.macs_extra:
                result = cheaper
    return result


def aim_lower(attempt, budget: int, first: Plan, tries: int, keep_first: bool, least=None) -> Plan:
    """A relaxation that aims at a byte target (the patch stages, the L3 placement) and misses
    the SRAM ``budget``: aim lower by the excess, ``tries`` times, then as low as it goes
    (``least()``, by default ``attempt(1)``); that last plan (or ``first`` when ``keep_first``, it
    took no stages and it needs less: a plan the budget asked for does not change) is the one
    reported over, whose need a rerun reaches."""
    result, target = first, budget
    for _ in range(tries):
        target = max(1, target - (result.memory.sram_bytes - budget))
        if target == 1:
            break
        result = attempt(target)
        if result.memory.sram_bytes <= budget:
            return result
    lowest = attempt(1) if least is None else least()
    return first if keep_first and not first.patches and first.memory.sram_bytes < lowest.memory.sram_bytes else lowest


def _lanes(plan: Plan) -> dict[int, int]:
    """Channels each layer's kernel computes at once (an in-place depthwise plane holds that many)."""
    return {lp.index: lp.variant.lanes for lp in plan.layers if lp.variant is not None}


def max_overhead(options: Options) -> float:
    return DEFAULT_MAX_OVERHEAD if options.max_overhead is None else options.max_overhead


def outside_arena(plan: Plan) -> frozenset:
    """Tensors the arena does not hold: the network's inputs, with --input-memory external."""
    return frozenset(plan.graph.inputs) if plan.options.input_memory == "external" else frozenset()


def unsplit_profile(plan: Plan) -> tuple[list, list[int]]:
    """The lifetimes of the network run whole (in-place rules taken) and its profile: the arena's
    lower bound at every op, each output over the input it consumes at its least span."""
    whole = overlap(in_place(plan.but(patches=()).with_layers(lambda lp: replace(lp, in_stage=False, tiling=None))))
    problem = deployment_problem(whole)
    return list(whole.lives), live_per_op(problem, problem.pairs)[:len(plan.layers)]


def split_patches(plan: Plan, sram_target: int | None, cache: dict | None = None) -> Plan:
    """The stages run patch by patch: as forced (--patch RxC@LAYER, one stage at the head), or
    (auto) those the exact search picks (solver.fusion) when --sram needs them, at the least
    recomputed MACs that fit ``sram_target``, or with --max-overhead alone the least SRAM within
    it: recomputing MACs nobody needs to save memory for is not a saving."""
    options = plan.options
    choice, patches = None, ()
    auto = options.patch == "auto"
    if options.patch != "off" and (not auto or options.sram is not None or options.max_overhead is not None):
        lives, profile = unsplit_profile(plan)
        alignment, outside = plan.backend.alignment, outside_arena(plan)
        if not auto:
            choice, patches = forced_plan(plan.graph, plan.kernels, lives, profile, alignment,
                                          parse_patch(options.patch), outside)
        else:
            target = None if sram_target is None else sram_target - emit.state_layout(plan.graph)[1]
            choice, patches = plan_stages(plan.graph, plan.kernels, lives, profile, alignment, max_overhead(options),
                                          target, cache, outside)
    stage = {k for p in patches for k in p.layers}
    return plan.but(patches=patches, fusion=choice).with_layers(lambda lp: replace(lp, in_stage=lp.index in stage))


def tile(plan: Plan, cache: dict | None = None, over_input: bool = True) -> Plan:
    """With an L1 budget, cut every tileable layer outside the patch stage into tiles that fit it
    (double-buffered). ``cache`` keeps each layer's tiling across calls; ``over_input``: depthwise
    layers that could write over their input get whole-row tiles, so that they still can."""
    tilings = tile_layers(plan, skip=plan.stage, cache=cache, over_input=over_input)
    return plan.with_layers(lambda lp: replace(lp, tiling=tilings.get(lp.index)))


def tile_layers(plan: Plan, skip=(), cache: dict | None = None, over_input: bool = True) -> dict:
    """op -> (TileGeometry, LayerTiling) of every tileable layer not in ``skip`` (none without --l1)."""
    cache = {} if cache is None else cache
    options, backend = plan.options, plan.backend
    if options.l1 is None:
        return {}
    tileable = [(k, g) for k, g in ((k, tiling_geometry(kern, k)) for k, kern in enumerate(plan.kernels))
                if g is not None]
    # the layers share --time-limit (deterministic time): the whole step keeps to it (but for the
    # cycles objective's floor per layer, solver.tiling_cpsat.CYCLES_TIME_FLOOR_S)
    config = TilingConfig(objective=plan.tile_objective, heuristics=dict(backend.tile_heuristics),
                          cost=backend.costs,
                          time_limit_s=min(2.0, options.time_limit_s / max(1, len(tileable))))
    result, worst = {}, None
    todo = [(k, g) for k, g in tileable if k not in skip]
    # depthwise layers that write over their input when they run whole: their tiles span whole
    # rows, so that they may do so tile by tile too
    wanted = {r.layer for r in plan_in_place(plan.graph, options.in_place, lanes=_lanes(plan))
              if r.rule == "depthwise-in-place"} if over_input else set()
    with progress.step(f"tiling ({options.tiler})", total=sum(1 for k, _ in todo if (k, k in wanted) not in cache)) as s:
        for k, g in todo:
            try:
                key = (k, k in wanted)
                if key not in cache:
                    cache[key] = _tile_layer(g, options, config, _variant_for_tiles(plan, k), k in wanted)
                    s.advance()
                result[k] = cache[key]
            except TilingInfeasible as e:
                s.advance()
                if worst is None or e.minimum_l1 > worst.minimum_l1:
                    worst = e
    if worst is not None:
        layer = plan.graph.layers[worst.layer]
        raise InfeasibleBudget(f"op {layer.index} {layer.op} '{layer.name}': its smallest tile needs "
                               f"{worst.minimum_l1} bytes of L1 but --l1 is {options.l1}; the smallest "
                               f"--l1 that works is {worst.minimum_l1}", worst.minimum_l1,
                               needs={"--l1": worst.minimum_l1})
    return result


def _tile_layer(g, options: Options, config: TilingConfig, variant, over_input: bool = False):
    """(geometry, tiling) of one layer, the first that fits of: as the target's variant runs a tile
    (its weights read in place or moved, its channel quantum, no split input channels), then as the
    portable kernels do; each first with whole-row tiles when the layer would write over its input."""
    own = replace(g, stage_weights=variant.stages_weights, c_quantum=variant.channel_quantum, split_ok=False)
    shapes = [own] if variant.dsp else []
    shapes.append(g)
    if over_input:
        shapes = [s for shape in shapes for s in (replace(shape, full_width=True), shape)]
    for i, shape in enumerate(shapes):
        try:
            return shape, plan_tiling(shape, options.l1, options.tiler, config)
        except TilingInfeasible:
            if i == len(shapes) - 1:
                raise


def in_place(plan: Plan, over_input: bool = True) -> Plan:
    """The in-place rules, then the lifetimes they leave: a tiled layer with a halo must not
    overwrite its input (elementwise tiles have none); a patch stage keeps every tensor it reads."""
    tilings = plan.tilings
    # elementwise tiles read what they write; depthwise tiles of whole rows may, when no tile after
    # the next still reads what a store overwrites (layer_analyzer.tiling.writes_behind_reads)
    over = {k for k, (g, t) in tilings.items()
            if over_input and writes_behind_reads(g, t.tile_h, t.tile_w, t.tile_c, plan.backend.async_dma)}
    keep = {k for k, (g, _) in tilings.items() if g.kind != "eltwise" and k not in over} | plan.stage
    reuses = {r.layer: r for r in plan_in_place(plan.graph, plan.options.in_place, keep=keep, lanes=_lanes(plan),
                                                planeless=over, readonly=outside_arena(plan))}
    plan = plan.with_layers(lambda lp: replace(lp, reuse=reuses.get(lp.index)))
    outside = outside_arena(plan)
    lives = [lt for lt in lifetimes(plan.graph, plan.reuses) if lt.tensor not in outside]
    return plan.but(lives=tuple(patch_lifetimes(lives, plan.patches)))


def _overlap_schedule(plan: Plan, lp: LayerPlan):
    """The order layer ``lp`` runs in (forwards), as reads and writes (layer_analyzer.overlap), or
    None when there is none an output over its input may rely on."""
    graph, k = plan.graph, lp.index
    if lp.overlap is not None and lp.overlap.order == "patches":
        return stage_schedule(plan, stage_of(plan.patches, k), lp.overlap.input)
    if lp.tiling is not None:
        return tile_walk(*lp.tiling, plan.backend.async_dma)
    if lp.variant is None or lp.variant.walk != "pixels" or lp.in_stage:
        return None
    layer = graph.layers[k]
    data = K.data_inputs(layer, lp.kernel)
    return pixel_walk(lp.kernel, element_bytes(graph.tensors[data[0]].dtype),
                      element_bytes(graph.tensors[layer.outputs[0]].dtype)) if len(data) == 1 else None


def _found(k: int, x: int, y: int, schedule) -> OutputOverInput:
    return OutputOverInput(k, x, y, schedule.order, schedule.window(), schedule.reversed().rise())


def stage_schedule(plan: Plan, patch, source: int):
    """A patch stage, whole input ``source`` against its whole output, patch by patch."""
    graph = plan.graph
    first = next(v.layer for v in patch.stage.layers if source in v.inputs)
    tensors = graph.tensors
    return patch_walk(patch, source, {t: tensors[t].shape for t in (source, patch.stage.output)},
                      {t: tensors[t].dtype for t in (source, patch.stage.output)},
                      nchw=isinstance(plan.kernels[first], K.Transpose))


def overlap(plan: Plan) -> Plan:
    """Outputs over consumed inputs (no MAC recomputed): a layer whose output is a buffer of its
    own and one of whose inputs dies there, run in an order an overlap may rely on (a whole
    kernel's pixel walk, the tile loop, the patch stage's patches), may start its output inside
    that input, as far up as the order allows (layer_analyzer.overlap). A patch stage is one such
    layer, its whole input against its whole output, recorded on its last op."""
    options, graph = plan.options, plan.graph
    if not (options.overlap and options.in_place):
        return plan
    owner = {lt.tensor: lt.owner for lt in plan.lives}
    last: dict[int, int] = {}
    for lt in plan.lives:
        last[lt.owner] = max(last.get(lt.owner, -1), lt.last_op)
    kept = set(graph.outputs) | set(graph.state()) | outside_arena(plan)  # read after the run, kept, or not ours

    def dying(x: int, k: int, others) -> bool:
        return (x in owner and x not in kept and last[owner[x]] == k
                and all(owner.get(t) != owner[x] for t in others if t != x))

    found: dict[int, OutputOverInput] = {}
    for lp in plan.layers:
        layer = graph.layers[lp.index]
        y = layer.outputs[0] if len(layer.outputs) == 1 else None
        if lp.reuse is not None or lp.in_stage or y is None or owner.get(y) != y:
            continue
        data = K.data_inputs(layer, lp.kernel)
        schedule = _overlap_schedule(plan, lp)
        if schedule is not None and len(data) == 1 and dying(data[0], lp.index, ()):
            found[lp.index] = _found(lp.index, data[0], y, schedule)
    for patch in plan.patches:
        st = patch.stage
        sources = sorted((x for x in st.inputs if dying(x, st.end, st.inputs)), key=lambda x: (-graph.tensors[x].nbytes, x))
        if sources and owner.get(st.output) == st.output:
            found[st.end] = _found(st.end, sources[0], st.output, stage_schedule(plan, patch, sources[0]))
    return plan.with_layers(lambda lp: replace(lp, overlap=found.get(lp.index)))


def shares_bytes(plan: Plan, o: OutputOverInput) -> bool:
    """Whether the arena put an output over (part of) the input it consumes."""
    if o.input not in plan.offsets or o.output not in plan.offsets:
        return False
    d = plan.offsets[o.output] - plan.offsets[o.input]
    return -plan.graph.tensors[o.output].nbytes < d < plan.graph.tensors[o.input].nbytes


def walk_way(o: OutputOverInput | None, offsets, graph) -> OutputOverInput | None:
    """Which way a layer walks, now its output's place is known: backwards where its output starts
    above the forward window but inside the input (the arena put it within the backward one),
    else forwards (clear of its input, either way would do)."""
    if o is None or o.input not in offsets or o.output not in offsets:
        return o
    return replace(o, reverse=o.window < offsets[o.output] - offsets[o.input] < graph.tensors[o.input].nbytes)


def prove_overlaps(plan: Plan) -> Plan:
    """Every output planned over its input, replayed at its planned addresses byte by byte
    (solver.plan_checker.check_schedule) in the order its final kernel is modelled to run (the
    model may be stricter than the kernel: a backward tile loop replays its input-channel slices
    last first, which the template keeps forwards, both storing at a group's last slice)."""
    for lp in plan.layers:
        o = lp.overlap
        if o is None or o.input not in plan.offsets or o.output not in plan.offsets:
            continue
        schedule = _overlap_schedule(plan, lp)
        if schedule is None or schedule.order != o.order:
            raise PlanError(f"op {lp.index}: its output was planned over its input walking {o.order}, but its "
                            f"kernel {lp.variant.name} runs no such order")
        schedule = schedule.reversed() if o.reverse else schedule
        check_schedule(schedule.reads, schedule.writes, schedule.ahead, plan.offsets[o.input],
                       plan.offsets[o.output], f"op {lp.index} {plan.graph.layers[lp.index].op}")
    return plan


def place_and_plan(plan: Plan) -> Plan:
    """The L2 arena, once what does not fit has moved to L3 (with --l3). Placement works from
    live bytes, a lower bound of the arena; when the planned arena still exceeds --sram, it
    aims lower by the excess, and at last moves everything that helps: that plan's need is
    the smallest --sram reported, and the one a rerun with it reaches."""
    options = plan.options
    lives = list(plan.lives)

    def attempt(target):
        l3 = stream_from_l3(plan, lives, target)
        streamed = set(l3.weights) if l3 is not None else set()
        l2 = lives if l3 is None else ([lt for lt in lives if lt.tensor not in l3.placement.tensors]
                                       + staging_lifetimes(l3.placement, lives))
        slabs = l3.placement.slabs if l3 is not None else {}
        overlaps = [o for o in plan.overlaps if o.layer not in slabs]
        banks = None
        if options.banks:
            arena, offsets, banked, bank_of = plan_banked_level(
                l2, options.banks, options.planner, options.time_limit_s, plan.backend.alignment, overlaps,
                access_weights(plan, l2), pinned_banks(plan))
            banks = BankLayout(options.banks, banked.bases(plan.backend.alignment), banked.used, bank_of, banked)
        else:
            arena, offsets = plan_level(l2, options.planner, options.time_limit_s, plan.backend.alignment,
                                        guard_bytes(options), overlaps)
        placed = plan.but(l3=l3, lives=tuple(l2), arena=arena, offsets=offsets, banks=banks).with_layers(
            lambda lp: replace(lp, l3_weights=lp.index in streamed,
                               overlap=None if lp.index in slabs else walk_way(lp.overlap, offsets, plan.graph)))
        if banks is not None:  # each layer's output bank, for the manifest and the report
            placed = placed.but(layers=tuple(
                replace(lp, bank=banks.memories[banks.bank_of[layer.outputs[0]]].name)
                if layer.outputs[0] in banks.bank_of else lp for lp, layer in zip(placed.layers, plan.graph.layers)))
        return measure(placed)

    result = attempt(options.sram)
    if options.l3 is None or options.sram is None or result.memory.sram_bytes <= options.sram:
        return result
    return aim_lower(attempt, options.sram, result, tries=4, keep_first=False)


def pinned_banks(plan: Plan) -> dict:
    """tensor -> bank index for the inputs and outputs --input-bank / --output-bank pin."""
    names = [b.name for b in plan.options.banks]
    pins = {}
    for flag, bank, tensors in (("--input-bank", plan.options.input_bank, plan.graph.inputs),
                                ("--output-bank", plan.options.output_bank, plan.graph.outputs)):
        if bank is None:
            continue
        if bank not in names:
            raise UsageError(f"{flag} {bank}: no such bank (the map's: {', '.join(names)})")
        pins.update({t: names.index(bank) for t in tensors})
    return pins


def access_weights(plan: Plan, lives) -> dict:
    """Per buffer owner, the bytes its layers move: written once, read by each layer that reads
    it (what a bank's access cost multiplies)."""
    readers: dict[int, int] = {}
    for layer in plan.graph.layers:
        for t in set(layer.inputs):
            readers[t] = readers.get(t, 0) + 1
    weight: dict[int, int] = {}
    for lt in lives:
        weight[lt.owner] = weight.get(lt.owner, 0) + lt.size * (1 + readers.get(lt.tensor, 1 if lt.tensor < 0 else 0))
    return weight


def stream_from_l3(plan: Plan, lives, sram_target: int | None):
    """With an L3, move what does not fit L2 (or flash) there and plan its addresses."""
    options, backend, graph = plan.options, plan.backend, plan.graph
    if options.l3 is None:
        return None
    scratch = l1_scratch(plan)
    placement = place(graph, plan.kernels, lives, plan.tilings,
                      sram=None if sram_target is None else sram_target - scratch - emit.state_layout(graph)[1],
                      flash=options.flash,
                      code_bytes=code_estimate(plan.layers, plan.patches),
                      resident_bytes=sum(emit.constant_sections(graph, plan.layers).values()),
                      weights_in_sram=backend.weights_in_sram, alignment=backend.alignment)
    if not placement:
        return None
    return layout_l3(graph, plan.kernels, placement, lives, backend.alignment,
                     lambda l3_lives: plan_level(l3_lives, options.planner, options.time_limit_s,
                                                       backend.alignment))


def fit_flash(plan: Plan) -> Plan:
    """The DSP kernels' packed weights take about twice the flash of int8 ones: when that is over
    --flash (and the kernels were not asked for by name), the layers whose packing costs most
    keep the portable kernels until the plan fits (or every layer is portable)."""
    options = plan.options
    flash = plan.memory.flash_bytes
    if options.kernels not in ("auto", "plain") or options.flash is None or flash <= options.flash:
        return plan
    savings = []
    for lp in plan.layers:
        if lp.variant.dsp and lp.variant.layout is not None:
            portable = choose((), lp.kernel, _weight_bytes(plan, lp.kernel))
            lanes = 0  # its per-lane bias and requantization arrays over the portable kernel's
            if lp.variant.lane_bytes is not None:
                bias = plan.graph.tensors[lp.kernel.bias].nbytes if getattr(lp.kernel, "bias", -1) >= 0 else 0
                lanes = sum(lp.variant.lane_bytes) - bias - emit.portable_requant_bytes(lp.kernel)
            savings.append((lp.variant.weight_bytes - portable.weight_bytes + lp.variant.code_bytes
                            - portable.code_bytes + lanes, lp.index))
    plain, over = set(), flash - options.flash
    for saving, k in sorted(savings, reverse=True):
        if over <= 0:
            break
        plain.add(k)
        over -= saving
    if not plain:
        return plan
    n = len(plain)
    note = (f"{n} layer{'s keep' if n > 1 else ' keeps'} the plain kernels (int8 weights) to fit --flash: "
            f"op{'s' if n > 1 else ''} {', '.join(map(str, sorted(plain)))}")
    relaxed = plan.with_layers(lambda lp: replace(lp, keep_portable=lp.keep_portable or lp.index in plain))
    relaxed = relaxed.but(notes=(*plan.notes, note))
    # replanned: their tiles now move int8 weights too; an in-place depthwise planned without a
    # scratch plane (its family's kernel writes over its input itself) needs one on the portable kernel
    planeless = {k for k in plain if plan.layers[k].reuse is not None and plan.layers[k].reuse.rule == "depthwise-in-place"
                 and not plan.layers[k].reuse.scratch_bytes}
    if planeless or any(plan.layers[k].tiling is not None for k in plain):
        fresh = relaxed.with_layers(lambda lp: replace(lp, tiling=None, in_stage=False, reuse=None, overlap=None,
                                                       l3_weights=False))
        return bind_variants(plan_memory(choose_variants(fresh.but(patches=(), fusion=None, l3=None, arena=None))))
    return bind_variants(relaxed)


# ---- the files --------------------------------------------------------------------------------

def emit_engine(plan: Plan) -> Plan:
    with progress.step("emit"):
        if plan.kind == "language_model":
            side, notes = language_model.side_files(plan)
            return plan.but(files={**llm_emit.render_engine(plan, tokens=language_model.tokens_file(plan) in side),
                                   **side}, notes=(*plan.notes, *notes))
        return plan.but(files=emit.render(plan, guard_bytes(plan.options)))


def link_elf(plan: Plan) -> Plan:
    """On a target with a QEMU board, when asked: the engine linked by its qemu/ Makefile, its
    real flash and SRAM (None without the Arm tools)."""
    if not plan.options.link_elf or plan.backend.qemu_machine is None:
        return plan
    from .qemu import elf_entry
    return plan.but(elf=elf_entry(plan) or False)


def document(plan: Plan) -> Plan:
    files = dict(plan.files)
    files["manifest.json"] = manifest_text(build_manifest(plan))
    plan = plan.but(files=files)
    report = deployment_report if plan.kind == "network" else language_model_report
    files["report.html"] = report(plan, deployment_problem(plan))
    return plan.but(files=files)
