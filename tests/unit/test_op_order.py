"""The least-peak operator order (solver.op_order) against brute force over every topological
order of small random graphs, with and without outputs written over dying inputs."""
from __future__ import annotations

import itertools
import random

import pytest

from network_parser.ir import Graph, Layer, Tensor
from solver.op_order import _Buffers, least_peak_order, reordered


def _tensor(k: int, nbytes: int) -> Tensor:
    return Tensor(f"t{k}", (1, nbytes), "int8")


def random_graph(seed: int, n: int = 7) -> Graph:
    """A random DAG of ``n`` ops: each reads one to three earlier tensors (or the input) and
    writes one, of random size; the last op's output and one random other are the outputs."""
    rng = random.Random(seed)
    tensors = [_tensor(0, rng.randint(1, 40))]
    layers = []
    for k in range(n):
        reads = sorted(set(rng.sample(range(len(tensors)), min(len(tensors), rng.randint(1, 3)))))
        tensors.append(_tensor(len(tensors), rng.randint(1, 40)))
        layers.append(Layer(k, "ADD", tuple(reads), (len(tensors) - 1,), None, f"op{k}"))
    outputs = tuple(sorted({len(tensors) - 1, rng.randrange(1, len(tensors))}))
    return Graph("g", tuple(tensors), tuple(layers), (0,), outputs)


def brute_force(graph: Graph, savings=None) -> int:
    b = _Buffers(graph, savings=savings)
    best = None
    for order in itertools.permutations(range(b.n)):
        done, live, peak = 0, b.start, b.start
        ok = True
        for k in order:
            if b.before[k] & ~done:
                ok = False
                break
            during, live = b.step(k, done, live)
            peak = max(peak, during)
            done |= 1 << k
        if ok:
            best = peak if best is None else min(best, peak)
    return best


def peak_of(graph: Graph, order, savings=None) -> int:
    b = _Buffers(graph, savings=savings)
    done, live, peak = 0, b.start, b.start
    for k in order:
        assert not b.before[k] & ~done, "not a topological order"
        during, live = b.step(k, done, live)
        peak = max(peak, during)
        done |= 1 << k
    return peak


@pytest.mark.parametrize("seed", range(40))
def test_the_order_found_is_the_least_peak_of_every_order(seed):
    graph = random_graph(seed)
    found = least_peak_order(graph)
    assert found.exact and found.peak == brute_force(graph) == peak_of(graph, found.order)
    assert found.file_peak == peak_of(graph, range(len(graph.layers))) >= found.peak
    assert found.changed == (found.peak < found.file_peak)  # the file's order kept on a tie


@pytest.mark.parametrize("seed", range(20))
def test_savings_of_outputs_over_dying_inputs_count_only_where_the_input_dies(seed):
    graph = random_graph(seed)
    rng = random.Random(seed)
    savings = {k: [(x, rng.randint(0, min(graph.tensors[x].nbytes, graph.tensors[layer.outputs[0]].nbytes)))
                   for x in layer.inputs] for k, layer in enumerate(graph.layers) if rng.random() < 0.6}
    found = least_peak_order(graph, savings=savings)
    assert found.peak == brute_force(graph, savings) == peak_of(graph, found.order, savings)
    assert found.peak <= least_peak_order(graph).peak


def test_a_wide_graph_past_the_beam_still_gets_a_valid_order():
    """Twelve independent branches of two ops: 3^12 sets on the middle levels, past a beam of 50."""
    tensors, layers = [_tensor(0, 4)], []
    for b in range(12):
        for size in (30 + b, 2):
            src = 0 if size != 2 else len(tensors) - 1
            tensors.append(_tensor(len(tensors), size))
            layers.append(Layer(len(layers), "ADD", (src,), (len(tensors) - 1,), None, f"op{len(layers)}"))
    graph = Graph("wide", tuple(tensors), tuple(layers), (0,), tuple(range(2, len(tensors), 2)))
    found = least_peak_order(graph, beam=50)
    assert not found.exact and sorted(found.order) == list(range(len(layers)))
    assert found.peak == peak_of(graph, found.order) <= found.file_peak


def test_reordered_layers_keep_their_file_index():
    graph = random_graph(3)
    order = least_peak_order(graph).order
    moved = reordered(graph, order)
    assert [layer.index for layer in moved.layers] == list(order)
