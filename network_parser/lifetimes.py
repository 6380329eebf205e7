"""Activation lifetimes in op order, with in-place aliases and per-layer scratch buffers.

A tensor lives from the op that writes it (op 0 for model inputs, which the
caller fills before the run) to the last op that reads it (the last op for
model outputs, which the caller reads after the run). A tensor that reuses
another's bytes (``alias_of``) is planned as part of its owner's buffer, which
lives as long as any of them. Scratch buffers live for their one layer and are keyed
``scratch_key(layer)`` (a negative number, never a tensor index).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import accumulate

from .inplace import Reuse, plan_in_place
from .ir import Graph


@dataclass(frozen=True, slots=True)
class Lifetime:
    tensor: int  # tensor index, or scratch_key(layer) for a scratch buffer
    name: str
    size: int
    first_op: int
    last_op: int
    alias_of: int | None  # tensor whose bytes this one reuses

    @property
    def owner(self) -> int:
        """The tensor (or scratch key) whose buffer holds these bytes."""
        return self.tensor if self.alias_of is None else self.alias_of


def owner_groups(lives: list[Lifetime]) -> dict[int, list[Lifetime]]:
    """Lifetimes by the buffer that holds their bytes, in first-seen order."""
    groups: dict[int, list[Lifetime]] = {}
    for lt in lives:
        groups.setdefault(lt.owner, []).append(lt)
    return groups


def scratch_key(layer: int) -> int:
    return -1 - layer


def aliases(reuses: tuple[Reuse, ...]) -> dict[int, int]:
    """tensor -> the tensor that owns its bytes (the root of its alias chain)."""
    owner: dict[int, int] = {}
    for r in reuses:
        owner[r.output] = owner.get(r.input, r.input)
    return owner


def lifetimes(graph: Graph, reuses: tuple[Reuse, ...] | None = None) -> list[Lifetime]:
    reuses = plan_in_place(graph) if reuses is None else reuses
    last = len(graph.layers) - 1
    span: dict[int, list[int]] = {}

    def touch(t: int, k: int):
        s = span.setdefault(t, [k, k])
        s[0], s[1] = min(s[0], k), max(s[1], k)

    for t in graph.inputs:
        touch(t, 0)
    for k, layer in enumerate(graph.layers):
        for t in (*layer.inputs, *layer.outputs):
            if t >= 0 and not graph.tensors[t].is_const:
                touch(t, k)
    for t in graph.outputs:
        touch(t, last)
    owner = aliases(reuses)
    result = []
    for t in graph.activations():
        tensor = graph.tensors[t]
        result.append(Lifetime(t, tensor.name, tensor.nbytes, span[t][0], span[t][1], owner.get(t)))
    for r in reuses:
        if r.scratch_bytes:
            result.append(Lifetime(scratch_key(r.layer), f"op{r.layer}_scratch", r.scratch_bytes,
                                   r.layer, r.layer, None))
    return result


def owner_heights(members: list[Lifetime]) -> list[tuple[int, int, int]]:
    """(first op, last op + 1, bytes) of every stretch of one owner's life over which its height
    is constant: the largest of the tensors sharing its bytes that is alive (0 in a gap). The
    height only changes where a member is born or dies: a sweep over those ops, with a heap of
    the members alive (the dead dropped lazily)."""
    born = sorted(members, key=lambda m: m.first_op)
    cuts = sorted({m.first_op for m in members} | {m.last_op + 1 for m in members})
    alive: list[tuple[int, int]] = []  # (-size, last op)
    spans, i = [], 0
    for a, b in zip(cuts, cuts[1:]):
        while i < len(born) and born[i].first_op <= a:
            heapq.heappush(alive, (-born[i].size, born[i].last_op))
            i += 1
        while alive and alive[0][1] < a:
            heapq.heappop(alive)
        spans.append((a, b, -alive[0][0] if alive else 0))
    return spans


def live_bytes_per_op(lives: list[Lifetime], n_ops: int) -> list[int]:
    """Bytes live at every op (the arena's lower bound is the largest): per owner of bytes, the
    largest of the tensors sharing them that is alive (each owner's stretches added to a
    difference array over the ops)."""
    diff = [0] * (n_ops + 1)
    for members in owner_groups(lives).values():
        for a, b, height in owner_heights(members):
            diff[a] += height
            diff[b] -= height
    return list(accumulate(diff[:n_ops]))


def memory_floor(lives: list[Lifetime], n_ops: int, per_op: list[int] | None = None) -> tuple[int, list[Lifetime]]:
    """The op where the most bytes are live (the arena's lower bound; ``per_op``: those bytes
    counted another way, e.g. with outputs over inputs) and what is live there: per owner of
    bytes its largest live member, largest first."""
    per_op = live_bytes_per_op(lives, n_ops) if per_op is None else per_op
    op = max(range(n_ops), key=lambda k: (per_op[k], -k)) if n_ops else 0
    held = []
    for members in owner_groups(lives).values():
        alive = [m for m in members if m.first_op <= op <= m.last_op]
        if alive:
            held.append(max(alive, key=lambda m: m.size))
    return op, sorted(held, key=lambda m: (-m.size, m.first_op))
