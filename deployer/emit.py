"""Render a planned network into C files with jinja2 (compute here, lay out in templates)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import jinja2
import numpy as np

from backends import Backend
from layer_analyzer import kernels as K
from layer_analyzer.tiling import geometry as tiling_geometry
from layer_analyzer.tiling import l1_align, tile_windows
from network_parser.ir import (LSTM_BIASES, LSTM_CELL, LSTM_HIDDEN, LSTM_INPUT_WEIGHTS, LSTM_LAYER_NORM, LSTM_PEEPHOLE,
                               LSTM_PROJECTION, LSTM_RECURRENT_WEIGHTS, Graph, Tensor)
from network_parser.lifetimes import Lifetime, owner_groups, scratch_key
from solver.arena_types import align
from solver.tiling import LayerTiling

from solver.patch_split import binary_windows, region_windows, stage_of
from .fixedpoint import scale_q32
from .render import (Code, c_array, c_comment_lines, c_identifier, c_int,
                     c_int64)
from .render import environment as template_environment

CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
          "float32": "float"}
DTYPE_SHORT = {"int8": "s8", "uint8": "u8", "int16": "s16", "int32": "s32", "int64": "s64", "float32": "f32"}


def core_flags(backend: Backend) -> str:
    """The flags that select the core, for an engine's #error when it is compiled for another."""
    return " ".join(f for f in backend.cflags if f.startswith(("-mcpu", "-mthumb", "-mfloat-abi", "-mfpu")))


def environment(backend: Backend) -> jinja2.Environment:
    return template_environment(tuple(d for d in (backend.template_dir, backend.template_fallback) if d is not None))


# ---- naming -------------------------------------------------------------------

def _short(name: str) -> str:
    base = name.split(";")[0].rstrip("/").split("/")[-1] or name
    return c_identifier(base)[:24].upper().strip("_")


def shape_text(t: Tensor) -> str:
    return "x".join(str(d) for d in t.shape) or "scalar"


def _pad4(seq, fill):
    seq = tuple(seq)
    return (fill,) * (4 - len(seq)) + seq


@dataclass(frozen=True, slots=True)
class Rendered:
    files: dict[str, str | bytes]  # file name -> text (or bytes: the L3 weight image)


def state_layout(graph: Graph) -> tuple[dict[int, int], int]:
    """Offsets of the variable tensors in the engine's state buffer (.bss, kept across
    inferences), each 4-byte aligned, and its size."""
    offsets, end = {}, 0
    for t in graph.state():
        offsets[t] = end
        end += -(-graph.tensors[t].nbytes // 4) * 4
    return offsets, end


class _Symbols:
    """C names for arena tensors, state tensors and .rodata arrays, shared by every layer of one
    engine."""

    def __init__(self, graph: Graph, macro: dict[int, str], in_l3=frozenset(), external=(), base=None,
                 soft_double: bool = False):
        self.graph, self.macro, self.in_l3 = graph, macro, in_l3
        self.soft_double = soft_double  # the target's double arithmetic is software (fx_rq_fc's estimate first)
        self.base = base or {}  # tensor -> the buffer of the bank it lies in (default: the one arena)
        self.external = {t: i for i, t in enumerate(external)}  # inputs in the application's buffers
        self.constants: list[dict] = []
        self.layer_args: dict[str, str] = {}  # the current layer's arrays by kernel_args_t field
        self.arg_types: dict[str, str] = {}  # every field the families named, with its C type
        self._tensor_names: dict[int, str] = {}
        self.state = {t: f"S{t}_{_short(graph.tensors[t].name)}" for t in graph.state()}

    def array(self, name: str, ctype: str, values, aligned: bool = False, arg: str | None = None) -> str:
        """A .rodata array of ``values`` (or of what ``values()`` gives) named ``name``; a name
        given again (a table every layer of a kind shares) is the one array. ``arg``: the
        kernel_args_t field a window's kernel reads it from (a family's per-layer arrays)."""
        if arg is not None:
            assert self.arg_types.setdefault(arg, ctype) == ctype, f"kernel_args_t.{arg}: two C types"
            self.layer_args[arg] = name
        arr = np.asarray(values() if callable(values) else values).reshape(-1)
        data = c_array(arr)
        same = next((c for c in self.constants if c["name"] == name), None)
        if same is not None:
            assert same["data"] == data and same["ctype"] == ctype, name
            return name
        self.constants.append(dict(name=name, ctype=ctype, count=arr.size, aligned=aligned, data=data))
        return name

    def tensor(self, t: int, label: str, writable: bool = False) -> str | None:
        """A pointer expression: into the arena, or to the tensor's .rodata array (None for a
        tensor in L3, which only its layers' slab fetches reach, by address)."""
        if t in self.in_l3:
            return None
        tt = self.graph.tensors[t]
        if tt.is_const:
            if t not in self._tensor_names:
                self._tensor_names[t] = self.array(label, CTYPES[tt.dtype], tt.data, aligned=True)
            return self._tensor_names[t]
        qual = "" if writable else "const "
        if t in self.external:  # read-only: nothing writes over the application's buffer
            return f"((const {CTYPES[tt.dtype]} *)input_data[{self.external[t]}])"
        if t in self.state:
            return f"({qual}{CTYPES[tt.dtype]} *)(state_buffer + {self.state[t]})"
        return f"({qual}{CTYPES[tt.dtype]} *)({self.at(t)})"

    def double_scales(self, name: str, scales) -> str | None:
        """On a core whose double arithmetic is software: each double scale's integer estimate
        round(scale * 2^32) (fx_rq_fc; deployer.fixedpoint.scale_q32), as an array; None elsewhere."""
        if not self.soft_double:
            return None
        return self.array(f"{name}_q32", "int32_t",
                          np.array([scale_q32(float(v)) for v in np.asarray(scales, np.float64).reshape(-1)], np.int64),
                          arg="scale_q32")

    def at(self, key) -> str:
        """The address of an arena tensor or scratch buffer: its bank's buffer plus its offset."""
        return f"{self.base.get(key, 'arena')} + {self.macro[key]}"


def _mat_requant_terms(rq, k: int, sym: _Symbols) -> dict:
    """A matrix product's MatRequant vectors as C expressions over the loop's batch ``b``, row ``i``
    and column ``(j)`` (a DSP kernel storing several columns at once puts its own in place of
    ``(j)``): a literal where a vector holds one value, else an element of its array."""
    def term(name, values, strides, ctype):
        if not values:
            return "0"
        if len(values) == 1:
            return str(c_int64(values[0]) if ctype == "int64_t" else c_int(values[0]))
        index = " + ".join(f"{v} * {st}" for v, st in zip(("b", "i", "(j)"), strides) if st) or "0"
        return f"{sym.array(f'op{k}_{name}', ctype, np.array(values, np.int64))}[{index}]"
    return dict(addend=term("addend", rq.addend, rq.addend_strides, "int32_t"),
                mul=term("rq_mul", rq.mul, rq.mul_strides, "int32_t"),
                add=term("rq_add", rq.add, rq.add_strides, "int64_t"))


def _int_rq_context(rq, k: int, sym: _Symbols) -> dict:
    """An integer graph's requantization constants: literals when one value serves every
    channel, else per-channel .rodata arrays (int32 multipliers, int64 addends)."""
    per_mul, per_add = len(set(rq.mul)) > 1, len(set(rq.add)) > 1
    return dict(rq=dict(
        mul=sym.array(f"op{k}_rq_mul", "int32_t", np.array(rq.mul, np.int64)) if per_mul else c_int(rq.mul[0]),
        add=sym.array(f"op{k}_rq_add", "int64_t", np.array(rq.add, np.int64)) if per_add else c_int64(rq.add[0]),
        mul_i=per_mul, add_i=per_add))


def _weights_context(kern, k: int, sym: _Symbols, streamed: bool) -> dict:
    # weights streamed from L3 have no .rodata array: the tile loop fetches them by address
    ctx = dict(w=None if streamed else sym.tensor(kern.weights, f"op{k}_weights"),
               b=sym.tensor(kern.bias, f"op{k}_bias") if kern.bias >= 0 else None)
    if isinstance(kern, K.FullyConnected):  # a bias per unit, or (ONNX Gemm) one per row and unit
        rows = kern.bias >= 0 and sym.graph.tensors[kern.bias].elements == kern.batch * kern.units > kern.units
        ctx["bias_at"] = f"b * {kern.units} + u" if rows else "u"
    if getattr(kern, "int_rq", None) is not None:
        ctx.update(_int_rq_context(kern.int_rq, k, sym))
    elif getattr(kern, "float_rq", None) is not None:
        ctx.update(fscale=sym.array(f"op{k}_scale_f32", "float", np.array(kern.float_rq, np.float32)))
    elif isinstance(kern, (K.Conv, K.TransposeConv)):
        ctx.update(mult=sym.array(f"op{k}_multiplier", "int32_t", kern.multiplier),
                   shift=sym.array(f"op{k}_shift", "int8_t", kern.shift))
    else:
        ctx.update(scale=sym.array(f"op{k}_scale", "double", np.array(kern.scale, np.float64)),
                   channel="u" if len(kern.scale) > 1 else "0",
                   fc_est=sym.double_scales(f"op{k}_scale", kern.scale) if _fc_estimated(kern) else None)
    return ctx


def _fc_estimated(kern) -> bool:
    """A fully connected layer whose double-precision requantization fx_rq_fc may estimate: an
    int32 accumulator and an output range within int16 (its error bound's premise)."""
    return isinstance(kern, K.FullyConnected) and not kern.acc64 and kern.act_min >= -32768 and kern.act_max <= 32767


def _extra_context(kern, k: int, sym: _Symbols, data: list[int], l3_weights: bool, layer_inputs=()) -> dict:
    """Template values beyond the kernel record itself, per kernel kind."""
    match kern:
        case K.Conv() | K.FullyConnected() | K.TransposeConv():
            return _weights_context(kern, k, sym, l3_weights)
        case K.Add() | K.Mul() | K.MinMax() | K.Prelu():
            return dict(flat=int(np.prod(kern.view.shape, dtype=np.int64)) if kern.view.dense else None)
        case K.IntAdd():
            return dict(flat=int(np.prod(kern.view.shape, dtype=np.int64)) if kern.view.dense else None,
                        rq=dict(add=c_int64(kern.add), post_add=c_int64(kern.post_add),
                                post=(kern.post_mul, kern.post_add, kern.post_shift) != (1, 0, 0)))
        case K.IntRescale() | K.IntHardswish() | K.Pool() if kern.int_rq is not None:
            return _int_rq_context(kern.int_rq, k, sym)
        case K.IntNoNorm():
            return dict(bias=sym.tensor(data[2], f"op{k}_bias"))
        case K.IntReduce():
            strides = K.element_strides(kern.in_shape)
            return dict(kept=[(kern.in_shape[d], strides[d]) for d in kern.kept],
                        reduced=[(kern.in_shape[d], strides[d]) for d in kern.axes])
        case K.Lookup():
            return dict(table=sym.array(f"op{k}_table", "int8_t", kern.table))
        case K.Concat():
            return dict(concat_parts=[(sym.tensor(i, f"op{k}_in{j}"), c)
                                      for j, (i, c) in enumerate(zip(data, kern.chunks))])
        case K.Pad():
            return dict(in4=_pad4(kern.in_shape, 1), out4=_pad4(kern.out_shape, 1),
                        before4=_pad4(kern.before, 0))
        case K.ResizeBilinear():
            return dict(rows=sym.array(f"op{k}_rows", "int32_t", np.array(kern.rows, np.int32)),
                        cols=sym.array(f"op{k}_cols", "int32_t", np.array(kern.cols, np.int32)))
        case K.Lstm():
            def named(i, label):
                return sym.tensor(layer_inputs[i], f"op{k}_{label}") if layer_inputs[i] >= 0 else None
            gates = "ifco"
            return dict(
                w_in=[named(i, f"w_x{g}") for i, g in zip(LSTM_INPUT_WEIGHTS, gates)],
                w_rec=[named(i, f"w_h{g}") for i, g in zip(LSTM_RECURRENT_WEIGHTS, gates)],
                peephole=[named(LSTM_PEEPHOLE[g], f"w_c{gates[g]}") if g in LSTM_PEEPHOLE else None for g in range(4)],
                projection=named(LSTM_PROJECTION, "w_projection"),
                projection_bias=sym.array(f"op{k}_projection_bias", "int32_t", np.array(kern.projection_bias, np.int64))
                if kern.projection_bias is not None else None,
                input_bias=sym.array(f"op{k}_input_bias", "int32_t", np.array(kern.input_bias, np.int64)),
                recurrent_bias=sym.array(f"op{k}_recurrent_bias", "int32_t", np.array(kern.recurrent_bias, np.int64)),
                h=sym.tensor(layer_inputs[LSTM_HIDDEN], f"op{k}_h", writable=True),
                c=sym.tensor(layer_inputs[LSTM_CELL], f"op{k}_c", writable=True),
                # layer normalization: each gate's coefficients and its raw bias (applied after)
                norm_weights=[named(LSTM_LAYER_NORM[g], f"norm_{gates[g]}") for g in range(4)] if kern.layer_norm else None,
                norm_bias=[named(LSTM_BIASES[g], f"b_{gates[g]}") for g in range(4)] if kern.layer_norm else None)
        case K.Svdf():
            return dict(wf=sym.tensor(layer_inputs[1], f"op{k}_weights_feature"),
                        wt=sym.tensor(layer_inputs[2], f"op{k}_weights_time"),
                        bias=sym.tensor(layer_inputs[3], f"op{k}_bias") if layer_inputs[3] >= 0 else None,
                        state=sym.tensor(layer_inputs[4], f"op{k}_state", writable=True))
        case K.Sigmoid16():  # one table for every 16-bit LOGISTIC and TANH
            return dict(table=sym.array("sigmoid16_table", "uint16_t", np.array(kern.table, np.uint16)))
        case K.Softmax16():  # the same two tables for every 16-bit SOFTMAX
            return dict(exp_table=sym.array("softmax16_exp", "int16_t", np.array(kern.exp_table, np.int16)),
                        reciprocal_table=sym.array("softmax16_reciprocal", "int16_t",
                                                   np.array(kern.reciprocal_table, np.int16)))
        case K.TableSoftmax():
            return dict(table=sym.array(f"op{k}_exp", "float", np.array(kern.table, np.float32)))
        case K.ResizeLinear():
            return dict(rows=sym.array(f"op{k}_rows", "int32_t", np.array([r[:2] for r in kern.rows], np.int32)),
                        cols=sym.array(f"op{k}_cols", "int32_t", np.array([r[:2] for r in kern.cols], np.int32)),
                        wy=sym.array(f"op{k}_wy", "float", np.array([r[2:] for r in kern.rows], np.float32)),
                        wx=sym.array(f"op{k}_wx", "float", np.array([r[2:] for r in kern.cols], np.float32)))
        case K.ResizeNearest():
            return dict(rows=sym.array(f"op{k}_rows", "int32_t", np.array(kern.rows, np.int32)),
                        cols=sym.array(f"op{k}_cols", "int32_t", np.array(kern.cols, np.int32)))
        case K.Mean() if kern.axes:
            strides = K.element_strides(kern.in_shape)
            return dict(kept=[(n, st) for d, (n, st) in enumerate(zip(kern.in_shape, strides)) if d not in kern.axes],
                        reduced=[(kern.in_shape[d], strides[d]) for d in kern.axes])
        case K.BatchMatMul():
            ctx = {}
            if len(kern.x_offsets) > 1:
                ctx.update(x_offsets=sym.array(f"op{k}_x_offsets", "int32_t", np.array(kern.x_offsets, np.int32)),
                           y_offsets=sym.array(f"op{k}_y_offsets", "int32_t", np.array(kern.y_offsets, np.int32)))
            if kern.requant is not None:
                ctx.update(mat_rq=_mat_requant_terms(kern.requant, k, sym))
            return ctx
        case K.AxisGather():
            return dict(tables=[sym.array(f"op{k}_axis{d}", "int32_t", np.array(t, np.int64))
                                for d, t in enumerate(kern.tables)])
        case K.Gather():
            return dict(indices=sym.array(f"op{k}_indices", "int32_t", np.array(kern.indices, np.int32)))
        case K.Transpose():
            strides = K.element_strides(kern.in_shape)
            return dict(out4=_pad4(kern.out_shape, 1), perm_strides4=_pad4([strides[p] for p in kern.perm], 0))
    return {}


def _slab_context(g, t, slabs, stage: str, addresses: dict) -> dict:
    """The L3 slab grid of a layer streaming ``slabs.streamed`` through its L2 staging buffer
    (``stage``): per streamed part its L3 address and its L2 slots, every slot aligned."""
    parts, cursor = {}, 0
    for part, size in slabs.slot_bytes:
        slots = []
        for _ in range(slabs.slots(part)):
            slots.append(cursor)
            cursor += l1_align(size)
        parts[part] = dict(addr=addresses[part], off=(slots[0], slots[-1]))
    assert cursor == slabs.l2_bytes, (cursor, slabs.l2_bytes)
    return dict(slabs=slabs.slabs, row_slabs=slabs.row_slabs, rows=slabs.rows, chans=slabs.chans,
                rows_t=-(-slabs.rows // t.tile_h), chans_t=-(-slabs.chans // t.tile_c), stage=stage, parts=parts,
                l2_bytes=slabs.l2_bytes, traffic=slabs.l3_traffic)


def _tiling_context(kern, g, t, l3=None, reverse: bool = False) -> dict:
    """The tile grid and the L1 layout of one tiled layer (input, weights, output: two slots each;
    the accumulator of split input channels: one); ``reverse``: its tiles run last first."""
    f = g.footprint(t.tile_h, t.tile_w, t.tile_c, t.tile_ci)
    split = 0 < t.tile_ci < g.in_c
    double = t.tiles > 1
    layout, cursor = {}, 0
    for name, size, twice in (("in", f.input, double), ("w", f.weights, double and (t.tile_c < g.out_c or split)),
                              ("out", f.output, double), ("acc", f.accumulator, False)):
        first = cursor
        cursor += l1_align(size)
        second = first
        if twice:
            second = cursor
            cursor += l1_align(size)
        layout[name] = (first, second)
    pad_t, pad_l = (kern.pad_t, kern.pad_l) if hasattr(kern, "pad_t") else (0, 0)
    staged = l3["parts"] if l3 else {}
    chans = l3["chans"] if l3 else None
    follow = g.channels_follow_output
    return dict(kind=g.kind, tiles=t.tiles, operand_bytes=f.input // g.operands, second=g.second, operands=g.operands, tile_h=t.tile_h, tile_w=t.tile_w, tile_c=t.tile_c, solver=t.solver,
                nh=-(-g.out_h // t.tile_h), nw=-(-g.out_w // t.tile_w), nc=-(-g.out_c // t.tile_c), l3=l3,
                split=split, tile_ci=t.tile_ci if split else g.in_c, nci=-(-g.in_c // t.tile_ci) if split else 1,
                acc_off=layout["acc"][0],
                # elements per pixel (or per weight row) of the L2 buffer each part is loaded from:
                # the whole tensor, or a slab staged from L3 that holds ``chans`` channels
                in_cs=chans if "in" in staged and follow else g.in_c,
                in2_cs=chans if "in2" in staged and follow else g.in_c,
                w_cs=chans if "w" in staged else g.out_c, out_cs=chans if "out" in staged else g.out_c,
                out_h=g.out_h, out_w=g.out_w, out_c=g.out_c, in_h=g.in_h, in_w=g.in_w, in_c=g.in_c,
                k_h=g.k_h, k_w=g.k_w, stride_h=g.stride_h, stride_w=g.stride_w, dil_h=g.dil_h, dil_w=g.dil_w,
                eff_h=(g.k_h - 1) * g.dil_h + 1, eff_w=(g.k_w - 1) * g.dil_w + 1, pad_t=pad_t, pad_l=pad_l,
                channels_follow_output=g.channels_follow_output,
                weights_per_channel=g.weight_bytes_per_channel if g.stage_weights else 0,
                in_off=layout["in"], w_off=layout["w"], out_off=layout["out"], l1_used=cursor,
                elem=g.elem, partial_ctype="int64_t" if g.acc_bytes == 8 else "int32_t", reverse=reverse)


# ---- the target's variants on windows: L1 tiles and patch regions ------------------------------

KERNEL_SIGNATURE = Code("(const int8_t *restrict src, const int8_t *restrict src2, int8_t *restrict dst, "
                        "const kernel_args_t *args, int32_t oc0)")


class _ArgSymbols:
    """Stands in for the engine's constants while a window's kernel is written: each array the
    variant asks for becomes a pointer into the layer's arrays (its kernel_args_t), from the
    window's first output channel."""

    def __init__(self, graph: Graph, per_group: dict[str, tuple[int, int]], soft_double: bool = False):
        self.graph, self.per_group, self.used, self.soft_double = graph, per_group, {}, soft_double

    def array(self, name: str, ctype: str, values, aligned: bool = False, arg: str | None = None) -> str:
        if arg is None:
            raise ValueError(f"{name}: a window's kernel reads only the layer's arrays a family names a "
                             "kernel_args_t field for")
        self.used[arg] = ctype
        return arg

    def double_scales(self, name: str, scales) -> str | None:
        """The layer's estimates of its double scales (fx_rq_fc), where the whole layer has them."""
        return self.array(f"{name}_q32", "int32_t", None, arg="scale_q32") if self.soft_double else None

    def prologue(self) -> Code:
        lines = []
        for field, ctype in self.used.items():
            if field in self.per_group:
                channels, words = self.per_group[field]
                step = f"(oc0 / {channels}) * {words}"
            else:
                step = "oc0"
            # restrict: the window's int8 stores never change these (else every store would reload them)
            lines.append(f"    const {ctype} *restrict {field} = args->{field} + {step};\n")
        return Code("".join(lines) + "    (void)src;\n    (void)src2;\n    (void)args;\n    (void)oc0;\n")


def _window_steps(kern, variant) -> dict[str, tuple[int, int]]:
    """How a window's kernel steps the layer's arrays laid out per group of channels (its family's)."""
    return variant.window_steps(kern, variant.layout) if variant.window_steps is not None else {}


def window_kernel(kern, rows: tuple[int, int, int], cols: tuple[int, int, int], channels: int):
    """The layer's kernel record restricted to one window: its outputs, the inputs it reads and the
    padding around them, ``channels`` output channels."""
    if isinstance(kern, K.Conv):
        return replace(kern, out_h=rows[0], in_h=rows[1], pad_t=rows[2], out_w=cols[0], in_w=cols[1], pad_l=cols[2],
                       out_c=channels, in_c=channels if kern.depthwise else kern.in_c)
    if isinstance(kern, K.TransposeConv):
        return replace(kern, out_h=rows[0], in_h=rows[1], pad_t=rows[2], out_w=cols[0], in_w=cols[1], pad_l=cols[2],
                       out_c=channels)
    if isinstance(kern, K.FullyConnected):
        return replace(kern, units=channels)
    if isinstance(kern, K.Pool):  # the tile's channels are its input's (channels follow the output)
        return replace(kern, out_h=rows[0], in_h=rows[1], pad_t=rows[2], out_w=cols[0], in_w=cols[1], pad_l=cols[2],
                       channels=channels)
    n = rows[0] * cols[0] * channels  # an elementwise tile: its elements, dense
    return replace(kern, view=K.Broadcast((1, 1, 1, n), (n, n, n, 1), (n, n, n, 1)))


def _dsp_tiles(L: dict, kern, k: int, sym: _Symbols, variant, g, t, env) -> dict:
    """The kernels of a tiled layer run by a DSP variant: one function per distinct tile shape
    (a window of the layer, its own literal bounds and borders), called through a table indexed
    by the tile's row, column and channel classes, with the layer's arrays (kernel_args_t)."""
    args = L["args"]  # the layer's packed arrays, in .rodata
    per_group = _window_steps(kern, variant)
    w = tile_windows(g, t.tile_h, t.tile_w, t.tile_c)
    rows, cols, chans = w["rows"], w["cols"], w["chans"]
    classes = {axis: sorted(set(spans)) for axis, spans in (("rows", rows), ("cols", cols), ("chans", chans))}
    index = {axis: [classes[axis].index(x) for x in spans] for axis, spans in
             (("rows", rows), ("cols", cols), ("chans", chans))}
    table = []
    for r in classes["rows"]:
        row = []
        for c in classes["cols"]:
            row.append([kernel_function(env, window_kernel(kern, r, c, ch), k, variant, per_group, sym.graph,
                                        soft_double=_estimates(L)) for ch in classes["chans"]])
        table.append(row)
    return dict(args=args, table=table, dims=[len(classes[a]) for a in ("rows", "cols", "chans")],
                row_class=index["rows"], col_class=index["cols"], chan_class=index["chans"])


def _estimates(L: dict) -> bool:
    """The layer's arrays hold integer estimates of its double scales (a core whose double
    arithmetic is software; _Symbols.double_scales): its windows' kernels read them too."""
    return "scale_q32" in L["args"]


def kernel_function(env, kern, k: int, variant, per_group: dict, graph: Graph, in_place: bool = False,
                    soft_double: bool = False) -> dict:
    """One window's kernel as a C function (the ``KERNEL_FN`` placeholder its name), and a name
    for it that says its variant and shape. ``in_place`` (a whole depthwise layer writing over its
    input): ``dst`` is the input it overwrites and ``src2`` its scratch plane."""
    bound = variant.for_window(variant, kern) if variant.for_window is not None else variant
    syms = _ArgSymbols(graph, per_group, soft_double)
    ctx = bound.context(kern, k, syms, bound, in_place)
    F = dict(k=kern, simd=ctx, family=bound.template, func="KERNEL_FN", params=KERNEL_SIGNATURE, x="src", x2="src2", y="dst",
             in_place=in_place, scratch=Code("(int8_t *)src2"), reverse=False)
    F["prologue"] = syms.prologue()
    text = env.get_template("kernel_function.c.j2").render(F=F)
    if isinstance(kern, (K.Conv, K.TransposeConv, K.Pool)):
        shape = f"{kern.out_h}x{kern.out_w}x{kern.channels if isinstance(kern, K.Pool) else kern.out_c}"
    else:
        shape = f"{kern.units}" if isinstance(kern, K.FullyConnected) else f"{kern.view.shape[3]}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return dict(name=f"{variant.name}_{shape}{'_in_place' if in_place else ''}_{digest}", text=text)


def _dsp_whole(L: dict, kern, k: int, variant, in_place: bool, graph: Graph, env) -> dict:
    """An untiled layer run by a DSP variant: its kernel as a function shared by every layer
    whose shape and literals are the same, called with the layer's buffers and arrays."""
    per_group = _window_steps(kern, variant)
    fn = kernel_function(env, kern, k, variant, per_group, graph, in_place, soft_double=_estimates(L))
    none = "(const int8_t *)0"
    if in_place:  # only dst (the input it overwrites) and the plane: no two restrict pointers alias
        src, src2 = none, f"(const int8_t *)({L['scratch']})"
    else:
        src, src2 = L["x"] or none, L["x2"] or none
    return dict(fn=fn, args=L["args"], src=Code(src), src2=Code(src2), dst=Code(L["y"]))


def _dsp_regions(L: dict, kern, k: int, variant, patch, view, graph: Graph, env) -> dict:
    """The kernels of a patch-stage op run by a DSP variant: per patch (row, column) the window of
    its input it reads (inside the input's patch buffer, or the whole input tensor) as a kernel of
    its own, shared where windows and literals agree; the byte offset of that window in its buffer."""
    per_group = _window_steps(kern, variant)
    windows = region_windows(kern, patch, k)
    channels = kern.channels if isinstance(kern, K.Pool) else kern.out_c
    pixel = kern.channels if isinstance(kern, K.Pool) else kern.in_c  # input elements a pixel
    table = [[kernel_function(env, replace(window_kernel(kern, rows, cols, channels), in_row=width * pixel), k,
                              variant, per_group, graph, soft_double=_estimates(L)) for rows, cols, _, width in row]
             for row in windows]
    offsets = [[offset * pixel for _, _, offset, _ in row] for row in windows]
    return dict(args=L["args"], table=table, offsets=offsets, offsets2=None)


def _dsp_binary_regions(L: dict, kern, k: int, variant, patch, view, graph: Graph, env) -> dict:
    """The kernels of a patch-stage elementwise op run by a family's variant: per patch (row,
    column) its output region's rows, each a run of its pixels' channels read from each operand's
    buffer (a patch buffer, or the whole tensor) at that operand's row stride, as a kernel of its
    own; the element offsets of the region's first pixel in each operand's buffer."""
    widths = {t: graph.tensors[t].shape[2] if len(graph.tensors[t].shape) == 4 else 1 for t in view.inputs}
    windows = binary_windows(patch, k, widths)
    c = view.channels

    def window(rows, cols, ins):
        (_, aw), (_, bw) = ins
        return replace(kern, view=K.Broadcast((1, 1, rows, cols * c), (0, 0, aw * c, 1), (0, 0, bw * c, 1)))
    table = [[kernel_function(env, window(*w), k, variant, {}, graph) for w in row] for row in windows]
    offsets = [[[ins[i][0] * c for _, _, ins in row] for row in windows] for i in range(2)]
    return dict(args=L["args"], table=table, offsets=offsets[0], offsets2=offsets[1])


def _keep_functions(functions: dict, fns, noinline: bool = False) -> None:
    """The engine's shared kernel functions: each (kernel_function's result) once, by its name.
    ``noinline``: a tile's or region's kernel, called from its schedule's loop, stays a function of
    its own (inlined there, where the loop keeps its state in registers, the DSP steps' inline
    assembly can run out of them: gcc refuses it)."""
    for fn in fns:
        name = fn["name"]
        text = fn["text"].replace("KERNEL_FN", name)
        if noinline:
            text = text.replace(f"static void {name}(", f"static __attribute__((noinline)) void {name}(", 1)
        if noinline or name not in functions:
            functions[name] = Code(text)


def _patch_context(L: dict, kern, k: int, patch, graph: Graph, sym, macro: dict, variant=None, env=None) -> dict:
    """How op ``k`` of the patch stage computes its region of one patch."""
    st = patch.stage
    view = next(v for v in st.layers if v.layer == k)
    out_t = graph.tensors[view.output]

    def operand(t):
        shape = graph.tensors[t].shape
        return dict(ptr=sym.tensor(t, f"op{k}_in"), table=f"P{t}" if t in patch.buffers else None,
                    w=shape[2] if len(shape) == 4 else 1, c=shape[-1])

    kind = {K.Conv: "spatial", K.Pool: "spatial", K.Add: "binary", K.Mul: "binary", K.IntAdd: "binary", K.MinMax: "binary", K.Transpose: "transpose",
            K.Quantize: "quantize"}[type(kern)]
    ctx = dict(kind=kind, end=st.end, out=f"P{view.output}", channels=view.channels, ins=[operand(t) for t in view.inputs],
               out_type=CTYPES[out_t.dtype], out_w=out_t.shape[2], full_out=None,
               out_ptr=f"({sym.at(view.output)})")
    if view.output == st.output:
        ctx.update(out_ptr=f"({sym.at(scratch_key(k))})", full_out=f"({sym.at(view.output)})")
    ctx["dsp"] = None
    if kind == "spatial":
        g = tiling_geometry(kern, k)
        whole = LayerTiling(k, g.out_h, g.out_w, g.out_c, 0, 1, "untiled", "OPTIMAL")
        ctx["view"] = dict(L, tiling=_tiling_context(kern, g, whole))
        if variant is not None and variant.dsp:
            ctx["dsp"] = _dsp_regions(L, kern, k, variant, patch, view, graph, env)
    if kind == "binary" and variant is not None and variant.dsp:
        ctx["dsp"] = _dsp_binary_regions(L, kern, k, variant, patch, view, graph, env)
    if kind == "transpose":
        ctx.update(in_h=kern.in_shape[2], in_w=kern.in_shape[3])
    return ctx


def _stage_context(patch, layers: list[dict], network_macs: int, reverse: bool = False) -> dict:
    """One patch stage: its tables (every tensor's rows and columns per patch row and column), the
    ops it runs per patch, and which way it walks its patches."""
    st = patch.stage
    tensors = [dict(name=f"P{t}", rows=[iv[t] for iv in patch.rows.intervals],
                    cols=[iv[t] for iv in patch.cols.intervals]) for t in st.patch_tensors]
    extra = patch.option.macs_extra
    return dict(name=f"patch_stage_{st.start}", start=st.start, end=st.end, rows=patch.rows.parts,
                cols=patch.cols.parts, tensors=tensors, funcs=[layers[k]["func"] for k in patch.layers],
                macs_extra=extra, overhead=f"{100 * extra / max(network_macs, 1):.1f}%", reverse=reverse)


def bank_context(plan) -> list[dict] | None:
    """The arena's banks as the engine declares them: one buffer each (arena_<name>, the bytes its
    tensors use, in the bank's linker section on a part), where it starts in the plan's one
    address space. None: one arena."""
    if plan.banks is None:
        return None
    section = plan.backend.bank_sections  # the part places a bank's buffer by section; the host cannot
    return [dict(name=m.name, buffer=f"arena_{m.name.lower()}", base=base, bytes=max(align(used, 16), 16), size=m.size,
                 section=m.section if section else None, cost=m.cost, zeroed=m.zeroed, used=used)
            for m, base, used in zip(plan.banks.memories, plan.banks.bases, plan.banks.used)]


def render(plan, guard: int = 0) -> dict[str, str | bytes]:
    """The engine's files for ``plan``: the C engine and its headers, the task glue, CMake and
    (on a target with a QEMU board) the qemu/ folder. ``guard``: bytes of canary planned on each
    side of every arena buffer (--debug-guards)."""
    graph, backend, lives, offsets, l3, patches = plan.graph, plan.backend, plan.lives, plan.offsets, plan.l3, plan.patches
    tilings = plan.tilings
    kernels = plan.kernels
    ident = c_identifier(graph.name)
    macro = {lt.tensor: (f"T{lt.tensor}_{_short(lt.name)}" if lt.tensor >= 0 else f"{lt.name.upper()}")
             for lt in lives}
    l3_macro = {}  # L3 addresses: streamed weights (by layer) and activations (by tensor)
    l3_symbols = []
    if l3 is not None:
        for k, addr in sorted(l3.weights.items()):
            l3_macro[("w", k)] = f"L3_OP{k}_WEIGHTS"
            w = graph.tensors[kernels[k].weights]
            l3_symbols.append(dict(macro=l3_macro[("w", k)], addr=addr,
                                   comment=f"{shape_text(w)} {DTYPE_SHORT.get(w.dtype)} weights of op {k}"))
        for lt in sorted(l3.lives, key=lambda lt: (l3.offsets[lt.tensor], lt.tensor)):
            l3_macro[lt.tensor] = f"L3_T{lt.tensor}_{_short(lt.name)}"
            t = graph.tensors[lt.tensor]
            l3_symbols.append(dict(macro=l3_macro[lt.tensor], addr=l3.offsets[lt.tensor],
                                   comment=f"{shape_text(t)} {DTYPE_SHORT.get(t.dtype)}, live ops "
                                           f"{lt.first_op}..{lt.last_op}"))
        macro.update({t: m for t, m in l3_macro.items() if isinstance(t, int)})
    # depthwise layers computing over their input through a scratch plane (tiles store from L1 instead)
    in_place = {r.layer: r for r in plan.reuses if r.rule == "depthwise-in-place" and r.layer not in tilings}
    life = {lt.tensor: lt for lt in lives}
    external = tuple(graph.inputs) if plan.options.input_memory == "external" else ()
    banks = bank_context(plan)
    base = {t: banks[k]["buffer"] for t, k in plan.banks.bank_of.items()} if banks else None
    sym = _Symbols(graph, macro, l3.placement.tensors if l3 is not None else frozenset(), external, base,
                   backend.soft_double)

    tensors = []
    for lt in sorted(lives, key=lambda lt: (offsets[lt.tensor], lt.tensor)):
        t = graph.tensors[lt.tensor] if lt.tensor >= 0 else None
        note = f", alias of {graph.tensors[lt.alias_of].name}" if lt.alias_of is not None else ""
        what = (f"{shape_text(t)} {DTYPE_SHORT.get(t.dtype, t.dtype)}" if lt.tensor >= 0
                else f"{lt.size} B scratch")
        bank = banks[plan.banks.bank_of[lt.tensor]] if banks else None
        tensors.append(dict(macro=macro[lt.tensor], offset=offsets[lt.tensor] - (bank["base"] if bank else 0),
                            comment=f"{what}{' in ' + bank['name'] if bank else ''}, live ops "
                                    f"{lt.first_op}..{lt.last_op}{note}"))

    env = environment(backend)
    functions: dict[str, Code] = {}  # one per (variant, window shape), shared by every layer that needs it
    layers = []
    for k, (layer, lp) in enumerate(zip(graph.layers, plan.layers)):
        kern, variant = lp.kernel, lp.variant
        out_t = graph.tensors[layer.outputs[0]]
        data = K.data_inputs(layer, kern)
        L = dict(index=k, kind=type(kern).__name__, k=kern, func=f"op{k}_{layer.op.lower()}",
                 title=f"{layer.op} `{layer.name}` -> {shape_text(out_t)}", variant=variant.name,
                 y=sym.tensor(layer.outputs[0], f"op{k}_out", writable=True), out_bytes=out_t.nbytes,
                 out_ctype=CTYPES[out_t.dtype], in_ctype=CTYPES[graph.tensors[data[0]].dtype] if data else None,
                 in2_ctype=CTYPES[graph.tensors[data[1]].dtype] if len(data) > 1 else None,
                 x=sym.tensor(data[0], f"op{k}_in") if data else None,
                 x2=sym.tensor(data[1], f"op{k}_in2") if len(data) > 1 else None,
                 external_in=any(t in sym.external for t in data[:2]),  # a pointer known only at run time
                 alias=None, in_place=False, params=Code("(void)"), prologue="", tile_dsp=None,
                 reverse=lp.overlap is not None and lp.overlap.reverse and lp.overlap.order != "patches")
        if k in in_place:  # a kernel that writes over its input itself has no plane
            # (a plane planned for another kernel than the one bound would be written at address 0)
            assert in_place[k].scratch_bytes or variant.lanes == 0, f"op {k}: {variant.name} needs a scratch plane"
            L.update(in_place=True, scratch=f"({CTYPES[out_t.dtype]} *)({sym.at(scratch_key(k))})"
                     if in_place[k].scratch_bytes else f"({CTYPES[out_t.dtype]} *)0")
        if isinstance(kern, K.Copy) and life[layer.outputs[0]].alias_of is not None:
            L["alias"] = f"`{out_t.name}` shares the bytes of `{graph.tensors[data[0]].name}`"
        L["whole_dsp"] = None
        L["family"] = variant.template  # the templates' module of its macro
        if variant.context is not None:
            sym.layer_args = {}
            L["simd"] = variant.context(kern, k, sym, variant, k in in_place)
            L["args"] = sym.layer_args
            if L["simd"].get("portable_values"):  # it reads the layer's arrays as the portable kernel lays them out
                L.update(_extra_context(kern, k, sym, data, lp.l3_weights, layer.inputs))
            if variant.shares_whole and k not in tilings and not lp.in_stage and not lp.l3_weights:
                L["whole_dsp"] = _dsp_whole(L, kern, k, variant, k in in_place, graph, env)
                _keep_functions(functions, [L["whole_dsp"]["fn"]])
        else:
            L["simd"] = None
            L.update(_extra_context(kern, k, sym, data, lp.l3_weights, layer.inputs))
        L["tiling"] = None
        if k in tilings:
            slab = None
            if l3 is not None and k in l3.placement.slabs:
                addr = dict(zip(("in", "in2"), (l3_macro.get(t) for t in data)), out=l3_macro.get(layer.outputs[0]),
                            w=l3_macro.get(("w", k)))
                slab = _slab_context(*tilings[k], l3.placement.slabs[k],
                                     f"({sym.at(scratch_key(k))})", addr)
            L["tiling"] = _tiling_context(kern, *tilings[k], slab, L["reverse"])
            if variant.dsp:
                L["tile_dsp"] = _dsp_tiles(L, kern, k, sym, variant, *tilings[k], env)
                _keep_functions(functions, (f for plane in L["tile_dsp"]["table"] for row in plane for f in row), True)
            if L["tiling"]["l1_used"] > plan.options.l1:
                raise AssertionError(f"op {k}: L1 layout {L['tiling']['l1_used']} B exceeds {plan.options.l1} B")
        L["patch"] = None
        patch = stage_of(patches, k) if lp.in_stage else None
        if patch is not None:
            L["patch"] = _patch_context(L, kern, k, patch, graph, sym, macro, variant, env)
            if L["patch"]["dsp"]:
                _keep_functions(functions, (f for row in L["patch"]["dsp"]["table"] for f in row), True)
            L["patch_first"] = k == patch.stage.start
            L["patch_last"] = k == patch.stage.end
            if layer.outputs[0] != patch.stage.output:
                L["y"] = None  # a patch buffer: nothing whole to trace
        layers.append(L)

    def io(ts):
        return [dict(macro=macro.get(t), bytes=graph.tensors[t].nbytes, base=sym.base.get(t, "arena"),
                     comment=f"`{graph.tensors[t].name}` {shape_text(graph.tensors[t])} "
                             f"{DTYPE_SHORT.get(graph.tensors[t].dtype)}") for t in ts]

    state_offsets, state_bytes = state_layout(graph)
    state = [dict(macro=sym.state[t], offset=off, bytes=graph.tensors[t].nbytes, fill=graph.tensors[t].state_fill,
                  comment=f"`{graph.tensors[t].name}` {shape_text(graph.tensors[t])} {DTYPE_SHORT.get(graph.tensors[t].dtype)}")
             for t, off in state_offsets.items()]
    guards = None
    if guard:  # the owners of an output planned over the input it consumes guard only what neither touches
        owner = {lt.tensor: lt.owner for lt in lives}
        paired = {frozenset((owner[o.input], owner[o.output])) for o in plan.overlaps
                  if o.input in owner and o.output in owner}
        guards = dict(bytes=guard, canaries=guard_canaries(
            guard_regions(lives, offsets, guard, macro, patches), guard,
            lambda a, b: frozenset((a["owner"], b["owner"])) not in paired))
    ctx = dict(model=graph.name, ident=ident, guard=ident.upper(), target=backend.name, guards=guards,
               debug_guards=bool(guard),
               arena_bytes=max(plan.arena.peak, 16), planner=plan.arena.method, tensors=tensors, banks=banks,
               state=state, state_bytes=state_bytes,
               constants=sym.constants, layers=layers, inputs=io(graph.inputs), outputs=io(graph.outputs),
               external_inputs=bool(external),
               macs=plan.macs, l1_bytes=plan.options.l1 if tilings else None,
               l1_attribute=Code(backend.l1_attribute),
               engine_note=c_comment_lines(backend.engine_note) if backend.engine_note else None,
               l3_init=backend.l3_init, rtos=plan.options.rtos,
               # the kernel families whose variants run layers: their headers, checks and helpers
               families=list(dict.fromkeys(L["family"] for L in layers if L["simd"])),
               soft_double=backend.soft_double,
               kernel_functions=list(functions.values()), kernel_args=list(sym.arg_types.items()),
               sixteen_bit=any(K.activation_dtype(lp.kernel) == "int16" for lp in plan.layers),
               stack=network_stack_need(layers), core_flags=core_flags(backend),
               stages={p.stage.end: _stage_context(p, layers, plan.macs, plan.layers[p.stage.end].overlap is not None
                                                   and plan.layers[p.stage.end].overlap.reverse) for p in patches},
               l3=None if l3 is None else dict(symbols=l3_symbols, image_bytes=l3.image_bytes, bytes=l3.bytes,
                                               image=c_array(np.frombuffer(l3.image(graph, kernels), np.uint8))
                                               if l3.image_bytes else None))
    names = {"engine.c.j2": f"{ident}_engine.c", "engine.h.j2": f"{ident}_engine.h",
             "fixedpoint.h.j2": f"{ident}_fixedpoint.h", "inference_api.h.j2": "inference_api.h",
             "inference_task.c.j2": "inference_task.c", "inference_task.h.j2": "inference_task.h",
             "CMakeLists.txt.j2": "CMakeLists.txt"}
    if tilings:
        names["dma.h.j2"] = f"{ident}_dma.h"
    files = {out: env.get_template(tpl).render(ctx) for tpl, out in names.items()}
    if l3 is not None and l3.image_bytes:
        files[f"{ident}_l3_weights.bin"] = l3.image(graph, kernels)  # to store at L3 address 0
    if backend.qemu_machine:
        files.update(qemu_files(env, backend, ident, banks))
    if banks and backend.bank_sections:
        files["memory_map.ld"] = env.get_template("memory_map.ld.j2").render(
            banks=[dict(b, region=f"BANK_{b['name'].upper()}", memory=m) for b, m in zip(banks, plan.banks.memories)],
            model=graph.name)
    return files


# --debug-guards: bytes of canary on each side of every arena buffer (a multiple of every
# target's alignment, so the buffers keep theirs)
GUARD_BYTES = 16


def guard_bytes(options) -> int:
    """The canary bytes on each side of every arena buffer (--debug-guards), for any kind of model."""
    return GUARD_BYTES if options.debug_guards else 0


def guard_canaries(regions: list[dict], guard: int, apart=lambda a, b: True) -> list[dict]:
    """The canaries of every guarded buffer (``regions``: name, lo, hi, first, last): the one just
    below its bytes and the one just above, each written before its first op and checked after
    each op while it lives; but a canary lying where a buffer it may share bytes with has its own
    bytes or canaries (an output over the input it consumes: ``apart(a, b)`` is False for the
    pair's regions) is left out, since the other one writes there while both live."""
    out = []
    for r in regions:
        partners = [o for o in regions if o is not r and not apart(r, o)]
        for at in (r["lo"], r["hi"]):
            if all(at + guard <= o["lo"] or at >= o["hi"] + guard for o in partners):
                out.append(dict(name=r["name"], at=at, first=r["first"], last=r["last"]))
    return out


def guard_regions(lives: list[Lifetime], offsets: dict[int, int], guard: int, macro: dict, patches=()) -> list[dict]:
    """The two canaries of every arena buffer: ``lo`` just below its bytes, ``hi`` just above
    its largest tensor, written before its first op (``first``) and checked after each op while
    it lives. A buffer whose life begins inside a patch stage is left out: the stage runs its
    ops once per patch, and the bytes around it belong to others between its uses."""
    regions = []
    for owner, members in owner_groups(lives).items():
        first, last = min(m.first_op for m in members), max(m.last_op for m in members)
        if any(p.stage.start < first <= p.stage.end for p in patches):
            continue
        off, size = offsets[owner], max(m.size for m in members)
        regions.append(dict(name=macro[owner], owner=owner, lo=off - guard, hi=off + size, first=max(first, 0),
                            last=last))
    return sorted(regions, key=lambda r: (r["lo"], r["name"]))


# Stack of the engine below inference_run's caller, in bytes: inference_run's own frame and a
# layer function's frame and spills, plus a layer's stack buffers (the DSP kernels' im2col
# column). Measured with -fstack-usage on six shared models: inference_run 8 B (arm-none-eabi-gcc
# -O2) and 16 B (x86-64 gcc); the largest layer frame 232 B beside its column (Cortex-M4), 72 B on
# the host; a margin covers libgcc's soft-float helpers. tests/host/test_engine_build.py checks it.
STACK_RUN_BYTES = 64
STACK_LAYER_BYTES = 320
# A layer run tile by tile (or patch by patch) keeps its tile descriptors on the stack: 672 B
# measured on x86-64 gcc, 224 B on rv32imc.
STACK_TILED_LAYER_BYTES = 1024
# A FreeRTOS task adds its function's frame and the context saved on a switch (with the FPU's
# registers, about 200 B on a Cortex-M4F/M7); with a margin.
TASK_EXTRA_BYTES = 512


def stack_need(buffer_bytes: int, tiled: bool = False, buffer: str = "im2col column") -> dict:
    """The engine's stack need from its largest layer's stack buffers (``buffer`` says what they
    hold; every kind of model), and a FreeRTOS task's stack in words."""
    buffer_bytes = -(-buffer_bytes // 8) * 8
    layer = max(STACK_TILED_LAYER_BYTES if tiled else 0, STACK_LAYER_BYTES + buffer_bytes)
    engine = STACK_RUN_BYTES + layer
    return dict(layer_bytes=layer, buffer_bytes=buffer_bytes, buffer=buffer, engine_bytes=engine,
                task_words=-(-(engine + TASK_EXTRA_BYTES) // 4))


def network_stack_need(layers: list[dict]) -> dict:
    """A network's: a family kernel's stack buffer (an im2col column: its context's stack_bytes),
    or an LSTM's gated values (a projected one) and gate sums (a layer-normalized one)."""
    column = max((L["simd"].get("stack_bytes", 0) for L in layers if L.get("simd")), default=0)
    gated = max((L["k"].n_cell * (1 if L["k"].projection_scale else 0) + 16 * L["k"].n_cell * (1 if L["k"].layer_norm else 0)
                 for L in layers if isinstance(L["k"], K.Lstm)), default=0)
    tiled = any(L.get("tiling") or L.get("patch") for L in layers)
    if gated > column:
        return stack_need(gated, tiled, "gated values and gate sums of an LSTM")
    return stack_need(column, tiled)




def qemu_files(env: jinja2.Environment, backend: Backend, ident: str, banks=None, l3: bool = False) -> dict[str, str]:
    """The qemu/ folder: start-up, linker script, semihosting, harness and Makefile that build
    the engine for the core's QEMU board and run it there before flashing. ``banks``
    (bank_context): each bank a region of the board's RAM of the bank's real size, at the top
    (QEMU gives the banks their sizes, not their addresses). ``l3``: the engine's L3 image
    (section .l3_image) goes into the board's external memory."""
    regions, top = [], backend.qemu_ram_bytes
    for b in reversed(banks or []):
        top -= align(b["size"], 16)
        regions.insert(0, dict(b, region=f"BANK_{b['name'].upper()}", origin=backend.qemu_ram_origin + top))
    ctx = dict(ident=ident, machine=backend.qemu_machine, cflags=" ".join(backend.cflags),
               flash_bytes=backend.qemu_flash_bytes, ram_bytes=top, stack_bytes=backend.stack_bytes, banks=regions,
               flash_origin=backend.qemu_flash_origin, ram_origin=backend.qemu_ram_origin,
               vector_origin=backend.qemu_vector_origin, l3=l3, l3_region=backend.qemu_l3)
    names = ("startup.c", "link.ld", "semihost.c", "semihost.h", "main.c", "Makefile")
    return {f"qemu/{n}": env.get_template(f"qemu/{n}.j2").render(ctx) for n in names}


def portable_requant_bytes(kern) -> int:
    """.rodata of a layer's requantization arrays and tables in the portable kernels' form."""
    if getattr(kern, "float_rq", None) is not None:
        return 4 * len(kern.float_rq)
    if getattr(kern, "int_rq", None) is not None:  # a uniform array is a literal
        return 4 * len(kern.int_rq.mul) * (len(set(kern.int_rq.mul)) > 1) \
            + 8 * len(kern.int_rq.add) * (len(set(kern.int_rq.add)) > 1)
    if isinstance(kern, K.Conv):
        return 5 * len(kern.multiplier)
    if isinstance(kern, K.FullyConnected):
        return 8 * len(kern.scale)
    if isinstance(kern, K.Lookup):
        return 256
    if isinstance(kern, K.ResizeNearest):
        return 4 * (len(kern.rows) + len(kern.cols))  # its int32 row and column tables
    return 0


def _recurrent_constants(kern) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(section, the layer's input positions) of the constants a recurrent layer's engine holds as
    they are stored: an LSTM's weights, projection and peepholes (its biases are folded, see the caller; a
    layer-normalized one's are read as stored too), an SVDF's feature and time weights and its bias."""
    if isinstance(kern, K.Lstm):  # (layer normalization: its coefficients, and the raw biases it adds)
        return (("weights", (*LSTM_INPUT_WEIGHTS, *LSTM_RECURRENT_WEIGHTS, LSTM_PROJECTION)),
                ("parameters", tuple(LSTM_PEEPHOLE.values()) + (LSTM_LAYER_NORM if kern.layer_norm else ())),
                ("biases", LSTM_BIASES if kern.layer_norm else ()))
    return ("weights", (1, 2)), ("biases", (3,))


def constant_sections(graph: Graph, layers) -> dict:
    """Bytes of .rodata the engine holds, by kind: weights (in their variant's layout), biases and
    the other constants (requantization arrays, lookup tables, constant operands) of ``layers``
    (the plan's LayerPlan records)."""
    seen: set[int] = set()  # constants the engine holds as they are (once, whoever reads them)
    sections = dict(weights=0, biases=0, parameters=0)
    for layer, lp in zip(graph.layers, layers):
        kern = lp.kernel
        if isinstance(kern, (K.Lstm, K.Svdf)):  # recurrent layers: weights as stored, their own biases
            for kind, positions in _recurrent_constants(kern):
                for i in positions:
                    t = layer.inputs[i]
                    if t >= 0 and t not in seen:
                        seen.add(t)
                        sections[kind] += graph.tensors[t].nbytes
            if isinstance(kern, K.Lstm):  # the gates' folded biases (the input's, the hidden state's), the projection's
                sections["biases"] += 2 * 4 * 4 * kern.n_cell + 4 * len(kern.projection_bias or ())
            continue
        own = lp.variant.lane_bytes if lp.variant is not None else None
        if own is not None:  # a variant laying out its own weights and per-channel arrays: per layer
            sections["weights"] += lp.variant.weight_bytes
            sections["biases"] += own[0]
            sections["parameters"] += own[1]
        for t in layer.inputs:
            if t < 0 or not graph.tensors[t].is_const or t in seen:
                continue
            n = graph.tensors[t].nbytes
            if t == getattr(kern, "weights", None):
                if own is None:
                    seen.add(t)
                    sections["weights"] += lp.variant.weight_bytes if lp.variant is not None else n
            elif t == getattr(kern, "bias", None):
                if own is None:
                    seen.add(t)
                    sections["biases"] += n
            else:
                seen.add(t)
                sections["parameters"] += n
        if own is None:
            sections["parameters"] += portable_requant_bytes(kern)
    return sections
