"""Synthetic int8 (and 16x8) ``.tflite`` model builder for property tests.

``ModelBuilder`` writes small, valid, fully int8-quantized TFLite flatbuffers (with
``activations="int16"``: int16 activations, int8 weights, int64 biases) with
random weights and plausible quantization, so that our C compiler can be checked
against LiteRT's reference kernels on arbitrary mixes of ops and geometries.

How quantization is chosen: every tensor carries a float "calibration sample"
(``_CALIB`` random inputs pushed through a float model of the graph, fake-quantized
at every int8 tensor).  An op's output scale/zero point is taken from the observed
range of its sample (widened by a random 0-15 % so tests see varied scales), which
keeps outputs well spread but unsaturated.  The same float model is available
through ``simulate()`` as an approximate oracle (float math, not TFLite's fixed-point).

Conventions and constraints:
  * Layout NHWC; tensors are integer ids; activations are int8 unless an input is
    declared float32 (then use ``quantize``/``dequantize`` at the edges).
  * int8 inputs are calibrated for the full int8 range; float32 inputs for values in
    ``FLOAT_INPUT_RANGE``.
  * Weights are symmetric int8 in [-127, 127] (zero point 0).  CONV_2D: OHWI, per-channel
    (quantized_dimension 0) or per-tensor; DEPTHWISE_CONV_2D: (1, KH, KW, C*M) per-channel
    along dim 3; FULLY_CONNECTED: (units, in) per-tensor.  Biases are int32 with scale
    input_scale * weight_scale[c] and zero point 0.
  * Fixed output quantization: SOFTMAX and LOGISTIC use 1/256, -128.  AVERAGE/MAX_POOL,
    RESHAPE, SQUEEZE, PAD, TRANSPOSE keep the input's quantization.
  * CONCATENATION: all inputs and the output must share one quantization (LiteRT
    requires it for int8).  If the given inputs already agree, that is used; otherwise
    the output quantization covers the union of the input ranges and a requantizing
    QUANTIZE (int8 -> int8) op is inserted for every input that differs.
  * Op versions (one OperatorCode per builtin, with the highest version any use needs):
    CONV_2D 3, DEPTHWISE_CONV_2D 3, FULLY_CONNECTED 4 (5 with keep_num_dims, 6 without
    bias), ADD 2, MUL 2 (3 when in1_scale*in2_scale/out_scale >= 1), AVERAGE_POOL_2D 2,
    MAX_POOL_2D 2, MEAN 2, SOFTMAX 2, LOGISTIC 2, RELU 2, RELU6 2, PAD 2 (4 if rank > 4),
    CONCATENATION 2, DEQUANTIZE 2, TRANSPOSE 2 (4 if rank 5, 6 if rank > 5),
    RESHAPE 1, SQUEEZE 1, HARD_SWISH 1, QUANTIZE 1.
  * ``fully_connected(bias=False)`` has 2 inputs (v6); ``conv2d(bias=False)`` gets an all-zero
    bias, because LiteRT's CONV_2D kernel refuses a missing bias.
  * CONCATENATION never carries a fused activation (LiteRT rejects it): ``concat(activation=...)``
    appends a separate RELU / RELU6 / RELU_N1_TO_1 op (v2 / v2 / v1) with the same quantization.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import flatbuffers
import numpy as np
import tflite as fb

Op = fb.BuiltinOperator
_ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
_PADDING = {"SAME": fb.Padding.SAME, "VALID": fb.Padding.VALID}
_TYPES = {"int8": fb.TensorType.INT8, "uint8": fb.TensorType.UINT8, "int16": fb.TensorType.INT16, "int32": fb.TensorType.INT32,
          "int64": fb.TensorType.INT64,
          "float32": fb.TensorType.FLOAT32}
# the op versions of the 16-bit forms (TFLite's op_version.cc); the builder writes the higher of
# these and the 8-bit version
_VERSIONS_16 = {Op.CONV_2D: 4, Op.DEPTHWISE_CONV_2D: 5, Op.FULLY_CONNECTED: 7, Op.ADD: 3, Op.SUB: 5, Op.MUL: 4,
                Op.AVERAGE_POOL_2D: 3, Op.MAX_POOL_2D: 3, Op.MEAN: 3, Op.SOFTMAX: 3, Op.LOGISTIC: 3, Op.TANH: 3,
                Op.LEAKY_RELU: 2, Op.CONCATENATION: 3, Op.PAD: 3, Op.PADV2: 3, Op.DEQUANTIZE: 3, Op.QUANTIZE: 2}
_CALIB = 8  # calibration samples per tensor (leading axis of every sample array)
FLOAT_INPUT_RANGE = (-1.0, 1.0)
_FIXED_SIGMOID_QUANT = (1.0 / 256.0, -128)


@dataclass
class _Tensor:
    name: str
    shape: tuple
    dtype: str
    scale: np.ndarray | None = None  # float32, length 1 or per channel
    zero_point: np.ndarray | None = None  # int64
    qdim: int = 0
    buffer: int = 0  # 0 = no data (activation)
    sim: np.ndarray | None = None  # calibration sample, shape (_CALIB, *shape), float64
    variable: bool = False  # state kept across invocations (an LSTM's hidden and cell state)


@dataclass
class _Op:
    code: int
    version: int
    inputs: list
    outputs: list
    options: tuple | None  # (BuiltinOptions type, fn(builder) -> offset)
    srcs: list  # activation inputs fed to fn
    fn: Callable
    act: str
    intermediates: tuple = ()


def _pair(v):
    return (int(v), int(v)) if np.isscalar(v) else tuple(int(i) for i in v)


def _apply_act(y, act):
    if act == "RELU":
        return np.maximum(y, 0.0)
    if act == "RELU6":
        return np.clip(y, 0.0, 6.0)
    if act == "RELU_N1_TO_1":
        return np.clip(y, -1.0, 1.0)
    return y


_RANGES = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def _fake_quant(y, scale, zp, dtype="int8"):
    lo, hi = _RANGES[dtype]
    return (np.clip(np.round(y / scale) + zp, lo, hi) - zp) * scale


def _geometry(hw, k, s, d, padding):
    """Output size and (before, after) padding per spatial dim, TFLite's SAME/VALID rule."""
    if padding not in _PADDING:
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    out, pads = [], []
    for size, kk, ss, dd in zip(hw, k, s, d):
        ek = (kk - 1) * dd + 1
        if padding == "SAME":
            o = -(-size // ss)
            total = max((o - 1) * ss + ek - size, 0)
            pads.append((total // 2, total - total // 2))  # odd padding goes after
        else:
            o = (size - ek) // ss + 1
            pads.append((0, 0))
        if o < 1:
            raise ValueError(f"kernel {k} (dilation {d}) does not fit input {hw} with {padding}")
        out.append(o)
    return tuple(out), pads


def _taps(v, k, s, d, out, pads, fill=0.0):
    """Yield (i, j, view) for sample arrays (S, N, H, W, C): view[..., y, x, :] is the
    input pixel under kernel tap (i, j) for output pixel (y, x)."""
    vp = np.pad(v, ((0, 0), (0, 0), pads[0], pads[1], (0, 0)), constant_values=fill)
    for i in range(k[0]):
        for j in range(k[1]):
            y0, x0 = i * d[0], j * d[1]
            yield i, j, vp[:, :, y0:y0 + (out[0] - 1) * s[0] + 1:s[0], x0:x0 + (out[1] - 1) * s[1] + 1:s[1], :]


def _bcast(v, rank):
    """Left-pad a sample array's shape (after the sample axis) to `rank` like numpy broadcasting."""
    return v.reshape(v.shape[:1] + (1,) * (rank + 1 - v.ndim) + v.shape[1:])


def _opts(name, **fields):
    """(options type, builder fn) for builtin options table `name`; list fields become int32 vectors."""
    def build(b):
        vecs = {k: b.CreateNumpyVector(np.asarray(v, np.int32))
                for k, v in fields.items() if isinstance(v, (list, tuple))}
        getattr(fb, f"{name}Start")(b)
        for k, v in fields.items():
            getattr(fb, f"{name}Add{k}")(b, vecs.get(k, v))
        return getattr(fb, f"{name}End")(b)
    return getattr(fb.BuiltinOptions, name), build


def _offset_vector(b, offsets):
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


class ModelBuilder:
    def __init__(self, seed: int = 0, activations: str = "int8"):
        """``activations``: the type of inputs declared without one ("int16": a 16x8 model, whose
        ops keep their inputs' type; its inputs' zero points are 0)."""
        if activations not in ("int8", "int16"):
            raise ValueError(f"activations must be 'int8' or 'int16', got {activations!r}")
        self.seed = seed
        self.activations = activations
        self.rng = np.random.default_rng(seed)
        self.description = f"synthetic {'16x8' if activations == 'int16' else 'int8'} model (the deployer's model builder, seed={seed})"
        self._tensors: list[_Tensor] = []
        self._ops: list[_Op] = []
        self._buffers: list[bytes] = [b""]  # buffer 0 is the empty sentinel
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._counts: dict[str, int] = {}

    # ------------------------------------------------------------------ introspection
    @property
    def inputs(self) -> list[int]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[int]:
        return list(self._outputs)

    def shape(self, t: int) -> tuple:
        return self._tensors[t].shape

    def dtype(self, t: int) -> str:
        return self._tensors[t].dtype

    def quantization(self, t: int) -> tuple[float, int] | None:
        """(scale, zero_point) of an int8 activation tensor, None for float tensors."""
        tt = self._tensors[t]
        return None if tt.scale is None else (float(tt.scale[0]), int(tt.zero_point[0]))

    # ------------------------------------------------------------------ internals
    def _name(self, kind):
        n = self._counts.get(kind, 0)
        self._counts[kind] = n + 1
        return f"{kind}_{n}"

    def _add_tensor(self, t: _Tensor) -> int:
        self._tensors.append(t)
        return len(self._tensors) - 1

    def _const(self, name, arr, dtype, scale=None, qdim=0):
        arr = np.ascontiguousarray(arr, dtype=dtype).reshape(np.shape(arr))  # a scalar stays a scalar
        self._buffers.append(arr.tobytes())
        zp = None if scale is None else np.zeros(len(scale), np.int64)
        return self._add_tensor(_Tensor(name, arr.shape, dtype, scale, zp, qdim, len(self._buffers) - 1))

    def _int8(self, x, rank=None):
        """An integer activation (int8, or int16 in a 16x8 graph: the op's output keeps its type)."""
        if not 0 <= x < len(self._tensors) or self._tensors[x].sim is None:
            raise ValueError(f"{x} is not an activation tensor id")
        t = self._tensors[x]
        if t.dtype not in ("int8", "int16"):
            raise ValueError(f"tensor {t.name} is {t.dtype}; this op needs int8 or int16 (use quantize())")
        if rank is not None and len(t.shape) != rank:
            raise ValueError(f"tensor {t.name} has shape {t.shape}; expected rank {rank}")
        return t

    def _q(self, x):
        return self.quantization(x)

    def _range_quant(self, y):
        """Scale/zero point covering the sample's range (incl. 0), randomly widened by 0-15 %."""
        lo, hi = min(float(y.min()), 0.0), max(float(y.max()), 0.0)
        span = max(hi - lo, 1e-6)
        if lo < 0:  # an exact-zero edge (e.g. after ReLU) stays exact: zp = -128
            lo -= span * self.rng.uniform(0.0, 0.15)
        if hi > 0:
            hi += span * self.rng.uniform(0.0, 0.15)
        if hi - lo < 1e-4:  # degenerate (constant-zero) sample
            hi = lo + 1e-2
        scale = float(np.float32((hi - lo) / 255.0))
        zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
        return scale, zp

    def _range_quant16(self, y):
        """int16 activations are symmetric (zero point 0): a scale covering the sample's largest
        magnitude, randomly widened by 0-15 %."""
        m = max(float(np.abs(y).max()), 1e-6) * (1.0 + self.rng.uniform(0.0, 0.15))
        return float(np.float32(m / 32767.0)), 0

    def _bias_type(self, x, bias32=False) -> str:
        """16x8 layers take int64 biases (as TFLite's converter writes them; ``bias32``: int32, the
        options saying so), int8 ones int32."""
        return "int64" if self._tensors[x].dtype == "int16" and not bias32 else "int32"

    def _check_act(self, act):
        if act not in _ACT:
            raise ValueError(f"activation must be one of {sorted(_ACT)}, got {act!r}")
        return _ACT[act]

    def _emit(self, name, code, version, inputs, srcs, fn, out_shape, dtype=None, act="NONE",
              quant=None, options=None) -> int:
        """Create the output tensor (calibrating its quantization) and the op that produces it.
        ``dtype`` None: int16 when the first activation input is int16 (a 16x8 layer), else int8."""
        self._check_act(act)
        if dtype is None:
            dtype = "int16" if srcs and self._tensors[srcs[0]].dtype == "int16" else "int8"
        if "int16" in (dtype, *(self._tensors[i].dtype for i in srcs[:1])):
            version = max(version, _VERSIONS_16.get(code, version))
        y = _apply_act(fn(*[self._tensors[i].sim for i in srcs]), act)
        assert y.shape == (_CALIB, *out_shape), (name, y.shape, out_shape)
        scale = zp = None
        if dtype in _RANGES:
            s, z = (self._range_quant16(y) if dtype == "int16" else self._range_quant(y)) if quant is None else quant
            scale, zp = np.array([s], np.float32), np.array([z], np.int64)
            y = _fake_quant(y, float(scale[0]), z, dtype)
        out = self._add_tensor(_Tensor(f"{name}/out", tuple(int(d) for d in out_shape), dtype, scale, zp, sim=y))
        self._ops.append(_Op(code, version, list(inputs), [out], options, list(srcs), fn, act))
        return out

    def _bias(self, acc, bscale, dtype="int32"):
        """A bias ~ N(0, (std of the channel's accumulator / 2)^2), in units of bscale (int32, or
        int64 for a 16x8 layer)."""
        std = acc.reshape(-1, acc.shape[-1]).std(axis=0)
        bf = self.rng.normal(0.0, 0.5 * std + 1e-9)
        return np.clip(np.round(bf / bscale), -(2**31 - 1), 2**31 - 1).astype(dtype)

    def _weights(self, shape, n_scales, fan_in):
        wq = self.rng.integers(-127, 128, shape).astype(np.int8)
        ws = (self.rng.uniform(0.5, 2.0, n_scales) / (127.0 * math.sqrt(fan_in))).astype(np.float32)
        return wq, ws

    # ------------------------------------------------------------------ graph API
    def input(self, shape, dtype=None, scale=None, zero_point=None) -> int:
        """Graph input (``dtype`` None: the builder's activation type).  int8: missing scale /
        zero point are drawn at random (scale in [0.01, 0.1], zero point in [-32, 32]); int16:
        scale in [1e-4, 1e-3] if missing, the zero point is always 0 (``zero_point`` ignored:
        16-bit activations are symmetric); int32 (read only by a QUANTIZE): scale as given,
        zero point 0, values within +-2^20; float32: no quantization, values expected in
        FLOAT_INPUT_RANGE."""
        dtype = dtype or self.activations
        shape = tuple(int(d) for d in shape)
        name = self._name("input")
        if dtype == "int8":
            s = float(np.float32(self.rng.uniform(0.01, 0.1) if scale is None else scale))
            z = int(self.rng.integers(-32, 33) if zero_point is None else zero_point)
            sim = (self.rng.integers(-128, 128, (_CALIB, *shape)) - z) * s
            t = _Tensor(name, shape, "int8", np.array([s], np.float32), np.array([z], np.int64), sim=sim)
        elif dtype == "int16":  # symmetric: zero point 0
            s = float(np.float32(self.rng.uniform(1e-4, 1e-3) if scale is None else scale))
            sim = self.rng.integers(-32768, 32768, (_CALIB, *shape)) * s
            t = _Tensor(name, shape, "int16", np.array([s], np.float32), np.array([0], np.int64), sim=sim)
        elif dtype == "int32":
            if scale is None:
                raise ValueError("an int32 input takes a scale")
            s = float(np.float32(scale))
            sim = self.rng.integers(-(1 << 20), 1 << 20, (_CALIB, *shape)) * s
            t = _Tensor(name, shape, "int32", np.array([s], np.float32), np.array([0], np.int64), sim=sim)
        elif dtype == "float32":
            if scale is not None or zero_point is not None:
                raise ValueError("float32 inputs carry no quantization")
            t = _Tensor(name, shape, "float32", sim=self.rng.uniform(*FLOAT_INPUT_RANGE, (_CALIB, *shape)))
        else:
            raise ValueError(f"input dtype must be 'int8', 'int16', 'int32' or 'float32', got {dtype!r}")
        self._inputs.append(self._add_tensor(t))
        return self._inputs[-1]

    def conv2d(self, x, out_channels, kernel=(3, 3), stride=(1, 1), padding="SAME", dilation=(1, 1),
               activation="NONE", per_channel=True, bias=True, bias32=False) -> int:
        """``bias32`` (16x8 only): an int32 bias, quantized_bias_type INT32 in the options."""
        t = self._int8(x, 4)
        n, h, w, c = t.shape
        k, s, d = _pair(kernel), _pair(stride), _pair(dilation)
        out, pads = _geometry((h, w), k, s, d, padding)
        name = self._name("conv2d")
        wq, ws = self._weights((out_channels, *k, c), out_channels if per_channel else 1, k[0] * k[1] * c)
        wf = (wq * ws.reshape(-1, 1, 1, 1)).transpose(1, 2, 3, 0).astype(np.float64)  # (KH, KW, C, O)

        def conv(v):
            return sum(p @ wf[i, j] for i, j, p in _taps(v, k, s, d, out, pads))

        # LiteRT's int8 CONV_2D requires a bias tensor, so bias=False means an all-zero bias.
        bscale = (np.float32(self._q(x)[0]) * ws).astype(np.float32)
        bq = self._bias(conv(t.sim), bscale.astype(np.float64), self._bias_type(x, bias32)) if bias else \
            np.zeros(out_channels, self._bias_type(x, bias32))
        bf = bq * bscale.astype(np.float64)
        inputs = [x, self._const(f"{name}/weights", wq, "int8", ws, qdim=0),
                  self._const(f"{name}/bias", bq, self._bias_type(x, bias32), bscale, qdim=0)]
        opts = _opts("Conv2DOptions", Padding=_PADDING[padding], StrideW=s[1], StrideH=s[0],
                     FusedActivationFunction=self._check_act(activation),
                     DilationWFactor=d[1], DilationHFactor=d[0],
                     **({"QuantizedBiasType": fb.TensorType.INT32} if bias32 else {}))
        return self._emit(name, Op.CONV_2D, 8 if bias32 else 3, inputs, [x], lambda v: conv(v) + bf, (n, *out, out_channels),
                          act=activation, options=opts)

    def depthwise_conv2d(self, x, multiplier=1, kernel=(3, 3), stride=(1, 1), padding="SAME", dilation=(1, 1),
                         activation="NONE") -> int:
        t = self._int8(x, 4)
        n, h, w, c = t.shape
        k, s, d = _pair(kernel), _pair(stride), _pair(dilation)
        out, pads = _geometry((h, w), k, s, d, padding)
        name = self._name("depthwise_conv2d")
        oc = c * multiplier
        wq, ws = self._weights((1, *k, oc), oc, k[0] * k[1])
        wf = (wq[0] * ws).astype(np.float64)  # (KH, KW, C*M); output channel o reads input o // M

        def dwconv(v):
            return sum(np.repeat(p, multiplier, axis=-1) * wf[i, j] for i, j, p in _taps(v, k, s, d, out, pads))

        bscale = (np.float32(self._q(x)[0]) * ws).astype(np.float32)
        bq = self._bias(dwconv(t.sim), bscale.astype(np.float64), self._bias_type(x))
        bf = bq * bscale.astype(np.float64)
        inputs = [x, self._const(f"{name}/weights", wq, "int8", ws, qdim=3),
                  self._const(f"{name}/bias", bq, self._bias_type(x), bscale, qdim=0)]
        opts = _opts("DepthwiseConv2DOptions", Padding=_PADDING[padding], StrideW=s[1], StrideH=s[0],
                     DepthMultiplier=multiplier, FusedActivationFunction=self._check_act(activation),
                     DilationWFactor=d[1], DilationHFactor=d[0])
        return self._emit(name, Op.DEPTHWISE_CONV_2D, 3, inputs, [x], lambda v: dwconv(v) + bf,
                          (n, *out, oc), act=activation, options=opts)

    def transpose_conv(self, x, out_channels, kernel=(3, 3), stride=(2, 2), padding="SAME", out_size=None,
                       activation="NONE", per_channel=True, bias=True, computed_shape=False) -> int:
        """TRANSPOSE_CONV; ``out_size`` (H, W) defaults to the input's times the stride (SAME) or
        (in - 1) * stride + kernel (VALID). ``computed_shape``: the output shape computed from the
        input's as a converter emits it (SHAPE, then int32 MUL and ADD), not a constant."""
        t = self._int8(x, rank=4)
        n, h, w, c = t.shape
        k, s = _pair(kernel), _pair(stride)
        if out_size is None:
            out_size = (h * s[0], w * s[1]) if padding == "SAME" else ((h - 1) * s[0] + k[0], (w - 1) * s[1] + k[1])
        oh, ow = out_size
        from network_parser.conv_geometry import pad_before
        pads = pad_before(oh, k[0], s[0], 1, padding), pad_before(ow, k[1], s[1], 1, padding)
        wq, ws = self._weights((out_channels, *k, c), out_channels if per_channel else 1, k[0] * k[1] * c / (s[0] * s[1]))
        wf = wq.astype(np.float64) * (ws[:, None, None, None] if per_channel else ws[0])
        name = self._name("transpose_conv")

        def tconv(v):
            full = np.zeros((len(v), n, (h - 1) * s[0] + k[0] + oh, (w - 1) * s[1] + k[1] + ow, out_channels))
            for i in range(k[0]):
                for j in range(k[1]):
                    full[:, :, i:i + (h - 1) * s[0] + 1:s[0], j:j + (w - 1) * s[1] + 1:s[1], :] += \
                        np.einsum("snhwc,oc->snhwo", v, wf[:, i, j, :])
            return full[:, :, pads[0]:pads[0] + oh, pads[1]:pads[1] + ow, :]

        bscale = (np.float32(self._q(x)[0]) * ws).astype(np.float32)
        shape = self._const(f"{name}/output_shape", [n, oh, ow, out_channels], "int32")
        if computed_shape:  # (n, h, w, c) * (1, oh / h, ow / w, 0) + (0, 0, 0, out_channels)
            if oh % h or ow % w:
                raise ValueError("computed_shape needs an output size that is a multiple of the input's")
            steps = [(Op.SHAPE, [x], _opts("ShapeOptions", OutType=fb.TensorType.INT32)),
                     (Op.MUL, [self._const(f"{name}/shape_scale", [1, oh // h, ow // w, 0], "int32")], None),
                     (Op.ADD, [self._const(f"{name}/shape_channels", [0, 0, 0, out_channels], "int32")], None)]
            shape = None
            for code, extra, opts in steps:
                out = self._add_tensor(_Tensor(f"{name}/shape_{len(self._ops)}", (4,), "int32"))
                self._ops.append(_Op(code, 1, ([x] if code == Op.SHAPE else [shape, *extra]), [out],
                                     opts or (_opts("MulOptions") if code == Op.MUL else _opts("AddOptions")),
                                     [], lambda: np.zeros(4), "NONE"))
                shape = out
        inputs = [shape, self._const(f"{name}/weights", wq, "int8", ws, qdim=0), x]
        bf = 0.0
        if bias:  # optional for TRANSPOSE_CONV
            bq = self._bias(tconv(t.sim), bscale.astype(np.float64), self._bias_type(x))
            inputs.append(self._const(f"{name}/bias", bq, self._bias_type(x), bscale, qdim=0))
            bf = bq * bscale.astype(np.float64)
        opts = _opts("TransposeConvOptions", Padding=_PADDING[padding], StrideW=s[1], StrideH=s[0],
                     FusedActivationFunction=self._check_act(activation))
        return self._emit(name, Op.TRANSPOSE_CONV, 4, inputs, [x], lambda v: tconv(v) + bf, (n, oh, ow, out_channels),
                          act=activation, options=opts)

    def batch_matmul(self, x, y, adj_x=False, adj_y=False) -> int:
        """BATCH_MATMUL of two int8 activations (batch axes broadcast)."""
        tx, ty = self._int8(x), self._int8(y)
        a_shape = tx.shape[:-2] + ((tx.shape[-1], tx.shape[-2]) if adj_x else tx.shape[-2:])
        b_shape = ty.shape[:-2] + ((ty.shape[-1], ty.shape[-2]) if adj_y else ty.shape[-2:])
        out_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + (a_shape[-2], b_shape[-1])

        def fn(va, vb):
            va = np.swapaxes(va, -1, -2) if adj_x else va
            vb = np.swapaxes(vb, -1, -2) if adj_y else vb
            r = len(out_shape)
            return _bcast(va, r) @ _bcast(vb, r)

        return self._emit(self._name("batch_matmul"), Op.BATCH_MATMUL, 4, [x, y], [x, y], fn, out_shape,
                          options=_opts("BatchMatMulOptions", AdjX=bool(adj_x), AdjY=bool(adj_y)))

    def lstm(self, x, units, time_major=False, cell_log2=-11, cell_clip=8.0, hidden_zero_point=None, cifg=False,
             peephole=False, projection=None, projection_clip=0.0, layer_norm=False) -> int:
        """UNIDIRECTIONAL_SEQUENCE_LSTM in TFLite's integer form: int8 weights (one scale each), int32
        biases, variable int8 hidden and int16 cell state (scale 2^cell_log2), the output quantized
        as the hidden state (scale 2^-7, a small zero point). ``cifg``: no input gate (coupled to
        the forget gate); ``peephole``: int16 cell-to-gate weights; ``projection``: the hidden
        state's size, projected from the gated cells (its own quantization, scale 2^-6);
        ``layer_norm``: each gate's sum normalized over the cells (int16 coefficients, inputs
        20-23, symmetric; the gate biases at the coefficients' scale times 2^-10, as TFLite's
        quantizer writes them; intermediates 0-3: the pre-norm sums' int16 scales, calibrated)."""
        t = self._int8(x, rank=3)
        n_in = t.shape[2]
        steps, batch = (t.shape[0], t.shape[1]) if time_major else (t.shape[1], t.shape[0])
        n_out = projection or units
        name = self._name("lstm")
        xs = float(self._q(x)[0])
        zp = int(self.rng.integers(-4, 5)) if hidden_zero_point is None else hidden_zero_point
        hq = (2.0 ** -7, zp)  # the gated hidden value's (intermediate 4)
        oq = (2.0 ** -6, int(self.rng.integers(-4, 5))) if projection else hq  # the hidden state's and the output's
        gates, norms = [], []
        for g in "ifco":
            wi, si = self._weights((units, n_in), 1, n_in)
            wr, sr = self._weights((units, n_out), 1, n_out)
            bs = np.float32(xs) * si
            if layer_norm:  # coefficients ~ U(0.3, 1.7), a tenth negative; int16 symmetric
                lf = self.rng.uniform(0.3, 1.7, units) * np.where(self.rng.random(units) < 0.1, -1, 1)
                ls = np.array([np.abs(lf).max() / 32767.0], np.float32)
                norms.append((np.clip(np.round(lf / ls[0]), -32767, 32767).astype(np.int16), ls))
                bs = ls * np.float32(2.0 ** -10)
            bq = np.clip(np.round(self.rng.normal(1.0 if g == "f" else 0.0, 0.5, units) / bs[0]), -2**31 + 1, 2**31 - 1)
            gates.append((wi, si, wr, sr, bq.astype(np.int32), bs))
        first = 1 if cifg else 0
        w_in = [-1] * first + [self._const(f"{name}/input_to_{g}", wi, "int8", si)
                               for g, (wi, si, *_) in list(zip("ifco", gates))[first:]]
        w_rec = [-1] * first + [self._const(f"{name}/recurrent_to_{g}", wr, "int8", sr)
                                for g, (_, _, wr, sr, _, _) in list(zip("ifco", gates))[first:]]
        biases = [-1] * first + [self._const(f"{name}/{g}_bias", bq, "int32", bs)
                                 for g, (*_, bq, bs) in list(zip("ifco", gates))[first:]]
        peep = [-1, -1, -1]
        if peephole:
            peep = [-1 if cifg and g == "i" else self._const(
                f"{name}/cell_to_{g}", self.rng.integers(-20000, 20001, units).astype(np.int16), "int16",
                np.array([self.rng.uniform(0.2, 1.0) / 32768], np.float32)) for g in "ifo"]
        proj = [-1, -1]
        if projection:
            wp, sp = self._weights((n_out, units), 1, units)
            pbs = np.float32(hq[0]) * sp
            proj = [self._const(f"{name}/projection", wp, "int8", sp),
                    self._const(f"{name}/projection_bias", self.rng.integers(-500, 500, n_out).astype(np.int32), "int32", pbs)]
        h = self._add_tensor(_Tensor(f"{name}/hidden", (batch, n_out), "int8", np.array([oq[0]], np.float32),
                                     np.array([oq[1]], np.int64), variable=True))
        c = self._add_tensor(_Tensor(f"{name}/cell", (batch, units), "int16", np.array([2.0 ** cell_log2], np.float32),
                                     np.zeros(1, np.int64), variable=True))
        floats = [(wi * si[0], wr * sr[0], bq * bs[0]) for wi, si, wr, sr, bq, bs in gates]
        wpf = proj and projection and (self._tensors[proj[0]], )
        maxima = [0.0] * 4  # the gates' largest pre-norm sums (layer norm: the intermediates' scales)

        def run(v):  # the float LSTM, for the calibration of what follows
            seq = v if not time_major else v.transpose(0, 2, 1, 3)  # (calib, batch, steps, in)
            hs = np.zeros((len(v), batch, n_out))
            cs = np.zeros((len(v), batch, units))
            out = np.zeros((len(v), batch, steps, n_out))
            sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
            for step in range(steps):
                a = [seq[:, :, step] @ wi.T + hs @ wr.T + (0 if layer_norm else b) for wi, wr, b in floats]
                if layer_norm:
                    for n, z in enumerate(a):
                        maxima[n] = max(maxima[n], float(np.abs(z).max()))
                    a = [(z - z.mean(-1, keepdims=True)) / (z.std(-1, keepdims=True) + 1e-8) * (lq * ls[0]) + b
                         for z, (lq, ls), (_, _, b) in zip(a, norms, floats)]
                i = 1 - sig(a[1]) if cifg else sig(a[0])
                cs = np.clip(sig(a[1]) * cs + i * np.tanh(a[2]), -cell_clip, cell_clip)
                hs = sig(a[3]) * np.tanh(cs)
                if projection:
                    hs = np.clip(hs, -1, 1) @ (wp * sp[0]).T
                out[:, :, step] = hs
            return out if not time_major else out.transpose(0, 2, 1, 3)

        del wpf
        run(t.sim)  # the pre-norm sums' ranges
        inter = [self._add_tensor(_Tensor(f"{name}/intermediate{i}", (0,), "int16",
                                          np.array([max(m, 1e-3) * self.rng.uniform(1.0, 1.3) / 32767.0], np.float32),
                                          np.zeros(1, np.int64)) if layer_norm else
                                  _Tensor(f"{name}/intermediate{i}", (0,), "float32")) for i, m in enumerate(maxima)]
        inter.append(self._add_tensor(_Tensor(f"{name}/hidden_scale", (0,), "int8", np.array([hq[0]], np.float32),
                                              np.array([hq[1]], np.int64))))
        lns = [-1] * 4
        if layer_norm:
            lns = [-1] * first + [self._const(f"{name}/{g}_layer_norm", lq, "int16", ls)
                                  for g, (lq, ls) in list(zip("ifco", norms))[first:]]
        inputs = [x, *w_in, *w_rec, *peep, *biases, *proj, h, c, *lns]
        opts = _opts("UnidirectionalSequenceLSTMOptions", FusedActivationFunction=fb.ActivationFunctionType.TANH,
                     CellClip=float(cell_clip), ProjClip=float(projection_clip), TimeMajor=bool(time_major))
        out = self._emit(name, Op.UNIDIRECTIONAL_SEQUENCE_LSTM, 1, inputs, [x], run, t.shape[:2] + (n_out,), quant=oq,
                         options=opts)
        self._ops[-1].intermediates = tuple(inter)
        return out

    # per state type: (feature products' range over the state scale, time weights' largest value,
    # bias bound, op version)
    _SVDF_STATE = {"int16": (16384.0, 32767, 2000, 3), "int8": (64.0, 127, 200, 4)}

    def svdf(self, x, units, rank=1, memory=4, bias=True, activation="RELU", state_dtype="int16",
             state_zero_point=0) -> int:
        """SVDF in TFLite's integer form: int8 feature weights, int16 time weights, int32 bias, a
        variable int16 activation state (batch, memory * units * rank), int8 output;
        ``state_dtype="int8"``: TFLite Micro's int8 time weights and state (with a zero point)."""
        span, w_max, b_max, version = self._SVDF_STATE[state_dtype]
        t = self._int8(x, rank=2)
        batch, n_in = t.shape
        filters = units * rank
        name = self._name("svdf")
        wf, sf = self._weights((filters, n_in), 1, n_in)
        feature = t.sim @ (wf * sf[0]).T  # calibration: the feature products' range
        state_scale = float(np.float32(max(np.abs(feature).max(), 1e-3) / span))
        wt = self.rng.integers(-w_max, w_max + 1, (filters, memory)).astype(state_dtype)
        st = np.array([1.0 / (float(w_max) * memory)], np.float32)
        inputs = [x, self._const(f"{name}/weights_feature", wf, "int8", sf),
                  self._const(f"{name}/weights_time", wt, state_dtype, st)]
        if bias:
            bscale = np.array([np.float32(state_scale) * st[0]], np.float32)
            bq = self.rng.integers(-b_max, b_max, units).astype(np.int32)
            inputs.append(self._const(f"{name}/bias", bq, "int32", bscale))
        else:
            inputs.append(-1)
        state = self._add_tensor(_Tensor(f"{name}/state", (batch, memory * filters), state_dtype,
                                         np.array([state_scale], np.float32),
                                         np.array([state_zero_point], np.int64), variable=True))
        inputs.append(state)
        wtf = wt.astype(np.float64) * float(st[0])

        def run(v):  # one invocation from zero state: only the newest time slot holds the features
            f = v @ (wf * sf[0]).T  # (calib, batch, filters)
            return (f * wtf[:, -1]).reshape(len(v), batch, units, rank).sum(-1)
        opts = _opts("SVDFOptions", Rank=int(rank), FusedActivationFunction=self._check_act(activation))
        return self._emit(name, Op.SVDF, version, inputs, [x], run, (batch, units), act=activation, options=opts)

    def fully_connected(self, x, units, activation="NONE", keep_num_dims=False, bias=True, bias32=False) -> int:
        """``bias32`` (16x8 only): an int32 bias, quantized_bias_type INT32 in the options."""
        t = self._int8(x)
        in_f = t.shape[-1]
        out_shape = (*t.shape[:-1], units) if keep_num_dims else (math.prod(t.shape[:-1]), units)
        name = self._name("fully_connected")
        wq, ws = self._weights((units, in_f), 1, in_f)
        wf = (wq * ws[0]).astype(np.float64).T

        def fc(v):
            return (v.reshape(len(v), -1, in_f) @ wf).reshape(len(v), *out_shape)

        inputs = [x, self._const(f"{name}/weights", wq, "int8", ws)]
        fn = fc
        if bias:
            bscale = (np.float32(self._q(x)[0]) * ws).astype(np.float32)
            bq = self._bias(fc(t.sim), bscale.astype(np.float64), self._bias_type(x, bias32))
            inputs.append(self._const(f"{name}/bias", bq, self._bias_type(x, bias32), bscale))
            bf = bq * bscale.astype(np.float64)
            fn = lambda v: fc(v) + bf  # noqa: E731
        version = 11 if bias32 else 6 if not bias else 5 if keep_num_dims else 4
        opts = _opts("FullyConnectedOptions", FusedActivationFunction=self._check_act(activation),
                     KeepNumDims=bool(keep_num_dims),
                     **({"QuantizedBiasType": fb.TensorType.INT32} if bias32 else {}))
        return self._emit(name, Op.FULLY_CONNECTED, version, inputs, [x], fn, out_shape, act=activation,
                          options=opts)

    def _binary(self, kind, code, a, b, activation, np_fn, pot_scale_int16=None):
        ta, tb = self._int8(a), self._int8(b)
        out_shape = np.broadcast_shapes(ta.shape, tb.shape)
        r = len(out_shape)
        pot = {}  # ADD / SUB of int16: the general kernel, as 16x8 converters write it (unless asked)
        if code in (Op.ADD, Op.SUB) and ta.dtype == "int16":
            pot = {"PotScaleInt16": bool(pot_scale_int16)}
        opts = _opts(f"{kind.capitalize()}Options", FusedActivationFunction=self._check_act(activation), **pot)
        return self._emit(self._name(kind), code, 2, [a, b], [a, b],
                          lambda va, vb: np_fn(_bcast(va, r), _bcast(vb, r)), out_shape,
                          act=activation, options=opts)

    def add(self, a, b, activation="NONE", pot_scale_int16=None) -> int:
        """``pot_scale_int16`` (int16 operands): the options' flag (written False unless given)."""
        return self._binary("add", Op.ADD, a, b, activation, np.add, pot_scale_int16)

    def sub(self, a, b, activation="NONE") -> int:
        return self._binary("sub", Op.SUB, a, b, activation, np.subtract)

    def prelu(self, x, alpha) -> int:
        """PRELU with a constant ``alpha`` (broadcast against x), quantized int8 with its own scale."""
        t = self._int8(x)
        alpha = np.asarray(alpha, np.float64)
        name = self._name("prelu")
        lo, hi = min(alpha.min(), 0.0), max(alpha.max(), 0.0)
        scale = float(np.float32(max(hi - lo, 1e-3) / 255.0))
        zp = int(np.clip(round(-128 - lo / scale), -128, 127))
        aq = np.clip(np.round(alpha / scale) + zp, -128, 127).astype(np.int8)
        at = self._const(f"{name}/alpha", aq, "int8", np.array([scale], np.float32))
        self._tensors[at].zero_point = np.array([zp], np.int64)
        real = (aq.astype(np.float64) - zp) * scale
        r = len(t.shape)
        return self._emit(name, Op.PRELU, 1, [x, at], [x], lambda v: np.where(v >= 0, v, v * _bcast(real[None], r)),
                          t.shape)

    def squared_difference(self, a, b) -> int:
        ta, tb = self._int8(a), self._int8(b)
        out_shape = np.broadcast_shapes(ta.shape, tb.shape)
        r = len(out_shape)
        return self._emit(self._name("squared_difference"), Op.SQUARED_DIFFERENCE, 2, [a, b], [a, b],
                          lambda va, vb: (_bcast(va, r) - _bcast(vb, r)) ** 2, out_shape)

    def maximum(self, a, b) -> int:
        return self._min_max("maximum", Op.MAXIMUM, a, b, np.maximum)

    def minimum(self, a, b) -> int:
        return self._min_max("minimum", Op.MINIMUM, a, b, np.minimum)

    def _min_max(self, kind, code, a, b, np_fn):
        """The output keeps a's quantization: LiteRT compares raw values (b should share it)."""
        ta, tb = self._int8(a), self._int8(b)
        out_shape = np.broadcast_shapes(ta.shape, tb.shape)
        r = len(out_shape)
        return self._emit(self._name(kind), code, 2, [a, b], [a, b], lambda va, vb: np_fn(_bcast(va, r), _bcast(vb, r)),
                          out_shape, quant=self._q(a))

    def mul(self, a, b, activation="NONE") -> int:
        out = self._binary("mul", Op.MUL, a, b, activation, np.multiply)
        if self._q(a)[0] * self._q(b)[0] / self._q(out)[0] >= 1.0:
            self._ops[-1].version = 3  # rescale >= 1 needs MUL v3
        return out

    def _pool(self, kind, code, x, filter, stride, padding, activation, reduce):
        t = self._int8(x, 4)
        k, s = _pair(filter), _pair(stride)
        out, pads = _geometry(t.shape[1:3], k, s, (1, 1), padding)
        # Padding is NaN so that max/mean ignore it, like TFLite (average counts valid taps only).

        def fn(v):
            return reduce(np.stack([p for _, _, p in _taps(v, k, s, (1, 1), out, pads, np.nan)]), axis=0)

        opts = _opts("Pool2DOptions", Padding=_PADDING[padding], StrideW=s[1], StrideH=s[0],
                     FilterWidth=k[1], FilterHeight=k[0], FusedActivationFunction=self._check_act(activation))
        return self._emit(self._name(kind), code, 2, [x], [x], fn, (t.shape[0], *out, t.shape[3]),
                          act=activation, quant=self._q(x), options=opts)

    def avg_pool(self, x, filter=(2, 2), stride=(2, 2), padding="VALID", activation="NONE") -> int:
        return self._pool("avg_pool", Op.AVERAGE_POOL_2D, x, filter, stride, padding, activation, np.nanmean)

    def max_pool(self, x, filter=(2, 2), stride=(2, 2), padding="VALID", activation="NONE") -> int:
        return self._pool("max_pool", Op.MAX_POOL_2D, x, filter, stride, padding, activation, np.nanmax)

    def mean(self, x, axes=(1, 2), keep_dims=True) -> int:
        t = self._int8(x)
        rank = len(t.shape)
        axes = sorted({int(a) % rank for a in np.atleast_1d(axes)})
        out_shape = tuple(1 if i in axes else dim for i, dim in enumerate(t.shape) if keep_dims or i not in axes)
        name = self._name("mean")
        ax = self._const(f"{name}/axes", axes, "int32")
        fn = lambda v: v.mean(axis=tuple(a + 1 for a in axes), keepdims=keep_dims)  # noqa: E731
        return self._emit(name, Op.MEAN, 2, [x, ax], [x], fn, out_shape,
                          options=_opts("ReducerOptions", KeepDims=bool(keep_dims)))

    def reshape(self, x, shape) -> int:
        t = self._int8(x)
        shape = [int(d) for d in shape]
        if shape.count(-1) == 1:
            shape[shape.index(-1)] = math.prod(t.shape) // -math.prod(shape)
        if math.prod(shape) != math.prod(t.shape):
            raise ValueError(f"cannot reshape {t.shape} to {shape}")
        name = self._name("reshape")
        sh = self._const(f"{name}/shape", shape, "int32")
        return self._emit(name, Op.RESHAPE, 1, [x, sh], [x], lambda v: v.reshape(len(v), *shape), shape,
                          quant=self._q(x), options=_opts("ReshapeOptions", NewShape=shape))

    def squeeze(self, x, dims=None) -> int:
        t = self._int8(x)
        rank = len(t.shape)
        dims = ([i for i, dim in enumerate(t.shape) if dim == 1] if dims is None
                else sorted({int(a) % rank for a in np.atleast_1d(dims)}))
        if any(t.shape[i] != 1 for i in dims):
            raise ValueError(f"cannot squeeze dims {dims} of {t.shape}")
        out_shape = tuple(dim for i, dim in enumerate(t.shape) if i not in dims)
        return self._emit(self._name("squeeze"), Op.SQUEEZE, 1, [x], [x], lambda v: v.reshape(len(v), *out_shape),
                          out_shape, quant=self._q(x), options=_opts("SqueezeOptions", SqueezeDims=dims))

    def softmax(self, x, beta=1.0, out_dtype=None) -> int:
        """``out_dtype="int16"`` on int8 values: the widening form (scale 1/65536, zero point -32768)."""
        t = self._int8(x)

        def fn(v):
            e = np.exp(beta * (v - v.max(axis=-1, keepdims=True)))
            return e / e.sum(axis=-1, keepdims=True)

        if out_dtype == "int16" and t.dtype == "int8":
            return self._emit(self._name("softmax"), Op.SOFTMAX, 3, [x], [x], fn, t.shape, dtype="int16",
                              quant=(1.0 / 65536.0, -32768), options=_opts("SoftmaxOptions", Beta=float(beta)))
        return self._emit(self._name("softmax"), Op.SOFTMAX, 2, [x], [x], fn, t.shape,
                          quant=(1.0 / 32768.0, 0) if t.dtype == "int16" else _FIXED_SIGMOID_QUANT,
                          options=_opts("SoftmaxOptions", Beta=float(beta)))

    def l2_normalization(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("l2_normalization"), Op.L2_NORMALIZATION, 2, [x], [x],
                          lambda v: v / np.maximum(np.sqrt((v * v).sum(axis=-1, keepdims=True)), 1e-6), t.shape,
                          quant=(1.0 / 128, 0))

    def log_softmax(self, x) -> int:
        t = self._int8(x)

        def fn(v):
            z = v - v.max(axis=-1, keepdims=True)
            return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

        return self._emit(self._name("log_softmax"), Op.LOG_SOFTMAX, 1, [x], [x], fn, t.shape,
                          quant=(16.0 / 256, 127))

    def logistic(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("logistic"), Op.LOGISTIC, 2, [x], [x], lambda v: 1.0 / (1.0 + np.exp(-v)),
                          t.shape, quant=(1.0 / 32768.0, 0) if t.dtype == "int16" else _FIXED_SIGMOID_QUANT)

    def hard_swish(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("hard_swish"), Op.HARD_SWISH, 1, [x], [x],
                          lambda v: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0, t.shape)

    def leaky_relu(self, x, alpha=0.2) -> int:
        t = self._int8(x)
        return self._emit(self._name("leaky_relu"), Op.LEAKY_RELU, 1, [x], [x], lambda v: np.where(v >= 0, v, alpha * v),
                          t.shape, options=_opts("LeakyReluOptions", Alpha=float(alpha)))

    def relu(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("relu"), Op.RELU, 2, [x], [x], lambda v: v, t.shape, act="RELU")

    def abs(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("abs"), Op.ABS, 2, [x], [x], np.abs, t.shape)

    def neg(self, x) -> int:
        """NEG; LiteRT negates the stored values (the output keeps the input's quantization here)."""
        t = self._int8(x)
        return self._emit(self._name("neg"), Op.NEG, 1, [x], [x], lambda v: -v, t.shape, quant=self._q(x))

    def tanh(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("tanh"), Op.TANH, 2, [x], [x], np.tanh, t.shape,
                          quant=(1.0 / 32768.0, 0) if t.dtype == "int16" else None)

    def exp(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("exp"), Op.EXP, 2, [x], [x], np.exp, t.shape)

    def log(self, x) -> int:
        """LOG; the reference refuses to run on inputs at or below zero."""
        t = self._int8(x)
        return self._emit(self._name("log"), Op.LOG, 2, [x], [x], lambda v: np.log(np.maximum(v, 1e-3)), t.shape)

    def rsqrt(self, x) -> int:
        """RSQRT; the reference refuses to run on inputs at or below zero."""
        t = self._int8(x)
        return self._emit(self._name("rsqrt"), Op.RSQRT, 2, [x], [x], lambda v: 1 / np.sqrt(np.maximum(v, 1e-3)),
                          t.shape)

    def sqrt(self, x) -> int:
        """SQRT; the reference refuses to run on inputs below zero."""
        t = self._int8(x)
        return self._emit(self._name("sqrt"), Op.SQRT, 1, [x], [x], lambda v: np.sqrt(np.maximum(v, 0)), t.shape)

    def relu_n1_to_1(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("relu_n1_to_1"), Op.RELU_N1_TO_1, 1, [x], [x], lambda v: np.clip(v, -1.0, 1.0),
                          t.shape)

    def relu_0_to_1(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("relu_0_to_1"), Op.RELU_0_TO_1, 1, [x], [x], lambda v: np.clip(v, 0.0, 1.0),
                          t.shape)

    def relu6(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("relu6"), Op.RELU6, 2, [x], [x], lambda v: v, t.shape, act="RELU6")

    def pad(self, x, paddings) -> int:
        t = self._int8(x)
        p = np.asarray(paddings, np.int32).reshape(-1, 2)
        if len(p) != len(t.shape) or (p < 0).any():
            raise ValueError(f"paddings must be [[before, after]] >= 0 for each of the {len(t.shape)} dims")
        out_shape = tuple(int(dim + a + b) for dim, (a, b) in zip(t.shape, p))
        name = self._name("pad")
        pt = self._const(f"{name}/paddings", p, "int32")
        widths = [(0, 0)] + [tuple(r) for r in p.tolist()]  # float 0 == zero point, as TFLite pads
        return self._emit(name, Op.PAD, 4 if len(t.shape) > 4 else 2, [x, pt], [x], lambda v: np.pad(v, widths),
                          out_shape, quant=self._q(x))

    def concat(self, xs, axis=-1, activation="NONE") -> int:
        self._check_act(activation)
        ts = [self._int8(x) for x in xs]
        rank = len(ts[0].shape)
        ax = int(axis) % rank
        for tt in ts:
            if len(tt.shape) != rank or any(a != b for i, (a, b) in enumerate(zip(tt.shape, ts[0].shape)) if i != ax):
                raise ValueError(f"concat shapes differ outside axis {ax}: {[u.shape for u in ts]}")
        name = self._name("concat")
        quants = {self._q(x) for x in xs}
        if len(quants) == 1:
            quant = quants.pop()
        else:  # LiteRT int8 concat needs one shared quantization: requantize the odd ones out
            both = np.concatenate([tt.sim.ravel() for tt in ts])
            quant = self._range_quant16(both) if ts[0].dtype == "int16" else self._range_quant(both)
            xs = [x if self._q(x) == quant else self._requantize(x, quant, f"{name}/requant_{i}")
                  for i, x in enumerate(xs)]
        out_shape = list(ts[0].shape)
        out_shape[ax] = sum(tt.shape[ax] for tt in ts)
        out = self._emit(name, Op.CONCATENATION, 2, xs, xs, lambda *vs: np.concatenate(vs, axis=ax + 1),
                         out_shape, quant=quant, options=_opts("ConcatenationOptions", Axis=ax))
        if activation == "NONE":
            return out
        # LiteRT's CONCATENATION rejects fused activations: apply it as a separate op instead.
        code = {"RELU": Op.RELU, "RELU6": Op.RELU6, "RELU_N1_TO_1": Op.RELU_N1_TO_1}[activation]
        return self._emit(f"{name}/{activation.lower()}", code, 1 if code == Op.RELU_N1_TO_1 else 2, [out], [out],
                          lambda v: v, out_shape, act=activation, quant=quant)

    def _requantize(self, x, quant, name):
        return self._emit(name, Op.QUANTIZE, 1, [x], [x], lambda v: v, self._tensors[x].shape, quant=quant)

    def quantize(self, x, scale=None, zero_point=None, dtype="int8") -> int:
        """float32 -> int8 / int16, or a requantization between int8, int16 and int32.  Without
        scale / zero point the output quantization is calibrated; with only a scale the zero point
        is 0 (int16 is always symmetric; int32 takes a scale)."""
        t = self._tensors[x]
        if t.dtype not in ("float32", *_RANGES) or t.sim is None or dtype not in _RANGES or \
                (dtype == "int32" and scale is None):
            raise ValueError(f"quantize needs a float32 or integer activation and an integer type, got {t.name} "
                             f"({t.dtype}) -> {dtype}")
        quant = None
        if scale is not None or zero_point is not None:
            calibrated = (self._range_quant16 if dtype == "int16" else self._range_quant)(t.sim)[0]
            quant = (float(np.float32(scale if scale is not None else calibrated)),
                     int(zero_point if zero_point is not None else 0))
        return self._emit(self._name("quantize"), Op.QUANTIZE, 1, [x], [x],
                          lambda v: v, t.shape, dtype=dtype, quant=quant)

    def float_op(self, x, op: str = "LOG_SOFTMAX") -> int:
        """A float32 op on a float32 tensor: post-processing after a DEQUANTIZE, as a model trained
        in float and quantized after training may end (LOG_SOFTMAX, SOFTMAX, LOGISTIC, RELU)."""
        t = self._tensors[x]
        if t.dtype != "float32":
            raise ValueError(f"tensor {t.name} is {t.dtype}; float_op takes float32 (use dequantize())")

        def log_softmax(v):
            z = v - v.max(axis=-1, keepdims=True)
            return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

        def softmax(v):
            e = np.exp(v - v.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        table = {"LOG_SOFTMAX": (Op.LOG_SOFTMAX, log_softmax, None),
                 "SOFTMAX": (Op.SOFTMAX, softmax, _opts("SoftmaxOptions", Beta=1.0)),
                 "LOGISTIC": (Op.LOGISTIC, lambda v: 1.0 / (1.0 + np.exp(-v)), None),
                 "RELU": (Op.RELU, lambda v: np.maximum(v, 0), None)}
        code, fn, options = table[op]
        return self._emit(self._name(op.lower()), code, 1, [x], [x], fn, t.shape, dtype="float32", options=options)

    def dequantize(self, x) -> int:
        t = self._int8(x)
        return self._emit(self._name("dequantize"), Op.DEQUANTIZE, 2, [x], [x],
                          lambda v: v, t.shape, dtype="float32")

    def transpose(self, x, perm) -> int:
        t = self._int8(x)
        perm = [int(p) % len(t.shape) for p in perm]
        if sorted(perm) != list(range(len(t.shape))):
            raise ValueError(f"bad permutation {perm} for rank {len(t.shape)}")
        name = self._name("transpose")
        pt = self._const(f"{name}/perm", perm, "int32")
        rank = len(perm)
        version = 6 if rank > 5 else 4 if rank > 4 else 2
        return self._emit(name, Op.TRANSPOSE, version, [x, pt], [x],
                          lambda v: v.transpose(0, *[p + 1 for p in perm]),
                          tuple(t.shape[p] for p in perm), quant=self._q(x))

    def strided_slice(self, x, begin, end, strides, begin_mask=0, end_mask=0, shrink_axis_mask=0) -> int:
        from layer_analyzer.kernels import slice_axis  # the reference's bounds per axis
        t = self._int8(x)
        rank = len(t.shape)
        axes = [slice_axis(t.shape[d], begin[d], end[d], strides[d], bool(begin_mask >> d & 1),
                           bool(end_mask >> d & 1), bool(shrink_axis_mask >> d & 1)) for d in range(rank)]
        out_shape = tuple(len(r) for d, r in enumerate(axes) if not shrink_axis_mask >> d & 1)
        name = self._name("strided_slice")
        consts = [self._const(f"{name}/{what}", list(v), "int32") for what, v in
                  (("begin", begin), ("end", end), ("strides", strides))]
        idx = [list(r) for r in axes]

        def fn(v):
            return v[np.ix_(range(len(v)), *idx)].reshape(len(v), *out_shape)

        return self._emit(name, Op.STRIDED_SLICE, 4 if rank > 4 else 2, [x, *consts], [x], fn, out_shape,
                          quant=self._q(x), options=_opts("StridedSliceOptions", BeginMask=begin_mask, EndMask=end_mask,
                                                          ShrinkAxisMask=shrink_axis_mask))

    def slice(self, x, begin, size) -> int:
        t = self._int8(x)
        stops = [dim if s == -1 else b + s for dim, b, s in zip(t.shape, begin, size)]
        out_shape = tuple(e - b for b, e in zip(begin, stops))
        name = self._name("slice")
        consts = [self._const(f"{name}/{what}", list(v), "int32") for what, v in (("begin", begin), ("size", size))]
        return self._emit(name, Op.SLICE, 4 if len(t.shape) > 4 else 2, [x, *consts], [x],
                          lambda v: v[(slice(None), *(slice(b, e) for b, e in zip(begin, stops)))], out_shape,
                          quant=self._q(x))

    def _pieces(self, kind, code, version, inputs, x, axis, sizes, options, drop_axis=False) -> list[int]:
        """An op with one output per piece of x along ``axis`` (SPLIT, SPLIT_V, UNPACK)."""
        t = self._int8(x)
        name, outs, start = self._name(kind), [], 0
        for j, size in enumerate(sizes):
            shape = list(t.shape)
            shape[axis] = size
            if drop_axis:
                del shape[axis]
            sim = np.take(t.sim, range(start, start + size), axis=axis + 1)
            outs.append(self._add_tensor(_Tensor(f"{name}/out{j}", tuple(shape), "int8", t.scale, t.zero_point,
                                                 sim=sim.reshape(len(sim), *shape))))
            start += size
        bounds = np.cumsum([0, *sizes])

        def fn(v):
            return tuple(np.take(v, range(a, b), axis=axis + 1).reshape(len(v), *self._tensors[o].shape)
                         for a, b, o in zip(bounds, bounds[1:], outs))

        self._ops.append(_Op(code, version, list(inputs), outs, options, [x], fn, "NONE"))
        return outs

    def split(self, x, num, axis=-1) -> list[int]:
        t = self._int8(x)
        axis %= len(t.shape)
        at = self._const(f"{self._name('split_axis')}", np.array(axis, np.int32), "int32")
        return self._pieces("split", Op.SPLIT, 2, [at, x], x, axis, [t.shape[axis] // num] * num,
                            _opts("SplitOptions", NumSplits=num))

    def split_v(self, x, sizes, axis=-1) -> list[int]:
        t = self._int8(x)
        axis %= len(t.shape)
        st = self._const(f"{self._name('split_v_sizes')}", list(sizes), "int32")
        at = self._const(f"{self._name('split_v_axis')}", np.array(axis, np.int32), "int32")
        real = [t.shape[axis] - sum(v for v in sizes if v != -1) if v == -1 else v for v in sizes]
        return self._pieces("split_v", Op.SPLIT_V, 2, [x, st, at], x, axis, real,
                            _opts("SplitVOptions", NumSplits=len(sizes)))

    def unpack(self, x, axis=0) -> list[int]:
        t = self._int8(x)
        axis %= len(t.shape)
        return self._pieces("unpack", Op.UNPACK, 2, [x], x, axis, [1] * t.shape[axis],
                            _opts("UnpackOptions", Num=t.shape[axis], Axis=axis), drop_axis=True)

    def pack(self, xs, axis=0) -> int:
        ts = [self._int8(x) for x in xs]
        rank = len(ts[0].shape) + 1
        axis %= rank
        out_shape = ts[0].shape[:axis] + (len(xs),) + ts[0].shape[axis:]
        return self._emit(self._name("pack"), Op.PACK, 2, xs, xs, lambda *vs: np.stack(vs, axis=axis + 1), out_shape,
                          quant=self._q(xs[0]), options=_opts("PackOptions", ValuesCount=len(xs), Axis=axis))

    def gather(self, x, indices, axis=0) -> int:
        t = self._int8(x)
        axis %= len(t.shape)
        idx = np.asarray(indices, np.int32)
        name = self._name("gather")
        it = self._const(f"{name}/indices", idx, "int32")
        out_shape = t.shape[:axis] + idx.shape + t.shape[axis + 1:]
        return self._emit(name, Op.GATHER, 1, [x, it], [x], lambda v: np.take(v, idx, axis=axis + 1), out_shape,
                          quant=self._q(x), options=_opts("GatherOptions", Axis=axis))

    def gather_nd(self, x, indices) -> int:
        """GATHER_ND: ``indices`` (..., depth) rows of coordinates into the input's leading axes."""
        t = self._int8(x)
        idx = np.asarray(indices, np.int32)
        depth = idx.shape[-1]
        name = self._name("gather_nd")
        it = self._const(f"{name}/indices", idx, "int32")
        out_shape = idx.shape[:-1] + t.shape[depth:]
        return self._emit(name, Op.GATHER_ND, 1, [x, it], [x],
                          lambda v: np.stack([s[tuple(idx.reshape(-1, depth).T)].reshape(out_shape) for s in v]),
                          out_shape, quant=self._q(x))

    def expand_dims(self, x, axis) -> int:
        t = self._int8(x)
        axis %= len(t.shape) + 1
        name = self._name("expand_dims")
        at = self._const(f"{name}/axis", np.array(axis, np.int32), "int32")
        out_shape = t.shape[:axis] + (1,) + t.shape[axis:]
        return self._emit(name, Op.EXPAND_DIMS, 1, [x, at], [x], lambda v: v.reshape(len(v), *out_shape), out_shape,
                          quant=self._q(x))

    def padv2(self, x, paddings, value) -> int:
        """PADV2 with the real ``value`` (quantized with the input's quantization)."""
        t = self._int8(x)
        p = np.asarray(paddings, np.int32).reshape(-1, 2)
        name = self._name("padv2")
        pt = self._const(f"{name}/paddings", p, "int32")
        q = int(np.clip(round(value / t.scale[0]) + t.zero_point[0], *_RANGES[t.dtype]))
        vt = self._const(f"{name}/value", np.array([q], t.dtype), t.dtype, t.scale)
        self._tensors[vt].zero_point = t.zero_point.copy()
        real = (q - t.zero_point[0]) * t.scale[0]
        widths = [(0, 0)] + [tuple(r) for r in p.tolist()]
        out_shape = tuple(int(d + a + b) for d, (a, b) in zip(t.shape, p))
        return self._emit(name, Op.PADV2, 1, [x, pt, vt], [x], lambda v: np.pad(v, widths, constant_values=real),
                          out_shape, quant=self._q(x))

    def mirror_pad(self, x, paddings, mode="REFLECT") -> int:
        t = self._int8(x)
        p = np.asarray(paddings, np.int32).reshape(-1, 2)
        name = self._name("mirror_pad")
        pt = self._const(f"{name}/paddings", p, "int32")
        widths = [(0, 0)] + [tuple(r) for r in p.tolist()]
        np_mode = "reflect" if mode == "REFLECT" else "symmetric"
        out_shape = tuple(int(d + a + b) for d, (a, b) in zip(t.shape, p))
        return self._emit(name, Op.MIRROR_PAD, 2, [x, pt], [x], lambda v: np.pad(v, widths, mode=np_mode), out_shape,
                          quant=self._q(x), options=_opts("MirrorPadOptions", Mode=getattr(fb.MirrorPadMode, mode)))

    def reduce(self, kind, x, axes, keep_dims=False) -> int:
        """REDUCE_MAX / REDUCE_MIN (kind "max" / "min") over constant axes."""
        t = self._int8(x)
        rank = len(t.shape)
        axes = sorted({int(a) % rank for a in np.atleast_1d(axes)})
        name = self._name(f"reduce_{kind}")
        at = self._const(f"{name}/axes", np.array(axes, np.int32), "int32")
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape) if keep_dims or i not in axes)
        fn = np.max if kind == "max" else np.min
        code = Op.REDUCE_MAX if kind == "max" else Op.REDUCE_MIN
        return self._emit(name, code, 2, [x, at], [x],
                          lambda v: fn(v, axis=tuple(a + 1 for a in axes), keepdims=keep_dims).reshape(len(v), *out_shape),
                          out_shape, quant=self._q(x), options=_opts("ReducerOptions", KeepDims=bool(keep_dims)))

    def arg(self, kind, x, axis, output_type="int32") -> int:
        """ARG_MAX / ARG_MIN (kind "max" / "min") along one axis; int32 or int64 indices."""
        t = self._int8(x)
        axis %= len(t.shape)
        name = self._name(f"arg_{kind}")
        at = self._const(f"{name}/axis", np.array([axis], np.int32), "int32")
        out_shape = t.shape[:axis] + t.shape[axis + 1:]
        fn = np.argmax if kind == "max" else np.argmin
        code, opts = (Op.ARG_MAX, "ArgMaxOptions") if kind == "max" else (Op.ARG_MIN, "ArgMinOptions")
        ttype = {"int32": fb.TensorType.INT32, "int64": fb.TensorType.INT64}[output_type]
        return self._emit(name, code, 2, [x, at], [x], lambda v: fn(v, axis=axis + 1).astype(np.float64), out_shape,
                          dtype=output_type, options=_opts(opts, OutputType=ttype))

    def depth_to_space(self, x, block) -> int:
        t = self._int8(x, rank=4)
        n, h, w, c = t.shape
        oc = c // (block * block)

        def fn(v):
            s = len(v)
            return v.reshape(s, n, h, w, block, block, oc).transpose(0, 1, 2, 4, 3, 5, 6).reshape(
                s, n, h * block, w * block, oc)

        return self._emit(self._name("depth_to_space"), Op.DEPTH_TO_SPACE, 1, [x], [x], fn,
                          (n, h * block, w * block, oc), quant=self._q(x),
                          options=_opts("DepthToSpaceOptions", BlockSize=block))

    def space_to_depth(self, x, block) -> int:
        t = self._int8(x, rank=4)
        n, h, w, c = t.shape

        def fn(v):
            s = len(v)
            return v.reshape(s, n, h // block, block, w // block, block, c).transpose(0, 1, 2, 4, 3, 5, 6).reshape(
                s, n, h // block, w // block, block * block * c)

        return self._emit(self._name("space_to_depth"), Op.SPACE_TO_DEPTH, 1, [x], [x], fn,
                          (n, h // block, w // block, block * block * c), quant=self._q(x),
                          options=_opts("SpaceToDepthOptions", BlockSize=block))

    def space_to_batch_nd(self, x, block, paddings) -> int:
        t = self._int8(x, rank=4)
        n, h, w, c = t.shape
        (pt, pb), (pl, pr) = paddings
        bh, bw = block
        hp, wp = h + pt + pb, w + pl + pr
        name = self._name("space_to_batch_nd")
        consts = [self._const(f"{name}/block", list(block), "int32"), self._const(f"{name}/paddings", paddings, "int32")]

        def fn(v):
            s = len(v)
            v = np.pad(v, ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)))
            v = v.reshape(s, n, hp // bh, bh, wp // bw, bw, c).transpose(0, 3, 5, 1, 2, 4, 6)
            return v.reshape(s, bh * bw * n, hp // bh, wp // bw, c)

        return self._emit(name, Op.SPACE_TO_BATCH_ND, 2, [x, *consts], [x], fn, (n * bh * bw, hp // bh, wp // bw, c),
                          quant=self._q(x))

    def batch_to_space_nd(self, x, block, crops) -> int:
        t = self._int8(x, rank=4)
        nb, h, w, c = t.shape
        bh, bw = block
        n = nb // (bh * bw)
        (ct, cb), (cl, cr) = crops
        name = self._name("batch_to_space_nd")
        consts = [self._const(f"{name}/block", list(block), "int32"), self._const(f"{name}/crops", crops, "int32")]

        def fn(v):
            s = len(v)
            v = v.reshape(s, bh, bw, n, h, w, c).transpose(0, 3, 4, 1, 5, 2, 6).reshape(s, n, h * bh, w * bw, c)
            return v[:, :, ct:h * bh - cb, cl:w * bw - cr, :]

        return self._emit(name, Op.BATCH_TO_SPACE_ND, 2, [x, *consts], [x], fn,
                          (n, h * bh - ct - cb, w * bw - cl - cr, c), quant=self._q(x))

    def tile(self, x, multiples) -> int:
        t = self._int8(x)
        name = self._name("tile")
        mt = self._const(f"{name}/multiples", list(multiples), "int32")
        out_shape = tuple(d * m for d, m in zip(t.shape, multiples))
        return self._emit(name, Op.TILE, 2, [x, mt], [x], lambda v: np.tile(v, (1, *multiples)), out_shape,
                          quant=self._q(x))

    def broadcast_to(self, x, shape) -> int:
        t = self._int8(x)
        name = self._name("broadcast_to")
        st = self._const(f"{name}/shape", list(shape), "int32")
        return self._emit(name, Op.BROADCAST_TO, 2, [x, st], [x],
                          lambda v: np.broadcast_to(v.reshape(len(v), *(1,) * (len(shape) - len(t.shape)), *t.shape),
                                                    (len(v), *shape)), tuple(shape), quant=self._q(x))

    def resize_nearest(self, x, size, align_corners=False, half_pixel_centers=False) -> int:
        from layer_analyzer.kernels import nearest_indices  # the reference's index mapping
        t = self._int8(x, rank=4)
        name = self._name("resize_nearest")
        st = self._const(f"{name}/size", list(size), "int32")
        rows = list(nearest_indices(size[0], t.shape[1], align_corners, half_pixel_centers))
        cols = list(nearest_indices(size[1], t.shape[2], align_corners, half_pixel_centers))
        return self._emit(name, Op.RESIZE_NEAREST_NEIGHBOR, 3, [x, st], [x], lambda v: v[:, :, rows][:, :, :, cols],
                          (t.shape[0], *size, t.shape[3]), quant=self._q(x),
                          options=_opts("ResizeNearestNeighborOptions", AlignCorners=bool(align_corners),
                                        HalfPixelCenters=bool(half_pixel_centers)))

    def resize_bilinear(self, x, size, align_corners=False, half_pixel_centers=False) -> int:
        """RESIZE_BILINEAR; its float model here is the nearest neighbour's (calibration only: the
        output keeps the input's quantization, as LiteRT's int8 kernel requires)."""
        out = self.resize_nearest(x, size, align_corners, half_pixel_centers)
        op = self._ops[-1]
        op.code, op.version = Op.RESIZE_BILINEAR, 3 if half_pixel_centers else 2
        op.options = _opts("ResizeBilinearOptions", AlignCorners=bool(align_corners),
                           HalfPixelCenters=bool(half_pixel_centers))
        return out

    def output(self, *xs) -> None:
        for x in xs:
            if self._tensors[x].sim is None:
                raise ValueError(f"{x} is not an activation tensor id")
            self._outputs.append(int(x))

    # ------------------------------------------------------------------ float oracle
    def simulate(self, *inputs) -> list[np.ndarray]:
        """Run the float model of the graph (fake-quantized at every int8 tensor) on one
        array per graph input (int8 or float32, model shapes).  Returns one array per output
        in the model's output dtype.  Approximate: float math, not TFLite's fixed point."""
        vals = {}
        for tid, a in zip(self._inputs, inputs, strict=True):
            t = self._tensors[tid]
            a = np.asarray(a, np.float64)[None]
            vals[tid] = (a - t.zero_point[0]) * t.scale[0] if t.dtype == "int8" else a
        for op in self._ops:
            ys = op.fn(*[vals[i] for i in op.srcs])
            for o, y in zip(op.outputs, ys if isinstance(ys, tuple) else (ys,)):  # SPLIT and UNPACK: a tuple
                y, t = _apply_act(y, op.act), self._tensors[o]
                vals[o] = y if t.scale is None else _fake_quant(y, float(t.scale[0]), int(t.zero_point[0]), t.dtype)
        res = []
        for o in self._outputs:
            t, v = self._tensors[o], vals[o][0]
            if t.dtype == "int8":
                v = np.clip(np.round(v / t.scale[0]) + t.zero_point[0], -128, 127).astype(np.int8)
            res.append(v.astype(np.float32) if t.dtype == "float32" else v)
        return res

    # ------------------------------------------------------------------ serialization
    def to_bytes(self) -> bytes:
        if not self._outputs:
            raise ValueError("no outputs marked; call output() first")
        b = flatbuffers.Builder(4096)

        buffers = []
        for data in self._buffers:
            vec = None
            if data:
                b.Prep(16, len(data))  # 16-byte aligned constant data (int32 bias etc.)
                vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8))
            fb.BufferStart(b)
            if vec is not None:
                fb.BufferAddData(b, vec)
            buffers.append(fb.BufferEnd(b))

        tensors = []
        for t in self._tensors:
            name = b.CreateString(t.name)
            shape = b.CreateNumpyVector(np.asarray(t.shape, np.int32))
            quant = None
            if t.scale is not None:
                sc = b.CreateNumpyVector(np.asarray(t.scale, np.float32))
                zp = b.CreateNumpyVector(np.asarray(t.zero_point, np.int64))
                fb.QuantizationParametersStart(b)
                fb.QuantizationParametersAddScale(b, sc)
                fb.QuantizationParametersAddZeroPoint(b, zp)
                fb.QuantizationParametersAddQuantizedDimension(b, t.qdim)
                quant = fb.QuantizationParametersEnd(b)
            fb.TensorStart(b)
            fb.TensorAddShape(b, shape)
            fb.TensorAddType(b, _TYPES[t.dtype])
            fb.TensorAddBuffer(b, t.buffer)
            fb.TensorAddName(b, name)
            if quant is not None:
                fb.TensorAddQuantization(b, quant)
            if t.variable:
                fb.TensorAddIsVariable(b, True)
            tensors.append(fb.TensorEnd(b))

        # One OperatorCode per builtin, at the highest version any of its uses needs.
        versions: dict[int, int] = {}
        for op in self._ops:
            versions[op.code] = max(versions.get(op.code, 1), op.version)
        index = {code: i for i, code in enumerate(versions)}

        operators = []
        for op in self._ops:
            ins = b.CreateNumpyVector(np.asarray(op.inputs, np.int32))
            outs = b.CreateNumpyVector(np.asarray(op.outputs, np.int32))
            inter = b.CreateNumpyVector(np.asarray(op.intermediates, np.int32)) if op.intermediates else None
            opt = op.options[1](b) if op.options else None
            fb.OperatorStart(b)
            fb.OperatorAddOpcodeIndex(b, index[op.code])
            fb.OperatorAddInputs(b, ins)
            fb.OperatorAddOutputs(b, outs)
            if inter is not None:
                fb.OperatorAddIntermediates(b, inter)
            if opt is not None:
                fb.OperatorAddBuiltinOptionsType(b, op.options[0])
                fb.OperatorAddBuiltinOptions(b, opt)
            operators.append(fb.OperatorEnd(b))

        codes = []
        for code, version in versions.items():
            fb.OperatorCodeStart(b)
            fb.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            fb.OperatorCodeAddBuiltinCode(b, code)
            fb.OperatorCodeAddVersion(b, version)
            codes.append(fb.OperatorCodeEnd(b))

        sg_tensors = _offset_vector(b, tensors)
        sg_inputs = b.CreateNumpyVector(np.asarray(self._inputs, np.int32))
        sg_outputs = b.CreateNumpyVector(np.asarray(self._outputs, np.int32))
        sg_ops = _offset_vector(b, operators)
        sg_name = b.CreateString("main")
        fb.SubGraphStart(b)
        fb.SubGraphAddTensors(b, sg_tensors)
        fb.SubGraphAddInputs(b, sg_inputs)
        fb.SubGraphAddOutputs(b, sg_outputs)
        fb.SubGraphAddOperators(b, sg_ops)
        fb.SubGraphAddName(b, sg_name)
        subgraph = fb.SubGraphEnd(b)

        m_codes = _offset_vector(b, codes)
        m_subgraphs = _offset_vector(b, [subgraph])
        m_desc = b.CreateString(self.description)
        m_buffers = _offset_vector(b, buffers)
        fb.ModelStart(b)
        fb.ModelAddVersion(b, 3)
        fb.ModelAddOperatorCodes(b, m_codes)
        fb.ModelAddSubgraphs(b, m_subgraphs)
        fb.ModelAddDescription(b, m_desc)
        fb.ModelAddBuffers(b, m_buffers)
        b.Finish(fb.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    def save(self, path) -> None:
        with open(path, "wb") as f:
            f.write(self.to_bytes())
