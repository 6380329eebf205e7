"""Per-layer L2 -> L1 tiling: the greedy tiler and the interface every tiler shares.

    plan_tiling(geometry, l1_bytes, method, config) -> LayerTiling

``geometry`` is a layer's tiling view (layer_analyzer.tiling.TileGeometry): out_h,
out_w, out_c and ``l1_bytes(tile_h, tile_w, tile_c[, tile_ci])`` / ``tiles(...)``, the
bytes a double-buffered tile needs in L1 and how many tiles cover the layer.

Input channels are split (``tile_ci``) only when no tile fits with all of them (DORY's
rule), and then by the greedy tiler alone: for every slice size at which some tile fits,
shrink the output tile until it fits, and keep the pair with the fewest modeled cycles.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .tiling_cost import modeled_cycles


@dataclass(frozen=True, slots=True)
class TilingConfig:
    objective: str = "l1"  # "l1": use L1 well (plus target heuristics); "cycles": the cost model
    heuristics: dict = field(default_factory=dict)  # e.g. {"tile_c_multiple": 4, "tile_h_multiple": 8}
    cost: dict = field(default_factory=dict)  # the backend's cost model parameters
    time_limit_s: float = 2.0  # CP-SAT's deterministic time for it (solver.cpsat): the same tile on any machine
    workers: int = 1  # CP-SAT workers; more than one run interleaved (deterministic, not faster on small models)
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
    tile_ci: int = 0  # input channels per tile when they are split; 0: all of them

    @property
    def tile_shape(self) -> tuple[int, int, int]:
        return self.tile_h, self.tile_w, self.tile_c

    @property
    def label(self) -> str:
        """'HxWxC', with '/ci N' when each tile sums a slice of N input channels."""
        return "x".join(map(str, self.tile_shape)) + (f"/ci{self.tile_ci}" if self.tile_ci else "")


class TilingInfeasible(Exception):
    """Not even the smallest tile fits; ``minimum_l1`` is the smallest L1 that would work."""

    def __init__(self, layer: int, minimum_l1: int):
        super().__init__(f"layer {layer}: the smallest tile needs {minimum_l1} bytes of L1")
        self.layer, self.minimum_l1 = layer, minimum_l1


def minimum_l1(g, split_input_channels: bool = True) -> int:
    """The smallest L1 any tiling fits: the smallest tile the variant runs (one input channel at
    a time when they may be split), or the whole layer single-buffered."""
    smallest = g.l1_bytes(*g.smallest_tile)
    if split_input_channels and g.splits_input_channels and g.in_c > 1:
        smallest = min(smallest, g.l1_bytes(*g.smallest_tile, 1))
    return min(smallest, g.l1_bytes(g.out_h, g.out_w, g.out_c))


def _input_slices(g, l1_bytes: int) -> list[int]:
    """Input-channel slice sizes (one per number of slices, evened out) at which a one-pixel,
    one-channel tile fits."""
    sizes = {-(-g.in_c // n) for n in range(2, g.in_c + 1)}
    return sorted(ci for ci in sizes if g.l1_bytes(*g.smallest_tile, ci) <= l1_bytes)


def _next_smaller(extent: int, tile: int, quantum: int = 1) -> int:
    """The largest tile size below ``tile`` that needs more tiles to cover ``extent`` (a multiple
    of ``quantum``; ``tile`` itself when there is none)."""
    t = min(-(-extent // (-(-extent // tile) + 1)), tile - 1)
    t -= t % quantum
    return t if t >= 1 else tile


def greedy_tiling(g, l1_bytes: int, cost: dict | None = None) -> LayerTiling:
    """Shrink the largest tile dimension (to the next size that adds a tile) until the tile fits.
    ``modeled_cycles`` comes from solver.tiling_cost under ``cost`` (its defaults when None)."""
    if minimum_l1(g) > l1_bytes:
        raise TilingInfeasible(g.layer, minimum_l1(g))
    if minimum_l1(g, split_input_channels=False) <= l1_bytes:
        return _shrink(g, l1_bytes, 0, cost)
    # input channels must be split: the slice whose shrunk tile models fewest cycles
    return min((_shrink(g, l1_bytes, ci, cost) for ci in _input_slices(g, l1_bytes)),
               key=lambda t: (t.modeled_cycles, -t.tile_ci))


def _shrink(g, l1_bytes: int, ci: int, cost: dict | None) -> LayerTiling:
    tile = [g.out_h, g.out_w, g.out_c]
    extents = (g.out_h, g.out_w, g.out_c)
    quanta = (1, 1, g.c_quantum)
    while g.l1_bytes(*tile, ci) > l1_bytes:
        shrinkable = [i for i in range(3) if _next_smaller(extents[i], tile[i], quanta[i]) < tile[i]
                      and not (i == 1 and g.full_width)]
        d = max(shrinkable, key=lambda i: (tile[i], -i))  # minimum_l1 promised that a smaller tile fits
        tile[d] = _next_smaller(extents[d], tile[d], quanta[d])
    whole = tuple(tile) == extents and not ci
    return LayerTiling(g.layer, *tile, g.l1_bytes(*tile, ci), g.tiles(*tile, ci),
                       "untiled" if whole else "greedy", "OPTIMAL" if whole else "FEASIBLE",
                       split_cycles(g, tile, ci, cost), ci)


def split_cycles(g, tile, ci: int, cost: dict | None) -> int:
    """Modeled cycles; with split input channels, each slice costs what the layer would with
    that many input channels (its tiles load, compute and, for the last slice, store)."""
    if not ci:
        return modeled_cycles(g, *tile, cost)
    slices = -(-g.in_c // ci)
    last = g.in_c - (slices - 1) * ci
    return ((slices - 1) * modeled_cycles(replace(g, in_c=ci), *tile, cost)
            + modeled_cycles(replace(g, in_c=last), *tile, cost))


def plan_tiling(g, l1_bytes: int, method: str = "greedy", config: TilingConfig = TilingConfig()) -> LayerTiling:
    greedy = greedy_tiling(g, l1_bytes, config.cost)
    if method == "greedy" or greedy.solver == "untiled" or greedy.tile_ci:
        return greedy
    from .tiling_cpsat import plan_tiling_cpsat
    return plan_tiling_cpsat(g, l1_bytes, config, greedy)
