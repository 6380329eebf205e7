"""Read a quantized ``.onnx`` graph into the IR.

Two families of graphs arrive here:

* **integer graphs** (NEMO/Quantlab exports for DORY, Deeploy's ``RequantShift`` graphs): every
  value is an integer carried in float or int64 tensors, and requantization is spelled out as a
  chain of nodes after each Conv/Gemm/MatMul/Add/pooling (Mul, Add, Cast, Div, Floor, Clip, or one
  ``RequantShift``). The chain is folded, by the values of its constants, into one exact integer
  requantization of the layer (``ir.IntRequant``): acc * mul + add, a floor shift, a clamp.
  Deeploy's integer softmax and norms (iSoftmax, iRMSNorm, iNoNorm) are layers of their own,
  computed as its kernels compute them.
* **QDQ graphs** (``onnxruntime.quantization``): QuantizeLinear/DequantizeLinear around float ops,
  read into the same scale/zero-point IR as a ``.tflite`` (``onnx_qdq``).

Layouts: ONNX activations are NCHW (1-D convolutions: NCL, run as 2-D with H = 1); the IR is NHWC.
Weights are transposed at read time; the graph's edges keep the model's layout unless
``nhwc`` is asked for, through a TRANSPOSE at the input and the output.

Unsigned activations (NEMO's 0..255, ``RequantShift`` with ``signed=0``) are stored as int8 holding
value - 128 (zero point -128), so every int8 kernel runs them unchanged; an unsigned graph input or
output is converted at the edge (one add of -128 / +128).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from .cut import CutSpec
from .errors import ModelFormatError, UnsupportedOperator, UsageError
from .ir import (BatchMatMul, FullyConnected, MatRequant, Transpose, name_text, Graph, IntegerAdd, IntegerHardswish,
                 IntegerNoNorm, IntegerReduce, IntegerRmsNorm, IntegerSoftmax, IntRequant, NoAttrs, Pad, Pool2D, Quant,
                 Rescale, Source)
from .onnx_common import (_IR_AXES, STANDARD_DOMAINS, UNIT, OnnxGraphBuilder, Value, exact_ints as _exact_ints,
                          ir_layout, load_onnx, tensor_array)

INT32 = (-(1 << 31), (1 << 31) - 1)
UNSIGNED = Quant((1.0,), (-128,))
# Float ops a classifier ends with, which integer deployers leave to the application (monotonic:
# the argmax of their input is the answer).
TRAILING_FLOAT_OPS = ("LogSoftmax", "Softmax", "Sigmoid")
CHAIN_OPS = ("Mul", "Add", "Div", "Cast", "Floor", "Clip", "Relu", "RequantShift", "Identity")
# Deeploy's own integer operators: its requantization, integer division and hardswish, and the
# integer approximations of softmax and of the layer norms (its quantization library's I-BERT style
# operators), run with the arithmetic of its kernels
DEEPLOY_OPS = ("RequantShift", "iHardswish", "TrueIntegerDiv", "iSoftmax", "iRMSNorm", "iNoNorm")
# every node type an integer graph may hold (``deploy ops``; the reader's handlers are these)
INTEGER_OPS = tuple(dict.fromkeys(("Conv", "Gemm", "MatMul", "Add", "Sub", "MaxPool", "AveragePool", "GlobalAveragePool",
                                   "GlobalMaxPool", "Flatten", "Reshape", "Pad", "Constant", "Gather", "Squeeze",
                                   "Unsqueeze", "Expand", "Concat", "Transpose", "Slice", "Split", "Resize",
                                   "ReduceSum", "ReduceMean", *DEEPLOY_OPS, *CHAIN_OPS, *TRAILING_FLOAT_OPS)))


def read_onnx(path: Path, input_layout: str = "nchw", output_layout: str = "nchw",
              input_type: str | None = None, cut: CutSpec = CutSpec()) -> Graph:
    """``input_type`` ("int8" | "uint8"): the range of an integer graph's input values; None
    guesses from the graph (unsigned when its activations are). ``cut``: the part of a quantized
    (QDQ / QOperator) graph between the values it names."""
    path = Path(path)
    model = load_onnx(path)
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm")
           for n in model.graph.node):
        from .onnx_qdq import read_qdq
        return read_qdq(path, model, input_layout, output_layout, cut)
    if cut:
        raise UsageError(f"{path}: --inputs, --outputs and --io cut .tflite models and quantized (QDQ, QOperator) "
                         f"ONNX graphs; this integer graph's values are float-typed, with no stored integers to "
                         f"cut at")
    return IntegerGraphReader(path, model, input_layout, output_layout, input_type).read()


# ---- values and constants -----------------------------------------------------

@dataclass
class Chain:
    """A requantization chain folded so far: y = clamp(floor((x * mul + add) / 2^shift), lo, hi)."""
    mul: list[int] = field(default_factory=lambda: [1])
    add: list[int] = field(default_factory=lambda: [0])
    shift: int = 0
    lo: int | None = None
    hi: int | None = None
    pending_mul: int | None = None  # a multiply after a division: undone by an equal division, or stage 2
    post: tuple[int, int] | None = None  # a second rounding stage: (multiplier, shift)
    truncating: bool = False  # an int64 Div (rounds toward zero) was read as a floor shift
    end: str = ""
    nodes: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def identity(self) -> bool:
        return self.mul == [1] and self.add == [0] and self.shift == 0 and self.lo is None and self.hi is None


def _broadcast(a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    if len(a) == len(b):
        return a, b
    if len(a) == 1:
        return a * len(b), b
    if len(b) == 1:
        return a, b * len(a)
    raise ValueError(f"{len(a)} and {len(b)} channels")


def _tensor_attr(attrs: dict, key: str, default, where: str = ""):
    """The one value of a tensor-valued attribute (RequantShift's div, n_levels, signed)."""
    if key not in attrs:
        return default
    value = attrs[key]
    what = f"{where + ': ' if where else ''}attribute '{key}'"
    arr = np.asarray(tensor_array(value, what) if isinstance(value, onnx.TensorProto) else value)
    if arr.size != 1 or arr.dtype.kind not in "iubf":
        raise ModelFormatError(f"{what} must hold one number, found {arr.reshape(-1)[:4].tolist()}")
    return arr.reshape(-1)[0]


def _power_of_two(d: int) -> tuple[int, bool]:
    """log2 of a divisor that is a power of two, or (from 2^16 up) one less than one: NEMO exports
    2^k as 2^k - 1 when its float-to-integer conversion rounds down. (k, was_off_by_one); k = -1
    when neither."""
    if d >= 1 and d & (d - 1) == 0:
        return d.bit_length() - 1, False
    if d >= (1 << 16) - 1 and (d + 1) & d == 0:
        return d.bit_length(), True
    return -1, False


class IntegerGraphReader(OnnxGraphBuilder):
    # Deeploy writes RequantShift in the default domain or onnxruntime-extensions' ai.onnx.contrib
    DOMAINS = {**{op: STANDARD_DOMAINS for op in INTEGER_OPS}, "RequantShift": (*STANDARD_DOMAINS, "ai.onnx.contrib")}

    def __init__(self, path: Path, model: onnx.ModelProto, input_layout: str, output_layout: str,
                 input_type: str | None):
        super().__init__(path, model, input_layout, output_layout)
        self.input_type = input_type
        self.batched: set[str] = set()  # values of a batch above 1, in the graph's layout: matrix products' only

    def value(self, name: str, i: int) -> Value:
        if name in self.batched and self.nodes[i].op_type not in ("MatMul", "Gemm"):
            raise UnsupportedOperator(f"{self.where(i)}: '{name}' holds a batch above 1, which only matrix products "
                                      f"(MatMul, Gemm) read; {self.nodes[i].op_type} would take its axes wrongly")
        return super().value(name, i)

    # ---- the graph ----------------------------------------------------------------

    def read(self) -> Graph:
        for inp in self.g.input:
            if inp.name not in self.consts:
                self._graph_input(inp)
        handlers = self.handlers()
        for i, node in enumerate(self.nodes):
            if i in self.done:
                continue
            if node.op_type not in handlers:
                raise UnsupportedOperator(f"{self.where(i)}: operator {node.op_type} is not supported in an "
                                          f"integer graph (supported: {', '.join(sorted(handlers))})")
            self.run_node(i, node, handlers[node.op_type])
            self.done.add(i)
        outputs, perms, shapes = [], [], []
        for name in self.graph_outputs:
            shapes.append(self.model_shape(self.values[name]) if name in self.values else ())
            t, perm = self._graph_output(name)
            outputs.append(t)
            perms.append(perm)
        inputs = [self.input_tensors[n] for n in self.input_tensors]
        source = Source("onnx-integer", self.input_layout, self.output_layout,
                        tuple(self.input_perms), tuple(perms), tuple(self.notes),
                        tuple(self.input_shapes), tuple(shapes))
        return Graph(name_text(self.path.stem), tuple(self.tensors), tuple(self.layers), tuple(inputs), tuple(outputs), source)

    def handlers(self) -> dict:
        """The reader's handler of every node type an integer graph may hold (INTEGER_OPS)."""
        handlers = {"Conv": self._conv, "Gemm": self._fc, "MatMul": self._fc, "Add": self._add, "Sub": self._sub,
                    "MaxPool": self._pool, "AveragePool": self._pool, "GlobalAveragePool": self._pool,
                    "Flatten": self._flatten, "Reshape": self._flatten, "Pad": self._pad,
                    "Constant": lambda i, n: None, "iSoftmax": self._isoftmax, "iRMSNorm": self._irmsnorm,
                    "iNoNorm": self._inonorm, "ReduceSum": self._reduce, "ReduceMean": self._reduce,
                    "iHardswish": self._hardswish, "TrueIntegerDiv": self._true_integer_div, **self.glue_handlers()}
        for op in CHAIN_OPS:
            handlers.setdefault(op, self._standalone_chain)
        for op in TRAILING_FLOAT_OPS:
            handlers[op] = self._trailing
        return handlers

    # ---- edges ----------------------------------------------------------------------

    def _guess_input_type(self) -> str:
        """Unsigned when the graph's first clamp is NEMO's 0..255, or its first RequantShift is unsigned."""
        for i, node in enumerate(self.nodes):
            a = self.attrs(node)
            if node.op_type == "Clip" and (a.get("min"), a.get("max")) == (0.0, 255.0):
                return "uint8"
            if node.op_type == "RequantShift":
                return "int8" if _tensor_attr(a, "signed", 1, self.where(i)) else "uint8"
        return "int8"

    def _graph_input(self, inp) -> None:
        # only matrix products read it: a batch above 1 is data, kept in the graph's own layout
        products = all(self.nodes[u].op_type in ("MatMul", "Gemm") for u in self.consumers.get(inp.name, [None])
                       if u is not None)
        dims = self.input_dims(inp, batch_ok=products)
        kind = self.input_type or self._guess_input_type()
        if kind not in ("int8", "uint8", "int16"):
            raise UnsupportedOperator(f"{self.path.name}: graph input '{inp.name}': input type {kind} "
                                      f"(supported: int8, uint8, int16)")
        batched = dims[0] != 1 and len(dims) > 2
        t = self.engine_input(inp.name, dims, kind, UNIT, "nchw" if batched else None)  # a batch: the graph's layout
        if kind == "uint8":  # stored as value - 128 inside
            s = self.add_tensor(f"{inp.name}/as_int8", self.tensors[t].shape, "int8", UNSIGNED)
            self.add_layer("QUANTIZE", [t], [s], NoAttrs(), f"{inp.name}/as_int8")
            t = s
        if batched:  # held as the graph has it, as a value of rank 2 or less is (only products read it)
            self.values[inp.name] = Value(t, 2)
            self.batched.add(inp.name)
            return
        self.values[inp.name] = Value(self.to_nhwc(t, inp.name, dims), len(dims))

    def _graph_output(self, name: str) -> tuple[int, tuple[int, ...] | None]:
        if name not in self.values:
            raise ModelFormatError(f"{self.path.name}: graph output '{name}' is never written")
        t, perm = self.from_nhwc(self.values[name], name)
        tt = self.tensors[t]
        if tt.dtype == "int8" and tt.quant.zero_point[0] == -128:  # unsigned: hand out uint8
            u = self.add_tensor(name, tt.shape, "uint8", UNIT)
            self.add_layer("QUANTIZE", [t], [u], NoAttrs(), name)
            t = u
        self.rename(t, name)
        return t, perm

    # ---- requantization chains ----------------------------------------------------------

    def channel_vector(self, arr: np.ndarray, channels: int, i: int, what: str) -> list[int]:
        ints = _exact_ints(arr, what, self.where(i))
        if ints.size == 1:
            return [int(ints.reshape(-1)[0])]
        squeezed = [d for d in ints.shape if d != 1]
        if squeezed != [channels]:
            raise UnsupportedOperator(f"{self.where(i)}: {what} of shape {list(ints.shape)} is neither one value "
                                      f"nor one per channel ({channels})")
        return [int(v) for v in ints.reshape(-1)]

    def absorb(self, start: str, channels: int, chain: Chain | None = None) -> Chain:
        """Fold the requantization nodes that follow value ``start`` (each the only reader of the
        value before it) into ``chain``; stops at a clamp, or at the first node that is not part of it."""
        c = chain or Chain()
        cur = start
        while True:
            nxt = self.single_consumer(cur)
            if nxt is None or nxt in self.done:
                break
            node = self.nodes[nxt]
            op = node.op_type
            if op not in CHAIN_OPS:
                break
            if op in ("Mul", "Add", "Div") and sum(1 for x in node.input if x in self.consts) != 1:
                break  # an op between two activations: not part of this chain
            if c.lo is not None and op not in ("Cast", "Identity"):
                break  # after the clamp: a new stage
            self.check_node(nxt, node)
            self._fold(c, nxt, node, cur, channels)
            c.nodes.append(nxt)
            self.done.add(nxt)
            cur = node.output[0]
        c.end = cur
        return c

    def _fold(self, c: Chain, i: int, node, cur: str, channels: int) -> None:
        op, a = node.op_type, self.attrs(node)
        where = self.where(i)
        other = next((x for x in node.input if x != cur), None)
        if op in ("Mul", "Add", "Div") and other not in self.consts:
            raise UnsupportedOperator(f"{where}: {op} of '{cur}' needs one constant operand here (a requantization step)")
        try:
            if op == "Mul":
                m = self.channel_vector(self.consts[other], channels, i, "the multiplier")
                if c.shift:
                    if len(m) != 1 or c.pending_mul is not None or c.post is not None:
                        raise UnsupportedOperator(f"{where}: a multiply after the division starts a second "
                                                  f"rounding stage, which the kernels do not have")
                    c.pending_mul = m[0]
                else:
                    mul, m2 = _broadcast(c.mul, m)
                    add, m3 = _broadcast(c.add, m)
                    c.mul = [x * y for x, y in zip(mul, m2)]
                    c.add = [x * y for x, y in zip(add, m3)]
            elif op == "Add":
                if c.pending_mul is not None or c.post is not None:
                    raise UnsupportedOperator(f"{where}: an addition between a multiply and its division")
                v = self.channel_vector(self.consts[other], channels, i, "the addend")
                add, v2 = _broadcast(c.add, v)
                c.add = [x + (y << c.shift) for x, y in zip(add, v2)]
            elif op == "Div":
                if node.input[0] != cur:
                    raise UnsupportedOperator(f"{where}: divides a constant by an activation")
                d = self.channel_vector(self.consts[other], channels, i, "the divisor")
                if len(d) != 1:
                    raise UnsupportedOperator(f"{where}: a per-channel divisor")
                k, off_by_one = _power_of_two(d[0])
                if c.pending_mul is not None:  # x * m / m is x; otherwise a second rounding stage
                    m, c.pending_mul = c.pending_mul, None
                    if d[0] == m:
                        return
                    if k < 0 or c.post is not None:
                        raise UnsupportedOperator(f"{where}: division by {d[0]} after a multiply by {m} "
                                                  f"(a second stage must divide by a power of two)")
                    c.post = (m, k)
                    return
                if k < 0:
                    raise UnsupportedOperator(f"{where}: division by {d[0]}, which is not a power of two "
                                              f"(an integer requantization divides by 2^k)")
                if off_by_one:
                    c.notes.append(f"{where}: division by {d[0]} read as a shift by {k} (2^{k}, exported "
                                   f"one less by a float-to-integer rounding)")
                if self.consts[other].dtype.kind in "iu":  # integer Div rounds toward zero
                    c.truncating = True
                c.shift += k
            elif op == "Clip":
                lo, hi = a.get("min"), a.get("max")
                if len(node.input) > 1 and node.input[1]:
                    lo = float(self.const(node.input[1], i, "the Clip minimum").reshape(-1)[0])
                if len(node.input) > 2 and node.input[2]:
                    hi = float(self.const(node.input[2], i, "the Clip maximum").reshape(-1)[0])
                c.lo = int(np.ceil(lo)) if lo is not None else INT32[0]
                c.hi = int(np.floor(hi)) if hi is not None else INT32[1]
            elif op == "Relu":
                c.lo, c.hi = 0, INT32[1]
            elif op == "RequantShift":
                if c.shift or c.lo is not None or c.pending_mul is not None or c.post is not None:
                    raise UnsupportedOperator(f"{where}: RequantShift after a division or a clamp")
                mul = self.channel_vector(self.const(node.input[1], i, "mul"), channels, i, "mul")
                add = self.channel_vector(self.const(node.input[2], i, "add"), channels, i, "add")
                div = int(_tensor_attr(a, "div", 1, where))
                k, off = _power_of_two(div)
                if k < 0 or off:
                    raise UnsupportedOperator(f"{where}: RequantShift div {div} is not a power of two")
                levels = int(_tensor_attr(a, "n_levels_out", _tensor_attr(a, "n_levels", 256, where), where))
                signed = bool(_tensor_attr(a, "signed", 1, where))
                # after a bias Add (or a multiply) with no division yet: (acc * M + A) * mul + add
                m_before, m_now = _broadcast(c.mul, mul)
                a_before, m_add = _broadcast(c.add, mul)
                products = [x * y for x, y in zip(a_before, m_add)]
                a_prod, add2 = _broadcast(products, add)
                c.mul = [x * y for x, y in zip(m_before, m_now)]
                c.add = [x + y + ((1 << k) >> 1) for x, y in zip(a_prod, add2)]  # rounds half up
                c.shift = k
                c.lo, c.hi = (-(levels // 2), levels // 2 - 1) if signed else (0, levels - 1)
            # Cast, Floor, Identity: the values are integers already
        except ValueError as e:
            raise UnsupportedOperator(f"{where}: constants do not broadcast over the channels ({e})") from None

    def requant(self, c: Chain, channels: int, where: str, eight_bit_inputs_unsigned: bool | None = None,
                allow_post: bool = False) -> tuple[IntRequant, str, Quant | None]:
        """The chain as the stored-domain IntRequant of a layer, with its output's dtype and quantization.
        A chain without a clamp gives a raw int32 output. With a second stage (``c.post``), the output
        zero point folds into that stage's addend instead: see ``post_stage``."""
        lo, hi = c.lo, c.hi
        if c.pending_mul is not None:
            raise UnsupportedOperator(f"{where}: a multiply by {c.pending_mul} after the division is never undone")
        if c.post is not None and not allow_post:
            raise UnsupportedOperator(f"{where}: two rounding stages after this layer (supported after Add only)")
        self.notes.extend(c.notes)
        if lo is None:
            lo, hi = INT32
        if c.truncating and lo < 0 and c.shift:
            raise UnsupportedOperator(f"{where}: an integer division (rounding toward zero) before a clamp "
                                      f"that keeps negative values; the kernels floor")
        if 0 <= lo and hi <= 255 and (hi > 127 or eight_bit_inputs_unsigned is not False):
            zp, dtype = -128, "int8"
        elif -128 <= lo and hi <= 127:
            zp, dtype = 0, "int8"
        else:
            zp, dtype = 0, "int32"
            lo, hi = max(lo, INT32[0]), min(hi, INT32[1])
        if dtype == "int8" and zp:
            add = [v - (128 << c.shift) for v in c.add] if c.post is None else c.add
            return IntRequant(tuple(c.mul), tuple(add), c.shift, lo - 128, hi - 128), dtype, UNSIGNED
        return IntRequant(tuple(c.mul), tuple(c.add), c.shift, lo, hi), dtype, UNIT

    @staticmethod
    def post_stage(c: Chain, quant: Quant) -> tuple[int, int, int]:
        """(multiplier, addend, shift) of a chain's second stage, the output zero point folded in."""
        if c.post is None:
            return 1, 0, 0
        m, k = c.post
        return m, quant.zero_point[0] << k, k

    def saturate_if_read_as_8bit(self, c: Chain, unsigned: bool, where: str) -> None:
        """A result with no Clip, read by an 8-bit layer: saturate it to its operands' 8-bit range,
        as DORY's kernels do (NEMO leaves that clamp implicit after Add and average pooling)."""
        readers = ("Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "Add", "Pad", "Flatten", "Reshape")
        if c.lo is None and any(self.nodes[u].op_type in readers for u in self.consumers.get(c.end, [])):
            c.lo, c.hi = (0, 255) if unsigned else (-128, 127)
            self.notes.append(f"{where}: no Clip before an 8-bit layer reads the result; saturated to {c.lo}..{c.hi}")

    # ---- layers ------------------------------------------------------------------------------

    def _pad(self, i: int, node) -> None:
        """A Pad that is not folded into a convolution (those are read through by ``_input_with_pads``)."""
        users = self.consumers.get(node.output[0], [])
        if users and all(self.nodes[u].op_type in ("Conv", "Pad") for u in users) \
                and node.output[0] not in self.graph_outputs:
            return
        v = self.value(node.input[0], i)
        t, b, l, r = self.pad_amounts(i)
        if not any((t, b, l, r)):  # NEMO exports zero-width Pads: nothing to do
            self.values[node.output[0]] = v
            return
        x = self.tensors[v.tensor]
        n, h, w, ch = x.shape
        out = self.add_tensor(node.output[0], (n, h + t + b, w + l + r, ch), x.dtype, x.quant)
        self.add_layer("PAD", [v.tensor], [out], Pad(((0, 0), (t, b), (l, r), (0, 0))), node.output[0])
        self.values[node.output[0]] = Value(out, v.rank)

    def weights(self, name: str, i: int, what: str = "weights") -> np.ndarray:
        w = _exact_ints(self.const(name, i, what), what, self.where(i))
        if w.size and (w.min() < -128 or w.max() > 127):
            raise UnsupportedOperator(f"{self.where(i)}: {what} '{name}' range {w.min()}..{w.max()} exceeds int8")
        return w.astype(np.int8)

    def bias(self, node, i: int, units: int) -> int:
        if len(node.input) < 3 or not node.input[2]:
            return -1
        b = _exact_ints(self.const(node.input[2], i, "the bias"), "the bias", self.where(i))
        rows = max(1, b.size // units)  # Gemm: one bias per unit, or per row and unit
        if b.size == 1:
            b = np.repeat(b.reshape(-1), units)
        elif b.size == units:
            b = b.reshape(-1)
        elif b.ndim == 2 and b.shape[1] == units and node.op_type == "Gemm":
            b = b.reshape(rows, units)
        if b.size not in (units, rows * units) or np.abs(b).max(initial=0) >= 2 ** 31:
            raise UnsupportedOperator(f"{self.where(i)}: bias of shape {list(b.shape)} for {units} outputs "
                                      f"(or beyond int32)")
        return self.add_tensor(node.input[2], b.shape, "int32", UNIT, b.astype(np.int32))

    def finish(self, i: int, node, op: str, inputs: list[int], attrs_of, shape, channels: int, rank: int,
               unsigned_inputs: bool | None = None) -> None:
        """Absorb the requantization after ``node``, then add the fused layer and its output."""
        chain = self.absorb(node.output[0], channels)
        rq, dtype, quant = self.requant(chain, channels, self.where(i), unsigned_inputs)
        out = self.add_tensor(chain.end, shape, dtype, quant)
        self.add_layer(op, inputs, [out], attrs_of(rq), chain.end)
        self.values[chain.end] = Value(out, rank)

    def _conv(self, i: int, node) -> None:
        x, extra = self.input_with_pads(node.input[0], i)
        op, w, shape, attrs = self.conv_geometry(i, node, x, self.weights(node.input[1], i), extra)
        oc = shape[3]
        inputs = [x.tensor, self.add_tensor(node.input[1], w.shape, "int8", UNIT, w), self.bias(node, i, oc)]
        if inputs[-1] < 0:
            inputs.pop()
        self.finish(i, node, op, inputs, attrs, shape, oc, x.rank)

    def _fc(self, i: int, node) -> None:
        a = self.attrs(node)
        where = self.where(i)
        x = self.value(node.input[0], i)
        if self._general_product(node, x):
            return self._matrix_product(i, node, x)
        if x.rank == 3 and node.op_type == "MatMul":
            return self._matmul3(i, node, x)
        if x.rank != 2:
            raise UnsupportedOperator(f"{where}: {node.op_type} over a rank-{x.rank} input (flatten it first)")
        w = self.fc_weights(node, a, self.weights(node.input[1], i), x, where)
        units, depth = w.shape
        batch, features = self.tensors[x.tensor].shape
        if depth != features:
            raise UnsupportedOperator(f"{where}: weights {list(w.shape)} for {features} input features")
        wt = self.add_tensor(node.input[1], (units, depth), "int8", UNIT, w)
        inputs = [x.tensor, wt]
        if node.op_type == "Gemm":
            b = self.bias(node, i, units)
            if b >= 0:
                inputs.append(b)
        self.finish(i, node, "FULLY_CONNECTED", inputs, lambda rq: FullyConnected("NONE", False, rq),
                    (batch, units), units, 2)

    # ---- the general integer matrix product -----------------------------------------------

    def _general_product(self, node, x: Value) -> bool:
        """Whether a MatMul/Gemm needs the general product (BATCH_MATMUL with a MatRequant) rather than
        a fully connected layer: two activations, rank-4 values (attention heads), Gemm's transA,
        alpha or beta, a bias per row, or an Add / RequantShift after it whose constants vary along
        the rows or batches (Deeploy's per-row requantization)."""
        a = self.attrs(node)
        if node.op_type == "MatMul" and (node.input[1] not in self.consts or x.rank == 4):
            return True
        if x.rank <= 2 and len(self.tensors[x.tensor].shape) > 2:  # a batch above 1, in the graph's layout
            return True
        if node.op_type == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                return True
            c = self.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if c is not None and c.ndim == 2 and c.shape[0] > 1:
                return True
        cur = node.output[0]
        while (j := self.single_consumer(cur)) is not None and self.nodes[j].op_type in ("Add", "RequantShift"):
            n = self.nodes[j]
            consts = [self.consts[v] for v in n.input if v in self.consts]
            if n.op_type == "Add" and len(consts) != 1:
                break
            if any(c.ndim >= 2 and any(d > 1 for d in c.shape[:-1]) for c in consts):
                return True
            cur = n.output[0]
        return False

    def _model_layout(self, v: Value, name: str) -> int:
        """A value in the ONNX graph's own layout, contiguous (a matrix product indexes its last two axes)."""
        return self.from_nhwc(v, name, "nchw")[0]

    def _ir_layout(self, t: int, name: str) -> Value:
        """A tensor in the ONNX graph's layout as the IR holds values (NHWC; rank 3 as N, 1, L, C)."""
        dims = list(self.tensors[t].shape)
        return Value(self.to_nhwc(t, name, dims, "nchw"), len(dims))

    @staticmethod
    def _mat_vector(arr, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, int, int]]:
        """A constant broadcast over the product's (batch, row, column), kept only along the axes
        where it varies: its values and their strides (0 where it is the same)."""
        batches = int(np.prod(shape[:-2], dtype=np.int64))
        v = np.broadcast_to(np.asarray(arr, np.int64), shape).reshape(batches, shape[-2], shape[-1])
        for d in range(3):
            first = np.take(v, [0], axis=d)
            if np.array_equal(v, np.broadcast_to(first, v.shape)):
                v = first
        b, r, c = v.shape
        return tuple(int(t) for t in v.reshape(-1)), (r * c if b > 1 else 0, c if r > 1 else 0, 1 if c > 1 else 0)

    def _matrix_product(self, i: int, node, x: Value) -> None:
        """MatMul / Gemm as BATCH_MATMUL with the integer graph's own scaling: Gemm's alpha and
        beta * C, an Add of a constant matrix and a RequantShift after it, each constant as it
        broadcasts over the output (per batch, row or column)."""
        where, a = self.where(i), self.attrs(node)
        gemm = node.op_type == "Gemm"
        xt = self._model_layout(x, node.input[0])
        if node.input[1] in self.consts:
            w = self.weights(node.input[1], i)
            yt = self.add_tensor(node.input[1], w.shape, "int8", UNIT, w)
        else:
            yt = self._model_layout(self.value(node.input[1], i), node.input[1])
        X, Y = self.tensors[xt], self.tensors[yt]
        for t in (X, Y):
            if t.dtype != "int8" or len(t.shape) < 2:
                raise UnsupportedOperator(f"{where}: operand '{t.name}' is {t.dtype} of rank {len(t.shape)}; the "
                                          f"matrix product takes 8-bit matrices")
        adj_x, adj_y = gemm and bool(a.get("transA", 0)), gemm and bool(a.get("transB", 0))
        rows = X.shape[-1] if adj_x else X.shape[-2]
        cols = Y.shape[-2] if adj_y else Y.shape[-1]
        try:
            shape = (*np.broadcast_shapes(X.shape[:-2], Y.shape[:-2]), rows, cols)
        except ValueError:
            raise UnsupportedOperator(f"{where}: batch axes of {list(X.shape)} and {list(Y.shape)} do not broadcast") from None
        alpha, beta = (a.get("alpha", 1.0), a.get("beta", 1.0)) if gemm else (1.0, 1.0)
        if not all(math.isfinite(v) and abs(v) < 2 ** 31 for v in (alpha, beta)) or alpha != int(alpha) \
                or beta != int(beta):
            raise UnsupportedOperator(f"{where}: Gemm alpha {alpha} and beta {beta} must be integers in an integer graph")
        addend = np.zeros(1, np.int64)
        if gemm and len(node.input) > 2 and node.input[2]:
            c = _exact_ints(self.const(node.input[2], i, "C"), "C", where)
            addend = int(beta) * c.astype(np.int64)
        mul, add, k, lo, hi, cur, signed = np.ones(1, np.int64), np.zeros(1, np.int64), 0, None, None, node.output[0], True
        while (j := self.single_consumer(cur)) is not None and j not in self.done:
            n = self.nodes[j]
            if n.op_type == "Add" and lo is None and k == 0 and sum(v in self.consts for v in n.input) == 1:
                other = next(v for v in n.input if v in self.consts)
                addend = addend + _exact_ints(self.consts[other], "the addend", self.where(j)).astype(np.int64)
            elif n.op_type == "RequantShift" and lo is None:
                ra = self.attrs(n)
                mul = _exact_ints(self.const(n.input[1], j, "mul"), "mul", self.where(j)).astype(np.int64)
                add = _exact_ints(self.const(n.input[2], j, "add"), "add", self.where(j)).astype(np.int64)
                div = int(_tensor_attr(ra, "div", 1, self.where(j)))
                k, off = _power_of_two(div)
                if k < 0 or off or k > 31:
                    raise UnsupportedOperator(f"{self.where(j)}: RequantShift div {div} is not a power of two up "
                                              f"to 2^31")
                levels = int(_tensor_attr(ra, "n_levels_out", _tensor_attr(ra, "n_levels", 256, self.where(j)), self.where(j)))
                signed = bool(_tensor_attr(ra, "signed", 1, self.where(j)))
                lo, hi = (-(levels // 2), levels // 2 - 1) if signed else (0, levels - 1)
                add = add + ((1 << k) >> 1)  # RequantShift rounds half up
            else:
                break
            self.check_node(j, n)
            self.done.add(j)
            cur = n.output[0]
        try:
            vectors = [self._mat_vector(v, shape) for v in (addend, mul, add)]
        except ValueError:
            raise UnsupportedOperator(f"{where}: a constant after the product does not broadcast over its output "
                                      f"{list(shape)}") from None
        if lo is None:
            dtype, quant, lo, hi = "int32", UNIT, *INT32
        elif -128 <= lo and hi <= 127:
            dtype, quant = "int8", UNIT
        elif 0 <= lo and hi <= 255:  # unsigned values stored as value - 128
            dtype, quant, lo, hi = "int8", UNSIGNED, lo - 128, hi - 128
            vectors[2] = (tuple(v - (128 << k) for v in vectors[2][0]), vectors[2][1])
        else:
            raise UnsupportedOperator(f"{where}: a RequantShift to {hi - lo + 1} levels after a matrix product "
                                      f"(supported: 8-bit results, or none: int32)")
        (addend_v, addend_s), (mul_v, mul_s), (add_v, add_s) = vectors
        # the kernels' widths: int32 constants and products (Deeploy's), the scaling in int64
        depth = X.shape[-2] if adj_x else X.shape[-1]
        acc = depth * 255 * 255
        low = abs(int(alpha)) * acc + max(map(abs, addend_v), default=0)
        if low >= 2 ** 31 or max(map(abs, mul_v)) >= 2 ** 31 or max(map(abs, add_v)) >= 2 ** 61 \
                or low * max(map(abs, mul_v)) + max(map(abs, add_v)) >= 2 ** 63:
            raise UnsupportedOperator(f"{where}: a scaling of the matrix product beyond its integer widths (alpha "
                                      f"{int(alpha)}, constants up to {max(map(abs, addend_v), default=0)} added, "
                                      f"{max(map(abs, mul_v))} multiplied: products must stay in 32 bits)")
        rq = MatRequant(int(alpha), addend_v if any(addend_v) else (), addend_s, mul_v, mul_s, add_v, add_s, k, lo, hi)
        in_ir = len(shape) > 2 and shape[0] == 1  # a batch above 1 stays in the graph's layout (as rank 2 does)
        out = self.add_tensor(f"{cur}/model" if in_ir else cur, shape, dtype, quant)
        self.add_layer("BATCH_MATMUL", [xt, yt], [out], BatchMatMul(adj_x, adj_y, rq), cur)
        self.values[cur] = self._ir_layout(out, cur) if in_ir else Value(out, 2)
        if len(shape) > 2 and not in_ir:
            self.batched.add(cur)

    def _matmul3(self, i: int, node, x: Value) -> None:
        """MatMul of a rank-3 activation (N, S, D), a sequence of S vectors, by constant (D, E)
        weights: one fully connected layer over the S rows. The IR holds a rank-3 value as
        (N, 1, D, S) (NCL as NHWC), so the rows are transposed to (S, D) before it and back after."""
        where = self.where(i)
        w = self.weights(node.input[1], i)
        _, _, depth, rows = self.nhwc(x)
        if w.ndim != 2 or w.shape[0] != depth:
            raise UnsupportedOperator(f"{where}: MatMul weights {list(w.shape)} for rows of {depth} values")
        units = w.shape[1]
        xt = self.tensors[x.tensor]
        seq = self.add_tensor(f"{node.output[0]}/rows", (1, 1, rows, depth), xt.dtype, xt.quant)
        self.add_layer("TRANSPOSE", [x.tensor], [seq], Transpose((0, 1, 3, 2)), f"{node.output[0]}/rows")
        wt = self.add_tensor(node.input[1], (units, depth), "int8", UNIT, np.ascontiguousarray(w.T))
        chain = self.absorb(node.output[0], units)
        rq, dtype, quant = self.requant(chain, units, where)
        out = self.add_tensor(f"{chain.end}/rows", (rows, units), dtype, quant)
        self.add_layer("FULLY_CONNECTED", [seq, wt], [out], FullyConnected("NONE", False, rq), f"{chain.end}/rows")
        back = self.add_tensor(chain.end, (1, 1, units, rows), dtype, quant)
        view = self.add_tensor(f"{chain.end}/view", (1, 1, rows, units), dtype, quant)
        self.add_layer("RESHAPE", [out], [view], NoAttrs(), f"{chain.end}/view")
        self.add_layer("TRANSPOSE", [view], [back], Transpose((0, 1, 3, 2)), chain.end)
        self.values[chain.end] = Value(back, 3)

    def _scaled_operand(self, name: str, i: int) -> tuple[Value, int]:
        """An Add operand, looking through a Mul by one constant that only this Add reads (NEMO's
        per-branch scaling)."""
        if name not in self.values:
            j = self.producer.get(name)
            node = self.nodes[j] if j is not None else None
            if node is not None and node.op_type == "Mul":
                src = next((x for x in node.input if x not in self.consts), None)
                cst = next((x for x in node.input if x in self.consts), None)
                if src is not None and cst is not None:
                    m = self.channel_vector(self.consts[cst], 1, j, "the branch scale")
                    self.done.add(j)
                    return self.value(src, i), m[0]
        return self.value(name, i), 1

    def _add(self, i: int, node, sign: int = 1) -> None:
        """Add (``sign`` -1: Sub) of two activations over their true values, with the requantization
        after it; the sum's output is int32 when no clamp follows (Deeploy's Add and Sub write int32)."""
        op = "ADD" if sign > 0 else "SUB"
        if any(x in self.consts for x in node.input):  # Add of a constant: part of a requantization
            if sign < 0:
                raise UnsupportedOperator(f"{self.where(i)}: Sub with a constant operand")
            return self._standalone_chain(i, node)
        where = self.where(i)
        (a, ma), (b, mb) = (self._scaled_operand(n, i) for n in node.input[:2])
        ta, tb = self.tensors[a.tensor], self.tensors[b.tensor]
        for t in (ta, tb):
            if t.dtype != "int8":
                raise UnsupportedOperator(f"{where}: operand '{t.name}' is {t.dtype}; {node.op_type} reads 8-bit activations")
        try:
            shape = np.broadcast_shapes(ta.shape, tb.shape)
        except ValueError:
            raise UnsupportedOperator(f"{where}: operands {list(ta.shape)} and {list(tb.shape)} do not broadcast") from None
        chain = self.absorb(node.output[0], 1)
        unsigned = ta.quant.zero_point[0] == -128 and tb.quant.zero_point[0] == -128
        self.saturate_if_read_as_8bit(chain, unsigned and sign > 0, where)
        if len(chain.mul) != 1 or len(chain.add) != 1:
            raise UnsupportedOperator(f"{where}: a per-channel requantization after {node.op_type}")
        rq, dtype, quant = self.requant(chain, 1, where, unsigned and sign > 0, allow_post=True)
        attrs = IntegerAdd(ma * rq.mul[0], sign * mb * rq.mul[0], rq.add[0], rq.shift, rq.lo, rq.hi,
                           *self.post_stage(chain, quant))
        out = self.add_tensor(chain.end, shape, dtype, quant)
        self.add_layer(op, [a.tensor, b.tensor], [out], attrs, chain.end)
        self.values[chain.end] = Value(out, max(a.rank, b.rank))

    def _sub(self, i: int, node) -> None:
        self._add(i, node, -1)

    def _reduce(self, i: int, node) -> None:
        """ReduceSum / ReduceMean over constant axes (Deeploy's kernels): SUM gives the int32 sum of
        the true values; MEAN the rounded mean in the input's own type (it stays in its range).
        The output is written in the IR layout of its own rank, whatever axes are dropped."""
        x = self.value(node.input[0], i)
        where, ir_axes = self._moved(i, node, x)
        xt = self.tensors[x.tensor]
        a = self.attrs(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = _exact_ints(self.const(node.input[1], i, "the axes"), "the axes", where).reshape(-1).tolist()
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                self.values[node.output[0]] = x
                return
            axes = list(range(x.rank))
        if any(not -x.rank <= v < x.rank for v in axes) or len({v % x.rank for v in axes}) != len(axes):
            raise ModelFormatError(f"{where}: axes {list(axes)} of a rank-{x.rank} activation")
        axes = sorted(v % x.rank for v in axes)
        keep = bool(a.get("keepdims", 1))
        if xt.dtype not in ("int8", "int16"):
            raise UnsupportedOperator(f"{where}: {node.op_type} of a {xt.dtype} activation (supported: int8, int16)")
        model = self.model_shape(x)
        count = math.prod(model[v] for v in axes)
        zp = xt.quant.zero_point[0]
        largest = 1 << 15 if xt.dtype == "int16" else max(abs(-128 - zp), abs(127 - zp))  # a true value's magnitude
        if count * largest + count // 2 >= 1 << 31:  # the sum, and a mean's rounding term, in int32
            raise UnsupportedOperator(f"{where}: a sum of {count} {xt.dtype} values may pass int32 (Deeploy's "
                                      f"accumulator)")
        reduced = tuple(k for k, m in enumerate(ir_axes) if m in axes)
        if keep:
            rank, kept = x.rank, tuple(k for k in range(len(ir_axes)) if k not in reduced)
            shape = tuple(1 if k in reduced else n for k, n in enumerate(xt.shape))
        else:
            rank = x.rank - len(axes)
            if rank == 0:
                raise UnsupportedOperator(f"{where}: {node.op_type} to a scalar (keepdims 0 over every axis)")
            if rank > 2 and 0 in axes:
                raise UnsupportedOperator(f"{where}: {node.op_type} over the batch axis to a rank-{rank} value (the "
                                          f"engine's values keep their batch axis first)")
            left = [m for m in range(x.rank) if m not in axes]  # output axis j is input axis left[j]
            out_axes = _IR_AXES[rank]
            order = [ir_axes.index(left[m]) for m in out_axes if m is not None]
            # the input's other axes (its added one, of size 1) after them: they move no value
            kept = tuple(order) + tuple(k for k in range(len(ir_axes)) if k not in reduced and k not in order)
            shape = tuple(1 if m is None else model[left[m]] for m in out_axes)
        if node.op_type == "ReduceSum":
            op, dtype, quant = "SUM", "int32", UNIT
        else:
            op, dtype, quant = "MEAN", xt.dtype, xt.quant
        out = self.add_tensor(node.output[0], shape, dtype, quant)
        self.add_layer(op, [x.tensor], [out], IntegerReduce(reduced, kept), node.output[0])
        self.values[node.output[0]] = Value(out, rank)

    def _int_attrs(self, i: int, node, names: tuple[str, ...]) -> list[int]:
        """Integer attributes a Deeploy operator needs (ints, or floats holding integers)."""
        a = self.attrs(node)
        values = []
        for name in names:
            v = a.get(name)
            if isinstance(v, onnx.TensorProto):
                v = _tensor_attr(a, name, None, self.where(i))
            if v is None or isinstance(v, (bytes, str, list)) or not float(v).is_integer():
                raise ModelFormatError(f"{self.where(i)}: attribute '{name}' must be one integer, found {v!r}")
            values.append(int(v))
        return values

    def _hardswish(self, i: int, node) -> None:
        """Deeploy's iHardswish of int8 values: x * (clamp(x + three, 0, six) * one_over_six) in
        int32, with the RequantShift after it (if any) as its requantization."""
        where = self.where(i)
        x = self.value(node.input[0], i)
        xt = self.tensors[x.tensor]
        one_over_six, six, three = self._int_attrs(i, node, ("one_over_six", "six", "three"))
        if xt.dtype != "int8" or xt.quant.zero_point[0] != 0:
            # Deeploy's kernel multiplies an unsigned input's stored (offset) value: no true-value rule to follow
            raise UnsupportedOperator(f"{where}: iHardswish of a {'unsigned ' if xt.dtype == 'int8' else ''}"
                                      f"{xt.dtype} activation (supported: signed int8, as Deeploy's kernel reads)")
        v = np.arange(-128, 128, dtype=np.int64)
        t = np.clip(v + three, 0, six) * one_over_six
        if max(np.abs(t).max(), np.abs(v * t).max()) >= 1 << 31:
            raise UnsupportedOperator(f"{where}: iHardswish constants (one_over_six {one_over_six}, six {six}, "
                                      f"three {three}) take int8 values past int32")
        c = xt.shape[-1]
        chain = self.absorb(node.output[0], c)
        rq, dtype, quant = self.requant(chain, c, where)
        out = self.add_tensor(chain.end, xt.shape, dtype, quant)
        self.add_layer("HARD_SWISH", [x.tensor], [out], IntegerHardswish(one_over_six, three, six, rq), chain.end)
        self.values[chain.end] = Value(out, x.rank)

    def _true_integer_div(self, i: int, node) -> None:
        """Deeploy's TrueIntegerDiv (x times Delta / y, its integer approximation) runs merged into
        the RequantShift after it, as Deeploy's MergeTrueIntegerDivRequantShiftPass merges them:
        that RequantShift's multiplier times floor(Delta * eta / (y * eta + eps)) * 256, its
        divisor times 256 (it has no kernel of its own). One REQUANT_SHIFT of x."""
        where = self.where(i)
        x = self.value(node.input[0], i)
        delta, eps, eta, y = self._int_attrs(i, node, ("Delta", "eps", "eta", "y"))
        nxt = self.single_consumer(node.output[0])
        rqs = self.nodes[nxt] if nxt is not None and nxt not in self.done else None
        scalar = rqs is not None and rqs.op_type == "RequantShift" and len(rqs.input) >= 3 \
            and all(n in self.consts and self.consts[n].size == 1 for n in rqs.input[1:3])
        if not scalar or _exact_ints(self.consts[rqs.input[2]], "add", where).reshape(-1)[0] != 0:
            raise UnsupportedOperator(f"{where}: TrueIntegerDiv runs merged into a RequantShift after it, with one "
                                      f"constant multiplier and a zero addend (as Deeploy merges it)")
        if y * eta + eps <= 0:
            raise UnsupportedOperator(f"{where}: TrueIntegerDiv with y * eta + eps = {y * eta + eps}")
        self.check_node(nxt, rqs)
        ra = self.attrs(rqs)
        rwhere = self.where(nxt)
        mul = int(_exact_ints(self.consts[rqs.input[1]], "mul", rwhere).reshape(-1)[0])
        k, off = _power_of_two(int(_tensor_attr(ra, "div", 1, rwhere)))
        if k < 0 or off:
            raise UnsupportedOperator(f"{rwhere}: RequantShift div is not a power of two")
        levels = int(_tensor_attr(ra, "n_levels_out", _tensor_attr(ra, "n_levels", 256, rwhere), rwhere))
        signed = bool(_tensor_attr(ra, "signed", 1, rwhere))
        coeff = math.floor((delta * eta) / (y * eta + eps)) * 256  # Deeploy's float64 quotient, floored
        lo, hi = (-(levels // 2), levels // 2 - 1) if signed else (0, levels - 1)
        chain = Chain([mul * coeff], [1 << (k + 7)], k + 8, lo, hi, nodes=[nxt])  # rounds half up, as RequantShift
        self.done.add(nxt)
        c = self.tensors[x.tensor].shape[-1]
        self._rescale(i, x, self.absorb(rqs.output[0], c, chain))

    def _pool(self, i: int, node) -> None:
        where = self.where(i)
        x = self.value(node.input[0], i)
        kernel, stride, pads, (n, oh, ow, c) = self.pool_geometry(i, node, x)
        xt = self.tensors[x.tensor]
        if node.op_type == "MaxPool":
            if xt.dtype != "int8":
                raise UnsupportedOperator(f"{where}: MaxPool over a {xt.dtype} input")
            out = self.add_tensor(node.output[0], (n, oh, ow, c), "int8", xt.quant)
            self.add_layer("MAX_POOL_2D", [x.tensor], [out], Pool2D(kernel, stride, "EXPLICIT", "NONE", None, pads),
                           node.output[0])
            self.values[node.output[0]] = Value(out, x.rank)
            return
        # integer average pooling (NEMO): the float mean, multiplied back by the window size, is the sum
        count = kernel[0] * kernel[1]
        nxt = self.single_consumer(node.output[0])
        first = self.nodes[nxt] if nxt is not None else None
        cst = next((v for v in first.input if v in self.consts), None) if first is not None else None
        if first is None or first.op_type != "Mul" or cst is None \
                or self.channel_vector(self.consts[cst], c, nxt, "the window size") != [count] or any(pads):
            raise UnsupportedOperator(f"{where}: an integer graph's average pooling must be unpadded and "
                                      f"followed by a Mul by its window size ({count}), as NEMO exports it")
        self.done.add(nxt)
        chain = self.absorb(first.output[0], c)
        self.saturate_if_read_as_8bit(chain, xt.quant.zero_point[0] == -128, where)
        rq, dtype, quant = self.requant(chain, c, where, xt.quant.zero_point[0] == -128)
        if dtype != "int8":
            raise UnsupportedOperator(f"{where}: average pooling without a clamp to 8 bits")
        out = self.add_tensor(chain.end, (n, oh, ow, c), dtype, quant)
        self.add_layer("AVERAGE_POOL_2D", [x.tensor], [out], Pool2D(kernel, stride, "EXPLICIT", "NONE", rq, pads),
                       chain.end)
        self.values[chain.end] = Value(out, x.rank)

    def _flatten(self, i: int, node) -> None:
        x = self.value(node.input[0], i)
        if node.op_type == "Reshape" and node.input[1] in self.consts:
            target = [int(d) for d in self.consts[node.input[1]].reshape(-1)]
            total = self.tensors[x.tensor].elements
            if target.count(-1) == 1 and 0 not in target:
                known = int(np.prod([d for d in target if d != -1]))
                target = [total // known if d == -1 else d for d in target]
            if int(np.prod(target)) == total and not (len(target) == 2 and target[0] == 1) \
                    and 2 <= len(target) <= 4 and (len(target) == 2 or target[0] == 1):
                # any other shape (attention's heads): in the graph's own layout, then back to the IR's
                t = self._model_layout(x, node.input[0])
                r = self.add_tensor(f"{node.output[0]}/model", target, self.tensors[t].dtype, self.tensors[t].quant)
                self.add_layer("RESHAPE", [t], [r], NoAttrs(), f"{node.output[0]}/model")
                self.values[node.output[0]] = self._ir_layout(r, node.output[0])
                return
        users = self.consumers.get(node.output[0], [])
        feeds_fc = bool(users) and all(self.nodes[u].op_type in ("Gemm", "MatMul") for u in users)
        self.values[node.output[0]] = self.flatten_value(i, node, x, feeds_fc)

    def _standalone_chain(self, i: int, node) -> None:
        """Requantization nodes on an 8-bit activation with no layer before them to fuse into:
        one REQUANT_SHIFT layer (or nothing, when they change no value)."""
        src = next((x for x in node.input if x in self.values), None)
        if src is None:
            raise UnsupportedOperator(f"{self.where(i)}: {node.op_type} of constants only")
        users = [self.nodes[u] for u in self.consumers.get(node.output[0], [])]
        if node.op_type == "Mul" and len(users) == 1 and users[0].op_type == "Add" \
                and not any(v in self.consts for v in users[0].input):
            return  # a branch's scaling: the Add reads through it (_scaled_operand)
        x = self.values[src]
        xt = self.tensors[x.tensor]
        c = xt.shape[-1]
        chain = Chain()
        self.done.discard(i)
        self._fold(chain, i, node, src, c)
        chain.nodes.append(i)
        self.done.add(i)
        chain = self.absorb(node.output[0], c, chain)
        if xt.dtype == "int8" and chain.mul == [1] and chain.add == [0] and chain.shift == 0 and chain.lo is not None:
            unsigned = xt.quant.zero_point[0] == -128  # a clamp alone: within the value's own 8-bit range?
            lo, hi = (0, 255) if unsigned else (-128, 127)
            chain.lo, chain.hi = max(chain.lo, lo), min(chain.hi, hi)
            if (chain.lo, chain.hi) == (lo, hi):
                chain.lo = chain.hi = None
        if src in self.batched and (len(chain.mul) > 1 or len(chain.add) > 1):
            raise UnsupportedOperator(f"{self.where(i)}: a per-channel requantization of '{src}', which holds a "
                                      f"batch above 1 in the graph's own layout")
        if chain.identity:
            self.values[chain.end] = x
            if src in self.batched:
                self.batched.add(chain.end)
            return
        self._rescale(i, x, chain)
        if src in self.batched:
            self.batched.add(chain.end)

    def _rescale(self, i: int, x: Value, chain: Chain) -> None:
        """One REQUANT_SHIFT of ``x`` (int8, or an int16 / int32 value requantized down) by ``chain``."""
        xt = self.tensors[x.tensor]
        c = xt.shape[-1]
        if xt.dtype not in ("int8", "int16", "int32"):
            raise UnsupportedOperator(f"{self.where(i)}: requantization of a {xt.dtype} activation")
        # the layer reads stored values: the input offset (128 for unsigned) makes them true values
        rq, dtype, quant = self.requant(chain, c, self.where(i))
        if dtype != "int8" and xt.dtype == "int8":
            raise UnsupportedOperator(f"{self.where(i)}: a requantization of an 8-bit activation to {dtype}")
        out = self.add_tensor(chain.end, xt.shape, dtype, quant)
        self.add_layer("REQUANT_SHIFT", [x.tensor], [out], Rescale(rq), chain.end)
        self.values[chain.end] = Value(out, x.rank)

    # ---- Deeploy's integer softmax and norms -------------------------------------------------

    def _int_attr(self, node, key: str, where: str) -> int:
        """A required attribute holding one integer (Deeploy stores them as float tensors)."""
        a = self.attrs(node)
        if key not in a:
            raise ModelFormatError(f"{where}: no attribute '{key}'")
        v = _tensor_attr(a, key, None, where)
        if not np.isfinite(v) or v != np.round(v) or abs(v) >= 2 ** 62:
            raise UnsupportedOperator(f"{where}: attribute '{key}' is {v}, not an integer")
        return int(v)

    def _log2_attr(self, node, key: str, where: str) -> int:
        d = self._int_attr(node, key, where)
        if d < 1 or d & (d - 1):
            raise UnsupportedOperator(f"{where}: {key} {d} is not a power of two (the kernel divides by a shift)")
        return d.bit_length() - 1

    def _deeploy_input(self, i: int, node, signed: bool) -> tuple[Value, str]:
        """The op's 8-bit input (Deeploy's kernels read int8), and where."""
        x = self.value(node.input[0], i)
        where, _ = self._moved(i, node, x)
        xt = self.tensors[x.tensor]
        if xt.dtype != "int8" or (signed and xt.quant.zero_point[0] != 0):
            kind = "unsigned 8-bit" if xt.dtype == "int8" else xt.dtype
            raise UnsupportedOperator(f"{where}: {node.op_type} of a{'n' if kind[0] in 'aeiou' else ''} {kind} "
                                      f"activation (Deeploy's kernel takes {'signed ' if signed else ''}8-bit values)")
        return x, where

    def _last_axis(self, node, x: Value, where: str) -> int:
        """The IR's axis of the model's last one, which Deeploy's kernels normalize over."""
        axis = self.attrs(node).get("axis", -1)
        if axis not in (-1, x.rank - 1):
            raise UnsupportedOperator(f"{where}: {node.op_type} over axis {axis} (Deeploy's kernel takes the last axis)")
        return _IR_AXES[x.rank].index(x.rank - 1)

    def _n_levels(self, node, where: str, allowed: range) -> int:
        n = self._int_attr(node, "n_levels", where)
        if n not in allowed:
            raise UnsupportedOperator(f"{where}: n_levels {n} (supported: {allowed.start}..{allowed.stop - 1}; the "
                                      f"output is 8-bit)")
        return n

    def _isoftmax(self, i: int, node) -> None:
        """iSoftmax: an unsigned 8-bit output (stored as value - 128). The input may be either kind:
        only differences from the row's maximum count."""
        x, where = self._deeploy_input(i, node, signed=False)
        axis = self._last_axis(node, x, where)
        a, b, c, log2 = (self._int_attr(node, k, where) for k in ("coeffA", "coeffB", "coeffC", "log2"))
        n = self._n_levels(node, where, range(2, 257))
        xt = self.tensors[x.tensor]
        out = self.add_tensor(node.output[0], xt.shape, "int8", UNSIGNED)
        self.add_layer("INTEGER_SOFTMAX", [x.tensor], [out], IntegerSoftmax(axis, a, b, c, log2, n), node.output[0])
        self.values[node.output[0]] = Value(out, x.rank)

    def _irmsnorm(self, i: int, node) -> None:
        x, where = self._deeploy_input(i, node, signed=True)
        axis = self._last_axis(node, x, where)
        if self.attrs(node).get("stash_type", 1) != 1:
            raise UnsupportedOperator(f"{where}: stash_type {self.attrs(node)['stash_type']} (supported: 1)")
        log2_d = self._log2_attr(node, "D", where)
        self._n_levels(node, where, range(256, 257))
        depth = self.model_shape(x)[-1]
        w = self.channel_vector(self.const(node.input[1], i, "the weights"), depth, i, "the weights")
        w = w * depth if len(w) == 1 else w
        if max(map(abs, w)) >= 2 ** 31:
            raise UnsupportedOperator(f"{where}: weights beyond int32")
        wt = self.add_tensor(node.input[1], (depth,), "int32", UNIT, np.array(w, np.int32))
        xt = self.tensors[x.tensor]
        out = self.add_tensor(node.output[0], xt.shape, "int8", UNIT)
        self.add_layer("INTEGER_RMS_NORM", [x.tensor, wt], [out], IntegerRmsNorm(axis, log2_d), node.output[0])
        self.values[node.output[0]] = Value(out, x.rank)

    def _inonorm(self, i: int, node) -> None:
        """iNoNorm: the weights and the bias broadcast against the input (numpy's rule), laid out
        as the IR holds the input."""
        x, where = self._deeploy_input(i, node, signed=True)
        log2_d = self._log2_attr(node, "D", where)
        mul = self._int_attr(node, "mul", where)
        self._n_levels(node, where, range(256, 257))
        shape = self.model_shape(x)
        w = self.weights(node.input[1], i)
        b = _exact_ints(self.const(node.input[2], i, "the bias"), "the bias", where)
        if np.abs(b).max(initial=0) >= 2 ** 31:
            raise UnsupportedOperator(f"{where}: bias beyond int32")
        consts = []
        for name, arr, dtype in ((node.input[1], w, "int8"), (node.input[2], b, "int32")):
            try:
                fits = arr.ndim <= len(shape) and np.broadcast_shapes(arr.shape, shape) == tuple(shape)
            except ValueError:
                fits = False
            if not fits:
                raise UnsupportedOperator(f"{where}: '{name}' of shape {list(arr.shape)} does not broadcast to the "
                                          f"input's {list(shape)}")
            data = ir_layout(arr.astype(dtype), x.rank)
            consts.append(self.add_tensor(name, data.shape, dtype, UNIT, data))
        xt = self.tensors[x.tensor]
        out = self.add_tensor(node.output[0], xt.shape, "int8", UNIT)
        self.add_layer("INTEGER_NO_NORM", [x.tensor, *consts], [out], IntegerNoNorm(mul, log2_d), node.output[0])
        self.values[node.output[0]] = Value(out, x.rank)

    def _trailing(self, i: int, node) -> None:
        src, out = node.input[0], node.output[0]
        if out not in self.graph_outputs or self.consumers.get(src, []) != [i]:
            raise UnsupportedOperator(f"{self.where(i)}: {node.op_type} inside an integer graph (supported only "
                                      f"as the float op on a classifier's output, left to the application)")
        self.notes.append(f"{self.where(i)}: {node.op_type} on the output is left to the application; the "
                          f"engine outputs its input '{src}'")
        self.graph_outputs[self.graph_outputs.index(out)] = src
        self.value(src, i)
