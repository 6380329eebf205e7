"""Spatial geometry of windowed layers, as TFLite computes it."""
from __future__ import annotations


def effective_size(kernel: int, dilation: int) -> int:
    return (kernel - 1) * dilation + 1


def output_size(size: int, kernel: int, stride: int, dilation: int, padding: str,
                explicit: tuple[int, int] | None = None) -> int:
    eff = effective_size(kernel, dilation)
    if explicit is not None:
        return (size + explicit[0] + explicit[1] - eff) // stride + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size - eff + stride) // stride


def pad_before(size: int, kernel: int, stride: int, dilation: int, padding: str,
               explicit: tuple[int, int] | None = None) -> int:
    """Rows (or columns) of implicit padding before the first input element."""
    if explicit is not None:
        return explicit[0]
    if padding != "SAME":
        return 0
    out = output_size(size, kernel, stride, dilation, padding)
    total = (out - 1) * stride + effective_size(kernel, dilation) - size
    return max(total, 0) // 2


def pad_after(size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    """Rows (or columns) of implicit padding TFLite adds after the last input element."""
    if padding != "SAME":
        return 0
    out = output_size(size, kernel, stride, dilation, padding)
    total = max((out - 1) * stride + effective_size(kernel, dilation) - size, 0)
    return total - total // 2
