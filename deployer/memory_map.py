"""--memory-map FILE.json: a part's RAM banks, as the user describes them
(deployer/memory_map.schema.json says the format):

    {"part": "an M33 with two SRAM blocks",
     "banks": [{"name": "SRAM0", "size": "64K", "section": ".sram0", "cost": 1, "address": "0x20000000"},
               {"name": "SRAM1", "size": "192K", "section": ".sram1", "cost": 1.5},
               {"name": "TCM", "size": "32K", "kind": "tcm", "use": "l1"}]}

Banks with ``use`` arena (the default) hold the activations; an ``l1`` bank is the tiles'
scratchpad (--l1 of its size), an ``l3`` one external memory reached by DMA (--l3). The map
replaces --sram, --l1 and --l3.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

from backends.base import MemoryBank
from network_parser.errors import UsageError
from network_parser.side_files import read_side_file

from .flag_values import parse_size

MAP_BYTES = 1 << 20
SCHEMA = Path(__file__).resolve().parent / "memory_map.schema.json"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_SECTION = re.compile(r"^\.[A-Za-z0-9_.]{1,63}$")
_MASTER = re.compile(r"^[a-z0-9_]{1,16}$")
_FIELDS = {"name", "size", "section", "cost", "kind", "masters", "zeroed", "address", "use"}


def read_memory_map(path: Path) -> tuple[MemoryBank, ...]:
    """The banks of a memory map file, each checked; any fault is one usage error naming the
    file and the bank."""
    raw = read_side_file(Path(path), what="the memory map", max_bytes=MAP_BYTES, error=UsageError)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a JSON memory map ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("banks"), list) or not data["banks"]:
        raise UsageError(f"{path}: a memory map is an object with a list of banks ({{\"banks\": [...]}})")
    extra = sorted(set(data) - {"banks", "part"})
    if extra:
        raise UsageError(f"{path}: unknown key '{extra[0]}' (a memory map has banks and part)")
    if len(data["banks"]) > 16:
        raise UsageError(f"{path}: {len(data['banks'])} banks; at most 16")
    banks = tuple(_bank(path, i, b) for i, b in enumerate(data["banks"]))
    for field in ("name", "section"):
        seen = [getattr(b, field) for b in banks]
        twice = next((v for v in seen if seen.count(v) > 1), None)
        if twice is not None:
            raise UsageError(f"{path}: two banks have the {field} {twice}; each bank needs its own")
    if not any(b.use == "arena" for b in banks):
        raise UsageError(f"{path}: no bank holds the activations (use \"arena\")")
    for use in ("l1", "l3"):
        if sum(b.use == use for b in banks) > 1:
            raise UsageError(f"{path}: more than one bank with use \"{use}\"")
    return banks


def _bank(path: Path, i: int, b) -> MemoryBank:
    where = f"{path}: bank {i}"
    if not isinstance(b, dict):
        raise UsageError(f"{where}: a bank is an object (name, size, ...)")
    extra = sorted(set(b) - _FIELDS)
    if extra:
        raise UsageError(f"{where}: unknown field '{extra[0]}' (known: {', '.join(sorted(_FIELDS))})")
    name = b.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"{where}: name must be a C identifier of at most 32 characters")
    where = f"{path}: bank {name}"
    size = b.get("size")
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise UsageError(f"{where}: size must be a number of bytes or a size such as 64K")
    size = parse_size(str(size), f"{where}: size")
    if not size:
        raise UsageError(f"{where}: size must be above 0")
    section = b.get("section", "." + name.lower())
    if not isinstance(section, str) or not _SECTION.match(section):
        raise UsageError(f"{where}: section must be a linker section name such as .sram1")
    cost = b.get("cost", 1.0)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or not 0 < cost <= 1000:
        raise UsageError(f"{where}: cost must be a number above 0 and at most 1000")
    kind = b.get("kind", "sram")
    if kind not in ("tcm", "sram", "external"):
        raise UsageError(f"{where}: kind must be tcm, sram or external")
    masters = b.get("masters", ["cpu", "dma"])
    if not isinstance(masters, list) or len(masters) > 16 or not all(isinstance(m, str) and _MASTER.match(m) for m in masters):
        raise UsageError(f"{where}: masters must be a list of short lower-case names (cpu, dma, ...)")
    zeroed = b.get("zeroed", True)
    if not isinstance(zeroed, bool):
        raise UsageError(f"{where}: zeroed must be true or false")
    address = b.get("address")
    if isinstance(address, str) and re.fullmatch(r"0[xX][0-9A-Fa-f]{1,8}", address):
        address = int(address, 16)
    if address is not None and (isinstance(address, bool) or not isinstance(address, int) or
                                not 0 <= address or address + size > 1 << 32):
        raise UsageError(f"{where}: address must be 0x0..0xFFFFFFFF with the bank inside the 32-bit space")
    use = b.get("use", "arena")
    if use not in ("arena", "l1", "l3"):
        raise UsageError(f"{where}: use must be arena, l1 or l3")
    if use == "arena" and "cpu" not in masters:
        raise UsageError(f"{where}: the core must reach a bank that holds activations (masters lack cpu)")
    return MemoryBank(name, size, section, float(cost), kind, tuple(masters), zeroed, address, use)


def with_memory_map(options, banks: tuple[MemoryBank, ...]):
    """The options a memory map gives: its arena banks, --l1 / --l3 of its l1 / l3 banks, --sram
    their arena banks' sum (each bank is checked on its own)."""
    arena = tuple(b for b in banks if b.use == "arena")
    l1 = next((b.size for b in banks if b.use == "l1"), None)
    l3 = next((b.size for b in banks if b.use == "l3"), None)
    return replace(options, banks=arena, sram=sum(b.size for b in arena), l1=l1, l3=l3 if l3 is not None else 0)
