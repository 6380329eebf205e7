"""Outputs over consumed inputs: the windows a layer's order leaves, proved by running a kernel
over one shared buffer; the arena planners placing overlap pairs; the checker's byte replay."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layer_analyzer import kernels as K
from layer_analyzer.overlap import pixel_walk
from solver.arena import ArenaProblem, Buffer, SolverConfig, plan_arena
from solver.arena_bound import lower_bound
from solver.arena_types import Overlap, pair_footprint
from solver.plan_checker import PlanError, check_plan, check_schedule


def conv(h, w, c, out_c, k, stride, same, depthwise=False) -> K.Conv:
    pad = (k - 1) // 2 if same else 0
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return K.Conv(depthwise, 1, h, w, c, oh, ow, c if depthwise else out_c, k, k, stride, stride, 1, 1, pad, pad,
                  1, 0, 0, (1,), (0,), -128, 127, 0, -1)


def run_shared(kern: K.Conv, x: np.ndarray, wts: np.ndarray, d: int, reverse: bool) -> np.ndarray:
    """The portable kernel's order over one buffer holding the input at 0-ish and the output ``d``
    bytes above it: pixel by pixel (last first when ``reverse``), each output channel computed
    from the window as the buffer holds it now and written at once."""
    in_bytes, out_bytes = x.size, kern.out_h * kern.out_w * kern.out_c
    base = max(0, -d)
    mem = np.zeros(base + max(in_bytes, d + out_bytes), np.int64)
    mem[base:base + in_bytes] = x.reshape(-1)
    pixels = [(oy, ox) for oy in range(kern.out_h) for ox in range(kern.out_w)]
    for oy, ox in reversed(pixels) if reverse else pixels:
        for oc in range(kern.out_c):
            acc = 0
            for ky in range(kern.k_h):
                for kx in range(kern.k_w):
                    iy, ix = oy * kern.stride_h - kern.pad_t + ky, ox * kern.stride_w - kern.pad_l + kx
                    if 0 <= iy < kern.in_h and 0 <= ix < kern.in_w:
                        for ic in ([oc] if kern.depthwise else range(kern.in_c)):
                            acc += int(mem[base + (iy * kern.in_w + ix) * kern.in_c + ic]) * int(wts[oc, ky, kx, ic])
            mem[base + d + (oy * kern.out_w + ox) * kern.out_c + oc] = acc
    return mem[base + d:base + d + out_bytes]


def run_apart(kern: K.Conv, x: np.ndarray, wts: np.ndarray) -> np.ndarray:
    return run_shared(kern, x, wts, x.size, False)  # the output just above the whole input


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(1, 4), st.sampled_from([1, 3]),
       st.integers(1, 2), st.booleans(), st.booleans(), st.integers(0, 5), st.randoms(use_true_random=False))
def test_a_kernel_run_over_its_own_input_within_the_window_gives_the_same_output(
        h, w, c, out_c, k, stride, same, depthwise, slack, rnd):
    """Forwards at the window or below it, backwards at the rise or above it: the kernel over one
    buffer computes what it computes over two, and the byte replay agrees."""
    if not same and k > min(h, w):
        return
    kern = conv(h, w, c, out_c, k, stride, same, depthwise)
    sched = pixel_walk(kern)
    in_bytes, out_bytes = sched.in_bytes, sched.out_bytes
    gen = np.random.default_rng(rnd.randrange(1 << 30))
    x = gen.integers(-128, 128, (h, w, c))
    wts = gen.integers(-3, 4, (kern.out_c, k, k, c))
    want = run_apart(kern, x, wts)
    window, rise = sched.window(), sched.reversed().rise()
    assert -out_bytes <= window <= in_bytes and -out_bytes <= rise
    for d, reverse in ((max(window - slack, -out_bytes), False), (min(rise + slack, in_bytes), True)):
        assert np.array_equal(run_shared(kern, x, wts, d, reverse), want), (d, reverse, window, rise)
        walk = sched.reversed() if reverse else sched
        check_schedule(walk.reads, walk.writes, walk.ahead, 0, d, "conv")
    if window + 1 < in_bytes:  # one byte further up, forwards: some write lands on a read to come
        with pytest.raises(PlanError, match="still reads"):
            check_schedule(sched.reads, sched.writes, sched.ahead, 0, window + 1, "conv")


def test_a_pointwise_layer_walking_backwards_sits_one_pixel_above_its_input():
    """A 1x1 convolution as wide as its input: backwards its output may start one pixel's
    channels above the input (the kernel re-reads its pixel for every output channel), forwards
    one pixel below: the two tensors span one pixel more than one of them, not twice."""
    kern = conv(5, 5, 8, 8, 1, 1, True)
    sched = pixel_walk(kern)
    assert sched.reversed().rise() == 8 and sched.window() == -8
    assert pair_footprint(sched.window(), 200, 200, sched.reversed().rise()) == 208


def test_a_three_by_three_convolution_starts_its_output_a_window_of_rows_below_its_input():
    """Output pixel (r, c) reads from input pixel (r - 1, c - 1) on while it writes: the output
    starts one row and two pixels below the input (8 x 8 x 4: 40 bytes)."""
    kern = conv(8, 8, 4, 4, 3, 1, True)
    assert pixel_walk(kern).window() == -(8 * 4 + 2 * 4)


def test_a_write_over_a_byte_still_to_be_read_is_named():
    reads = [(0, 0, 4), (1, 4, 8), (2, 8, 12)]
    writes = [(0, 0, 4), (1, 4, 8), (2, 8, 12)]
    check_schedule(reads, writes, 1, 0, 0, "op 3 CONV_2D")  # each step writes what it has read
    with pytest.raises(PlanError, match=r"op 3 CONV_2D: step 0 writes bytes \[4, 8\) that step 1 still reads"):
        check_schedule(reads, writes, 1, 0, 4, "op 3 CONV_2D")


# ---- the arena with overlap pairs -----------------------------------------------------------

def chain(sizes, shifts, rises=None):
    """A chain of buffers, each written by the op reading its predecessor last, every pair may overlap."""
    buffers = tuple(Buffer(f"t{i}", s, i, i + 1) for i, s in enumerate(sizes))
    rises = rises or [None] * len(shifts)
    pairs = tuple(Overlap(i, i + 1, shift, rise) for i, (shift, rise) in enumerate(zip(shifts, rises)))
    return buffers, pairs


@pytest.mark.parametrize("method", ["first-fit", "best-fit", "cpsat"])
def test_the_planners_place_a_chain_of_pairs_at_their_least_span(method):
    buffers, pairs = chain([1024, 1024, 512, 2048], [-64, 0, -512], [64, 1024, None])
    problem = ArenaProblem(buffers, 16, pairs=pairs)
    plan = plan_arena(problem, method, SolverConfig(time_limit_s=5))
    apart = ArenaProblem(buffers, 16)
    assert lower_bound(problem) < lower_bound(apart)
    assert plan.peak < plan_arena(apart, method, SolverConfig(time_limit_s=5)).peak
    if method == "cpsat":
        assert plan.peak == lower_bound(problem)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(-64, 64), st.integers(0, 80)), min_size=2, max_size=7),
       st.sampled_from(["first-fit", "best-fit"]))
def test_greedy_plans_with_pairs_pass_the_checker_and_the_bound(rows, method):
    sizes = [16 * r[0] for r in rows]
    buffers, pairs = chain(sizes, [16 * r[1] for r in rows[:-1]],
                           [16 * r[2] if r[2] else None for r in rows[:-1]])
    problem = ArenaProblem(buffers, 16, pairs=pairs)
    plan = plan_arena(problem, method)  # plan_arena runs the checker on every plan
    assert lower_bound(problem) <= plan.peak <= plan_arena(ArenaProblem(buffers, 16), method).peak + max(sizes)
    check_plan(buffers, plan.offsets, 16, plan.peak, pairs)


def test_the_checker_refuses_a_pair_outside_its_window():
    buffers, pairs = chain([256, 256], [-32])
    check_plan(buffers, [32, 0], 16, 288, pairs)  # later 32 below: inside the window
    with pytest.raises(PlanError):
        check_plan(buffers, [0, 0], 16, 256, pairs)  # on top of it: a write before the last read
