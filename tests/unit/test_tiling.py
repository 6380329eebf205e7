"""The CP-SAT tiler against the geometry and its greedy twin (property tests), and the cost model
against a tile-by-tile simulation."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from layer_analyzer.tiling import CONV_PARAM_BYTES, FC_PARAM_BYTES, TileGeometry
from solver import tiling_cpsat
from solver.tiling import (
    _input_slices,
    _shrink,
    LayerTiling,
    TilingConfig,
    TilingInfeasible,
    greedy_tiling,
    minimum_l1,
    plan_tiling,
)
from solver.tiling_cost import (
    compute_cycles,
    cost_params,
    dma_transfers,
    modeled_cycles,
    schedule,
)
from backends.cortexm import CORTEX_M7
from solver.tiling_cpsat import (
    bonus,
    build_tiling_model,
    l1_score,
    plan_tiling_cpsat,
    solve,
)

PROPS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GAP8_LIKE = dict(macs_per_cycle=12, dma_bytes_per_cycle=8, dma_setup_cycles=60, tile_setup_cycles=300,
                 leftover_penalty=150, h_multiple=8, w_multiple=2, c_multiple=4)
M7_LIKE = dict(macs_per_cycle=1.5, dma_bytes_per_cycle=4, dma_setup_cycles=100, tile_setup_cycles=100,
               leftover_penalty=40, w_multiple=2, c_multiple=2, dma_dims=2)
# the Cortex-M model fitted to QEMU counts: per-kind rates and per-output work (and one kind faster
# than the base rate, so that a lower bound using only the base rate would be wrong)
CORTEX_M = CORTEX_M7.costs
FAST_KIND = {**CORTEX_M, "macs_per_cycle_depthwise": 3.0, "macs_per_cycle_pool": 2.0}
COSTS = st.sampled_from([{}, GAP8_LIKE, M7_LIKE, CORTEX_M, FAST_KIND])
# what the tile-by-tile reference simulates (3-D DMA, double buffering), per-kind keys included
SIMULATED_COSTS = st.sampled_from([{}, GAP8_LIKE, {**GAP8_LIKE, "macs_per_cycle_depthwise": 3.0,
                                                   "cycles_per_output_conv": 11, "cycles_per_output_pool": 35}])


@st.composite
def geometries(draw, max_hw: int = 24, max_c: int = 48) -> TileGeometry:
    kind = draw(st.sampled_from(["conv", "depthwise", "fc", "pool"]))
    if kind == "fc":
        return TileGeometry(0, "fc", 1, 1, draw(st.integers(1, 200)), 1, 1, draw(st.integers(1, 300)),
                            param_bytes=FC_PARAM_BYTES)
    k_h, k_w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    s_h, s_w = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    d_h, d_w = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if kind != "pool" else (1, 1)
    out_h, out_w, out_c = draw(st.integers(1, max_hw)), draw(st.integers(1, max_hw)), draw(st.integers(1, max_c))
    # SAME padding makes the input smaller than the receptive field of the whole output
    in_h = max(1, (out_h - 1) * s_h + (k_h - 1) * d_h + 1 - draw(st.integers(0, (k_h - 1) * d_h)))
    in_w = max(1, (out_w - 1) * s_w + (k_w - 1) * d_w + 1 - draw(st.integers(0, (k_w - 1) * d_w)))
    in_c = draw(st.integers(1, 32)) if kind == "conv" else out_c
    params = 0 if kind == "pool" else CONV_PARAM_BYTES
    return TileGeometry(0, kind, out_h, out_w, out_c, in_h, in_w, in_c, k_h, k_w, s_h, s_w, d_h, d_w,
                        param_bytes=params)


def whole_l1(g) -> int:
    return g.l1_bytes(g.out_h, g.out_w, g.out_c)


@st.composite
def tiled_problems(draw, max_hw: int = 24, max_c: int = 48):
    """A geometry and an L1 budget between the smallest tile with all input channels and (just
    below) the whole layer: the space CP-SAT searches."""
    g = draw(geometries(max_hw, max_c))
    lo, hi = minimum_l1(g, split_input_channels=False), whole_l1(g) - 1
    assume(lo <= hi)
    return g, draw(st.integers(lo, hi))


def config(**kw) -> TilingConfig:
    return TilingConfig(time_limit_s=1.0, workers=2, seed=0, **kw)


def assert_valid(g, t: LayerTiling, budget: int) -> None:
    assert 1 <= t.tile_h <= g.out_h and 1 <= t.tile_w <= g.out_w and 1 <= t.tile_c <= g.out_c
    assert g.l1_bytes(*t.tile_shape, t.tile_ci) == t.l1_bytes <= budget
    n = [-(-e // s) for e, s in zip((g.out_h, g.out_w, g.out_c), t.tile_shape)]
    # the tile grid covers the layer and no tile is empty
    for e, s, k in zip((g.out_h, g.out_w, g.out_c), t.tile_shape, n):
        assert k * s >= e > (k - 1) * s
    slices = -(-g.in_c // t.tile_ci) if t.tile_ci else 1
    assert t.tiles == n[0] * n[1] * n[2] * slices == g.tiles(*t.tile_shape, t.tile_ci)


# --------------------------------------------------------------------------- the cost model

def simulate(g, tile, cost) -> int:
    """Every tile in loop order (channels, rows, columns), double-buffered: the reference."""
    p = cost_params(cost)
    ext_c, ext_h, ext_w = g.out_c, g.out_h, g.out_w
    t_h, t_w, t_c = tile

    def cuts(e, t):
        return [min(t, e - i) for i in range(0, e, t)]

    def dma(nbytes, transfers):
        return 0 if nbytes == 0 else math.ceil(nbytes / p["dma_bytes_per_cycle"]) + p["dma_setup_cycles"] * transfers

    assert p["dma_dims"] == 3
    seq = [(c, h, w, ci, hi, wi) for ci, c in enumerate(cuts(ext_c, t_c)) for hi, h in enumerate(cuts(ext_h, t_h))
           for wi, w in enumerate(cuts(ext_w, t_w))]
    loads, computes, stores = [], [], []
    prev = None
    for c, h, w, ci, hi, wi in seq:
        in_c = c if g.channels_follow_output else g.in_c
        new_in = prev is None or g.channels_follow_output or (prev[4], prev[5]) != (hi, wi)
        new_w = prev is None or prev[3] != ci
        ld = (dma(g.operands * g.in_rows(h) * g.in_cols(w) * in_c, g.operands) if new_in else 0)
        if new_w:
            ld += dma(c * g.weight_bytes_per_channel, 1) + dma(c * g.param_bytes, 1)
        loads.append(ld)
        computes.append(compute_cycles(g, h, w, c, p))
        stores.append(dma(h * w * c, 1))
        prev = (c, h, w, ci, hi, wi)
    total = loads[0] + stores[-1]
    for i in range(len(seq)):
        total += max(computes[i], (loads[i + 1] if i + 1 < len(seq) else 0) + (stores[i - 1] if i else 0))
    return total


@PROPS
@given(g=geometries(max_hw=12, max_c=20), data=st.data(), cost=SIMULATED_COSTS)
def test_cost_model_matches_tile_by_tile_simulation(g, data, cost):
    cost = {**cost, "dma_dims": 3}
    tile = (data.draw(st.integers(1, g.out_h)), data.draw(st.integers(1, g.out_w)), data.draw(st.integers(1, g.out_c)))
    assert modeled_cycles(g, *tile, cost) == simulate(g, tile, cost)


def test_cost_model_defaults_and_transfers():
    g = TileGeometry(0, "conv", 8, 8, 16, 10, 10, 8, 3, 3, param_bytes=CONV_PARAM_BYTES)
    whole = schedule(g, (8, 8, 16), {})
    # one tile: load input, weights, params; compute; store
    assert whole.transfers == dma_transfers(g, (8, 8, 16)) == 4
    assert whole.cycles == whole.compute_cycles + whole.dma_cycles
    assert whole.compute_cycles == 8 * 8 * 16 * 3 * 3 * 8  # one MAC per cycle by default
    # rows in 4 tiles, channels in 2: the input is reloaded per channel tile, weights once per channel tile
    s = schedule(g, (2, 8, 8), {})
    assert s.tiles == 8 and s.transfers == 8 + 2 * 2 + 8
    # compute-bound: double buffering hides all DMA but the first load and the last store
    assert whole.compute_cycles < s.cycles < whole.compute_cycles + s.dma_cycles


def test_leftover_groups_cost_more():
    g = TileGeometry(0, "conv", 16, 16, 16, 16, 16, 16, param_bytes=CONV_PARAM_BYTES)
    cost = dict(GAP8_LIKE, dma_setup_cycles=0, tile_setup_cycles=0)
    # same number of tiles, rows split 8 + 8 (no leftover) or 9 + 7 (leftover groups on both)
    assert modeled_cycles(g, 8, 16, 16, cost) < modeled_cycles(g, 9, 16, 16, cost)


# --------------------------------------------------------------------------- the geometric model

@PROPS
@given(g=geometries(), data=st.data())
def test_model_l1_is_the_geometry_l1(g, data):
    tile = (data.draw(st.integers(1, g.out_h)), data.draw(st.integers(1, g.out_w)), data.draw(st.integers(1, g.out_c)))
    need = g.l1_bytes(*tile)
    v = build_tiling_model(g, need)
    for var, value in zip(v.tile, tile):
        v.model.add(var == value)
    r = solve(v, config())
    assert r.status in ("OPTIMAL", "FEASIBLE") and r.l1 == need
    # one byte less and that tile is excluded
    v = build_tiling_model(g, need - 1)
    for var, value in zip(v.tile, tile):
        v.model.add(var == value)
    assert solve(v, config()).status == "INFEASIBLE"


# --------------------------------------------------------------------------- the tiler

@PROPS
@given(problem=tiled_problems())
def test_l1_objective_fits_and_uses_at_least_greedys_l1(problem):
    g, budget = problem
    greedy = greedy_tiling(g, budget)
    t = plan_tiling(g, budget, "cpsat", config(objective="l1"))
    assert t.solver == "cpsat" and t.status in ("OPTIMAL", "FEASIBLE")
    assert_valid(g, t, budget)
    assert t.l1_bytes >= greedy.l1_bytes
    if t.l1_bytes == greedy.l1_bytes:
        assert t.tiles <= greedy.tiles
    assert t.modeled_cycles == modeled_cycles(g, *t.tile_shape, {})


HEURISTICS = {"tile_h_multiple": 8, "tile_w_multiple": 2, "tile_c_multiple": 4}


def best_score(g, budget, heuristics):
    """Every tile, by brute force: the best (weighted rules + L1, -tiles) of those that fit."""
    return max(l1_score(g, (h, w, c), budget, heuristics)
               for h in range(1, g.out_h + 1) for w in range(1, g.out_w + 1) for c in range(1, g.out_c + 1)
               if g.l1_bytes(h, w, c) <= budget)


@PROPS
@given(problem=tiled_problems(max_hw=12, max_c=24),
       heuristics=st.sampled_from([{}, HEURISTICS, {"tile_c_multiple": 4}, {"even_tiles": True, "weight": 64},
                                   {"balanced_tiles": True, "tile_h_multiple": 2}]))
def test_l1_objective_is_optimal_and_honours_heuristics(problem, heuristics):
    """Heuristic rules outweigh L1 bytes (DORY's weighting) unless given a ``weight``: the tile
    may use less L1 than greedy's only by satisfying more rules. OPTIMAL means the best score
    of every tile that fits (brute force)."""
    g, budget = problem
    greedy = greedy_tiling(g, budget)
    t = plan_tiling(g, budget, "cpsat", config(objective="l1", heuristics=heuristics))
    assert t.solver == "cpsat" and t.status in ("OPTIMAL", "FEASIBLE")
    assert_valid(g, t, budget)
    assert l1_score(g, t.tile_shape, budget, heuristics) >= l1_score(g, greedy.tile_shape, budget, heuristics)
    if t.l1_bytes < greedy.l1_bytes:
        assert bonus(g, t.tile_shape, heuristics) > bonus(g, greedy.tile_shape, heuristics)
    if t.status == "OPTIMAL":
        assert l1_score(g, t.tile_shape, budget, heuristics) == best_score(g, budget, heuristics)
        if heuristics == {"tile_c_multiple": 4} and g.out_c % 4 == 0 and g.l1_bytes(1, 1, 4) <= budget:
            assert t.tile_c % 4 == 0


def test_heuristic_weight_zero_only_breaks_ties():
    g = TileGeometry(0, "conv", 56, 56, 64, 58, 58, 32, 3, 3, param_bytes=CONV_PARAM_BYTES)
    plain = plan_tiling(g, 64 * 1024, "cpsat", config(objective="l1"))
    tie = plan_tiling(g, 64 * 1024, "cpsat", config(objective="l1", heuristics={**HEURISTICS, "weight": 0}))
    ruled = plan_tiling(g, 64 * 1024, "cpsat", config(objective="l1", heuristics=HEURISTICS))
    assert tie.l1_bytes == plain.l1_bytes >= ruled.l1_bytes
    assert (ruled.tile_h % 8, ruled.tile_w % 2, ruled.tile_c % 4) == (0, 0, 0)


@PROPS
@given(problem=tiled_problems(), cost=COSTS)
def test_cycles_objective_never_slower_than_greedy(problem, cost):
    g, budget = problem
    greedy = greedy_tiling(g, budget, cost)
    t = plan_tiling(g, budget, "cpsat", config(objective="cycles", cost=cost))
    assert t.solver == "cpsat" and t.status in ("OPTIMAL", "FEASIBLE")
    assert_valid(g, t, budget)
    assert t.modeled_cycles == modeled_cycles(g, *t.tile_shape, cost)
    assert greedy.modeled_cycles == modeled_cycles(g, *greedy.tile_shape, cost)
    assert t.modeled_cycles <= greedy.modeled_cycles


@PROPS
@given(problem=tiled_problems(max_hw=10, max_c=16), cost=COSTS)
def test_cycles_objective_finds_the_brute_force_optimum(problem, cost):
    """Small layers (at most EXHAUSTIVE tile shapes) are searched over every tile: exact."""
    g, budget = problem
    t = plan_tiling(g, budget, "cpsat", config(objective="cycles", cost=cost))
    best = min(modeled_cycles(g, h, w, c, cost) for h in range(1, g.out_h + 1) for w in range(1, g.out_w + 1)
               for c in range(1, g.out_c + 1) if g.l1_bytes(h, w, c) <= budget)
    assert t.modeled_cycles == best


@PROPS
@given(g=geometries(), short=st.integers(1, 4096))
def test_infeasible_budget_names_the_minimum(g, short):
    need = minimum_l1(g)
    assume(need - short >= 0)
    for method in ("greedy", "cpsat"):
        with pytest.raises(TilingInfeasible) as e:
            plan_tiling(g, need - short, method, config())
        assert e.value.minimum_l1 == need and e.value.layer == g.layer


@PROPS
@given(g=geometries(), data=st.data())
def test_input_channels_split_only_when_nothing_else_fits(g, data):
    """Below the smallest all-channel tile, conv and FC tiles sum slices of input channels; the
    greedy slice is the one with the fewest modeled cycles, and CP-SAT leaves it alone."""
    full, least = minimum_l1(g, split_input_channels=False), minimum_l1(g)
    budget = data.draw(st.integers(least, full + 64))
    t = plan_tiling(g, budget, "cpsat", config())
    assert_valid(g, t, budget)
    if budget >= full:
        assert t.tile_ci == 0
        return
    assert g.splits_input_channels and 0 < t.tile_ci < g.in_c and t.solver == "greedy"
    f = g.footprint(*t.tile_shape, t.tile_ci)
    assert f.accumulator == 4 * t.tile_h * t.tile_w * t.tile_c
    assert f.input == g.in_rows(t.tile_h) * g.in_cols(t.tile_w) * t.tile_ci
    assert t.modeled_cycles == min(_shrink(g, budget, ci, {}).modeled_cycles for ci in _input_slices(g, budget))


def test_whole_layer_fits_untiled():
    g = TileGeometry(3, "depthwise", 4, 4, 8, 6, 6, 8, 3, 3, param_bytes=CONV_PARAM_BYTES)
    t = plan_tiling(g, whole_l1(g), "cpsat", config(objective="cycles"))
    assert (t.solver, t.tiles, t.tile_shape) == ("untiled", 1, (4, 4, 8))
    assert t.modeled_cycles == modeled_cycles(g, 4, 4, 8, {})


LAYER = TileGeometry(7, "conv", 28, 28, 32, 30, 30, 16, 3, 3, param_bytes=CONV_PARAM_BYTES)


@pytest.mark.parametrize("objective", ["l1", "cycles"])
def test_unknown_status_falls_back_to_greedy(monkeypatch, objective):
    monkeypatch.setattr(tiling_cpsat, "solve", lambda v, c: tiling_cpsat.SolveResult("UNKNOWN", None, None, 1.0,
                                                                                      None, None))
    greedy = greedy_tiling(LAYER, 16 * 1024, GAP8_LIKE)
    with pytest.warns(RuntimeWarning, match="fell back"):
        t = plan_tiling(LAYER, 16 * 1024, "cpsat", config(objective=objective, cost=GAP8_LIKE))
    assert (t.solver, t.status, t.tile_shape) == ("greedy", "FALLBACK", greedy.tile_shape)
    assert t.modeled_cycles == greedy.modeled_cycles > 0


def test_solver_exception_falls_back_to_greedy(monkeypatch):
    def boom(self, model, *a, **k):
        raise RuntimeError("solver crashed")

    monkeypatch.setattr(tiling_cpsat.cp_model.CpSolver, "solve", boom)
    greedy = greedy_tiling(LAYER, 16 * 1024)
    with pytest.warns(RuntimeWarning, match="solver crashed"):
        t = plan_tiling_cpsat(LAYER, 16 * 1024, config(), greedy)
    assert (t.status, t.tile_shape) == ("FALLBACK", greedy.tile_shape)


def test_unknown_objective_falls_back(monkeypatch):
    greedy = greedy_tiling(LAYER, 16 * 1024)
    with pytest.warns(RuntimeWarning, match="unknown tiling objective"):
        t = plan_tiling_cpsat(LAYER, 16 * 1024, config(objective="latency"), greedy)
    assert t.status == "FALLBACK"


def test_a_mistyped_cost_key_is_an_error():
    with pytest.raises(ValueError, match="unknown cost model keys: macs_per_cycles_conv"):
        cost_params({"macs_per_cycles_conv": 2})
    assert cost_params({"cycles_per_output_pool": 3})["cycles_per_output_pool"] == 3
