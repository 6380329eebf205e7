"""Operator order: the topological order of a branched graph whose whole-tensor peak is least.

A tensor is live from the op writing it (the graph's inputs from the start) until its last
reader has run (the graph's outputs to the end); while op k runs, everything live after the ops
run before it is live, and so are k's outputs. Which tensors are live depends only on the *set*
of ops run so far, not on their order, so the least peak over every order is a shortest-path
problem over the graph's down-sets (sets closed under predecessors): level by level, each set
keeps the least peak reaching it (then the least sum of live bytes over the steps: less area
packs better), which is exact. A chain has one set per level; residual blocks and pyramids a
few; a graph wide enough to have more sets on one level than the beam (BEAM, fewer on long
graphs) keeps the best of them (a beam search: a valid order, no longer proven least).

An op that may write its output over an input dying there (an in-place rule, an output over
the input it consumes) takes ``savings[k]``: (input tensor, bytes the two then span less) lowers
its step's peak when the order lets that input die at it, as the arena will place them. Fused
stages come after: the pipeline plans the chosen order and the file's, and keeps the one needing
less (the file's order is the twin and the fallback).
"""
from __future__ import annotations

from dataclasses import dataclass

from network_parser.inplace import ZERO_COPY
from network_parser.ir import Graph

BEAM = 4096  # sets kept per level: exact below it ...
WORK = 2_000_000  # ... and fewer on long graphs: levels x sets x ops stays about this (a second or two)
MAX_OPS = 300  # longer graphs keep the file's order (the search's work grows with the square of the ops)


@dataclass(frozen=True)
class OpOrder:
    order: tuple[int, ...]  # positions of graph.layers in the order to run them
    peak: int  # its whole-tensor peak
    file_peak: int  # the file order's
    exact: bool  # no level had more than BEAM sets: ``peak`` is the least of every order

    @property
    def changed(self) -> bool:
        return self.order != tuple(range(len(self.order)))


class _Buffers:
    """The graph's activation buffers (a zero-copy reshape is its source's buffer), each with its
    bytes, writer, readers (as bit masks over positions) and whether the caller keeps it."""

    def __init__(self, graph: Graph, outside=frozenset(), savings=None):
        n = len(graph.layers)
        tensors = graph.tensors
        owner: dict[int, int] = {}
        for layer in graph.layers:  # reshapes only reinterpret: their output is their input's bytes
            src = layer.inputs[0] if layer.inputs else -1
            if layer.op in ZERO_COPY and src >= 0 and not tensors[src].is_const and owner.get(src, src) not in outside:
                owner[layer.outputs[0]] = owner.get(src, src)

        def arena(t: int) -> bool:
            return t >= 0 and not tensors[t].is_const and not tensors[t].variable

        self.size: dict[int, int] = {}
        self.writer: dict[int, int] = {}
        self.readers: dict[int, int] = {}
        kept = set()
        for t in graph.inputs:
            if arena(t) and t not in outside:
                self.size[owner.get(t, t)] = tensors[t].nbytes
        for k, layer in enumerate(graph.layers):
            for t in layer.outputs:
                if arena(t) and t not in owner:
                    self.size[t] = tensors[t].nbytes
                    self.writer[t] = k
            for t in layer.inputs:
                b = owner.get(t, t)
                if arena(t) and b in self.size:
                    self.readers[b] = self.readers.get(b, 0) | 1 << k
        for t in graph.outputs:
            kept.add(owner.get(t, t))
        self.kept = kept
        self.n = n
        # what op k reads must be written first (a reshape's output too, though it holds no bytes)
        wrote = {t: k for k, layer in enumerate(graph.layers) for t in layer.outputs}
        self.before = [0] * n
        last_user: dict[int, int] = {}  # a state tensor each user updates: its users keep the file's order
        for k, layer in enumerate(graph.layers):
            for t in layer.inputs:
                if wrote.get(t, k) != k:
                    self.before[k] |= 1 << wrote[t]
                if t >= 0 and tensors[t].variable:
                    if t in last_user:
                        self.before[k] |= 1 << last_user[t]
                    last_user[t] = k
        self.out = [sum(self.size[t] for t in layer.outputs if t in self.size and self.writer.get(t) == k)
                    for k, layer in enumerate(graph.layers)]
        # buffers that may die when op k runs: what it reads, and what it writes that nobody reads
        self.ends = [sorted({owner.get(t, t) for t in (*layer.inputs, *layer.outputs)} & set(self.size))
                     for layer in graph.layers]
        self.start = sum(s for t, s in self.size.items() if t not in self.writer)
        self.savings = [tuple((owner.get(x, x), b) for x, b in (savings or {}).get(k, ()) if owner.get(x, x) in self.size)
                        for k in range(n)]

    def dying(self, k: int, done: int) -> int:
        """Bytes that die when op k runs after the ops ``done`` (k's own inputs whose readers are
        then all run, its outputs nobody reads)."""
        after = done | 1 << k
        return sum(self.size[b] for b in self.ends[k] if self._dies(b, after))

    def _dies(self, b: int, after: int) -> bool:
        return b not in self.kept and self.readers.get(b, 0) & ~after == 0

    def step(self, k: int, done: int, live: int) -> tuple[int, int]:
        """(bytes live while op k runs after the ops ``done`` with ``live`` bytes, live after it)."""
        after = done | 1 << k
        saved = max((b for x, b in self.savings[k] if self._dies(x, after)), default=0)
        return live + self.out[k] - saved, live + self.out[k] - self.dying(k, done)


def file_order_peak(buffers: _Buffers) -> int:
    live, peak, done = buffers.start, buffers.start, 0
    for k in range(buffers.n):
        during, live = buffers.step(k, done, live)
        peak = max(peak, during)
        done |= 1 << k
    return peak


def least_peak_order(graph: Graph, outside=frozenset(), savings=None, beam: int = BEAM) -> OpOrder:
    """The order with the least peak (``outside``: tensors the arena does not hold; ``savings``:
    op -> ((input, bytes), ...) its output over a dying input saves)."""
    b = _Buffers(graph, outside, savings)
    n = b.n
    beam = min(beam, max(8, WORK // max(n * n, 1)))
    file_peak = file_order_peak(b)
    # set -> (peak, area, live bytes, parent set, op run last)
    level: dict[int, tuple] = {0: (b.start, 0, b.start, None, None)}
    history = [level]
    exact = True
    for _ in range(n):
        nxt: dict[int, tuple] = {}
        for done, (peak, area, live, _, _) in level.items():
            for k in range(n):
                if done >> k & 1 or b.before[k] & ~done:
                    continue
                after = done | 1 << k
                during, now = b.step(k, done, live)
                cand = (max(peak, during), area + now, now, done, k)
                old = nxt.get(after)
                if old is None or cand[:2] < old[:2]:
                    nxt[after] = cand
        if len(nxt) > beam:
            exact = False
            nxt = dict(sorted(nxt.items(), key=lambda item: (item[1][0], item[1][1], item[0]))[:beam])
        history.append(nxt)
        level = nxt
    (full, (peak, *_)), = level.items()
    order, state = [], full
    for lvl in reversed(history[1:]):
        _, _, _, parent, k = lvl[state]
        order.append(k)
        state = parent
    order.reverse()
    if peak >= file_peak:  # the file's order is as good: keep it
        return OpOrder(tuple(range(n)), file_peak, file_peak, exact)
    return OpOrder(tuple(order), peak, file_peak, exact)


def worth_searching(graph: Graph) -> bool:
    """Whether the search runs: the graph has at most MAX_OPS ops and another topological order,
    i.e. some op does not read the one before it (a path between neighbours would have to pass an
    op between them), so the two may swap."""
    if len(graph.layers) > MAX_OPS:
        return False
    for k in range(1, len(graph.layers)):
        if not set(graph.layers[k - 1].outputs) & set(graph.layers[k].inputs):
            return True
    return False


def reordered(graph: Graph, order: tuple[int, ...]) -> Graph:
    """The graph with its layers in ``order`` (each keeps its file op index, ``Layer.index``)."""
    from dataclasses import replace
    return replace(graph, layers=tuple(graph.layers[k] for k in order))
