"""L3 -> L2 slabs: a layer whose input, weights or output live in L3 (external memory that
only DMA reaches) runs slab by slab, each slab staged in L2 and cut into L1 tiles there.

    plan_slabs(g, tiling, streamed, l2_limit, alignment) -> SlabPlan

A slab is ``rows`` output rows (the whole width) by ``chans`` output channels, a whole
number of the layer's L1 tiles (rows a multiple of ``tile_h``, chans of ``tile_c``), so the
L1 tile loop runs inside a slab unchanged. Slabs go channel slab outermost (each weight
slab is fetched once), then row slabs. Every streamed part (an input operand's window with
its halo, the slab's weights, its output) has two L2 slots when it changes from slab to
slab, so the DMA of slab i+1 overlaps the compute of slab i.

The search is exhaustive over the distinct slab grids (at most a few thousand per layer),
so the plan is the optimum of its objective: least L3 traffic within ``l2_limit``, then
fewest slabs (fewest transfers), then least L2. When nothing fits ``l2_limit`` the plan with
the least L2 is returned with ``fits`` False; the arena budget check then reports it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

PARTS = ("in", "in2", "w", "out")


@dataclass(frozen=True, slots=True)
class SlabPlan:
    layer: int
    rows: int
    chans: int
    row_slabs: int
    chan_slabs: int
    streamed: tuple[str, ...]  # parts moved between L3 and L2, in PARTS order
    slot_bytes: tuple[tuple[str, int], ...]  # (part, bytes of one L2 slot)
    l2_bytes: int  # the layer's L2 staging, every slot aligned
    l3_traffic: int  # bytes moved between L3 and L2 per inference (halo rows counted in full)
    fits: bool = True

    @property
    def slabs(self) -> int:
        return self.row_slabs * self.chan_slabs

    def slots(self, part: str) -> int:
        """L2 slots of a streamed part: two when it changes from slab to slab."""
        if part == "w":
            return 2 if self.chan_slabs > 1 else 1
        return 2 if self.slabs > 1 else 1


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _align(n: int, alignment: int) -> int:
    return _ceil(n, alignment) * alignment


def _counts(extent: int, tile: int) -> list[int]:
    """Slab sizes (multiples of ``tile``) giving each distinct number of slabs, largest first."""
    n_tiles = _ceil(extent, tile)
    sizes, seen = [], set()
    for m in range(n_tiles, 0, -1):
        size = min(m * tile, extent)
        slabs = _ceil(extent, size)
        if slabs not in seen:
            seen.add(slabs)
            sizes.append(size)
    return sizes


def evaluate(g, rows: int, chans: int, streamed, alignment: int = 16) -> SlabPlan:
    streamed = tuple(p for p in PARTS if p in streamed)
    row_slabs, chan_slabs = _ceil(g.out_h, rows), _ceil(g.out_c, chans)
    parts = g.slab_parts(rows, chans)
    plan = SlabPlan(g.layer, rows, chans, row_slabs, chan_slabs, streamed,
                    tuple((p, parts[p]) for p in streamed), 0, 0)
    l2 = sum(_align(parts[p], alignment) * plan.slots(p) for p in streamed)
    traffic = 0
    for p in streamed:
        if p in ("in", "in2"):
            # every row slab reads its window; a regular conv reads it again per channel slab
            last = g.out_h - (row_slabs - 1) * rows
            per_c = g.in_c if not g.channels_follow_output else g.out_c
            window = ((row_slabs - 1) * g.in_rows(rows) + g.in_rows(last)) * g.in_w * per_c * g.elem
            traffic += window * (1 if g.channels_follow_output else chan_slabs)
        elif p == "w":
            traffic += g.out_c * g.weight_bytes_per_channel
        else:
            traffic += g.out_h * g.out_w * g.out_c * g.elem
    return replace(plan, l2_bytes=l2, l3_traffic=traffic)


def plan_slabs(g, tiling, streamed, l2_limit: int | None = None, alignment: int = 16) -> SlabPlan:
    """The best slab grid for layer ``g`` (tiled in L1 by ``tiling``) streaming ``streamed``."""
    if not streamed:
        raise ValueError(f"layer {g.layer}: nothing to stream from L3")
    candidates = [evaluate(g, r, c, streamed, alignment)
                  for r in _counts(g.out_h, tiling.tile_h) for c in _counts(g.out_c, tiling.tile_c)]
    fitting = [p for p in candidates if l2_limit is None or p.l2_bytes <= l2_limit]
    if fitting:
        return min(fitting, key=lambda p: (p.l3_traffic, p.slabs, p.l2_bytes, -p.rows, -p.chans))
    best = min(candidates, key=lambda p: (p.l2_bytes, p.l3_traffic, p.slabs, -p.rows, -p.chans))
    return replace(best, fits=False)
