"""Reader for MiniMalloc's static-allocation benchmark files (``id,lower,upper,size``).

Each row is one buffer live over the half-open time interval ``[lower, upper)``; the
file name may carry the capacity the instance was made for (``A.1048576.csv``).
"""
from __future__ import annotations

import csv
from pathlib import Path

from .arena_types import ArenaProblem, Buffer

_COLUMNS = ("id", "lower", "upper", "size")


def _capacity_from_name(path: Path) -> int | None:
    """``A.1048576.csv`` -> 1048576; None when the name carries no number."""
    parts = path.name.split(".")
    for part in reversed(parts[1:-1] if len(parts) > 2 else []):
        if part.isdigit():
            return int(part)
    return None


def read_alloc_bench(path) -> ArenaProblem:
    """One ArenaProblem (alignment 1) from an alloc-bench CSV: [lower, upper) -> first=lower, last=upper-1."""
    path = Path(path)
    buffers: list[Buffer] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != _COLUMNS:
            raise ValueError(f"{path}:1: expected the header {','.join(_COLUMNS)}, got {header!r}")
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(_COLUMNS):
                raise ValueError(f"{path}:{line_no}: expected 4 fields (id,lower,upper,size), got {len(row)}: {row!r}")
            name, *numbers = (cell.strip() for cell in row)
            try:
                lower, upper, size = (int(x) for x in numbers)
            except ValueError:
                raise ValueError(f"{path}:{line_no}: lower, upper and size must be integers, got {row!r}") from None
            if lower < 0 or upper <= lower or size < 0:
                raise ValueError(f"{path}:{line_no}: need 0 <= lower < upper and size >= 0, got {row!r}")
            buffers.append(Buffer(name=name, size=size, first=lower, last=upper - 1))
    if not buffers:
        raise ValueError(f"{path}: no buffers")
    return ArenaProblem(buffers=tuple(buffers), alignment=1, capacity=_capacity_from_name(path))
