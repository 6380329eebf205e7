"""The whole compiler on one screen: read -> lower -> lifetimes -> arena -> budgets -> emit."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from pathlib import Path

from backends import BACKENDS, Backend
from layer_analyzer import kernels as K
from layer_analyzer import simd
from network_parser.errors import InfeasibleBudget, ModelFormatError, UsageError
from network_parser.ir import Graph
from network_parser.inplace import plan_in_place
from network_parser.lifetimes import Lifetime, lifetimes, owner_groups
from network_parser.rewrites import apply_rewrites
from network_parser.onnx_reader import read_onnx
from network_parser.tflite_reader import read_tflite
from network_parser.validate import check_graph
from solver.arena import ArenaPlan, ArenaProblem, Buffer, SolverConfig, plan_arena
from solver.plan_checker import check_tensor_plan
from solver.tiling import TilingConfig, TilingInfeasible, plan_tiling
from layer_analyzer.tiling import geometry as tiling_geometry

from . import emit, progress
from .patching import PatchPlan, forced_plan, make_plan, parse_patch, patch_lifetimes, plan_split
from .placement import L3Layout, layout_l3, place, staging_lifetimes
from .manifest import build_manifest, manifest_text
from .report_html import deployment_report

# Rough .text per generated layer function (a DSP kernel: its unrolled steps, taps and
# requantization; measured 0.6-4.5 KB on Cortex-M, about 1.3 KB on average) and for the fixed
# runtime; the compiled engine's measured size is in the manifest's "elf" (Cortex-M targets).
CODE_BYTES_PER_LAYER = 640
CODE_BYTES_PER_DSP_LAYER = 1536
CODE_BYTES_BASE = 1024


@dataclass(frozen=True)
class Options:
    target: str = "host"
    l1: int | None = None
    sram: int | None = None
    flash: int | None = None
    planner: str = "cpsat"
    time_limit_s: float = 5.0
    tiler: str = "cpsat"  # "cpsat" | "greedy": how layers are cut into L1 tiles (when --l1 is given)
    tile_objective: str = "l1"  # "l1" (use L1 well, target heuristics) | "cycles" (the backend's cost model)
    l3: int | None = None  # external memory reached by DMA only: what does not fit streams from there
    patch: str = "auto"  # "auto" | "off" | "RxC@LAYER": run the first stage patch by patch
    max_overhead: float = 0.2  # MACs a patch split may recompute, as a share of the network's
    in_place: bool = True  # in-place rules beyond zero-copy reshapes
    fuse: bool = True  # graph rewrites such as PAD folded into convolutions
    kernels: str = "auto"  # "auto" (the target's: DSP kernels on Cortex-M) | "plain" (portable C) | "smlad"
    board_budgets: bool = True  # a board preset's memories fill an unset --sram / --flash
    input_layout: str = "nchw"  # ONNX graphs: the layout of the engine's 3-D/4-D inputs ("nchw" = the model's)
    output_layout: str = "nchw"  # ... and of its outputs
    input_type: str | None = None  # integer ONNX graphs: "int8" | "uint8" input values (None: guessed)
    rtos: str = "baremetal"  # the task glue: "baremetal" | "freertos"
    debug_guards: bool = False  # canaries around every arena buffer, checked after each layer; DMA bounds checks


GUARD_BYTES = emit.GUARD_BYTES


def guard_bytes(options: Options) -> int:
    return GUARD_BYTES if options.debug_guards else 0


def kernel_set(options: Options, backend: Backend) -> str:
    """The kernel family the engine's untiled conv/fc layers use."""
    chosen = backend.kernels if options.kernels == "auto" else options.kernels
    if chosen == "smlad" and backend.kernels != "smlad":
        raise UsageError(f"--kernels smlad needs an Armv7E-M target (cortex-m4, cortex-m7 or a board "
                         f"preset), not '{backend.name}'")
    return chosen


@dataclass(frozen=True)
class Deployment:
    graph: Graph
    kernels: tuple
    lives: list[Lifetime]
    plan: ArenaPlan
    offsets: dict[int, int]
    memory: dict
    files: dict[str, str] = field(repr=False)
    backend: Backend
    options: Options
    reuses: tuple = ()
    notes: tuple[str, ...] = ()
    tilings: dict = field(default_factory=dict)  # layer -> (TileGeometry, LayerTiling)
    l3: L3Layout | None = None  # what lives in L3 and how the layers touching it stream
    patch: PatchPlan | None = None  # the first stage run patch by patch
    kernels_used: str = "plain"  # the kernel family of untiled conv/fc layers
    plain_layers: frozenset = frozenset()  # layers that keep the portable kernels

    @property
    def macs(self) -> int:
        return sum(K.macs(k) for k in self.kernels)


def read_model(path: Path, options: Options | None = None) -> Graph:
    options = options or Options()
    suffix = path.suffix.lower()
    if suffix not in (".tflite", ".onnx"):
        raise ModelFormatError(f"{path}: unknown model format '{suffix}' (supported: .tflite, .onnx)")
    graph = read_tflite(path) if suffix == ".tflite" else \
        read_onnx(path, options.input_layout, options.output_layout, options.input_type)
    check_graph(graph, str(path))
    return graph


def arena_problem(lives: list[Lifetime], alignment: int, guard: int = 0) -> tuple[ArenaProblem, list[int]]:
    """One buffer per owner of bytes. Tensors sharing an owner's bytes make its height vary
    over time: at each op, the largest of them alive. ``guard`` bytes of canary on each side
    make a buffer a rectangle of its largest height plus both canaries."""
    members = owner_groups(lives)
    buffers, owners = [], []
    for lt in lives:
        if lt.alias_of is not None:
            continue
        group = members[lt.tensor]
        first, last = min(m.first_op for m in group), max(m.last_op for m in group)
        steps: list[list[int]] = []
        # the height changes only where a member's life begins or ends: one step per span between,
        # its height the largest member alive (a heap of the members begun, the ended ones dropped)
        bounds = sorted({first, last + 1} | {m.first_op for m in group} | {m.last_op + 1 for m in group})
        by_first, alive, i = sorted(group, key=lambda m: m.first_op), [], 0
        for k, nxt in zip(bounds, bounds[1:]):
            while i < len(by_first) and by_first[i].first_op <= k:
                heapq.heappush(alive, (-by_first[i].size, by_first[i].last_op))
                i += 1
            while alive and alive[0][1] < k:
                heapq.heappop(alive)
            height = -alive[0][0] if alive else 0
            if steps and steps[-1][2] == height:
                steps[-1][1] = nxt - 1
            else:
                steps.append([k, nxt - 1, height])
        if guard:
            steps = [[first, last, max(s[2] for s in steps) + 2 * guard]]
        buffers.append(Buffer(lt.name, max(s[2] for s in steps), first, last,
                              tuple(map(tuple, steps)) if len(steps) > 1 else ()))
        owners.append(lt.tensor)
    return ArenaProblem(tuple(buffers), alignment), owners


def tensor_offsets(lives: list[Lifetime], owners: list[int], plan: ArenaPlan, guard: int = 0) -> dict[int, int]:
    """Every tensor's arena offset: its buffer's (after its first canary), or its owner's when it
    reuses another's bytes."""
    offsets = {t: off + guard for t, off in zip(owners, plan.offsets)}
    for lt in lives:
        if lt.alias_of is not None:
            offsets[lt.tensor] = offsets[lt.alias_of]
    return offsets


def tensor_rows(lives: list[Lifetime], offsets: dict[int, int]) -> list[tuple]:
    """(name, group, first op, last op, offset, size) per tensor, for the tensor-level plan check."""
    return [(lt.name, lt.owner, lt.first_op, lt.last_op,
             offsets[lt.tensor], lt.size) for lt in lives]


def code_estimate(graph: Graph, kernels=(), kernels_used: str = "plain", plain_layers: frozenset = frozenset()) -> int:
    dsp = sum(1 for k, kern in enumerate(kernels) if k not in plain_layers and emit.simd_choice(kern, kernels_used))
    return CODE_BYTES_BASE + CODE_BYTES_PER_LAYER * (len(graph.layers) - dsp) + CODE_BYTES_PER_DSP_LAYER * dsp


def lanes(options: Options) -> int:
    """Channels the depthwise kernels compute at once (an in-place layer's scratch plane holds that many)."""
    return simd.LANES if kernel_set(options, BACKENDS[options.target]) == "smlad" else 1


def l1_scratch(tilings: dict, options: Options, backend: Backend) -> int:
    """SRAM taken by the tiles' L1 buffer on parts without a scratchpad or TCM to hold it."""
    return options.l1 if tilings and backend.l1_in_sram else 0


def memory_report(graph: Graph, kernels, plan: ArenaPlan, backend: Backend, l3: L3Layout | None = None,
                  kernels_used: str = "plain", plain_layers: frozenset = frozenset(), scratch: int = 0) -> dict:
    """Bytes per memory. Resident weights count to flash, and to SRAM too on parts that run
    from L2 (the boot loader copies the image there); streamed weights count to L3 only;
    ``scratch`` (an L1 buffer carved out of SRAM) counts to SRAM."""
    streamed = l3.image_bytes if l3 else 0
    sections = emit.constant_sections(graph, kernels, kernels_used, plain_layers)
    sections["weights"] -= sum(graph.tensors[kernels[k].weights].nbytes for k in (l3.weights if l3 else ()))
    weights = sum(sections.values())
    code = code_estimate(graph, kernels, kernels_used, plain_layers)
    sram = plan.peak + scratch + (weights + code if backend.weights_in_sram else 0)
    return dict(arena_bytes=plan.peak, scratch_bytes=scratch, sram_bytes=sram,
                weights_bytes=weights, code_bytes_estimate=code, flash_bytes=weights + code,
                flash_sections=dict(sections, code_estimate=code),
                l3_bytes=l3.bytes if l3 else 0, l3_weights_bytes=streamed,
                l3_arena_bytes=l3.bytes - streamed if l3 else 0)


BUDGETS = (("sram_bytes", "sram", "--sram", "SRAM"), ("flash_bytes", "flash", "--flash", "FLASH"),
           ("l3_bytes", "l3", "--l3", "L3"))  # memory key, Options field, flag, name


def over_budget(memory: dict, options: Options) -> list[tuple[str, str, int, int]]:
    """(flag, memory name, need, budget) for every memory the plan exceeds."""
    return [(flag, name, memory[key], getattr(options, field_)) for key, field_, flag, name in BUDGETS
            if getattr(options, field_) is not None and memory[key] > getattr(options, field_)]


def check_budgets(memory: dict, options: Options) -> None:
    """Every memory over its budget in one error, each with the smallest budget that works."""
    over = over_budget(memory, options)
    if over:
        raise InfeasibleBudget("; ".join(f"the plan needs {need} bytes of {name} but {flag} is {budget}; the "
                                         f"smallest {flag} that works is {need} ({-(-need // 1024)}K)"
                                         for flag, name, need, budget in over),
                               over[0][2], needs={flag: need for flag, _, need, _ in over})


def plan_patches(graph: Graph, kernels, options: Options, sram_target: int | None) -> PatchPlan | None:
    """The first stage split into patches: as forced, or (auto) when the split is needed to fit
    --sram (aiming at ``sram_target``), or saves a larger share of memory than the share of
    MACs it recomputes (not on targets with DSP kernels, which the stage does not use)."""
    if options.patch == "off":
        return None
    if options.patch != "auto":
        lives = lifetimes(graph, plan_in_place(graph, options.in_place, lanes=lanes(options)))
        return forced_plan(graph, kernels, lives, parse_patch(options.patch))
    choice = split_choice(graph, kernels, options, sram_target)
    if choice.end is None:
        return None
    needed = options.sram is not None and choice.unsplit_peak > options.sram
    saving = 1 - choice.peak / max(choice.unsplit_peak, 1)
    # The stage runs the portable kernels: where the target's DSP kernels are several times
    # faster, a split that is not needed costs more time than its recomputed MACs say.
    worth = saving > choice.overhead and kernel_set(options, BACKENDS[options.target]) != "smlad"
    return make_plan(graph, kernels, choice) if needed or worth else None


def split_choice(graph: Graph, kernels, options: Options, sram_target: int | None):
    """The split CP-SAT picks within --max-overhead: the least peak (no ``sram_target``), or the
    least recompute that fits it."""
    lives = lifetimes(graph, plan_in_place(graph, options.in_place, lanes=lanes(options)))
    # plan_split reports its steps (stage ends tried, CP-SAT models) and bounds them by counts
    return plan_split(graph, kernels, lives, "cpsat", options.max_overhead, sram_target,
                      min(options.time_limit_s, 1.0))


def tile_layers(graph: Graph, kernels, options: Options, skip=(), cache: dict | None = None) -> dict:
    """With an L1 budget, cut every tileable layer into tiles that fit it (double-buffered);
    the ``skip`` layers (a patch stage) run whole, region by region. ``cache`` keeps each
    layer's tiling across calls."""
    cache = {} if cache is None else cache
    if options.l1 is None:
        return {}
    backend = BACKENDS[options.target]
    tileable = [(k, g) for k, g in ((k, tiling_geometry(kern, k)) for k, kern in enumerate(kernels)) if g is not None]
    # the layers share --time-limit (deterministic time): the whole step keeps to it
    config = TilingConfig(objective=options.tile_objective, heuristics=dict(backend.tile_heuristics),
                          cost=dict(backend.cost_model),
                          time_limit_s=min(2.0, options.time_limit_s / max(1, len(tileable))))
    result, worst = {}, None
    todo = [(k, g) for k, g in tileable if k not in skip]
    with progress.step(f"tiling ({options.tiler})", total=sum(1 for k, _ in todo if k not in cache)) as s:
        for k, g in todo:
            try:
                if k not in cache:
                    cache[k] = plan_tiling(g, options.l1, options.tiler, config)
                    s.advance()
                result[k] = (g, cache[k])
            except TilingInfeasible as e:
                s.advance()
                if worst is None or e.minimum_l1 > worst.minimum_l1:
                    worst = e
    if worst is not None:
        layer = graph.layers[worst.layer]
        raise InfeasibleBudget(f"op {layer.index} {layer.op} '{layer.name}': its smallest tile needs "
                               f"{worst.minimum_l1} bytes of L1 but --l1 is {options.l1}; the smallest "
                               f"--l1 that works is {worst.minimum_l1}", worst.minimum_l1,
                               needs={"--l1": worst.minimum_l1})
    return result


def deploy(model: Path, options: Options) -> Deployment:
    """The whole compiler: the plan (below), the budgets, then the files of out/."""
    return emit_deployment(plan_deployment(model, options))


def emit_deployment(dep: Deployment) -> Deployment:
    """A planned deployment checked against its budgets, with the files of out/: the C engine,
    the manifest and the report."""
    check_budgets(dep.memory, dep.options)
    with progress.step("emit"):
        files = emit.render(dep.graph, dep.kernels, dep.lives, dep.offsets, dep.plan.peak, dep.plan.method,
                            dep.backend, dep.reuses, dep.tilings, dep.options.l1, dep.l3, dep.patch,
                            dep.kernels_used, dep.plain_layers, dep.options.rtos, guard_bytes(dep.options)).files
        files["manifest.json"] = manifest_text(build_manifest(
            dep.graph, dep.kernels, dep.lives, dep.offsets, dep.plan, dep.memory, dep.options, dep.backend,
            dep.tilings, dep.l3, dep.patch))
        dep = replace(dep, files=files)
        report = deployment_report(dep, deployment_problem(dep))
        return replace(dep, files={**files, "report.html": report})


def deployment_problem(dep: Deployment) -> ArenaProblem:
    """The arena problem a deployment's L2 plan solved."""
    return arena_problem(dep.lives, dep.backend.alignment, guard_bytes(dep.options))[0]


def resolve_options(options: Options) -> tuple[Options, Backend]:
    """The target's own memories fill what the flags leave unset; contradictions are usage errors."""
    backend = BACKENDS.get(options.target)
    if backend is None:
        raise UsageError(f"unknown target '{options.target}' (known: {', '.join(sorted(BACKENDS))})")
    options = replace(options, l1=backend.l1_bytes) if options.l1 is None else options  # the part's own L1
    options = replace(options, l3=backend.l3_bytes) if options.l3 is None else options  # and its L3
    options = replace(options, l3=None) if options.l3 == 0 else options  # --l3 0: no external memory
    if backend.board and options.board_budgets:  # a board's memories are its default budgets
        options = replace(options, sram=options.sram or backend.sram_bytes, flash=options.flash or backend.flash_bytes)
    if backend.tcm_bytes is not None and options.l1 is not None and options.l1 > backend.tcm_bytes:
        raise UsageError(f"--l1 {options.l1} exceeds the {backend.tcm_bytes} bytes of tightly-coupled memory "
                         f"of {backend.name}")
    kernel_set(options, backend)  # --kernels smlad on a target without the DSP extension
    if options.l3 is not None and options.l1 is None:
        raise UsageError("--l3 needs an L1 (--l1): layers stream L3 data through their L1 tile loops")
    return options, backend


def plan_deployment(model: Path, options: Options) -> Deployment:
    """read -> rewrites -> lower -> memory plan -> flash fit: everything but the budget check and
    the files (``deploy suggest`` measures its alternatives with this)."""
    options, backend = resolve_options(options)
    kernels_used = kernel_set(options, backend)
    with progress.step("read"):
        graph = read_model(Path(model), options)
        graph, notes = apply_rewrites(graph, options.fuse)
        notes = [*(graph.source.notes if graph.source else ()), *notes]
        kernels = K.lower_graph(graph)
    patch, tilings, reuses, l3, lives, plan, offsets, memory = plan_memory(graph, kernels, options, backend)
    plain_layers = emit.portable_layers(tilings, patch, l3)
    scratch = l1_scratch(tilings, options, backend)
    memory = memory_report(graph, kernels, plan, backend, l3, kernels_used, plain_layers, scratch)
    extra = fit_flash(graph, kernels, options, kernels_used, memory["flash_bytes"], plain_layers)
    if extra:
        plain_layers |= extra
        memory = memory_report(graph, kernels, plan, backend, l3, kernels_used, plain_layers, scratch)
        n = len(extra)
        notes = [*notes, f"{n} layer{'s keep' if n > 1 else ' keeps'} the plain kernels (int8 weights) to fit "
                         f"--flash: op{'s' if n > 1 else ''} {', '.join(map(str, sorted(extra)))}"]
    return Deployment(graph, kernels, lives, plan, offsets, memory, {}, backend, options, reuses,
                      tuple(notes), tilings, l3, patch, kernels_used, plain_layers)


def fit_flash(graph: Graph, kernels, options: Options, kernels_used: str, flash_bytes: int,
              plain_layers: frozenset = frozenset()) -> frozenset:
    """The DSP kernels' packed weights take about twice the flash of int8 ones: when that is over
    --flash (and the kernels were not asked for by name), the layers whose packing costs most
    keep the plain kernels until the plan fits (or every layer is plain)."""
    if kernels_used != "smlad" or options.kernels == "smlad" or options.flash is None or flash_bytes <= options.flash:
        return frozenset()
    extra = []
    for k, kern in enumerate(kernels):
        s = None if k in plain_layers else emit.simd_choice(kern, kernels_used)
        if s is not None:
            w = graph.tensors[kern.weights].nbytes
            extra.append((simd.packed_bytes(kern, s, w) - w + CODE_BYTES_PER_DSP_LAYER - CODE_BYTES_PER_LAYER, k))
    plain, over = set(), flash_bytes - options.flash
    for saving, k in sorted(extra, reverse=True):
        if over <= 0:
            break
        plain.add(k)
        over -= saving
    return frozenset(plain)


def plan_memory(graph: Graph, kernels, options: Options, backend: Backend):
    """patch split -> L1 tiles -> in-place rules -> lifetimes -> L3 placement -> arena. An
    automatic split aims at --sram from live bytes; when the planned arena is still over, it
    aims lower by the excess, and at last takes the split with the least peak (whose need is
    then the smallest --sram reported, and the one a rerun with it reaches), unless that needs
    more than the first plan."""
    tile_cache: dict = {}

    def attempt(target):
        patch = plan_patches(graph, kernels, options, target)
        stage = set(patch.layers) if patch else set()
        tilings = tile_layers(graph, kernels, options, skip=stage, cache=tile_cache)
        # A tiled layer with a halo must not overwrite its input; elementwise tiles have none;
        # a patch stage keeps every tensor it reads.
        reuses = plan_in_place(graph, options.in_place,
                               keep={k for k, (g, _) in tilings.items() if g.kind != "eltwise"} | stage,
                               lanes=lanes(options))
        lives = lifetimes(graph, reuses)
        if patch is not None:
            lives = patch_lifetimes(lives, patch)
        l3, lives, plan, offsets = place_and_plan(graph, kernels, lives, tilings, options, backend)
        memory = memory_report(graph, kernels, plan, backend, l3, kernel_set(options, backend),
                               scratch=l1_scratch(tilings, options, backend))
        return patch, tilings, reuses, l3, lives, plan, offsets, memory

    first = result = attempt(options.sram)
    need = result[-1]["sram_bytes"]
    if options.patch != "auto" or options.sram is None or need <= options.sram:
        return result
    # Over, split or not: live bytes under --sram are no promise of an arena under it.
    target = options.sram
    for _ in range(3):
        target = max(1, target - (need - options.sram))
        result = attempt(target)
        need = result[-1]["sram_bytes"]
        if need <= options.sram or target == 1:
            return result
    least = attempt(1)
    return least if least[-1]["sram_bytes"] <= first[-1]["sram_bytes"] else first


def plan_level(lives: list[Lifetime], options: Options, backend: Backend, guard: int = 0) -> tuple[ArenaPlan, dict[int, int]]:
    """Offsets for one memory level's tensors, checked tensor by tensor."""
    from solver.cpsat import watchdog_s
    problem, owners = arena_problem(lives, backend.alignment, guard)
    # CP-SAT's limit is deterministic time; the wall clock's bound is its watchdog
    with progress.step(f"arena ({options.planner}, {len(problem.buffers)} buffers)",
                       limit_s=watchdog_s(options.time_limit_s) if options.planner == "cpsat" else None):
        plan = plan_arena(problem, options.planner, SolverConfig(time_limit_s=options.time_limit_s))
    offsets = tensor_offsets(lives, owners, plan, guard)
    check_tensor_plan(tensor_rows(lives, offsets), plan.peak, backend.alignment)
    return plan, offsets


def place_and_plan(graph: Graph, kernels, lives: list[Lifetime], tilings: dict, options: Options, backend: Backend):
    """The L2 arena, once what does not fit has moved to L3 (with --l3). Placement works from
    live bytes, a lower bound of the arena; when the planned arena still exceeds --sram, it
    aims lower by the excess, and at last moves everything that helps: that plan's need is
    the smallest --sram reported, and the one a rerun with it reaches."""
    def attempt(target):
        l3 = stream_from_l3(graph, kernels, lives, tilings, options, backend, target)
        l2 = lives if l3 is None else ([lt for lt in lives if lt.tensor not in l3.placement.tensors]
                                       + staging_lifetimes(l3.placement, lives))
        plan, offsets = plan_level(l2, options, backend, guard_bytes(options))
        return (l3, l2, plan, offsets), memory_report(graph, kernels, plan, backend, l3, kernel_set(options, backend),
                                                      scratch=l1_scratch(tilings, options, backend))["sram_bytes"]

    result, need = attempt(options.sram)
    if options.l3 is None or options.sram is None or need <= options.sram:
        return result
    target = options.sram
    for _ in range(4):
        target = max(1, target - (need - options.sram))
        result, need = attempt(target)
        if need <= options.sram or target == 1:
            return result
    return attempt(1)[0]


def stream_from_l3(graph: Graph, kernels, lives, tilings: dict, options: Options, backend: Backend,
                   sram_target: int | None):
    """With an L3, move what does not fit L2 (or flash) there and plan its addresses."""
    if options.l3 is None:
        return None
    scratch = l1_scratch(tilings, options, backend)
    placement = place(graph, kernels, lives, tilings, sram=None if sram_target is None else sram_target - scratch,
                      flash=options.flash,
                      code_bytes=code_estimate(graph, kernels, kernel_set(options, backend)),
                      resident_bytes=emit.constant_bytes(graph, kernels, kernel_set(options, backend)),
                      weights_in_sram=backend.weights_in_sram, alignment=backend.alignment)
    if not placement:
        return None
    return layout_l3(graph, kernels, placement, lives, backend.alignment,
                     lambda l3_lives: plan_level(l3_lives, options, backend))
