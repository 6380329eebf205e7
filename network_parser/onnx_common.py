"""What both ONNX readers share: the graph's constants and wiring, activations as the IR holds
them (NHWC), the edges between the model's layout and the engine's, and the geometry of
convolutions, pooling and flattening."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from . import conv_geometry as geo

from .errors import ModelFormatError, UnsupportedOperator
from .ir import Concat, Conv2D, DepthwiseConv2D, Gather, Layer, NoAttrs, Pool2D, Quant, Resize, StridedSlice, Tensor, Transpose
from .side_files import read_model_file

UNIT = Quant((1.0,), (0,))
STANDARD_DOMAINS = ("", "ai.onnx")  # the default operator set's two spellings
# Inputs every node of an op needs (present and named), before any reader looks at it.
ARITY = {"Conv": 2, "Gemm": 2, "MatMul": 2, "Add": 2, "Sub": 2, "Mul": 2, "Div": 2, "Reshape": 2, "RequantShift": 3,
         "iRMSNorm": 2, "iNoNorm": 3,
         "QuantizeLinear": 2, "DequantizeLinear": 2, "QLinearConv": 8, "QLinearMatMul": 8, "QGemm": 6,
         "QLinearAdd": 8, "QLinearAveragePool": 5, "QLinearGlobalAveragePool": 5}


def load_onnx(path: Path) -> onnx.ModelProto:
    data = read_model_file(path)
    try:
        model = onnx.load_model_from_string(data)  # from bytes: never a file the model names
    except Exception as e:  # protobuf's DecodeError and friends: the file is not an ONNX model
        raise ModelFormatError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    if not model.graph.node:
        raise ModelFormatError(f"{path}: the ONNX graph has no nodes")
    _check_names(model.graph, path)
    return model


def _check_names(g, path: Path) -> None:
    """Names are protobuf strings: bytes where the file's are not UTF-8 (the IR, the C and the
    manifest need text)."""
    def check(name, what):
        if not isinstance(name, str):
            raise ModelFormatError(f"{path}: {what} name {name[:40]!r} is not valid UTF-8")
    for i, node in enumerate(g.node):
        for name in (node.name, node.op_type, node.domain, *node.input, *node.output):
            check(name, f"node {i}")
        if node.op_type == "Constant" and not node.output:
            raise ModelFormatError(f"{path}: node {i} Constant '{node.name}' has no output")
    for what, items in (("initializer", g.initializer), ("graph input", g.input), ("graph output", g.output)):
        for t in items:
            check(t.name, what)


def tensor_array(proto, what: str) -> np.ndarray:
    """A TensorProto's values; data kept in an external file, or data that does not match the
    declared type and dims, is the model's error (named by ``what``)."""
    if not isinstance(proto, onnx.TensorProto):
        raise ModelFormatError(f"{what}: expected a tensor value, found {type(proto).__name__}")
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelFormatError(f"{what}: its data is in an external file, which is not read (save the model "
                               f"with its weights inside)")
    if any(d < 0 for d in proto.dims):
        raise ModelFormatError(f"{what}: negative dimension in {list(proto.dims)}")
    try:
        return numpy_helper.to_array(proto)
    except Exception as e:  # noqa: BLE001 - onnx's decoding of a malformed tensor raises anything
        raise ModelFormatError(f"{what}: unreadable tensor data ({type(e).__name__}: {e})") from None


# IR axis -> ONNX axis of a value of each ONNX rank (rank 4 is held NHWC, rank 3 as N, 1, L, C:
# None is that added axis); ranks 1 and 2 keep the model's layout
_IR_AXES = {1: (0,), 2: (0, 1), 3: (0, None, 2, 1), 4: (0, 2, 3, 1)}


RESIZE_COORDINATES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn", "align_corners")
RESIZE_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def ir_layout(data: np.ndarray, rank: int) -> np.ndarray:
    """A constant broadcast against a rank-``rank`` activation (numpy's rule, right-aligned), in
    the IR's layout of that activation: its axes moved as the activation's are (a per-channel
    (C, 1, 1) beside N, C, H, W becomes (1, 1, 1, C) beside N, H, W, C)."""
    data = data.reshape((1,) * (rank - data.ndim) + data.shape)
    axes = _IR_AXES[rank]
    data = data.transpose([a for a in axes if a is not None])
    dims = iter(data.shape)  # in the IR's order now: an axis the IR adds has one entry
    return np.ascontiguousarray(data.reshape([1 if a is None else next(dims) for a in axes]))


def _opset(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def nearest_sources(out: int, length: int, scale, coord: str, rounding: str, ratio: Fraction) -> list[int]:
    """The input index onnxruntime's nearest Resize takes for each of ``out`` indices along an axis
    of ``length``: its float32 coordinate transformation (``scale``: the float32 output/input
    ratio), then the nearest mode, clamped. An axis of scale 1 is copied through, as onnxruntime
    does. Where the exact coordinate (``ratio``: input/output, exactly) is a tie of the rounding
    modes, onnxruntime lands on the tie that float32 may miss by an ulp: measured on every
    coordinate transformation and mode for axes of 1 to 12 resized to 1 to 29, each index equal."""
    if scale == np.float32(1.0):
        return list(range(out))
    f = np.float32
    result = []
    for o in range(out):
        x = f(o)
        if coord == "half_pixel":
            v, e = (x + f(0.5)) / scale - f(0.5), (o + Fraction(1, 2)) * ratio - Fraction(1, 2)
        elif coord == "asymmetric":
            v, e = x / scale, o * ratio
        elif coord == "pytorch_half_pixel":
            v, e = ((x + f(0.5)) / scale - f(0.5), (o + Fraction(1, 2)) * ratio - Fraction(1, 2)) if out > 1 \
                else (f(0.0), Fraction(0))
        elif coord == "tf_half_pixel_for_nn":
            v, e = (x + f(0.5)) / scale, (o + Fraction(1, 2)) * ratio
        else:  # align_corners
            v, e = (f(0.0), Fraction(0)) if out == 1 else (x * f(length - 1) / f(out - 1), Fraction(o * (length - 1), out - 1))
        v = float(f(v))
        if rounding.startswith("round") and (e - Fraction(1, 2)).denominator == 1:
            v = float(e)  # an exact tie
        if rounding == "round_prefer_floor":
            j = math.floor(v) if v == int(v) + 0.5 else _round_away(v)
        elif rounding == "round_prefer_ceil":
            j = _round_away(v)
        elif rounding == "floor":
            j = math.floor(v)
        else:
            j = math.ceil(v)
        result.append(min(max(j, 0), length - 1))
    return result


def linear_sources(out: int, length: int, scale, coord: str) -> tuple[tuple[int, int, float, float], ...]:
    """onnxruntime's linear Resize along an axis of ``length`` resized to ``out``: per output index
    its two inputs and their weights, (lower, upper, weight of the upper, weight of the lower),
    computed in float32 as it does (``scale``: the float32 output/input ratio): the coordinate
    transformation, clamped to the axis, split at its integer part; an axis end takes both
    inputs from one place, half each. An axis of scale 1 keeps its coordinates (no
    transformation), as onnxruntime does."""
    f = np.float32
    result = []
    for o in range(out):
        x = f(o)
        if scale == f(1.0):
            v = x
        elif coord == "half_pixel":
            v = (x + f(0.5)) / scale - f(0.5)
        elif coord == "asymmetric":
            v = x / scale
        elif coord == "pytorch_half_pixel":
            v = (x + f(0.5)) / scale - f(0.5) if out > 1 else f(0.0)
        elif coord == "tf_half_pixel_for_nn":
            v = (x + f(0.5)) / scale
        else:  # align_corners
            v = f(0.0) if out == 1 else x * f(length - 1) / f(out - 1)
        v = f(max(f(0.0), min(f(v), f(length - 1))))
        lo = min(int(v), length - 1)
        hi = min(lo + 1, length - 1)
        d_lo, d_hi = (f(0.5), f(0.5)) if lo == hi else (f(abs(v - f(lo))), f(abs(v - f(hi))))
        result.append((lo, hi, float(d_lo), float(d_hi)))
    return tuple(result)


def _round_away(v: float) -> int:
    """std::round: half away from zero."""
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def exact_ints(arr: np.ndarray, what: str, where: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.array_equal(arr, np.round(arr)):
            raise UnsupportedOperator(f"{where}: {what} holds non-integer values; an integer graph needs "
                                      f"integer constants (a float graph must be quantized first)")
        if np.abs(arr).max(initial=0) >= 2 ** 62:
            raise UnsupportedOperator(f"{where}: {what} holds values beyond 64-bit integers")
    elif arr.dtype.kind not in "iub":
        raise UnsupportedOperator(f"{where}: {what} has type {arr.dtype}")
    return arr.astype(np.int64)


@dataclass
class Value:
    """An ONNX activation as the IR holds it."""
    tensor: int  # IR tensor index (4-D values: NHWC)
    rank: int  # the ONNX rank: 2 (N, F), 3 (N, C, L) or 4 (N, C, H, W)
    flat_chw: tuple[int, int, int] | None = None  # flattened from (C, H, W) but stored in H, W, C order


class OnnxGraphBuilder:
    # op type -> the domains a reader takes it from: an op of another domain shares only its name
    # with the one the reader implements
    DOMAINS: dict[str, tuple[str, ...]] = {}

    def __init__(self, path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str):
        self.path, self.model, self.g = path, model, model.graph
        self.input_layout, self.output_layout = input_layout, output_layout
        self.nodes = list(self.g.node)
        for i, node in enumerate(self.nodes):  # before any node is read (Constant values below)
            self.check_domain(i, node)
        self.consts: dict[str, np.ndarray] = {init.name: tensor_array(init, f"{path.name}: initializer '{init.name}'")
                                              for init in self.g.initializer}
        for node in self.nodes:
            if node.op_type == "Constant":
                self.consts[node.output[0]] = self._constant_value(node)
        self.consumers: dict[str, list[int]] = {}
        self.producer: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(i)
            for name in node.output:
                self.producer[name] = i
        self.graph_outputs = [o.name for o in self.g.output]
        self.tensors: list[Tensor] = []
        self.layers: list[Layer] = []
        self.values: dict[str, Value] = {}
        self.done: set[int] = set()
        self.notes: list[str] = []
        self.input_tensors: dict[str, int] = {}
        self.input_perms: list[tuple[int, ...] | None] = []
        self.input_shapes: list[tuple[int, ...]] = []

    # ---- small helpers ----------------------------------------------------------

    def check_node(self, i: int, node) -> None:
        """The inputs and the output a node of its op needs are there."""
        need = ARITY.get(node.op_type, 1 if node.op_type != "Constant" else 0)
        if len(node.input) < need or not all(node.input[:need]) or not node.output or not node.output[0]:
            raise ModelFormatError(f"{self.where(i)}: {len(node.input)} inputs and {len(node.output)} outputs; "
                                   f"{node.op_type} needs {need} inputs and one output")

    def check_domain(self, i: int, node) -> None:
        """The node's (domain, op type) is in the reader's table. An op type the reader does not
        know at all, in the default domain, is left to the reader, which lists what it takes."""
        domains = self.DOMAINS.get(node.op_type)
        if domains is not None and node.domain in domains:
            return
        if domains is None and node.domain in STANDARD_DOMAINS:
            return
        where = f"{self.where(i)}: operator {node.op_type} of domain '{node.domain}' is not supported"
        if domains is None:
            raise UnsupportedOperator(where)
        raise UnsupportedOperator(f"{where} (the reader takes {node.op_type} of domain "
                                  f"{' or '.join(repr(d) for d in domains)})")

    def run_node(self, i: int, node, handler) -> None:
        """``handler(i, node)``, with a malformed node's slip (a missing attribute, a shape that does
        not fit) reported as the node's ModelFormatError rather than an internal error."""
        self.check_node(i, node)
        try:
            handler(i, node)
        except ModelFormatError as e:
            if self.path.name in e.args[0]:
                raise
            raise ModelFormatError(f"{self.where(i)}: {e.args[0]}") from None  # a helper's error, placed
        except (IndexError, KeyError, ValueError, TypeError) as e:
            raise ModelFormatError(f"{self.where(i)}: malformed node ({type(e).__name__}: {e})") from None

    def where(self, i: int) -> str:
        node = self.nodes[i]
        return f"{self.path.name}: node {i} {node.op_type} '{node.name or (node.output[0] if node.output else '?')}'"

    def _constant_value(self, node) -> np.ndarray:
        for a in node.attribute:
            if a.name == "value":
                return tensor_array(a.t, f"{self.path.name}: Constant '{node.output[0]}'")
            if a.name in ("value_float", "value_int", "value_floats", "value_ints"):
                return np.array(onnx.helper.get_attribute_value(a))
        raise UnsupportedOperator(f"{self.path.name}: Constant '{node.output[0]}' has no supported value attribute")

    @staticmethod
    def attrs(node) -> dict:
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def add_tensor(self, name: str, shape, dtype: str, quant: Quant | None, data=None) -> int:
        self.tensors.append(Tensor(name, tuple(int(d) for d in shape), dtype, quant, data))
        return len(self.tensors) - 1

    def add_layer(self, op: str, inputs, outputs, attrs, name: str) -> None:
        self.layers.append(Layer(len(self.layers), op, tuple(inputs), tuple(outputs), attrs, name))

    def value(self, name: str, i: int) -> Value:
        if name in self.consts:
            raise UnsupportedOperator(f"{self.where(i)}: input '{name}' is a constant where an activation "
                                      f"was expected")
        if name not in self.values:
            raise ModelFormatError(f"{self.where(i)}: reads '{name}' before any node writes it "
                                   f"(a cycle, or a name nothing defines)")
        return self.values[name]

    def const(self, name: str, i: int, what: str) -> np.ndarray:
        if name not in self.consts:
            raise UnsupportedOperator(f"{self.where(i)}: {what} '{name}' must be a constant")
        return self.consts[name]

    def single_consumer(self, name: str) -> int | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in self.graph_outputs else None

    def model_shape(self, v: Value) -> tuple[int, ...]:
        """The value's shape in the ONNX graph's own layout."""
        shape = self.tensors[v.tensor].shape
        if v.rank == 4:
            return (shape[0], shape[3], shape[1], shape[2])
        if v.rank == 3:
            return (shape[0], shape[3], shape[2])
        return tuple(shape)

    def nhwc(self, v: Value) -> tuple[int, int, int, int]:
        return self.tensors[v.tensor].shape  # type: ignore[return-value]

    # ---- edges ----------------------------------------------------------------------

    def input_dims(self, inp, batch_ok: bool = False) -> list[int]:
        """``batch_ok``: a first axis above 1 is data the graph computes on (matrix products' batch)."""
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in inp.type.tensor_type.shape.dim]
        where = f"{self.path.name}: graph input '{inp.name}'"
        if not 2 <= len(dims) <= 4 or any(d <= 0 for d in dims):
            raise UnsupportedOperator(f"{where} has shape {dims}; a fixed 2-D, 3-D or 4-D shape is needed")
        if dims[0] != 1 and len(dims) > 2 and not batch_ok:
            raise UnsupportedOperator(f"{where}: batch {dims[0]}; the engine runs one sample (batch 1)")
        return dims

    def engine_input(self, name: str, dims: list[int], dtype: str, quant: Quant | None, layout: str | None = None) -> int:
        """The engine's input tensor: the model's shape, or channels last with --input-layout nhwc
        (``layout``: another than --input-layout's)."""
        layout = layout or self.input_layout
        perm = (0, *range(2, len(dims)), 1) if len(dims) > 2 and layout == "nhwc" else None
        t = self.add_tensor(name, dims if perm is None else [dims[p] for p in perm], dtype, quant)
        self.input_tensors[name] = t
        self.input_perms.append(perm)
        self.input_shapes.append(tuple(dims))
        return t

    def to_nhwc(self, t: int, name: str, dims: list[int], layout: str | None = None) -> int:
        """An input tensor (as the engine takes it: ``layout``, by default --input-layout's) as the
        IR's NHWC (rank 3: N, 1, L, C)."""
        rank = len(dims)
        if rank == 2:
            return t
        tt = self.tensors[t]
        c, spatial = dims[1], dims[2:]
        h, w = (1, spatial[0]) if rank == 3 else spatial
        if (layout or self.input_layout) == "nhwc":
            if rank == 3:
                r = self.add_tensor(f"{name}/nhwc", (1, 1, w, c), tt.dtype, tt.quant)
                self.add_layer("RESHAPE", [t], [r], NoAttrs(), f"{name}/nhwc")
                t = r
            return t
        if rank == 3:
            r = self.add_tensor(f"{name}/nchw", (1, c, 1, w), tt.dtype, tt.quant)
            self.add_layer("RESHAPE", [t], [r], NoAttrs(), f"{name}/nchw")
            t = r
        n = self.add_tensor(f"{name}/nhwc", (1, h, w, c), tt.dtype, tt.quant)
        self.add_layer("TRANSPOSE", [t], [n], Transpose((0, 2, 3, 1)), f"{name}/nhwc")
        return n

    def from_nhwc(self, v: Value, name: str, layout: str | None = None) -> tuple[int, tuple[int, ...] | None]:
        """An output value as the engine hands it out (``layout``, by default --output-layout's: the
        model's own unless nhwc), and the permutation from the model's layout to it."""
        t = v.tensor
        tt = self.tensors[t]
        if v.rank <= 2:
            return t, None
        _, h, w, c = tt.shape
        if (layout or self.output_layout) == "nchw":
            n = self.add_tensor(f"{name}/nchw", (1, c, h, w), tt.dtype, tt.quant)
            self.add_layer("TRANSPOSE", [t], [n], Transpose((0, 3, 1, 2)), f"{name}/nchw")
            t = n
            if v.rank == 3:
                r = self.add_tensor(f"{name}/ncl", (1, c, w), tt.dtype, tt.quant)
                self.add_layer("RESHAPE", [t], [r], NoAttrs(), f"{name}/ncl")
                t = r
            return t, None
        if v.rank == 3:
            r = self.add_tensor(f"{name}/nlc", (1, w, c), tt.dtype, tt.quant)
            self.add_layer("RESHAPE", [t], [r], NoAttrs(), f"{name}/nlc")
            t = r
        return t, (0, *range(2, v.rank), 1)

    def rename(self, t: int, name: str) -> None:
        tt = self.tensors[t]
        self.tensors[t] = Tensor(name, tt.shape, tt.dtype, tt.quant, tt.data)

    # ---- data movement: the model's axes mapped onto the IR's layout -----------------------

    def glue_handlers(self) -> dict:
        return {"Concat": self._concat, "Transpose": self._transpose, "Slice": self._slice, "Split": self._split,
                "GlobalMaxPool": self._global_max_pool, "Resize": self._resize, "Gather": self._gather,
                "Squeeze": self._squeeze, "Unsqueeze": self._squeeze, "Expand": self._expand}

    def _resize(self, i: int, node) -> None:
        """Resize of the height and width (opset 11 and later: scales or sizes constant). Nearest:
        each output row and column takes the input one onnxruntime's coordinate transformation
        and nearest mode pick, computed as it does in float32. Linear (QDQ graphs): the two
        inputs and float32 weights of each, blended as onnxruntime does (RESIZE_BILINEAR with
        ``blend``)."""
        x = self.value(node.input[0], i)
        where, _ = self._moved(i, node, x)
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in self.attrs(node).items()}
        mode = a.get("mode", "nearest")
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        rounding = a.get("nearest_mode", "round_prefer_floor")
        if mode not in ("nearest", "linear") or x.rank != 4:
            raise UnsupportedOperator(f"{where}: Resize mode {mode} of a rank-{x.rank} activation (supported: "
                                      f"nearest, linear; rank 4)")
        if mode == "linear" and (a.get("antialias", 0) or a.get("exclude_outside", 0)):
            raise UnsupportedOperator(f"{where}: linear Resize with antialias or exclude_outside")
        if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise UnsupportedOperator(f"{where}: Resize with keep_aspect_ratio_policy "
                                      f"{a['keep_aspect_ratio_policy']} (supported: stretch)")
        if coord not in RESIZE_COORDINATES or rounding not in RESIZE_ROUNDING or a.get("axes") is not None:
            raise UnsupportedOperator(f"{where}: Resize with coordinate_transformation_mode {coord}, nearest_mode "
                                      f"{rounding}{', axes' if a.get('axes') is not None else ''} (supported: "
                                      f"{', '.join(RESIZE_COORDINATES)}; {', '.join(RESIZE_ROUNDING)})")
        names = list(node.input) + [""] * 4
        if not names[2] and not names[3] or self.model.opset_import and _opset(self.model) < 11:
            raise UnsupportedOperator(f"{where}: Resize before opset 11 or without scales or sizes")
        shape = self.model_shape(x)
        if names[3]:
            sizes = exact_ints(self.const(names[3], i, "the sizes"), "the sizes", where).reshape(-1).tolist()
            if len(sizes) != 4 or any(v < 1 for v in sizes):
                raise ModelFormatError(f"{where}: sizes {sizes} for a rank-4 activation")
            scales = [np.float32(o) / np.float32(d) for o, d in zip(sizes, shape)]
        else:
            scales = [np.float32(v) for v in self.const(names[2], i, "the scales").astype(np.float32).reshape(-1)]
            if len(scales) != 4 or not all(np.isfinite(s) and s > 0 for s in scales):
                raise ModelFormatError(f"{where}: scales {[float(s) for s in scales]} for a rank-4 activation")
            sizes = [int(np.floor(np.float32(d) * s)) for d, s in zip(shape, scales)]
        if sizes[:2] != list(shape[:2]):
            raise UnsupportedOperator(f"{where}: Resize of the batch or channel axis (sizes {sizes})")
        ratios = [Fraction(shape[k], sizes[k]) if names[3] else 1 / Fraction(float(scales[k])) for k in range(4)]
        xt = self.tensors[x.tensor]
        if mode == "linear":
            quant, out_name = self.blended_output(i, node)
            blend = tuple(linear_sources(sizes[k], shape[k], scales[k], coord) for k in (2, 3))
            out = self.add_tensor(out_name, (xt.shape[0], sizes[2], sizes[3], xt.shape[3]), xt.dtype, quant)
            self.add_layer("RESIZE_BILINEAR", [x.tensor], [out], Resize((sizes[2], sizes[3]), blend=blend), out_name)
            self.values[out_name] = Value(out, 4)
            return
        sources = tuple(tuple(nearest_sources(sizes[k], shape[k], scales[k], coord, rounding, ratios[k]))
                        for k in (2, 3))
        out = self.add_tensor(node.output[0], (xt.shape[0], sizes[2], sizes[3], xt.shape[3]), xt.dtype, xt.quant)
        self.add_layer("RESIZE_NEAREST_NEIGHBOR", [x.tensor], [out], Resize((sizes[2], sizes[3]), sources=sources),
                       node.output[0])
        self.values[node.output[0]] = Value(out, 4)

    def blended_output(self, i: int, node) -> tuple:
        """(quantization, value name) of a linear Resize's output: a graph whose values are
        integers has none to blend into."""
        raise UnsupportedOperator(f"{self.where(i)}: linear Resize in an integer graph (it blends values in "
                                  f"float; supported in QDQ graphs)")

    def _moved(self, i: int, node, x: Value) -> tuple[str, tuple]:
        """(where, IR axis -> ONNX axis) of a value a data-movement node reads."""
        where = self.where(i)
        if x.flat_chw is not None:
            raise UnsupportedOperator(f"{where}: {node.op_type} of a value flattened from C, H, W (stored H, W, C)")
        if x.rank not in _IR_AXES:
            raise UnsupportedOperator(f"{where}: {node.op_type} of a rank-{x.rank} activation")
        return where, _IR_AXES[x.rank]

    def _axis(self, node, x: Value, where: str, default: int | None = None) -> int:
        """The node's ``axis`` attribute (an ONNX axis of ``x``), checked, as the IR's axis."""
        axis = self.attrs(node).get("axis", default)
        if axis is None or not -x.rank <= axis < x.rank:
            raise ModelFormatError(f"{where}: axis {axis} of a rank-{x.rank} activation")
        return _IR_AXES[x.rank].index(axis % x.rank)

    def _concat(self, i: int, node) -> None:
        """Concat of activations of one type and quantization (integer graphs copy their values);
        QLinearConcat's values are every third input from the third (after Y's scale and zero point)."""
        xs = [self.value(n, i) for n in (node.input[2::3] if node.op_type == "QLinearConcat" else node.input)]
        where, _ = self._moved(i, node, xs[0])
        ts = [self.tensors[x.tensor] for x in xs]
        if any(x.rank != xs[0].rank or x.flat_chw is not None for x in xs):
            raise UnsupportedOperator(f"{where}: Concat of activations of different ranks or layouts")
        axis = self._axis(node, xs[0], where)
        if axis == 0 and xs[0].rank > 2:
            raise UnsupportedOperator(f"{where}: Concat along the batch axis (the engine's values have one batch)")
        xs = self.concat_inputs(i, node, xs)
        ts = [self.tensors[x.tensor] for x in xs]
        if any((t.dtype, t.quant) != (ts[0].dtype, ts[0].quant) for t in ts):
            raise UnsupportedOperator(f"{where}: Concat of activations of different types or quantizations (an "
                                      f"integer graph's Concat copies values)")
        shape = list(ts[0].shape)
        if any(len(t.shape) != len(shape) or any(a != b for k, (a, b) in enumerate(zip(t.shape, shape)) if k != axis)
               for t in ts):
            raise ModelFormatError(f"{where}: inputs {[list(self.model_shape(x)) for x in xs]} do not concatenate")
        shape[axis] = sum(t.shape[axis] for t in ts)
        out = self.add_tensor(node.output[0], shape, ts[0].dtype, ts[0].quant)
        self.add_layer("CONCATENATION", [x.tensor for x in xs], [out], Concat(axis, "NONE"), node.output[0])
        self.values[node.output[0]] = Value(out, xs[0].rank)

    def concat_inputs(self, i: int, node, xs: list) -> list:
        """The values a Concat joins (a QDQ graph first brings them to its output's quantization)."""
        return xs

    def _transpose(self, i: int, node) -> None:
        """Transpose: the model's permutation, seen through both values' layouts (the added axis of a
        rank-3 value stays where it is)."""
        x = self.value(node.input[0], i)
        where, axes = self._moved(i, node, x)
        perm = list(self.attrs(node).get("perm", range(x.rank - 1, -1, -1)))
        if sorted(perm) != list(range(x.rank)):
            raise ModelFormatError(f"{where}: perm {perm} for a rank-{x.rank} activation")
        if x.rank > 2 and perm[0] != 0:
            raise UnsupportedOperator(f"{where}: Transpose moving the batch axis (perm {perm}); the engine's "
                                      f"layouts keep it first")
        ir_perm = tuple(k if a is None else axes.index(perm[a]) for k, a in enumerate(axes))
        xt = self.tensors[x.tensor]
        out = self.add_tensor(node.output[0], tuple(xt.shape[p] for p in ir_perm), xt.dtype, xt.quant)
        self.add_layer("TRANSPOSE", [x.tensor], [out], Transpose(ir_perm), node.output[0])
        self.values[node.output[0]] = Value(out, x.rank)

    def _slice_layer(self, name: str, x: Value, ranges: dict[int, range], where: str) -> None:
        """One STRIDED_SLICE taking ``ranges`` (IR axis -> the indices kept) of ``x`` as ``name``."""
        xt = self.tensors[x.tensor]
        if any(len(r) == 0 for r in ranges.values()):
            raise UnsupportedOperator(f"{where}: a slice that keeps nothing")
        begin, end, strides, end_mask, shape = [], [], [], 0, []
        for k, dim in enumerate(xt.shape):
            r = ranges.get(k, range(dim))
            begin.append(r.start)
            last = r.start + (len(r) - 1) * r.step
            end.append(last + (1 if r.step > 0 else -1))
            if end[-1] < 0:  # to the axis's start, with a negative step: the end mask says it
                end_mask |= 1 << k
                end[-1] = 0
            strides.append(r.step)
            shape.append(len(r))
        out = self.add_tensor(name, shape, xt.dtype, xt.quant)
        self.add_layer("STRIDED_SLICE", [x.tensor], [out], StridedSlice(tuple(begin), tuple(end), tuple(strides), 0,
                                                                      end_mask), name)
        self.values[name] = Value(out, x.rank)

    def _slice(self, i: int, node) -> None:
        """Slice with constant starts, ends, axes and steps (inputs since opset 10, attributes before)."""
        x = self.value(node.input[0], i)
        where, axes_map = self._moved(i, node, x)
        a = self.attrs(node)
        if "starts" in a:
            starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
        else:
            names = list(node.input[1:]) + [""] * (4 - len(node.input[1:]))
            starts, ends, axes, steps = (None if not n else
                                         exact_ints(self.const(n, i, what), what, where).reshape(-1).tolist()
                                         for n, what in zip(names, ("the starts", "the ends", "the axes", "the steps")))
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else list(steps)
        if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps \
                or any(not -x.rank <= v < x.rank for v in axes) or len({v % x.rank for v in axes}) != len(axes):
            raise ModelFormatError(f"{where}: starts {starts}, ends {ends}, axes {axes} and steps {steps} do not "
                                   f"slice a rank-{x.rank} activation")
        shape = self.model_shape(x)
        ranges = {}
        for b, e, ax, st in zip(starts, ends, axes, steps):
            ax %= x.rank
            if st < 0 and b < -shape[ax]:  # ONNX clamps a start before the axis to its first index
                b = 0
            ranges[axes_map.index(ax)] = range(*slice(b, e, st).indices(shape[ax]))  # else as Python clamps
        self._slice_layer(node.output[0], x, ranges, where)

    def _split(self, i: int, node) -> None:
        """Split into pieces of constant sizes (equal ones without a split list): a slice per output."""
        x = self.value(node.input[0], i)
        where, axes_map = self._moved(i, node, x)
        axis = self._axis(node, x, where, 0)
        dim = self.model_shape(x)[axes_map[axis]]
        a, outs = self.attrs(node), list(node.output)
        sizes = a.get("split")
        if sizes is None and len(node.input) > 1 and node.input[1]:
            sizes = exact_ints(self.const(node.input[1], i, "the split sizes"), "the split sizes", where).tolist()
        if sizes is None:
            n = len(outs)
            sizes = [-(-dim // n)] * (n - 1) + [dim - -(-dim // n) * (n - 1)]
        sizes = [int(v) for v in sizes]
        if len(sizes) != len(outs) or any(v < 1 for v in sizes) or sum(sizes) != dim:
            raise ModelFormatError(f"{where}: pieces of sizes {sizes} do not split an axis of {dim} into "
                                   f"{len(outs)} outputs")
        start = 0
        for name, size in zip(outs, sizes):
            if name:
                self._slice_layer(name, x, {axis: range(start, start + size)}, where)
            start += size

    def _gather(self, i: int, node) -> None:
        """Gather with constant indices on a rank-1 or rank-2 activation (NEMO splits a classifier's
        scores this way): the IR's GATHER, its layout the model's."""
        where = self.where(i)
        x = self.value(node.input[0], i)
        if x.rank > 2:
            raise UnsupportedOperator(f"{where}: Gather on a rank-{x.rank} activation (only ranks 1 and 2, whose "
                                      f"layout the engine keeps)")
        if node.input[1] not in self.consts:
            raise UnsupportedOperator(f"{where}: Gather with indices computed at run time")
        xt = self.tensors[x.tensor]
        axis = int(self.attrs(node).get("axis", 0))
        if not -x.rank <= axis < x.rank:
            raise ModelFormatError(f"{where}: axis {axis} of a rank-{x.rank} activation")
        axis %= x.rank
        idx = exact_ints(self.consts[node.input[1]], "the indices", where)
        dim = xt.shape[axis]
        if ((idx < -dim) | (idx >= dim)).any():
            raise ModelFormatError(f"{where}: indices {idx.reshape(-1).tolist()} outside the axis's {dim} entries")
        idx = np.where(idx < 0, idx + dim, idx)
        shape = xt.shape[:axis] + tuple(idx.shape) + xt.shape[axis + 1:]
        if len(shape) > 2:
            raise UnsupportedOperator(f"{where}: Gather giving a rank-{len(shape)} activation")
        out = self.add_tensor(node.output[0], shape, xt.dtype, xt.quant)
        self.add_layer("GATHER", [x.tensor], [out], Gather(axis, tuple(int(v) for v in idx.reshape(-1)),
                                                          tuple(idx.shape)), node.output[0])
        self.values[node.output[0]] = Value(out, len(shape))

    def _squeeze(self, i: int, node) -> None:
        """Squeeze / Unsqueeze of a rank-1 or rank-2 activation: the same bytes (a RESHAPE)."""
        where = self.where(i)
        x = self.value(node.input[0], i)
        xt = self.tensors[x.tensor]
        if x.rank > 2:
            raise UnsupportedOperator(f"{where}: {node.op_type} of a rank-{x.rank} activation (only ranks 1 and 2)")
        axes = self.attrs(node).get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            if node.input[1] not in self.consts:
                raise UnsupportedOperator(f"{where}: axes computed at run time")
            axes = exact_ints(self.consts[node.input[1]], "the axes", where).reshape(-1).tolist()
        shape = list(xt.shape)
        rank = len(shape) + (len(axes) if axes and node.op_type == "Unsqueeze" else 0)
        if axes and (len(set(axes)) != len(axes) or any(not -rank <= a < rank for a in axes)):
            raise ModelFormatError(f"{where}: axes {list(axes)} for a rank-{rank} value")
        if node.op_type == "Squeeze":
            drop = {a % len(shape) for a in axes} if axes else {d for d, n in enumerate(shape) if n == 1}
            if any(shape[d] != 1 for d in drop):
                raise ModelFormatError(f"{where}: cannot squeeze axes {sorted(drop)} of {shape}")
            shape = [n for d, n in enumerate(shape) if d not in drop]
        else:
            if not axes:
                raise ModelFormatError(f"{where}: Unsqueeze without axes")
            for a in sorted(v % rank for v in axes):
                shape.insert(a, 1)
        if len(shape) > 2:
            raise UnsupportedOperator(f"{where}: {node.op_type} giving a rank-{len(shape)} activation (only ranks "
                                      f"1 and 2)")
        out = self.add_tensor(node.output[0], shape, xt.dtype, xt.quant)
        self.add_layer("RESHAPE", [x.tensor], [out], NoAttrs(), node.output[0])
        self.values[node.output[0]] = Value(out, len(shape))

    def _expand(self, i: int, node) -> None:
        """Expand by a constant shape (numpy's broadcasting, both ways) that keeps the activation's
        rank: a BROADCAST_TO, each of the model's axes mapped onto the IR's layout."""
        x = self.value(node.input[0], i)
        where, axes = self._moved(i, node, x)
        if node.input[1] not in self.consts:
            raise UnsupportedOperator(f"{where}: Expand to a shape computed at run time")
        want = exact_ints(self.consts[node.input[1]], "the shape", where).reshape(-1).tolist()
        have = list(self.model_shape(x))
        if len(want) > len(have):
            raise UnsupportedOperator(f"{where}: Expand of a rank-{len(have)} activation to rank {len(want)} (the "
                                      f"engine keeps each value's rank)")
        want = [1] * (len(have) - len(want)) + want
        if any(w < 1 or (h != 1 and w not in (1, h)) for h, w in zip(have, want)):
            raise ModelFormatError(f"{where}: {have} does not broadcast to shape {want}")
        out_model = [max(h, w) for h, w in zip(have, want)]
        if out_model[0] != have[0]:
            raise UnsupportedOperator(f"{where}: Expand along the batch axis (the engine's values have one batch)")
        xt = self.tensors[x.tensor]
        shape = tuple(n if a is None else out_model[a] for n, a in zip(xt.shape, axes))
        out = self.add_tensor(node.output[0], shape, xt.dtype, xt.quant)
        self.add_layer("BROADCAST_TO", [x.tensor], [out], NoAttrs(), node.output[0])
        self.values[node.output[0]] = Value(out, x.rank)

    def _global_max_pool(self, i: int, node) -> None:
        x = self.value(node.input[0], i)
        where, _ = self._moved(i, node, x)
        xt = self.tensors[x.tensor]
        if x.rank != 4 or xt.dtype != "int8":
            raise UnsupportedOperator(f"{where}: GlobalMaxPool of a rank-{x.rank} {xt.dtype} activation (supported: "
                                      f"rank 4, 8-bit)")
        n, h, w, c = xt.shape
        out = self.add_tensor(node.output[0], (n, 1, 1, c), xt.dtype, xt.quant)
        self.add_layer("MAX_POOL_2D", [x.tensor], [out], Pool2D((h, w), (1, 1), "VALID", "NONE"), node.output[0])
        self.values[node.output[0]] = Value(out, 4)

    # ---- geometry ------------------------------------------------------------------------

    def input_with_pads(self, name: str, i: int) -> tuple[Value, tuple[int, int, int, int]]:
        """An activation, looking through zero Pads that only this layer reads (folded into its padding)."""
        pads, seen = [0, 0, 0, 0], set()
        while name not in self.values:
            j = self.producer.get(name)
            if j is None or self.nodes[j].op_type != "Pad":
                break
            if j in seen:
                raise ModelFormatError(f"{self.where(i)}: its input '{name}' comes from a cycle of Pad nodes")
            seen.add(j)
            t, b, l, r = self.pad_amounts(j)
            pads = [pads[0] + t, pads[1] + b, pads[2] + l, pads[3] + r]
            name = self.nodes[j].input[0]
        return self.value(name, i), tuple(pads)

    def pad_amounts(self, j: int) -> tuple[int, int, int, int]:
        """A zero Pad's (top, bottom, left, right)."""
        node = self.nodes[j]
        a = self.attrs(node)
        where = self.where(j)
        pads = a.get("pads")
        if pads is None and len(node.input) > 1:
            pads = self.const(node.input[1], j, "the pads").reshape(-1).tolist()
        value = a.get("value", 0.0)
        if len(node.input) > 2 and node.input[2]:
            value = float(self.const(node.input[2], j, "the pad value").reshape(-1)[0])
        if a.get("mode", b"constant") not in (b"constant", "constant") or value != 0 or pads is None:
            raise UnsupportedOperator(f"{where}: only zero padding is supported")
        rank = len(pads) // 2
        begin, end = pads[:rank], pads[rank:]
        if rank < 3 or any(begin[:2]) or any(end[:2]) or min(pads) < 0:
            raise UnsupportedOperator(f"{where}: pads {list(pads)} touch the batch or channel axis (or are negative)")
        if rank == 3:
            return 0, 0, int(begin[2]), int(end[2])
        return int(begin[2]), int(end[2]), int(begin[3]), int(end[3])

    def conv_geometry(self, i: int, node, x: Value, w: np.ndarray, extra_pads=(0, 0, 0, 0)):
        """(op, IR weights, output NHWC shape, attrs factory) of a Conv with int weights ``w`` in
        ONNX's (O, I/group, [KH,] KW) layout; 1-D convolutions run as 2-D with H = 1."""
        a = self.attrs(node)
        where = self.where(i)
        if x.rank not in (3, 4) or w.ndim != x.rank:
            raise UnsupportedOperator(f"{where}: a {w.ndim - 2}-D convolution over a rank-{x.rank} input")
        one_d = x.rank == 3
        if one_d:
            w = w[:, :, None, :]

        def pair(key):
            v = list(a.get(key, [1] * (1 if one_d else 2)))
            return (1, int(v[0])) if one_d else (int(v[0]), int(v[1]))
        stride, dil = pair("strides"), pair("dilations")
        pads = list(a.get("pads", [0] * (2 if one_d else 4)))
        pads = [0, 0, pads[0], pads[1]] if one_d else [pads[0], pads[2], pads[1], pads[3]]
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID"):
            raise UnsupportedOperator(f"{where}: auto_pad {auto} (supported: NOTSET, VALID)")
        pads = tuple(int(p) + e for p, e in zip(pads, extra_pads))
        n, ih, iw, ic = self.nhwc(x)
        oc, icg, kh, kw = w.shape
        group = int(a.get("group", 1))
        if min(stride) < 1 or min(dil) < 1 or min(pads) < 0:
            raise ModelFormatError(f"{where}: strides {stride}, dilations {dil} and pads {list(pads)} must be "
                                   f"positive (pads: non-negative)")
        oh = geo.output_size(ih, kh, stride[0], dil[0], "EXPLICIT", pads[:2])
        ow = geo.output_size(iw, kw, stride[1], dil[1], "EXPLICIT", pads[2:])
        if oh < 1 or ow < 1:
            raise UnsupportedOperator(f"{where}: a {kh}x{kw} window over a {ih}x{iw} input gives no output")
        if group == 1 and icg == ic:
            weights = np.ascontiguousarray(np.transpose(w, (0, 2, 3, 1)))

            def attrs(requant=None, activation="NONE", float_requant=False):
                return Conv2D(stride, dil, "EXPLICIT", activation, pads, requant, float_requant)
            return "CONV_2D", weights, (n, oh, ow, oc), attrs
        if group == ic and icg == 1 and oc % ic == 0:
            weights = np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0)))

            def attrs(requant=None, activation="NONE", float_requant=False):
                return DepthwiseConv2D(stride, dil, "EXPLICIT", activation, oc // ic, pads, requant, float_requant)
            return "DEPTHWISE_CONV_2D", weights, (n, oh, ow, oc), attrs
        raise UnsupportedOperator(f"{where}: grouped convolution (group {group}, {ic} input channels, "
                                  f"weights {list(w.shape)}); supported: group 1 or depthwise")

    def pool_geometry(self, i: int, node, x: Value):
        """(window, stride, pads, output NHWC shape) of a MaxPool / AveragePool / GlobalAveragePool."""
        a = self.attrs(node)
        where = self.where(i)
        if x.rank not in (3, 4):
            raise UnsupportedOperator(f"{where}: pooling over a rank-{x.rank} input")
        n, ih, iw, c = self.nhwc(x)
        one_d = x.rank == 3
        if node.op_type.endswith("GlobalAveragePool"):
            kernel, stride, pads = (ih, iw), (1, 1), (0, 0, 0, 0)
        else:
            if "kernel_shape" not in a:
                raise ModelFormatError(f"{where}: no kernel_shape")
            k = list(a["kernel_shape"])
            s = list(a.get("strides", [1] * len(k)))
            p = list(a.get("pads", [0] * 2 * len(k)))
            auto = a.get("auto_pad", b"NOTSET")
            if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [])) \
                    or (auto.decode() if isinstance(auto, bytes) else auto) not in ("NOTSET", "VALID"):
                raise UnsupportedOperator(f"{where}: ceil_mode, auto_pad or dilated pooling")
            kernel, stride = ((1, k[0]), (1, s[0])) if one_d else ((k[0], k[1]), (s[0], s[1]))
            pads = (0, 0, p[0], p[1]) if one_d else (p[0], p[2], p[1], p[3])
        if min(kernel) < 1 or min(stride) < 1:
            raise ModelFormatError(f"{where}: window {kernel} and strides {stride} must be positive")
        oh = geo.output_size(ih, kernel[0], stride[0], 1, "EXPLICIT", pads[:2])
        ow = geo.output_size(iw, kernel[1], stride[1], 1, "EXPLICIT", pads[2:])
        if oh < 1 or ow < 1:
            raise UnsupportedOperator(f"{where}: a {kernel} window over a {ih}x{iw} input gives no output")
        return tuple(kernel), tuple(stride), tuple(int(p) for p in pads), (n, oh, ow, c)

    def flatten_value(self, i: int, node, x: Value, feeds_fc: bool) -> Value:
        """Flatten (axis 1) or Reshape to (1, N). A 4-D value stored H, W, C is flattened as it is
        when only fully connected layers read it (they reorder their weights); else transposed back
        to C, H, W first."""
        where = self.where(i)
        xt = self.tensors[x.tensor]
        a = self.attrs(node)
        if node.op_type == "Flatten" and a.get("axis", 1) != 1:
            raise UnsupportedOperator(f"{where}: Flatten at axis {a.get('axis')} (supported: 1)")
        if node.op_type == "Reshape":
            target = self.const(node.input[1], i, "the shape").reshape(-1).tolist()
            total = xt.elements
            if target.count(-1) > 1 or 0 in target:
                raise UnsupportedOperator(f"{where}: reshape to {target}")
            known = int(np.prod([d for d in target if d != -1]))
            target = [total // known if d == -1 else d for d in target]
            if int(np.prod(target)) != total or len(target) != 2 or target[0] != 1:
                raise UnsupportedOperator(f"{where}: reshape of {list(xt.shape)} to {target} (supported: to (1, N))")
        t, flat = x.tensor, None
        if x.rank > 2:
            _, h, w, c = xt.shape
            if h * w > 1:
                if feeds_fc and node.output[0] not in self.graph_outputs:
                    flat = (c, h, w)
                else:
                    n = self.add_tensor(f"{node.output[0]}/nchw", (1, c, h, w), xt.dtype, xt.quant)
                    self.add_layer("TRANSPOSE", [t], [n], Transpose((0, 3, 1, 2)), f"{node.output[0]}/nchw")
                    t = n
        out = self.add_tensor(node.output[0], (1, xt.elements), xt.dtype, xt.quant)
        self.add_layer("RESHAPE", [t], [out], NoAttrs(), node.output[0])
        return Value(out, 2, flat)

    @staticmethod
    def fc_weights(node, attrs: dict, w: np.ndarray, x: Value, where: str) -> np.ndarray:
        """Gemm/MatMul (QGemm/QLinearMatMul) weights as (units, features), columns in the order the
        input is stored."""
        if node.op_type in ("Gemm", "QGemm"):
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                raise UnsupportedOperator(f"{where}: Gemm with transA, alpha or beta other than 0, 1, 1")
            w = w if attrs.get("transB", 0) else w.T
        else:
            w = w.T
        if w.ndim != 2:
            raise UnsupportedOperator(f"{where}: weights of rank {w.ndim} (a matrix is needed)")
        if x.flat_chw is not None:  # the input is stored H, W, C: reorder the weight columns to match
            c, h, ww = x.flat_chw
            units = w.shape[0]
            if w.shape[1] != c * h * ww:
                raise UnsupportedOperator(f"{where}: weights {list(w.shape)} for {c * h * ww} input features")
            w = w.reshape(units, c, h, ww).transpose(0, 2, 3, 1).reshape(units, -1)
        return np.ascontiguousarray(w)
