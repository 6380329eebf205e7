"""What a layer needs in L1 as a function of its tile sizes: the tiling problem, per layer.

A tile is ``tile_h x tile_w`` output pixels by ``tile_c`` output channels. Its input
tile is the receptive field of those pixels (the halo included), over all input
channels for a regular convolution or fully connected layer and over the same
``tile_c`` channels for depthwise convolutions, pooling and elementwise ops.

When not even a one-pixel, one-channel tile fits with all input channels, a regular
convolution or fully connected layer also splits its input channels (``tile_ci``, 0 =
all): each tile then sums a slice of them into an int32 accumulator held in L1 and the
last slice requantizes (DORY's rule: input channels are cut only when nothing else fits).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import kernels as K

# Per output channel: int32 bias + int32 multiplier + int8 shift (conv); int32 bias + double scale (FC);
# a 16x8 layer's bias takes 8 bytes.
CONV_PARAM_BYTES = 9
FC_PARAM_BYTES = 12
WIDE_BIAS_BYTES = 4


@dataclass(frozen=True, slots=True)
class Footprint:
    input: int
    weights: int
    params: int
    output: int
    accumulator: int = 0  # partial sums (int32; int64 in 16x8 layers) of a tile whose input channels are split

    def l1_bytes(self, double_buffer: bool, double_buffer_weights: bool) -> int:
        """Input and output tiles are double-buffered (DMA of tile i+1 overlaps compute of tile i),
        weights too when they change from tile to tile; every buffer starts 16-byte aligned.
        The accumulator is not moved by DMA: one copy."""
        io = 2 if double_buffer else 1
        w = 2 if double_buffer_weights else 1
        return (io * (l1_align(self.input) + l1_align(self.output)) + w * (l1_align(self.weights) + l1_align(self.params))
                + l1_align(self.accumulator))


L1_ALIGNMENT = 16  # every L1 buffer starts aligned


def l1_align(n: int) -> int:
    return -(-n // L1_ALIGNMENT) * L1_ALIGNMENT


@dataclass(frozen=True, slots=True)
class TileGeometry:
    """One tileable layer, reduced to what its L1 footprint depends on."""
    layer: int
    kind: str  # "conv" | "depthwise" | "fc" | "pool" | "eltwise" | "resize" | "bilinear" | "transpose_conv"
    out_h: int
    out_w: int
    out_c: int
    in_h: int
    in_w: int
    in_c: int
    k_h: int = 1
    k_w: int = 1
    stride_h: int = 1
    stride_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    operands: int = 1  # input tensors streamed in (2 for ADD/MUL without broadcast)
    # an elementwise layer's second operand, when it is not streamed in with the tile: a constant
    # read where it is, one value per channel ("channel") or one in all ("scalar")
    second: str = "tile"
    param_bytes: int = 0  # per output channel
    pad_t: int = 0  # padding before the first input row and column
    pad_l: int = 0
    # How the layer's kernel variant runs a tile (set by the tiling pass, from the variant):
    stage_weights: bool = True  # weights and parameters are moved into L1 (else read where they are)
    c_quantum: int = 1  # a tile's output channels are a multiple of this, or all of them
    full_width: bool = False  # tiles span whole rows (a layer writing over its input, tile by tile)
    split_ok: bool = True  # input channels may be split when nothing else fits (DORY's rule)
    # the input rows (first, last) each output row reads, and the columns, where they are not a
    # window of strides and a kernel (a resize, a transposed convolution; both ends non-decreasing:
    # a tile reads from its first row's first to its last row's last); () otherwise
    rows: tuple[tuple[int, int], ...] = ()
    cols: tuple[tuple[int, int], ...] = ()
    elem: int = 1  # bytes of an input or output element (2: a 16-bit layer)
    acc_bytes: int = 4  # bytes of a partial sum when input channels are split (8: a 16x8 layer's int64)

    @property
    def alignment(self) -> int:
        """Every L1 buffer of a tile starts on this boundary (the solver's models round to it)."""
        return L1_ALIGNMENT

    @property
    def channels_follow_output(self) -> bool:
        """Input channels are tiled together with output channels (one input channel each)."""
        return self.kind in ("depthwise", "pool", "eltwise", "resize", "bilinear")

    @property
    def streams(self) -> bool:
        """Its tiles may be staged in L2 slabs from L3 (the slab schedule cuts windows of strides)."""
        return not self.rows

    @property
    def weight_bytes_per_channel(self) -> int:
        if self.kind in ("conv", "transpose_conv"):
            return self.k_h * self.k_w * self.in_c
        if self.kind == "depthwise":
            return self.k_h * self.k_w
        if self.kind == "fc":
            return self.in_c
        return 0

    def in_rows(self, tile_h: int) -> int:
        """Input rows the tallest tile of ``tile_h`` output rows reads (the halo included)."""
        if self.rows:
            return _widest_span(self.rows, tile_h)
        return min((tile_h - 1) * self.stride_h + (self.k_h - 1) * self.dil_h + 1, self.in_h)

    def in_cols(self, tile_w: int) -> int:
        if self.cols:
            return _widest_span(self.cols, tile_w)
        return min((tile_w - 1) * self.stride_w + (self.k_w - 1) * self.dil_w + 1, self.in_w)

    @property
    def splits_input_channels(self) -> bool:
        """Input channels may be split (regular convolutions and fully connected layers)."""
        return self.split_ok and self.kind in ("conv", "fc")

    def allows(self, tile_h: int, tile_w: int, tile_c: int) -> bool:
        """The variant can run this tile shape."""
        return (tile_c == self.out_c or tile_c % self.c_quantum == 0) and (not self.full_width or tile_w == self.out_w)

    @property
    def smallest_tile(self) -> tuple[int, int, int]:
        return 1, self.out_w if self.full_width else 1, min(self.c_quantum, self.out_c)

    def footprint(self, tile_h: int, tile_w: int, tile_c: int, tile_ci: int = 0) -> Footprint:
        split = 0 < tile_ci < self.in_c
        in_c = tile_c if self.channels_follow_output else (tile_ci if split else self.in_c)
        per_channel = self.weight_bytes_per_channel // self.in_c * in_c if split else self.weight_bytes_per_channel
        staged = self.stage_weights
        return Footprint(input=self.operands * self.in_rows(tile_h) * self.in_cols(tile_w) * in_c * self.elem,
                         weights=tile_c * per_channel if staged else 0,
                         params=tile_c * self.param_bytes if staged else 0,
                         output=tile_h * tile_w * tile_c * self.elem,
                         accumulator=self.acc_bytes * tile_h * tile_w * tile_c if split else 0)

    def l1_bytes(self, tile_h: int, tile_w: int, tile_c: int, tile_ci: int = 0) -> int:
        """L1 for the tile; one tile covering the layer needs no second buffer."""
        double = self.tiles(tile_h, tile_w, tile_c, tile_ci) > 1
        split = 0 < tile_ci < self.in_c
        return self.footprint(tile_h, tile_w, tile_c, tile_ci).l1_bytes(
            double, double and (tile_c < self.out_c or split))

    def slab_parts(self, rows: int, chans: int) -> dict[str, int]:
        """L2 staging, in bytes, of one L3 slab: ``rows`` output rows (whole width) by ``chans``
        output channels. Per part: each input operand's window (halo included; all input
        channels unless channels follow the output), the slab's weights, its output."""
        in_c = chans if self.channels_follow_output else self.in_c
        window = self.in_rows(rows) * self.in_w * in_c * self.elem
        return {"in": window, "in2": window if self.operands > 1 else 0,
                "w": chans * self.weight_bytes_per_channel, "out": rows * self.out_w * chans * self.elem}

    def tiles(self, tile_h: int, tile_w: int, tile_c: int, tile_ci: int = 0) -> int:
        slices = -(-self.in_c // tile_ci) if 0 < tile_ci < self.in_c else 1
        return -(-self.out_h // tile_h) * -(-self.out_w // tile_w) * -(-self.out_c // tile_c) * slices

    def macs_per_output(self) -> int:
        if self.kind == "conv":
            return self.k_h * self.k_w * self.in_c
        if self.kind == "transpose_conv":  # each output sums about (k / stride)^2 input pixels
            return max(1, self.k_h // self.stride_h) * max(1, self.k_w // self.stride_w) * self.in_c
        if self.kind in ("depthwise", "pool"):
            return self.k_h * self.k_w
        if self.kind == "bilinear":
            return 4
        if self.kind == "fc":
            return self.in_c
        return 1


def _widest_span(spans: tuple[tuple[int, int], ...], tile: int) -> int:
    """Input entries the widest tile of ``tile`` outputs reads (at least one: a tile's buffer)."""
    return max(1, max(inputs for _, inputs, _ in _source_windows(spans, tile)))


# the kernel records that run tile by tile in L1 (geometry decides per layer: batch 1, dense, ...)
TILED = (K.Conv, K.Pool, K.Add, K.Mul, K.IntAdd, K.MinMax, K.Prelu, K.FullyConnected, K.ResizeNearest,
         K.ResizeBilinear, K.ResizeLinear, K.TransposeConv)


def geometry(kernel, layer: int) -> TileGeometry | None:
    """The tiling view of a lowered kernel, or None when the layer runs untiled from L2."""
    if not isinstance(kernel, TILED):
        return None
    if K.activation_dtype(kernel) == "int16":
        return _geometry16(kernel, layer)
    if getattr(kernel, "float_avg", None) is not None:
        return None  # onnxruntime's float average pooling runs whole
    if getattr(kernel, "act_max", 0) > 127 or getattr(kernel, "act_min", 0) < -128:
        return None  # an integer graph's raw int32 output: tiles hold int8 outputs only
    return _view(kernel, layer)


def _view(kernel, layer: int) -> TileGeometry | None:
    """The geometry of a tileable kernel record (batch 1, dense, ...), in elements."""
    match kernel:
        case K.Conv(batch=1):
            kind = "depthwise" if kernel.depthwise else "conv"
            if kernel.depthwise and kernel.depth_multiplier != 1:
                return None
            return TileGeometry(layer, kind, kernel.out_h, kernel.out_w, kernel.out_c, kernel.in_h,
                                kernel.in_w, kernel.in_c, kernel.k_h, kernel.k_w, kernel.stride_h,
                                kernel.stride_w, kernel.dil_h, kernel.dil_w, param_bytes=CONV_PARAM_BYTES,
                                pad_t=kernel.pad_t, pad_l=kernel.pad_l)
        case K.Pool(batch=1):
            return TileGeometry(layer, "pool", kernel.out_h, kernel.out_w, kernel.channels, kernel.in_h,
                                kernel.in_w, kernel.channels, kernel.f_h, kernel.f_w, kernel.stride_h,
                                kernel.stride_w, pad_t=kernel.pad_t, pad_l=kernel.pad_l)
        case K.Add() | K.Mul() | K.IntAdd() | K.MinMax() | K.Prelu() if kernel.view.dense and kernel.view.shape[0] == 1:
            _, h, w, c = kernel.view.shape
            return TileGeometry(layer, "eltwise", h, w, c, h, w, c, operands=2)
        case K.Prelu(alpha_constant=True) if kernel.view.shape[0] == 1:
            # an alpha per channel (or one): read where it is, by the tile's channels
            v = kernel.view
            _, h, w, c = v.shape
            dense = tuple(K.element_strides(v.shape))
            used = [d for d in range(4) if v.shape[d] > 1]  # a stride along an axis of one entry is never taken
            if any(v.a_strides[d] != dense[d] for d in used) or any(v.b_strides[d] for d in used if d < 3):
                return None
            if c > 1 and v.b_strides[3] not in (0, 1):
                return None
            return TileGeometry(layer, "eltwise", h, w, c, h, w, c,
                                second="channel" if c > 1 and v.b_strides[3] == 1 else "scalar")
        case K.FullyConnected(batch=1):
            return TileGeometry(layer, "fc", 1, 1, kernel.units, 1, 1, kernel.in_features,
                                param_bytes=FC_PARAM_BYTES)
        case K.ResizeNearest(batch=1) if _non_decreasing(kernel.rows) and _non_decreasing(kernel.cols):
            return TileGeometry(layer, "resize", len(kernel.rows), len(kernel.cols), kernel.channels, kernel.in_h,
                                kernel.in_w, kernel.channels, rows=tuple((r, r) for r in kernel.rows),
                                cols=tuple((c, c) for c in kernel.cols))
        case K.ResizeBilinear(batch=1) | K.ResizeLinear(batch=1):  # each output blends two rows and columns: the span
            rows, cols = (tuple((a, b) for a, b, *_ in t) for t in (kernel.rows, kernel.cols))
            if not all(_non_decreasing([s[e] for s in spans]) for spans in (rows, cols) for e in (0, 1)):
                return None
            return TileGeometry(layer, "bilinear", len(rows), len(cols), kernel.channels, kernel.in_h, kernel.in_w,
                                kernel.channels, rows=rows, cols=cols)
        case K.TransposeConv(batch=1):
            k = kernel
            return TileGeometry(layer, "transpose_conv", k.out_h, k.out_w, k.out_c, k.in_h, k.in_w, k.in_c, k.k_h, k.k_w,
                                k.stride_h, k.stride_w, param_bytes=CONV_PARAM_BYTES, pad_t=k.pad_t, pad_l=k.pad_l,
                                split_ok=False, rows=gathered_spans(k.out_h, k.in_h, k.k_h, k.stride_h, k.pad_t),
                                cols=gathered_spans(k.out_w, k.in_w, k.k_w, k.stride_w, k.pad_l))
    return None


def _geometry16(kernel, layer: int) -> TileGeometry | None:
    """A 16-bit layer's tiling view: its convolutions, pooling, same-shape ADD/SUB/MUL and fully
    connected layers tile with 2-byte elements (int64 partial sums where input channels split);
    the others run whole."""
    match kernel:
        case K.Conv() | K.Pool() | K.FullyConnected() | K.Add() | K.Mul():
            g = _view(kernel, layer)
            if g is None:
                return None
            wide = getattr(kernel, "acc64", False)
            return replace(g, elem=2, acc_bytes=8 if wide else 4,
                           param_bytes=g.param_bytes + (WIDE_BIAS_BYTES if wide else 0))
    return None


def _non_decreasing(sources) -> bool:
    return all(a <= b for a, b in zip(sources, sources[1:]))


def gathered_spans(out: int, extent: int, k: int, stride: int, pad: int) -> tuple[tuple[int, int], ...]:
    """A transposed convolution along one axis: the input entries (first, last) whose scattered
    kernel window covers each output (input i reaches outputs i * stride - pad + [0, k)); an
    output no window covers has last = first - 1."""
    spans = []
    for o in range(out):
        lo = max(0, -(-(o + pad - k + 1) // stride))
        hi = min(extent - 1, (o + pad) // stride)
        spans.append((lo, max(hi, lo - 1)))
    return tuple(spans)


def writes_behind_reads(g: TileGeometry, tile_h: int, tile_w: int, tile_c: int, async_dma: bool = False) -> bool:
    """Can a depthwise layer whose output takes over its input's bytes (output pixel p, channel c
    at the byte of input pixel p, channel c) run tile by tile? The tile schedule loads tile t + 1
    before it stores tile t: with copies that finish before the next starts, a store must only
    overwrite bytes no tile after the next one still reads; with an asynchronous DMA engine (the
    load of t + 1 may still run during the store of t), bytes no later tile reads. Tiles run
    channel slice by channel slice, rows inside; they must span whole rows."""
    if g.kind != "depthwise" or tile_w != g.out_w:
        return False
    rows = [(r, min(tile_h, g.out_h - r)) for r in range(0, g.out_h, tile_h)]
    reads, writes = [], []  # flat pixel ranges of each row tile, the same in every channel slice
    for r, h in rows:
        y0 = max(r * g.stride_h - g.pad_t, 0)
        y1 = min((r + h - 1) * g.stride_h - g.pad_t + (g.k_h - 1) * g.dil_h + 1, g.in_h)
        reads.append((y0 * g.in_w, y1 * g.in_w))
        writes.append((r * g.out_w, (r + h) * g.out_w))
    return all(writes[t][1] <= reads[u][0] or reads[u][1] <= writes[t][0]
               for t in range(len(rows)) for u in range(t + (1 if async_dma else 2), len(rows)))


def axis_windows(out: int, tile: int, stride: int, pad: int, eff: int, extent: int) -> list[tuple[int, int, int]]:
    """(outputs, inputs read, padding before) of each tile along one axis, as the tile grid
    clips its input window to the image."""
    spans = []
    for i in range(-(-out // tile)):
        o0 = i * tile
        o = min(tile, out - o0)
        raw0, raw1 = o0 * stride - pad, (o0 + o - 1) * stride - pad + eff
        spans.append((o, min(raw1, extent) - max(raw0, 0), max(raw0, 0) - raw0))
    return spans


def _source_windows(spans: tuple[tuple[int, int], ...], tile: int, pad: int = 0,
                    stride: int = 0) -> list[tuple[int, int, int]]:
    """(outputs, inputs read, padding before) of each tile along one axis of a layer with input
    spans. A transposed convolution's window is one of its own whose padding puts the tile's first
    output where it is: pad + o0 - first input * stride (a resize's: 0)."""
    n = len(spans)
    return [(min(tile, n - o), spans[min(o + tile, n) - 1][1] - spans[o][0] + 1,
             pad + o - spans[o][0] * stride if stride else 0) for o in range(0, n, tile)]


def tile_windows(g: TileGeometry, tile_h: int, tile_w: int, tile_c: int) -> dict[str, list]:
    """Every tile's window along each axis ("rows", "cols": (outputs, inputs, padding before);
    "chans": output channels), in tile order: what a kernel run on one tile sees."""
    if g.kind == "fc":
        rows = cols = [(1, 1, 0)]
    elif g.kind == "eltwise":
        rows = [(o, o, 0) for o, _, _ in axis_windows(g.out_h, tile_h, 1, 0, 1, g.in_h)]
        cols = [(o, o, 0) for o, _, _ in axis_windows(g.out_w, tile_w, 1, 0, 1, g.in_w)]
    elif g.kind == "transpose_conv":  # the padding before: where the window's first output sits
        rows, cols = (_source_windows(src, tile, pad, stride) for src, tile, pad, stride in
                      ((g.rows, tile_h, g.pad_t, g.stride_h), (g.cols, tile_w, g.pad_l, g.stride_w)))
    elif g.rows:
        rows, cols = (_source_windows(src, tile) for src, tile in ((g.rows, tile_h), (g.cols, tile_w)))
    else:
        rows = axis_windows(g.out_h, tile_h, g.stride_h, g.pad_t, (g.k_h - 1) * g.dil_h + 1, g.in_h)
        cols = axis_windows(g.out_w, tile_w, g.stride_w, g.pad_l, (g.k_w - 1) * g.dil_w + 1, g.in_w)
    return dict(rows=rows, cols=cols, chans=[min(tile_c, g.out_c - c0) for c0 in range(0, g.out_c, tile_c)])


def window_shapes(g: TileGeometry, tile_h: int, tile_w: int, tile_c: int) -> list[tuple]:
    """The distinct (rows, cols, chans) windows of a tiling: one kernel each."""
    w = tile_windows(g, tile_h, tile_w, tile_c)
    return [(r, c, ch) for r in sorted(set(w["rows"])) for c in sorted(set(w["cols"])) for ch in sorted(set(w["chans"]))]
