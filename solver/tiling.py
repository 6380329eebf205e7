"""Per-layer L2 -> L1 tiling: the greedy tiler and the interface every tiler shares.

    plan_tiling(geometry, l1_bytes, method, config) -> LayerTiling

``geometry`` is a layer's tiling view (layer_analyzer.tiling.TileGeometry): out_h,
out_w, out_c and ``l1_bytes(tile_h, tile_w, tile_c)`` / ``tiles(...)``, the bytes a
double-buffered tile needs in L1 and how many tiles cover the layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .tiling_cost import modeled_cycles


@dataclass(frozen=True, slots=True)
class TilingConfig:
    objective: str = "l1"  # "l1": use L1 well (plus target heuristics); "cycles": the cost model
    heuristics: dict = field(default_factory=dict)  # e.g. {"tile_c_multiple": 4, "tile_h_multiple": 8}
    cost: dict = field(default_factory=dict)  # the backend's cost model parameters
    time_limit_s: float = 2.0
    workers: int = 2
    seed: int = 0


@dataclass(frozen=True, slots=True)
class LayerTiling:
    layer: int
    tile_h: int
    tile_w: int
    tile_c: int
    l1_bytes: int
    tiles: int
    solver: str  # "greedy" | "cpsat" | "untiled" (the whole layer fits)
    status: str  # OPTIMAL | FEASIBLE | FALLBACK (greedy after a solver failure)
    modeled_cycles: int = 0

    @property
    def tile_shape(self) -> tuple[int, int, int]:
        return self.tile_h, self.tile_w, self.tile_c


class TilingInfeasible(Exception):
    """Not even the smallest tile fits; ``minimum_l1`` is the smallest L1 that would work."""

    def __init__(self, layer: int, minimum_l1: int):
        super().__init__(f"layer {layer}: the smallest tile needs {minimum_l1} bytes of L1")
        self.layer, self.minimum_l1 = layer, minimum_l1


def minimum_l1(g) -> int:
    """The smallest L1 any tiling fits: one-element tiles, or the whole layer single-buffered."""
    return min(g.l1_bytes(1, 1, 1), g.l1_bytes(g.out_h, g.out_w, g.out_c))


def _next_smaller(extent: int, tile: int) -> int:
    """The largest tile size below ``tile`` that needs more tiles to cover ``extent``."""
    return min(-(-extent // (-(-extent // tile) + 1)), tile - 1)


def greedy_tiling(g, l1_bytes: int, cost: dict | None = None) -> LayerTiling:
    """Shrink the largest tile dimension (to the next size that adds a tile) until the tile fits.
    ``modeled_cycles`` comes from solver.tiling_cost under ``cost`` (its defaults when None)."""
    if minimum_l1(g) > l1_bytes:
        raise TilingInfeasible(g.layer, minimum_l1(g))
    tile = [g.out_h, g.out_w, g.out_c]
    extents = (g.out_h, g.out_w, g.out_c)
    while g.l1_bytes(*tile) > l1_bytes:
        d = max((i for i in range(3) if tile[i] > 1), key=lambda i: (tile[i], -i))
        tile[d] = _next_smaller(extents[d], tile[d])
    whole = tuple(tile) == extents
    return LayerTiling(g.layer, *tile, g.l1_bytes(*tile), g.tiles(*tile),
                       "untiled" if whole else "greedy", "OPTIMAL" if whole else "FEASIBLE",
                       modeled_cycles(g, *tile, cost))


def plan_tiling(g, l1_bytes: int, method: str = "greedy", config: TilingConfig = TilingConfig()) -> LayerTiling:
    greedy = greedy_tiling(g, l1_bytes, config.cost)
    if method == "greedy" or greedy.solver == "untiled":
        return greedy
    from .tiling_cpsat import plan_tiling_cpsat
    return plan_tiling_cpsat(g, l1_bytes, config, greedy)
