"""The values the commands' flags take, read into numbers: sizes ('64K'), shares ('20%') and
the names the planners and kernel families go by. One place, so ``deploy`` and ``deploy sweep``
read a flag the same way."""
from __future__ import annotations

import math
import re

from backends import BACKENDS
from network_parser.errors import UsageError

_SIZE = re.compile(r"^\s*(\d+)\s*([KkMm]?)(?:i?[Bb])?\s*$")


# every target is a 32-bit part (host models one): no memory of it holds more bytes than this
ADDRESS_SPACE_BYTES = 1 << 32


def parse_size(text: str | None, flag: str | None = None) -> int | None:
    """'64K' -> 65536, '1M' -> 1048576, '1000' -> 1000 (K and M are multiples of 1024), at most
    the 4 GiB a 32-bit target addresses. ``flag``: the option it came from, for the error."""
    if text is None:
        return None
    named = f"{flag} " if flag else ""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"{named}cannot read size '{text}' (examples: 65536, 64K, 1M)")
    size = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if size > ADDRESS_SPACE_BYTES:
        raise UsageError(f"{named}{str(text).strip()} is {size:,} bytes, more than the {ADDRESS_SPACE_BYTES:,} (4 GiB) "
                         f"a 32-bit target addresses")
    return size


PLANNERS = ("cpsat", "first-fit", "best-fit", "bidirectional")
# --kernels: the targets' kernel families by name, beside "auto" (a target's own, in order) and "plain"
FAMILIES = {f.name: f for b in BACKENDS.values() for f in b.families}
KERNELS = ("auto", "plain", *FAMILIES)


def parse_share(text: str) -> float:
    """'20%' or '0.2' -> 0.2."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"--max-overhead '{text}': expected a share such as 20% or 0.2") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--max-overhead '{text}': must be a share of at least 0")
    return value
