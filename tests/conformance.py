"""The operator conformance suite: for every TFLite operator the deployer takes, models drawn
from a seed (shapes, strides, broadcasting, activations and quantization at their edges: scales
from 1e-3 to 2, zero points at -128, 0 and 127), each deployed for a target and checked element by
element against LiteRT's reference kernels.

CI runs a sample (tests/host/test_conformance.py, tests/target/test_conformance_qemu.py);
``python bench/conformance.py`` the full sweep."""
from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from tests.tflite_builder import ModelBuilder

SCALES = (1e-3, 0.02, 0.1, 0.5, 2.0)
ZERO_POINTS = (-128, -1, 0, 5, 127)
ACTS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def _input(mb: ModelBuilder, rng: np.random.Generator, shape, edge: bool = True, **q) -> int:
    """An input of the builder's type (int8, or int16: symmetric, the zero point dropped); its
    quantization at an edge (or the builder's random one)."""
    if edge and not q:
        q = dict(scale=float(rng.choice(SCALES)), zero_point=int(rng.choice(ZERO_POINTS)))
    return mb.input(tuple(int(d) for d in shape), **q)


def _nhwc(rng, lo=1, hi=9, c_hi=8):
    return (1, int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(1, c_hi)))


def _any_shape(rng, rank_hi=4, hi=6):
    return tuple(int(d) for d in rng.integers(1, hi, int(rng.integers(1, rank_hi + 1))))


def _act(rng):
    return str(rng.choice(ACTS))


def conv(mb, rng, depthwise=False):
    shape = _nhwc(rng, 3, 12)
    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    d = (1, 1) if rng.random() < 0.7 or max(s) > 1 else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    padding = "SAME" if rng.random() < 0.5 or min(shape[1:3]) < (max(k) - 1) * max(d) + 1 else "VALID"
    x = _input(mb, rng, shape, edge=rng.random() < 0.5)
    if depthwise:
        return mb.depthwise_conv2d(x, int(rng.integers(1, 3)), k, s, padding, d, _act(rng))
    return mb.conv2d(x, int(rng.integers(1, 17)), k, s, padding, d, _act(rng), per_channel=bool(rng.random() < 0.7))


def binary(mb, rng, op):
    a_shape = _nhwc(rng)
    b_shape = tuple(1 if rng.random() < 0.3 else d for d in a_shape)  # broadcast some axes
    if rng.random() < 0.5:
        a_shape, b_shape = b_shape, a_shape
    same = dict(scale=0.05, zero_point=3) if op in ("maximum", "minimum") and rng.random() < 0.5 else {}
    a, b = _input(mb, rng, a_shape, **same), _input(mb, rng, b_shape, **same)
    if op in ("maximum", "minimum", "squared_difference"):
        return getattr(mb, op)(a, b)
    return getattr(mb, op)(a, b, activation=_act(rng))


def pool(mb, rng, kind):
    shape = _nhwc(rng, 2, 12)
    f = (int(rng.integers(1, min(4, shape[1]) + 1)), int(rng.integers(1, min(4, shape[2]) + 1)))
    s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    x = _input(mb, rng, shape, edge=False)
    return (mb.avg_pool if kind == "avg" else mb.max_pool)(x, f, s, str(rng.choice(["SAME", "VALID"])), _act(rng))


def unary(mb, rng, op, **kw):
    if op == "exp":  # inputs whose exponential a float32 holds
        return mb.exp(_input(mb, rng, _any_shape(rng), scale=float(rng.choice(SCALES[:3])),
                             zero_point=int(rng.choice(ZERO_POINTS))))
    return getattr(mb, op)(_input(mb, rng, _any_shape(rng)), **kw)


def positive(mb, rng, op):
    """LOG / RSQRT / SQRT: inputs the reference runs are above zero (the suite feeds those, zp -128)."""
    return getattr(mb, op)(_input(mb, rng, _any_shape(rng), scale=float(rng.choice(SCALES)), zero_point=-128))


def strided_slice(mb, rng):
    shape = _any_shape(rng)
    begin, end, strides = [], [], []
    for d in shape:
        first, stride = int(rng.integers(0, d)), int(rng.choice([1, 2, -1, -2]))
        last = int(rng.integers(first + 1, d + 3)) if stride > 0 else int(rng.integers(-1, first))
        begin.append(first - d if rng.random() < 0.3 else first)
        end.append((last - d if rng.random() < 0.3 else last) if last >= 0 else -d - 1)
        strides.append(stride)
    masks = [int(rng.integers(0, 2 ** len(shape))) for _ in range(3)]
    shrink = masks[2] & sum(1 << i for i, s in enumerate(strides) if s > 0)
    return mb.strided_slice(_input(mb, rng, shape), begin, end, strides, masks[0], masks[1], shrink)


def transpose_conv(mb, rng):
    shape = (1, int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.choice([1, 3, 4, 8, 12])))  # 4k: DSP
    k, s = (int(rng.integers(1, 5)), int(rng.integers(1, 5))), (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    padding = str(rng.choice(["SAME", "VALID"]))
    e = (int(rng.integers(0, s[0])), int(rng.integers(0, s[1])))
    out = (shape[1] * s[0] - e[0], shape[2] * s[1] - e[1]) if padding == "SAME" else \
        ((shape[1] - 1) * s[0] + k[0] + e[0], (shape[2] - 1) * s[1] + k[1] + e[1])
    return mb.transpose_conv(_input(mb, rng, shape, edge=rng.random() < 0.5), int(rng.integers(1, 9)), k, s, padding,
                             out, _act(rng), bool(rng.random() < 0.7), bool(rng.random() < 0.7))


def split(mb, rng, kind):
    shape = _any_shape(rng)
    axis = int(rng.integers(0, len(shape)))
    x = _input(mb, rng, shape, scale=0.05, zero_point=2)
    if kind == "split":
        n = int(rng.choice([n for n in range(1, shape[axis] + 1) if shape[axis] % n == 0]))
        return mb.split(x, n, axis)
    if kind == "split_v":
        cuts = sorted(set(int(c) for c in rng.integers(1, shape[axis], 2))) if shape[axis] > 1 else []
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, shape[axis]])]
        sizes[int(rng.integers(0, len(sizes)))] = -1
        return mb.split_v(x, sizes, axis)
    if kind == "unpack":
        return mb.unpack(x, axis)
    others = [x] + [_input(mb, rng, shape, scale=0.05, zero_point=2) for _ in range(int(rng.integers(0, 3)))]
    return mb.pack(others, int(rng.integers(0, len(shape) + 1)))


def depth_space(mb, rng, op):
    b = int(rng.integers(1, 4))
    shape = (1, int(rng.integers(1, 5)) * b, int(rng.integers(1, 5)) * b, int(rng.integers(1, 4)) * b * b)
    return getattr(mb, op)(_input(mb, rng, shape), b)


def space_batch(mb, rng, op):
    bh, bw, c = (int(v) for v in rng.integers(1, 4, 3))
    if op == "space_to_batch_nd":
        pads = [[int(v) for v in rng.integers(0, 3, 2)] for _ in range(2)]
        h = max(bh * int(rng.integers(1, 4)) - sum(pads[0]), 1)
        pads[0][1] = bh * -(-(h + pads[0][0]) // bh) - h - pads[0][0]  # whole blocks
        w = max(bw * int(rng.integers(1, 4)) - sum(pads[1]), 1)
        pads[1][1] = bw * -(-(w + pads[1][0]) // bw) - w - pads[1][0]
        return mb.space_to_batch_nd(_input(mb, rng, (int(rng.integers(1, 3)), h, w, c)), (bh, bw), pads)
    h, w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    crops = [[int(rng.integers(0, h * bh)), 0], [0, int(rng.integers(0, w * bw))]]
    return mb.batch_to_space_nd(_input(mb, rng, (bh * bw * int(rng.integers(1, 3)), h, w, c)), (bh, bw), crops)


def tile(mb, rng):
    shape = _any_shape(rng, hi=4)
    return mb.tile(_input(mb, rng, shape), [int(m) for m in rng.integers(1, 4, len(shape))])


def broadcast_to(mb, rng):
    shape = _any_shape(rng, hi=4)
    target = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 2)))] + \
        [int(rng.integers(1, 4)) if d == 1 else d for d in shape]
    return mb.broadcast_to(_input(mb, rng, shape), target)


def prelu(mb, rng):
    shape = _any_shape(rng)
    alpha_shape = [tuple(shape), tuple(shape[-1:]), (1,)][int(rng.integers(0, 3))]
    return mb.prelu(_input(mb, rng, shape), rng.uniform(-0.5, 1.5, alpha_shape))


def gather(mb, rng):
    shape = _any_shape(rng)
    axis = int(rng.integers(0, len(shape)))
    idx_shape = [(), (3,), (2, 2)][int(rng.integers(0, 3))]
    idx = rng.integers(0, shape[axis], idx_shape) if idx_shape else np.array(int(rng.integers(0, shape[axis])))
    return mb.gather(_input(mb, rng, shape), idx, axis)


def gather_nd(mb, rng):
    shape = _any_shape(rng)
    depth = int(rng.integers(1, len(shape) + 1))
    rows = [(int(rng.integers(1, 4)),), (2, 2), ()][int(rng.integers(0, 3))]
    idx = np.stack([rng.integers(0, d, rows) for d in shape[:depth]], axis=-1)
    return mb.gather_nd(_input(mb, rng, shape), idx)


def reduce(mb, rng, kind):
    shape = _any_shape(rng)
    first = int(rng.integers(0, len(shape)))
    axes = list(range(first, int(rng.integers(first, len(shape))) + 1))
    return mb.reduce(kind, _input(mb, rng, shape), axes, bool(rng.random() < 0.5))


def arg(mb, rng, kind):
    shape = _any_shape(rng)
    x = _input(mb, rng, shape, scale=0.5, zero_point=0)  # coarse: ties
    return mb.arg(kind, x, int(rng.integers(-len(shape), len(shape))), str(rng.choice(["int32", "int64"])))


def batch_matmul(mb, rng):
    m, k, n = (int(v) for v in rng.integers(1, 12, 3))
    adj_x, adj_y = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    batch_x = [(), (2,), (1, 3), (2, 3)][int(rng.integers(0, 4))]
    batch_y = [batch_x, batch_x[1:], tuple(1 for _ in batch_x)][int(rng.integers(0, 3))]
    x = _input(mb, rng, (*batch_x, *((k, m) if adj_x else (m, k))))
    y = _input(mb, rng, (*batch_y, *((n, k) if adj_y else (k, n))))
    return mb.batch_matmul(x, y, adj_x, adj_y)


def fully_connected(mb, rng):
    lead = tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(1, 3))))
    x = _input(mb, rng, (*lead, int(rng.integers(1, 40))), edge=rng.random() < 0.5)
    return mb.fully_connected(x, int(rng.integers(1, 20)), _act(rng), bool(rng.random() < 0.3), bool(rng.random() < 0.8))


def mean(mb, rng):
    shape = _nhwc(rng, 1, 8)
    axes = [(1, 2), (1,), (2,), (3,), (2, 3), (1, 3), (0, 2), (3, 1)][int(rng.integers(0, 8))]
    return mb.mean(_input(mb, rng, shape, edge=False), axes, bool(rng.random() < 0.5))


def pad(mb, rng, v2=False):
    shape = _any_shape(rng)
    p = [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in shape]
    x = _input(mb, rng, shape)
    return mb.padv2(x, p, float(rng.uniform(-2, 2))) if v2 else mb.pad(x, p)


def mirror_pad(mb, rng):
    shape = _any_shape(rng)
    mode = str(rng.choice(["REFLECT", "SYMMETRIC"]))
    edge = 1 if mode == "REFLECT" else 0
    p = [[int(rng.integers(0, d - edge + 1)), int(rng.integers(0, d - edge + 1))] for d in shape]
    return mb.mirror_pad(_input(mb, rng, shape), p, mode)


def concat(mb, rng):
    shape = _any_shape(rng)
    axis = int(rng.integers(-len(shape), len(shape)))
    xs = []
    for _ in range(int(rng.integers(2, 4))):
        s = list(shape)
        s[axis] = int(rng.integers(1, 4))
        xs.append(_input(mb, rng, s, scale=0.05, zero_point=3) if rng.random() < 0.5 else _input(mb, rng, s, edge=False))
    return mb.concat(xs, axis=axis)


def resize(mb, rng):
    shape = _nhwc(rng, 1, 7)
    size = (int(rng.integers(1, 15)), int(rng.integers(1, 15)))
    return mb.resize_nearest(_input(mb, rng, shape), size, bool(rng.random() < 0.5), bool(rng.random() < 0.5))


def resize_bilinear(mb, rng):
    shape = _nhwc(rng, 1, 7)
    size = (int(rng.integers(1, 15)), int(rng.integers(1, 15)))
    mode = int(rng.integers(0, 3))
    return mb.resize_bilinear(_input(mb, rng, shape), size, mode == 1, mode == 2)


def reshape(mb, rng, kind):
    shape = _any_shape(rng)
    x = _input(mb, rng, shape)
    if kind == "squeeze":
        return mb.relu(mb.squeeze(mb.expand_dims(x, 0), (0,)))
    if kind == "expand_dims":
        return mb.relu(mb.expand_dims(x, int(rng.integers(-len(shape) - 1, len(shape) + 1))))
    return mb.relu(mb.reshape(x, (math.prod(shape),)))


def quantize(mb, rng, kind):
    shape = _any_shape(rng)
    if kind == "quantize":
        f = mb.input(shape, dtype="float32")
        return mb.quantize(f, float(rng.choice(SCALES[:4])), int(rng.choice(ZERO_POINTS)))
    if kind == "requantize":
        return mb.quantize(_input(mb, rng, shape), float(rng.choice(SCALES)), int(rng.choice(ZERO_POINTS)))
    return mb.dequantize(_input(mb, rng, shape))


def transpose(mb, rng):
    shape = _any_shape(rng)
    return mb.transpose(_input(mb, rng, shape), list(rng.permutation(len(shape))))


def slice_(mb, rng):
    shape = _any_shape(rng)
    begin = [int(rng.integers(0, d)) for d in shape]
    size = [-1 if rng.random() < 0.3 else int(rng.integers(1, d - b + 1)) for d, b in zip(shape, begin)]
    return mb.slice(_input(mb, rng, shape), begin, size)


def softmax(mb, rng, log=False):
    shape = (*(int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3)))), int(rng.integers(1, 40)))
    x = _input(mb, rng, shape)
    return mb.log_softmax(x) if log else mb.softmax(x, float(rng.choice([1.0, 0.5, 2.0])))


def lstm(mb, rng):
    """An integer LSTM (verify runs it as a stream with a reset)."""
    time_major = bool(rng.random() < 0.3)
    batch, steps, n_in = int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 12))
    x = _input(mb, rng, (steps, batch, n_in) if time_major else (batch, steps, n_in))
    extra = rng.choice(["", "peephole", "projection"])
    return mb.lstm(x, int(rng.integers(1, 14)), time_major=time_major, cell_log2=int(rng.choice([-12, -11, -10])),
                   cell_clip=float(rng.choice([0.0, 2.0, 8.0])), cifg=bool(rng.random() < 0.3),
                   peephole=extra == "peephole", projection=int(rng.integers(1, 9)) if extra == "projection" else None,
                   layer_norm=bool(rng.random() < 0.4))


def svdf(mb, rng):
    """An integer SVDF (verify runs it as a stream with a reset)."""
    x = _input(mb, rng, (int(rng.integers(1, 3)), int(rng.integers(1, 24))))
    return mb.svdf(x, int(rng.integers(1, 9)), rank=int(rng.integers(1, 4)), memory=int(rng.integers(1, 10)),
                   bias=bool(rng.random() < 0.7))


# operator -> case(builder, rng) adding its layers to the builder and returning the output(s)
CASES: dict[str, Callable] = {
    "CONV_2D": conv, "DEPTHWISE_CONV_2D": lambda mb, rng: conv(mb, rng, True), "FULLY_CONNECTED": fully_connected,
    "TRANSPOSE_CONV": transpose_conv, "BATCH_MATMUL": batch_matmul,
    **{op.upper(): (lambda op: lambda mb, rng: binary(mb, rng, op))(op)
       for op in ("add", "sub", "mul", "maximum", "minimum", "squared_difference")},
    "AVERAGE_POOL_2D": lambda mb, rng: pool(mb, rng, "avg"), "MAX_POOL_2D": lambda mb, rng: pool(mb, rng, "max"),
    "MEAN": mean, "SOFTMAX": softmax, "LOG_SOFTMAX": lambda mb, rng: softmax(mb, rng, True),
    **{op.upper(): (lambda op: lambda mb, rng: unary(mb, rng, op))(op)
       for op in ("logistic", "tanh", "exp", "neg", "hard_swish", "relu", "relu6", "relu_n1_to_1", "relu_0_to_1", "abs")},
    "L2_NORMALIZATION": lambda mb, rng: mb.l2_normalization(_input(mb, rng, _any_shape(rng, hi=40))),
    "LEAKY_RELU": lambda mb, rng: unary(mb, rng, "leaky_relu", alpha=float(rng.choice([0.01, 0.2, 1.5, -0.3]))),
    "LOG": lambda mb, rng: positive(mb, rng, "log"), "RSQRT": lambda mb, rng: positive(mb, rng, "rsqrt"),
    "SQRT": lambda mb, rng: positive(mb, rng, "sqrt"),
    "PAD": pad, "PADV2": lambda mb, rng: pad(mb, rng, True), "MIRROR_PAD": mirror_pad, "CONCATENATION": concat,
    "QUANTIZE": lambda mb, rng: quantize(mb, rng, "quantize" if rng.random() < 0.5 else "requantize"),
    "DEQUANTIZE": lambda mb, rng: quantize(mb, rng, "dequantize"),
    "TRANSPOSE": transpose, "RESHAPE": lambda mb, rng: reshape(mb, rng, "reshape"),
    "SQUEEZE": lambda mb, rng: reshape(mb, rng, "squeeze"), "EXPAND_DIMS": lambda mb, rng: reshape(mb, rng, "expand_dims"),
    "RESIZE_NEAREST_NEIGHBOR": resize, "RESIZE_BILINEAR": resize_bilinear, "STRIDED_SLICE": strided_slice, "SLICE": slice_,
    **{op.upper(): (lambda op: lambda mb, rng: split(mb, rng, op))(op) for op in ("split", "split_v", "unpack", "pack")},
    "GATHER": gather, "GATHER_ND": gather_nd, "PRELU": prelu, "DEPTH_TO_SPACE": lambda mb, rng: depth_space(mb, rng, "depth_to_space"),
    "SPACE_TO_DEPTH": lambda mb, rng: depth_space(mb, rng, "space_to_depth"), "TILE": tile, "BROADCAST_TO": broadcast_to,
    "SPACE_TO_BATCH_ND": lambda mb, rng: space_batch(mb, rng, "space_to_batch_nd"),
    "BATCH_TO_SPACE_ND": lambda mb, rng: space_batch(mb, rng, "batch_to_space_nd"), "REDUCE_MAX": lambda mb, rng: reduce(mb, rng, "max"),
    "REDUCE_MIN": lambda mb, rng: reduce(mb, rng, "min"), "ARG_MAX": lambda mb, rng: arg(mb, rng, "max"),
    "ARG_MIN": lambda mb, rng: arg(mb, rng, "min"), "UNIDIRECTIONAL_SEQUENCE_LSTM": lstm, "SVDF": svdf,
}


def quantize16(mb, rng, kind):
    """QUANTIZE into and out of 16 bits: float32 -> int16, int8 -> int16, int16 -> int8 and
    int16 -> int16; DEQUANTIZE int16 -> float32."""
    shape = _any_shape(rng)
    if kind == "dequantize":
        return mb.dequantize(_input(mb, rng, shape))
    source = str(rng.choice(["float32", "int8", "int16"]))
    x = mb.input(shape, dtype="float32") if source == "float32" else \
        _input(mb, rng, shape, dtype=source) if source == "int8" else _input(mb, rng, shape)
    to = "int8" if source == "int16" and rng.random() < 0.5 else "int16"
    scale = float(rng.choice(SCALES[:4])) / (256.0 if to == "int16" else 1.0)
    return mb.quantize(x, scale, int(rng.choice(ZERO_POINTS)) if to == "int8" else 0, dtype=to)


# the operators with 16-bit activations ("16x8": int16 activations, int8 weights, int64 biases):
# the same cases on a builder whose inputs are int16 (zero point 0)
CASES16: dict[str, Callable] = {
    **{op: CASES[op] for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL",
                                "AVERAGE_POOL_2D", "MAX_POOL_2D", "PAD", "PADV2", "STRIDED_SLICE", "SLICE",
                                "CONCATENATION", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "RELU", "RELU6",
                                "LEAKY_RELU", "PRELU", "MEAN", "SOFTMAX", "LOGISTIC", "TANH")},
    "QUANTIZE": lambda mb, rng: quantize16(mb, rng, "quantize"),
    "DEQUANTIZE": lambda mb, rng: quantize16(mb, rng, "dequantize"),
}


def build(op: str, seed: int, bits: int = 8) -> ModelBuilder:
    """Case ``seed`` of ``op``: a model holding it (and what feeds it); ``bits`` 16: its 16x8 form."""
    rng = np.random.default_rng([seed, sum(map(ord, op))] + ([16] if bits == 16 else []))
    mb = ModelBuilder(seed, activations="int16" if bits == 16 else "int8")
    out = (CASES16 if bits == 16 else CASES)[op](mb, rng)
    mb.output(*(out if isinstance(out, list) else [out]))
    return mb


def first_tiled_case(op: str, target: str, l1: int, cases: int = 30, bits: int = 8, min_tiles: int = 1) -> int:
    """The first case of ``op`` (``bits`` 16: its 16x8 form) whose layer of that op runs tile by
    tile with ``l1`` on ``target`` (in at least ``min_tiles`` tiles)."""
    from deployer.pipeline import Options, plan_deployment
    from network_parser.errors import UnsupportedOperator
    for seed in range(cases):
        with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
            path = Path(tmp) / "case.tflite"
            build(op, seed, bits).save(path)
            try:
                plan = plan_deployment(path, Options(target=target, l1=l1))
            except UnsupportedOperator:  # a 16-bit case the reference cannot run either (SUB rescaling up)
                if bits == 8:
                    raise
                continue
            if any(lp.tiling is not None and lp.tiling[1].tiles >= min_tiles and layer.op == op
                   for layer, lp in zip(plan.graph.layers, plan.layers)):
                return seed
    raise AssertionError(f"none of the first {cases} cases of {op} tiles")


def samples_for(op: str, graph, seed: int, count: int = 2) -> list[list[np.ndarray]]:
    """Inputs the reference runs on: int8 over the whole range (LOG, RSQRT and SQRT: above zero)."""
    from deployer.verify import random_inputs
    samples = [random_inputs(graph, seed * 7 + s) for s in range(count)]
    if op in ("LOG", "RSQRT", "SQRT"):
        samples = [[np.maximum(x, graph.tensors[t].zero_point + 1).astype(x.dtype) for x, t in zip(sample, graph.inputs)]
                   for sample in samples]
    return samples


def check(op: str, seed: int, target: str = "host", l1: int | None = None, bits: int = 8) -> dict:
    """Case ``seed`` of ``op`` (``bits`` 16: its 16x8 form) deployed for ``target`` (Cortex-M: run
    on its QEMU board), against the reference: the verify result (``max_abs_diff`` per output)."""
    from deployer.pipeline import Options, deploy
    from deployer.qemu import verify_on_qemu
    from deployer.verify import verify

    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        path = Path(tmp) / f"{op.lower()}_{seed}.tflite"
        build(op, seed, bits).save(path)
        dep = deploy(path, Options(target=target, l1=l1))
        samples = samples_for(op, dep.graph, seed)
        return verify_on_qemu(dep, path, samples) if dep.backend.qemu_machine else verify(dep, path, samples)


def exact(result: dict) -> bool:
    return all(o["max_abs_diff"] == 0 for o in result["outputs"])
