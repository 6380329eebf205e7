"""What every kernel family's kernels share about a layer's geometry and arithmetic: the output
pixels whose windows lie inside the input, the walks over the others, the input offset folded
into the bias, and per-channel values padded to a kernel's passes."""
from __future__ import annotations

import numpy as np

from layer_analyzer import kernels as K


def folded_bias(kern, bias: np.ndarray | None, weights: np.ndarray) -> np.ndarray:
    """bias + input_offset * (sum of each output channel's weights): the pointwise kernels sum
    x * w, not (x + offset) * w (int32 arithmetic wraps alike, so the final sum is the same)."""
    base = 0 if bias is None else bias.astype(np.int64)
    return base + kern.input_offset * weights.reshape(weights.shape[0], -1).astype(np.int64).sum(1)


def pad_channels(values, channels: int, total: int, fill, dtype) -> np.ndarray:
    """Per-channel ``values`` (or one for all) for ``channels`` channels, then ``fill`` up to
    ``total`` entries (a kernel's last pass of fewer channels reads whole vectors)."""
    v = np.full(total, fill, dtype)
    v[:channels] = np.broadcast_to(np.asarray(values, dtype), (channels,))
    return v


def interior(kern: K.Conv) -> tuple[int, int, int, int]:
    """Output rows [oy0, oy1) and columns [ox0, ox1) whose whole window lies inside the input."""
    def span(pad, stride, k, n_in, n_out):
        lo = -(-pad // stride)
        hi = (n_in - k + pad) // stride + 1 if n_in + pad >= k else 0
        lo, hi = min(max(lo, 0), n_out), min(max(hi, 0), n_out)
        return (lo, max(lo, hi))
    return (*span(kern.pad_t, kern.stride_h, kern.k_h, kern.in_h, kern.out_h),
            *span(kern.pad_l, kern.stride_w, kern.k_w, kern.in_w, kern.out_w))


def border_walks(kern: K.Conv) -> list[tuple[tuple[int, int, int, int], int, int]]:
    """The output pixels outside ``interior`` as walks ((a, b, c, d), ox0, ox1): rows [a, b) and
    [c, d), columns [ox0, ox1). The rows above and below the interior take one walk over every
    column (one copy of the window's taps, those some windows cut off guarded); the columns left
    and right of it, one each (where that is one column, the compiler folds its guards)."""
    oy0, oy1, ox0, ox1 = interior(kern)
    h, w = kern.out_h, kern.out_w
    if oy0 == oy1 or ox0 == ox1:
        return [((0, h, h, h), 0, w)]
    above = (0, oy0, oy1, h) if oy0 and oy1 < h else (0, oy0, oy0, oy0) if oy0 else (oy1, h, h, h)
    walks = [(above, 0, w), ((oy0, oy1, oy1, oy1), 0, ox0), ((oy0, oy1, oy1, oy1), ox1, w)]
    return [(rows, a, b) for rows, a, b in walks if a < b and (rows[0] < rows[1] or rows[2] < rows[3])]


def tap_guards(kern: K.Conv) -> list[str]:
    """Per tap column of a window, the C condition under which a border pixel's window holds it
    (over the pixel's first and last columns kx0, kx1; "" where every window does): a column some
    window starts after, or ends before, checks the pixel's window."""
    cuts = set()  # (first, last + 1) tap column of every window
    for ox in range(kern.out_w):
        ix0 = ox * kern.stride_w - kern.pad_l
        cuts.add((max(0, -ix0), min(kern.k_w, kern.in_w - ix0)))
    return [" && ".join([f"kx0 <= {kx}"] * any(a > kx for a, _ in cuts) + [f"{kx} < kx1"] * any(b <= kx for _, b in cuts))
            for kx in range(kern.k_w)]
