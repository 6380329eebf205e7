"""Which bytes live in L3, the external memory that only DMA reaches (``--l3``).

Without an L3 every weight is resident (in flash, or in L2 on parts that run from L2) and
every activation is in the L2 arena. With one, what does not fit moves out, largest first:

- weights, when the resident weights and code exceed the memory that holds them
  (``--flash``; ``--sram`` on parts whose weights live in L2, such as GAP8);
- activations, when the L2 arena's lower bound (live bytes at the worst op, staging
  included) exceeds ``--sram``.

Only a tiled layer can stream (one whose slabs are windows of strides: not a resize), so an
activation moves to L3 only when the layer writing it and every layer reading it stream (and a
layer's weights only when it streams), it
shares no bytes with another tensor, and it is not
a model input or output (the application reads and writes those in place). Every layer
touching L3 gets a slab plan (solver.l3_tiling) whose L2 staging is a scratch buffer of the
arena, live for that layer only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from layer_analyzer import kernels as K
from network_parser.ir import Graph
from network_parser.lifetimes import Lifetime, live_bytes_per_op, scratch_key
from solver.l3_tiling import SlabPlan, plan_slabs


@dataclass(frozen=True)
class Placement:
    tensors: frozenset = frozenset()  # activations held in L3
    weights: frozenset = frozenset()  # layers whose weights stream from L3
    slabs: dict = field(default_factory=dict)  # layer -> SlabPlan, for every layer touching L3

    def __bool__(self) -> bool:
        return bool(self.tensors or self.weights)


data_inputs = K.data_inputs


def streamed_parts(graph: Graph, kernels, k: int, tensors, weights) -> tuple[str, ...]:
    layer = graph.layers[k]
    ins = data_inputs(layer, kernels[k])
    parts = [p for p, t in zip(("in", "in2"), ins) if t in tensors]
    if k in weights:
        parts.append("w")
    if layer.outputs[0] in tensors:
        parts.append("out")
    return tuple(parts)


def _candidates(graph: Graph, kernels, lives: list[Lifetime], tilings: dict):
    """Activations that may move to L3 and layers whose weights may, with their sizes."""
    shared = {lt.alias_of for lt in lives if lt.alias_of is not None}
    aliased = {lt.tensor for lt in lives if lt.alias_of is not None} | shared
    readers: dict[int, set[int]] = {}
    writer: dict[int, int] = {}
    for k, layer in enumerate(graph.layers):
        for t in layer.inputs:
            readers.setdefault(t, set()).add(k)
        for t in layer.outputs:
            writer[t] = k
    io = set(graph.inputs) | set(graph.outputs)
    streams = {k for k, (g, _) in tilings.items() if g.streams}
    acts = {lt.tensor: lt for lt in lives
            if lt.tensor >= 0 and lt.tensor not in io and lt.tensor not in aliased
            and writer.get(lt.tensor) in streams and readers.get(lt.tensor)
            and all(r in streams for r in readers[lt.tensor])}
    weights = {}
    for k, (g, _) in tilings.items():
        kern = kernels[k]
        if g.streams and g.weight_bytes_per_channel and len(readers.get(kern.weights, ())) == 1:
            weights[k] = graph.tensors[kern.weights].nbytes
    return acts, weights


def place(graph: Graph, kernels, lives: list[Lifetime], tilings: dict, *, sram: int | None,
          flash: int | None, code_bytes: int, resident_bytes: int, weights_in_sram: bool,
          alignment: int) -> Placement:
    """Move bytes to L3 until the budgets hold. A move of activations (or of weights, on parts
    whose weights live in L2) is taken only when it lowers the L2 need, since the staging it
    adds can outweigh it; when no move helps, the budget check after arena planning reports
    what is still over."""
    acts, weight_sizes = _candidates(graph, kernels, lives, tilings)
    n = len(graph.layers)
    cache: dict = {}

    def evaluate(tensors: frozenset, weights: frozenset):
        resident = resident_bytes - sum(weight_sizes[k] for k in weights)
        fixed = resident + code_bytes if weights_in_sram else 0
        live = live_bytes_per_op([lt for lt in lives if lt.tensor not in tensors], n)
        slabs = _plan(graph, kernels, tilings, tensors, weights, live, sram, fixed, alignment, cache)
        need = [live[k] + fixed + (slabs[k].l2_bytes if k in slabs else 0) for k in range(n)]
        over = sum(max(0, x - sram) for x in need) if sram is not None else 0
        return (max(need, default=0), over), need, slabs, resident

    tensors, weights = frozenset(), frozenset()
    score, need, slabs, resident = evaluate(tensors, weights)
    while True:
        free_weights = sorted((k for k in weight_sizes if k not in weights), key=lambda k: (-weight_sizes[k], k))
        if not weights_in_sram and flash is not None and resident + code_bytes > flash and free_weights:
            weights = weights | {free_weights[0]}  # always helps flash; costs L2 staging only
            score, need, slabs, resident = evaluate(tensors, weights)
            continue
        if sram is None or score[0] <= sram:
            break
        worst = max(range(n), key=lambda k: (need[k], -k))
        moves = [(acts[t].size, (t,), ()) for t in acts
                 if t not in tensors and acts[t].first_op <= worst <= acts[t].last_op]
        if weights_in_sram:
            moves += [(weight_sizes[k], (), (k,)) for k in free_weights]
        for _, t, w in sorted(moves, key=lambda m: (-m[0], m[1], m[2])):
            trial = evaluate(tensors | set(t), weights | set(w))
            if trial[0] < score:
                tensors, weights = tensors | set(t), weights | set(w)
                score, need, slabs, resident = trial
                break
        else:
            break
    return Placement(tensors, weights, slabs)


def _plan(graph, kernels, tilings, tensors, weights, live, sram, fixed, alignment, cache) -> dict[int, SlabPlan]:
    slabs = {}
    for k, (g, tiling) in tilings.items():
        parts = streamed_parts(graph, kernels, k, tensors, weights)
        if parts:
            limit = None if sram is None else max(sram - fixed - live[k], 0)
            key = (k, parts, limit)
            if key not in cache:
                cache[key] = plan_slabs(g, tiling, parts, limit, alignment)
            slabs[k] = cache[key]
    return slabs


def staging_lifetimes(placement: Placement, lives: list[Lifetime]) -> list[Lifetime]:
    """The L2 staging buffer of every slab-streamed layer, live for its layer only."""
    taken = {lt.tensor for lt in lives if lt.tensor < 0}
    result = []
    for k, plan in sorted(placement.slabs.items()):
        if scratch_key(k) in taken:
            raise AssertionError(f"op {k} already has a scratch buffer")
        result.append(Lifetime(scratch_key(k), f"op{k}_l3_stage", plan.l2_bytes, k, k, None))
    return result


@dataclass(frozen=True)
class L3Layout:
    """The L3 address space: the streamed weights first (the image to store there before
    the first run), then the activations held in L3, planned like the L2 arena."""
    placement: Placement
    weights: dict  # layer -> L3 address of its weights
    image_bytes: int  # the weight image, aligned
    lives: tuple  # Lifetime of every activation in L3
    plan: object  # ArenaPlan of those activations (None when there are none)
    offsets: dict  # tensor -> L3 address

    @property
    def bytes(self) -> int:
        return self.image_bytes + (self.plan.peak if self.plan is not None else 0)

    def image(self, graph: Graph, kernels) -> bytes:
        data = bytearray(self.image_bytes)
        for k, addr in self.weights.items():
            raw = graph.tensors[kernels[k].weights].data.tobytes()
            data[addr:addr + len(raw)] = raw
        return bytes(data)


def layout_l3(graph: Graph, kernels, placement: Placement, lives: list[Lifetime], alignment: int, plan_fn) -> L3Layout:
    """Addresses in L3: ``plan_fn(lives)`` plans the activations (the pipeline's arena planner)
    and returns (ArenaPlan, tensor -> offset)."""
    weights, cursor = {}, 0
    for k in sorted(placement.weights):
        weights[k] = cursor
        cursor += -(-graph.tensors[kernels[k].weights].nbytes // alignment) * alignment
    l3_lives = tuple(lt for lt in lives if lt.tensor in placement.tensors)
    plan, offsets = (None, {})
    if l3_lives:
        plan, rel = plan_fn(list(l3_lives))
        offsets = {t: cursor + off for t, off in rel.items()}
    return L3Layout(placement, weights, cursor, l3_lives, plan, offsets)
