"""CP-SAT per-layer tiler: the tile (tile_h x tile_w output pixels x tile_c output channels)
that uses L1 best or runs fastest, seeded with and never worse than the greedy tiler.

    plan_tiling_cpsat(g, l1_bytes, config, greedy) -> LayerTiling

Shaped like OR-Tools' samples:

``build_tiling_model(g, l1_bytes)``
    the geometry, exactly ``TileGeometry.l1_bytes``: integer tile sizes in ``[1, extent]``;
    input rows/cols ``min((t-1)*stride + (k-1)*dil + 1, in_extent)``; the input tile
    ``operands * rows * cols * channels`` (channels = ``tile_c`` for depthwise / pooling /
    elementwise, all ``in_c`` otherwise: input channels are never tiled), the output tile
    ``tile_h * tile_w * tile_c`` and weights + per-channel parameters ``tile_c * bytes``
    (products through ``add_multiplication_equality``); booleans ``full_h/w/c`` (tile ==
    extent) and ``whole`` (one tile); every buffer rounded up to the geometry's alignment
    (``g.alignment``, 16 bytes today: ``a * q`` with ``x <= a q < x + a``); L1 =
    ``in + out + w`` when whole, ``2 (in + out) + w`` when only the weights stay (all output
    channels in every tile), ``2 (in + out + w)`` otherwise (double buffering of every tensor
    the DMA moves from tile to tile), bounded by the budget; tile counts ``ceil(E / t)`` by
    division.
``add_heuristics(v, heuristics)``
    the target's policy, soft: a bonus boolean per rule, ``tile_{h,w,c}_multiple`` (tile a
    multiple of it, or the whole extent), ``even_tiles`` (the tile divides the extent) and
    ``balanced_tiles`` (``t == ceil(E / n)``: all tiles within one of each other).
``set_l1_objective`` (``config.objective == "l1"``, DORY's)
    maximise ``weight * bonuses + L1 bytes``, then fewer tiles. ``heuristics["weight"]``
    is what one satisfied rule is worth in L1 bytes; by default more than the whole budget,
    so a rule is honoured whenever some tile that fits satisfies it, and the tile may then
    use less L1 than greedy's (that trade is the point of the heuristics). ``weight: 0``
    makes the rules pure tie-breakers.
``set_cycles_objective`` (``"cycles"``)
    minimise ``solver.tiling_cost.modeled_cycles`` exactly. The model is not linear (max of
    compute and DMA per tile, border tiles, rounding to groups), but the tile space is small:
    candidates are, per dimension, the "one more tile" sizes ``ceil(E / n)``, those rounded up
    to the target's multiple, and greedy's size; the ones that fit L1 (numpy, the same
    formula) are ranked by a lower bound (max of total compute and total DMA), evaluated
    exactly best-first until the bound passes the ``CANDIDATES``-th best, and CP-SAT picks
    among those with one boolean per candidate (exactly one true) linked to the tile
    variables, so the geometric model still vets every choice. Greedy's tile is always a
    candidate: the result is never slower than greedy's.

Always: greedy's tile as the hint, the config's time limit (as deterministic time, see
solver.cpsat) / workers / seed; after solving, ``g.l1_bytes(*tile)`` is recomputed and must
equal the model's L1 and fit; the answer must score at least greedy's. An UNKNOWN /
INFEASIBLE status or any exception returns greedy's tiling with status FALLBACK (and a
warning).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
from ortools.sat.python import cp_model

from . import cpsat
from .cpsat import new_solver
from .tiling import LayerTiling, TilingConfig
from .tiling_cost import cost_params, modeled_cycles

__all__ = [
    "CANDIDATES",
    "SolveResult",
    "TilingVars",
    "add_heuristics",
    "add_hint",
    "bonus",
    "build_tiling_model",
    "cycle_candidates",
    "heuristic_rules",
    "l1_score",
    "plan_tiling_cpsat",
    "set_cycles_objective",
    "set_l1_objective",
    "solve",
]

EXHAUSTIVE = 4096  # layers with at most this many tile shapes are searched exactly
CANDIDATES = 32  # exactly evaluated tiles CP-SAT chooses among under the cycles objective
# exact cost-model evaluations per second of the layer's share of --time-limit (at most 2 s: 2000;
# the lower bound usually stops far earlier): a count, so the same model always gets the same
# tile (about 0.4 ms each here: a network of many layers gets fewer each)
EVALUATIONS_PER_SECOND = 1000
CYCLES_TIME_FLOOR_S = 0.25  # the cycles model's CP-SAT search, which finds nothing in less


# --------------------------------------------------------------------------- data

@dataclass(slots=True)
class TilingVars:
    model: cp_model.CpModel
    g: object  # TileGeometry
    budget: int
    tile: tuple  # tile_h, tile_w, tile_c
    counts: tuple  # n_h, n_w, n_c
    full: tuple  # full_h, full_w, full_c
    whole: cp_model.IntVar
    in_rows: cp_model.IntVar
    in_cols: cp_model.IntVar
    input: cp_model.IntVar
    output: cp_model.IntVar
    weights: cp_model.LinearExpr  # aligned weights + parameters
    l1: cp_model.IntVar
    tiles: cp_model.IntVar
    bonuses: list = field(default_factory=list)  # (BoolVar, rule name)
    choice: list = field(default_factory=list)  # (BoolVar, candidate) under the cycles objective
    objective: object = None  # the objective expression, kept to pin it while breaking ties


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE / UNKNOWN / MODEL_INVALID
    objective: float | None
    best_bound: float | None
    wall_s: float
    tile: tuple | None
    l1: int | None


# --------------------------------------------------------------------------- geometry

def _extents(g) -> tuple[int, int, int]:
    return g.out_h, g.out_w, g.out_c


def _aligned(m: cp_model.CpModel, expr, upper: int, a: int, name: str):
    """``expr`` rounded up to a multiple of ``a`` (a new variable unless ``a`` is 1)."""
    if a == 1:
        return expr
    q = m.new_int_var(0, -(-upper // a), f"{name}_blocks")
    m.add(a * q >= expr)
    m.add(a * q <= expr + (a - 1))
    return a * q


def build_tiling_model(g, l1_bytes: int) -> TilingVars:
    """Tile sizes, their input tile, the double-buffered L1 footprint within ``l1_bytes``, tile counts."""
    m = cp_model.CpModel()
    ext = _extents(g)
    th, tw, tc = (m.new_int_var(1, e, f"tile_{d}") for e, d in zip(ext, "hwc"))
    tile = (th, tw, tc)
    # input tile: rows/cols clipped to the input extent
    in_rows = m.new_int_var(1, g.in_h, "in_rows")
    in_cols = m.new_int_var(1, g.in_w, "in_cols")
    if g.rows:  # input spans per output row (resize, transposed conv): the widest per tile size, as a table
        m.add_element(th, [1] + [g.in_rows(t) for t in range(1, ext[0] + 1)], in_rows)
        m.add_element(tw, [1] + [g.in_cols(t) for t in range(1, ext[1] + 1)], in_cols)
    else:
        m.add_min_equality(in_rows, [th * g.stride_h + ((g.k_h - 1) * g.dil_h + 1 - g.stride_h), g.in_h])
        m.add_min_equality(in_cols, [tw * g.stride_w + ((g.k_w - 1) * g.dil_w + 1 - g.stride_w), g.in_w])
    area = m.new_int_var(1, g.in_h * g.in_w, "in_area")
    m.add_multiplication_equality(area, [in_rows, in_cols])
    in_c = g.out_c if g.channels_follow_output else g.in_c
    e = g.elem  # bytes per input and output element
    input_ = m.new_int_var(0, g.operands * g.in_h * g.in_w * in_c * e, "input_bytes")
    if g.channels_follow_output:
        per_operand = m.new_int_var(1, g.in_h * g.in_w * in_c, "input_per_operand")
        m.add_multiplication_equality(per_operand, [area, tc])
        m.add(input_ == g.operands * e * per_operand)
    else:
        m.add(input_ == g.operands * g.in_c * e * area)
    # output tile and weights
    pixels = m.new_int_var(1, g.out_h * g.out_w, "out_pixels")
    m.add_multiplication_equality(pixels, [th, tw])
    out_elems = m.new_int_var(1, g.out_h * g.out_w * g.out_c, "output_elements")
    m.add_multiplication_equality(out_elems, [pixels, tc])
    output = m.new_int_var(1, g.out_h * g.out_w * g.out_c * e, "output_bytes")
    m.add(output == e * out_elems)
    # every L1 buffer starts aligned, as layer_analyzer.tiling lays them out
    a = g.alignment
    io = (_aligned(m, input_, g.operands * g.in_h * g.in_w * in_c * e, a, "input")
          + _aligned(m, output, g.out_h * g.out_w * g.out_c * e, a, "output"))
    w_bytes, p_bytes = (g.weight_bytes_per_channel, g.param_bytes) if g.stage_weights else (0, 0)
    weights = (_aligned(m, tc * w_bytes, g.out_c * w_bytes, a, "weights")
               + _aligned(m, tc * p_bytes, g.out_c * p_bytes, a, "params"))
    # whole extents: a single tile needs no second buffer; all channels: weights stay put
    full = []
    for t, e, d in zip(tile, ext, "hwc"):
        f = m.new_bool_var(f"full_{d}")
        m.add(t == e).only_enforce_if(f)
        m.add(t <= e - 1).only_enforce_if(~f)
        full.append(f)
    # what the layer's kernel variant can run: whole rows, channels by its quantum
    if g.full_width:
        m.add(tw == g.out_w)
    if g.c_quantum > 1 and g.out_c > g.c_quantum:
        q = m.new_int_var(1, g.out_c // g.c_quantum, "tile_c_quanta")
        m.add(tc == g.c_quantum * q).only_enforce_if(~full[2])
    whole = m.new_bool_var("whole")
    m.add_bool_and(full).only_enforce_if(whole)
    m.add_bool_or([~f for f in full] + [whole])
    l1 = m.new_int_var(0, l1_bytes, "l1_bytes")
    m.add(l1 == io + weights).only_enforce_if(whole)
    m.add(l1 == 2 * io + weights).only_enforce_if([~whole, full[2]])
    m.add(l1 == 2 * io + 2 * weights).only_enforce_if(~full[2])
    # tile counts
    counts = []
    for t, e, d in zip(tile, ext, "hwc"):
        n = m.new_int_var(1, e, f"n_{d}")
        m.add_division_equality(n, t + (e - 1), t)
        counts.append(n)
    tiles = m.new_int_var(1, ext[0] * ext[1] * ext[2], "tiles")
    m.add_multiplication_equality(tiles, counts)
    return TilingVars(m, g, l1_bytes, tile, tuple(counts), tuple(full), whole, in_rows, in_cols, input_, output,
                      weights, l1, tiles)


# --------------------------------------------------------------------------- target policy

def heuristic_rules(heuristics: dict) -> dict:
    """The rules a heuristics dict asks for: multiples per dimension, even / balanced tiles, weight."""
    h = heuristics or {}
    mult = {d: int(h.get(f"tile_{d}_multiple", h.get(f"{d}_multiple", 1)) or 1) for d in "hwc"}
    return dict(multiple=mult, even=bool(h.get("even_tiles", False)), balanced=bool(h.get("balanced_tiles", False)),
                weight=h.get("weight"))


def _rules_for(g, rules: dict):
    """(name, dimension index, kind, parameter) for every rule that can tell tiles apart."""
    out = []
    for i, (d, e) in enumerate(zip("hwc", _extents(g))):
        if e == 1:
            continue
        if rules["multiple"][d] > 1:
            out.append((f"tile_{d}_multiple", i, "multiple", rules["multiple"][d]))
        if rules["even"]:
            out.append((f"even_{d}", i, "even", None))
        if rules["balanced"]:
            out.append((f"balanced_{d}", i, "balanced", None))
    return out


def bonus(g, tile, heuristics: dict) -> int:
    """How many heuristic rules ``tile`` satisfies (what ``add_heuristics`` rewards)."""
    n = 0
    for _, i, kind, par in _rules_for(g, heuristic_rules(heuristics)):
        t, e = tile[i], _extents(g)[i]
        count = -(-e // t)
        n += {"multiple": t % par == 0 or t == e if par else False, "even": e % t == 0,
              "balanced": count * t - e < count}[kind]
    return n


def add_heuristics(v: TilingVars, heuristics: dict) -> list:
    """One bonus boolean per rule; true only when the tile satisfies the rule."""
    m, ext = v.model, _extents(v.g)
    for name, i, kind, par in _rules_for(v.g, heuristic_rules(heuristics)):
        b = m.new_bool_var(name)
        t, n, e = v.tile[i], v.counts[i], ext[i]
        if kind == "multiple":
            q = m.new_int_var(1, e // par if e >= par else 1, f"{name}_q")
            is_mult = m.new_bool_var(f"{name}_exact")
            m.add(t == par * q).only_enforce_if(is_mult)
            m.add_bool_or([is_mult, v.full[i]]).only_enforce_if(b)
        else:
            covered = m.new_int_var(e, 2 * e, f"{name}_covered")  # n * t, at most 2e - 1
            m.add_multiplication_equality(covered, [n, t])
            if kind == "even":
                m.add(covered == e).only_enforce_if(b)
            else:
                m.add(covered - e < n).only_enforce_if(b)
        v.bonuses.append((b, name))
    return v.bonuses


# --------------------------------------------------------------------------- objectives

def _bonus_weight(g, budget: int, heuristics: dict) -> int:
    w = heuristic_rules(heuristics)["weight"]
    return budget + 1 if w is None else int(w)


def l1_score(g, tile, budget: int, heuristics: dict) -> tuple[int, int]:
    """What the l1 objective maximises, lexicographically: (weight * bonuses + L1 bytes, -tiles)."""
    return (_bonus_weight(g, budget, heuristics) * bonus(g, tile, heuristics) + g.l1_bytes(*tile),
            -g.tiles(*tile))


def set_l1_objective(v: TilingVars, heuristics: dict) -> None:
    g = v.g
    w = _bonus_weight(g, v.budget, heuristics)
    scale = g.out_h * g.out_w * g.out_c + 1  # tiles never outweigh one byte of L1
    v.objective = scale * (w * sum(b for b, _ in v.bonuses) + v.l1) - v.tiles
    v.model.maximize(v.objective)


def _one_more_tile_sizes(e: int, multiple: int) -> set[int]:
    sizes = {-(-e // n) for n in range(1, e + 1)}
    if multiple > 1:
        sizes |= {s for s in (-(-t // multiple) * multiple for t in sizes) if s <= e}
    return sizes


def _input_extents(g, th, tw, first: bool = False):
    """Input rows and columns of the tallest and widest tiles (``first``: of the first tile) over
    numpy arrays of tile sizes, as ``g.in_rows`` / ``g.in_cols``."""
    if g.rows:
        def extent(spans, widest):
            if first:
                return lambda t: max(1, spans[min(int(t), len(spans)) - 1][1] - spans[0][0] + 1)
            return lambda t: widest(int(t))
        return (np.vectorize(extent(g.rows, g.in_rows), otypes=[np.int64])(th),
                np.vectorize(extent(g.cols, g.in_cols), otypes=[np.int64])(tw))
    return (np.minimum((th - 1) * g.stride_h + (g.k_h - 1) * g.dil_h + 1, g.in_h),
            np.minimum((tw - 1) * g.stride_w + (g.k_w - 1) * g.dil_w + 1, g.in_w))


def _covered(spans) -> int:
    """Input entries some output's span reads."""
    return len({i for lo, hi in spans for i in range(lo, hi + 1)})


def _l1_vec(g, th, tw, tc):
    """``g.l1_bytes`` over numpy arrays of tile sizes (checked against it for every candidate used)."""
    rows, cols = _input_extents(g, th, tw)
    a = g.alignment

    def up(x):
        return -(-x // a) * a

    io = up(g.operands * rows * cols * (tc if g.channels_follow_output else g.in_c) * g.elem) + up(th * tw * tc * g.elem)
    wp = up(tc * g.weight_bytes_per_channel) + up(tc * g.param_bytes) if g.stage_weights else 0 * tc
    whole = (th == g.out_h) & (tw == g.out_w) & (tc == g.out_c)
    return np.where(whole, io + wp, 2 * io + np.where(tc < g.out_c, 2, 1) * wp)


def _lower_bound_vec(g, th, tw, tc, p):
    """Lower bounds on ``modeled_cycles`` over numpy arrays of tiles: the larger of
    first load + total compute + last store (compute exact: the tile grid's border classes,
    groups rounded up) and the total DMA (bytes moved at least once, transfers counted)."""
    ext = _extents(g)
    t = (th, tw, tc)
    n = [-(-e // x) for e, x in zip(ext, t)]
    border = [e - (k - 1) * x for e, k, x in zip(ext, n, t)]
    mult = (1, 1, p["c_multiple"]) if g.kind == "fc" else (p["h_multiple"], p["w_multiple"], p["c_multiple"])

    def up(x, m):
        return -(-x // m) * m

    rate = p.get(f"macs_per_cycle_{g.kind}", p["macs_per_cycle"])  # as compute_cycles
    per_output = p.get(f"cycles_per_output_{g.kind}", 0)
    compute = 0
    for classes in np.ndindex(2, 2, 2):  # 0: the full tiles of a dimension, 1: its border tile
        count, macs, left = 1, g.macs_per_output(), 0
        for d, full_or_border in enumerate(classes):
            size = t[d] if full_or_border == 0 else border[d]
            count = count * (n[d] - 1 if full_or_border == 0 else 1)
            macs = macs * up(size, mult[d])
            left = left + (size % mult[d] != 0)
        per_tile = np.ceil(macs / rate) + p["tile_setup_cycles"] + p["leftover_penalty"] * left
        compute = compute + count * per_tile
    compute = compute + np.ceil(ext[0] * ext[1] * ext[2] * per_output)  # the outputs' own work, whatever the tiles
    bw, setup = p["dma_bytes_per_cycle"], p["dma_setup_cycles"]
    in_c = tc if g.channels_follow_output else g.in_c
    rows, cols = _input_extents(g, th, tw, first=True)
    first_in = g.operands * rows * cols * in_c * g.elem
    first_w = tc * (g.weight_bytes_per_channel + g.param_bytes) * g.stage_weights
    last_out = border[0] * border[1] * border[2] * g.elem
    ends = np.ceil(first_in / bw) + np.ceil(first_w / bw) + np.ceil(last_out / bw) + 2 * setup
    tiles = n[0] * n[1] * n[2]
    outputs = ext[0] * ext[1] * ext[2]
    reload = (n[0] * n[1] > 1) | g.channels_follow_output
    loads = np.where(reload, tiles, 1) * g.operands + n[2] * ((g.weight_bytes_per_channel > 0) + (g.param_bytes > 0)) \
        * g.stage_weights
    read = g.in_h * g.in_w if not g.rows else _covered(g.rows) * _covered(g.cols)  # a resize may skip some
    moved = (outputs + g.operands * read * g.in_c) * g.elem + g.out_c * (g.weight_bytes_per_channel + g.param_bytes) \
        * g.stage_weights
    dma = np.ceil(moved / bw) + setup * (tiles + loads)
    return np.maximum(compute + ends, dma)


def cycle_candidates(g, l1_bytes: int, cost: dict, must=(), k: int = CANDIDATES,
                     evaluations: int = 2000) -> list[tuple[int, tuple]]:
    """The ``k`` fastest (modeled cycles, tile) that fit ``l1_bytes``, plus ``must``: over every tile
    when the layer has at most EXHAUSTIVE of them, else over the one-more-tile grid."""
    p = cost_params(cost)
    mult = (1, 1, p["c_multiple"]) if g.kind == "fc" else (p["h_multiple"], p["w_multiple"], p["c_multiple"])
    extents = _extents(g)
    if extents[0] * extents[1] * extents[2] <= EXHAUSTIVE:
        axes = [list(range(1, e + 1)) for e in extents]
    else:
        axes = [sorted(_one_more_tile_sizes(e, mu) | {t[i] for t in must}) for i, (e, mu) in
                enumerate(zip(extents, mult))]
    th, tw, tc = (a.ravel() for a in np.meshgrid(*[np.array(a, dtype=np.int64) for a in axes], indexing="ij"))
    fits = (_l1_vec(g, th, tw, tc) <= l1_bytes) & ((tc == g.out_c) | (tc % g.c_quantum == 0)) \
        & ((tw == g.out_w) | (not g.full_width))
    th, tw, tc = th[fits], tw[fits], tc[fits]
    bound = _lower_bound_vec(g, th, tw, tc, p)
    order = np.argsort(bound, kind="stable")
    best: list[tuple[int, tuple]] = []
    for evaluated, j in enumerate(order):
        if (len(best) >= k and bound[j] >= best[k - 1][0]) or evaluated >= evaluations:
            break
        tile = (int(th[j]), int(tw[j]), int(tc[j]))
        best.append((modeled_cycles(g, *tile, cost), tile))
        best.sort()
    chosen = best[:k]
    for tile in must:
        if all(t != tile for _, t in chosen):
            chosen.append((modeled_cycles(g, *tile, cost), tuple(tile)))
    return chosen


def set_cycles_objective(v: TilingVars, candidates) -> None:
    """Exactly one candidate is the tile; minimise its modeled cycles, then its number of tiles."""
    m, g = v.model, v.g
    v.choice = [(m.new_bool_var(f"pick_{t[0]}x{t[1]}x{t[2]}"), (cyc, t)) for cyc, t in candidates]
    m.add_exactly_one(b for b, _ in v.choice)
    for i in range(3):
        m.add(v.tile[i] == sum(b * t[i] for b, (_, t) in v.choice))
    rank = {n: r for r, n in enumerate(sorted({g.tiles(*t) for _, t in candidates}))}
    scale = len(rank) + 1
    v.objective = sum(b * (cyc * scale + rank[g.tiles(*t)]) for b, (cyc, t) in v.choice)
    m.minimize(v.objective)


def add_hint(v: TilingVars, tile) -> None:
    for var, value in zip(v.tile, tile):
        v.model.add_hint(var, value)
    for b, (_, t) in v.choice:
        v.model.add_hint(b, tuple(t) == tuple(tile))


# --------------------------------------------------------------------------- solving

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
           cp_model.UNKNOWN: "UNKNOWN", cp_model.MODEL_INVALID: "MODEL_INVALID"}


def solve(v: TilingVars, config: TilingConfig) -> SolveResult:
    solver = new_solver(config.time_limit_s, config.workers, config.seed)
    start = time.perf_counter()
    code = cpsat.solve(solver, v.model, what=f"layer {v.g.layer}: CP-SAT tiling")
    wall = time.perf_counter() - start
    status = _STATUS.get(code, "UNKNOWN")
    if status not in ("OPTIMAL", "FEASIBLE"):
        return SolveResult(status, None, None, wall, None, None)
    return SolveResult(status, solver.objective_value, solver.best_objective_bound, wall,
                       tuple(int(solver.value(t)) for t in v.tile), int(solver.value(v.l1)))


# --------------------------------------------------------------------------- the tiler

def _with_cycles(t: LayerTiling, g, cost: dict) -> LayerTiling:
    return replace(t, modeled_cycles=modeled_cycles(g, *t.tile_shape, cost))


def _fallback(g, greedy: LayerTiling, cost: dict, why: str) -> LayerTiling:
    warnings.warn(f"layer {g.layer}: CP-SAT tiling fell back to greedy ({why})", RuntimeWarning, stacklevel=3)
    return _with_cycles(replace(greedy, solver="greedy", status="FALLBACK"), g, cost)


def break_ties(v: TilingVars, result: SolveResult, config: TilingConfig) -> SolveResult:
    """Among the optimal tiles, the one with the most channels, then columns, then rows: the same
    model always gets the same tile, whatever order the parallel search found optima in."""
    g = v.g
    v.model.add(v.objective == round(result.objective))
    v.model.clear_objective()
    v.model.maximize((v.tile[2] * (g.out_w + 1) + v.tile[1]) * (g.out_h + 1) + v.tile[0])
    again = solve(v, config)
    return again if again.status == "OPTIMAL" else result


def plan_tiling_cpsat(g, l1_bytes: int, config: TilingConfig, greedy: LayerTiling) -> LayerTiling:
    try:
        v = build_tiling_model(g, l1_bytes)
        if config.objective == "cycles":
            budget = max(CANDIDATES, int(config.time_limit_s * EVALUATIONS_PER_SECOND))
            set_cycles_objective(v, cycle_candidates(g, l1_bytes, config.cost, must=[greedy.tile_shape],
                                                     evaluations=budget))
            config = replace(config, time_limit_s=max(config.time_limit_s, CYCLES_TIME_FLOOR_S))
        elif config.objective == "l1":
            add_heuristics(v, config.heuristics)
            set_l1_objective(v, config.heuristics)
        else:
            raise ValueError(f"unknown tiling objective '{config.objective}' (known: l1, cycles)")
        add_hint(v, greedy.tile_shape)
        result = solve(v, config)
        if result.tile is None:
            return _fallback(g, greedy, config.cost, result.status)
        if result.status == "OPTIMAL":
            result = break_ties(v, result, config)
        tile = result.tile
        need = g.l1_bytes(*tile)
        assert need == result.l1 <= l1_bytes, f"tile {tile}: model L1 {result.l1}, geometry {need}, budget {l1_bytes}"
        if config.objective == "cycles":
            worse = modeled_cycles(g, *tile, config.cost) > modeled_cycles(g, *greedy.tile_shape, config.cost)
        else:
            worse = l1_score(g, tile, l1_bytes, config.heuristics) < l1_score(g, greedy.tile_shape, l1_bytes,
                                                                             config.heuristics)
        if worse:
            return _fallback(g, greedy, config.cost, f"{result.status} answer worse than greedy's")
        return LayerTiling(g.layer, *tile, need, g.tiles(*tile), "cpsat", result.status,
                           modeled_cycles(g, *tile, config.cost))
    except Exception as e:  # noqa: BLE001 -- any solver failure: greedy's plan, with a warning
        return _fallback(g, greedy, config.cost, f"{type(e).__name__}: {e}")
