"""A sweep's axes: each a list of values, from flags (``--sram 64K..512K:x2``) or a sweep file
(JSON or TOML), and the points they make (their product, models outermost).

    --target stm32f446,stm32h743     a list
    --sram 64K..512K:x2              a range: 64K, 128K, 256K, 512K (times 2 each step)
    --sram 64K..256K:+64K            a range by steps: 64K, 128K, 192K, 256K
    --l1 none,16K,64K                none: the flag not given (the part's own, or no L1)

A sweep file says the same and what the flags cannot (every axis in AXES, a list per axis):

    {"models": ["kws.tflite"], "verify": "host",
     "axes": {"target": ["stm32h743"], "sram": "128K..512K:x2", "order": ["auto", "file"]}}
"""
from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from network_parser.errors import UsageError

from ..flag_values import PLANNERS, KERNELS, parse_share, parse_size

MAX_POINTS = 100_000  # a sweep beyond this is a mistake in a range, not a plan
MAX_AXIS_VALUES = 1_000
VERIFY = ("none", "host", "qemu")


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(text: str, axis: str) -> str:
        if text not in allowed:
            raise UsageError(f"sweep axis {axis}: '{text}' is not one of {', '.join(allowed)}")
        return text
    return parse


def _targets(text: str, axis: str) -> str:
    from backends import BACKENDS
    return _choice(*sorted(BACKENDS))(text, axis)


def _size(text: str, axis: str) -> int | None:
    return None if text == "none" else parse_size(text, f"sweep axis {axis}")


def _patch(text: str, axis: str) -> str:
    if text in ("auto", "off") or re.fullmatch(r"\d+x\d+@\d+", text):
        return text
    raise UsageError(f"sweep axis {axis}: '{text}' is not auto, off or RxC@LAYER")


def _share(text: str, axis: str) -> float | None:
    return None if text == "none" else parse_share(text)


def _seconds(text: str, axis: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise UsageError(f"sweep axis {axis}: '{text}' is not a time limit in seconds (0 < s <= 3600)")
    return value


@dataclass(frozen=True)
class Axis:
    name: str
    field: str  # deployer.pipeline.Options field it sets
    parse: Callable[[str, str], object]
    default: object
    ranges: bool = False  # takes A..B:xK / A..B:+S


# every axis, in the order a point lists them (the table's columns)
AXES = {a.name: a for a in (
    Axis("target", "target", _targets, "host"),
    Axis("sram", "sram", _size, None, ranges=True),
    Axis("flash", "flash", _size, None, ranges=True),
    Axis("l1", "l1", _size, None, ranges=True),
    Axis("l3", "l3", _size, None, ranges=True),
    Axis("planner", "planner", _choice(*PLANNERS), "cpsat"),
    Axis("tiler", "tiler", _choice("cpsat", "greedy"), "cpsat"),
    Axis("patch", "patch", _patch, "auto"),
    Axis("kernels", "kernels", _choice(*KERNELS), "auto"),
    Axis("order", "order", _choice("auto", "file"), "auto"),
    Axis("overlap", "overlap", _choice("on", "off"), "on"),
    Axis("max_overhead", "max_overhead", _share, None),
    Axis("time_limit", "time_limit_s", _seconds, 5.0),
)}

_RANGE = re.compile(r"^(?P<lo>[^.]+)\.\.(?P<hi>[^:]+):(?P<op>[x+])(?P<step>.+)$")


def parse_values(axis: str, text) -> tuple:
    """An axis's values from a flag's text or a sweep file's value (a list, a string, a number,
    or null for none), in the order given, duplicates dropped."""
    a = AXES.get(axis)
    if a is None:
        raise UsageError(f"unknown sweep axis '{axis}' (known: {', '.join(AXES)})")
    items = text if isinstance(text, list) else [text]
    values: list = []
    for item in items:
        if item is None:
            item = "none"
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise UsageError(f"sweep axis {axis}: {item!r} is not a value")
        for part in str(item).split(",") if isinstance(item, str) else [str(item)]:
            part = part.strip()
            if not part:
                raise UsageError(f"sweep axis {axis}: an empty value in '{item}'")
            values.extend(_range(a, part) if _RANGE.match(part) else [a.parse(part, axis)])
            if len(values) > MAX_AXIS_VALUES:
                raise UsageError(f"sweep axis {axis}: more than {MAX_AXIS_VALUES:,} values")
    return tuple(dict.fromkeys(values))


def _range(a: Axis, text: str) -> list:
    m = _RANGE.match(text)
    if not a.ranges:
        raise UsageError(f"sweep axis {a.name}: '{text}' is a range; only sizes take ranges")
    lo, hi = a.parse(m["lo"], a.name), a.parse(m["hi"], a.name)
    if lo is None or hi is None or lo > hi or lo <= 0:
        raise UsageError(f"sweep axis {a.name}: range '{text}' needs sizes 0 < low <= high")
    values = [lo]
    if m["op"] == "x":
        try:
            factor = float(m["step"])
        except ValueError:
            factor = 0.0
        if not math.isfinite(factor) or factor <= 1:
            raise UsageError(f"sweep axis {a.name}: range '{text}': the factor after x must be a number above 1")
        step = lambda v: max(v + 1, int(v * factor))  # noqa: E731
    else:
        inc = parse_size(m["step"], f"sweep axis {a.name}")
        if not inc:
            raise UsageError(f"sweep axis {a.name}: range '{text}': the step after + must be a size above 0")
        step = lambda v: v + inc  # noqa: E731
    while (nxt := step(values[-1])) <= hi:
        values.append(nxt)
        if len(values) > MAX_AXIS_VALUES:
            raise UsageError(f"sweep axis {a.name}: range '{text}' has more than {MAX_AXIS_VALUES:,} values")
    return values


@dataclass(frozen=True)
class Spec:
    """What a sweep runs: its models, each axis's values and how each point is checked."""
    models: tuple[Path, ...]
    axes: tuple[tuple[str, tuple], ...]  # (axis, values) for every axis in AXES order
    verify: str = "none"

    def settings(self):
        """Every combination of the axes' values, as ((axis, value), ...), the last axis fastest."""
        names = [name for name, _ in self.axes]
        for combo in itertools.product(*(values for _, values in self.axes)):
            yield tuple(zip(names, combo))

    @property
    def size(self) -> int:
        return len(self.models) * math.prod(len(v) for _, v in self.axes)

    def as_dict(self) -> dict:
        return {"models": [str(m) for m in self.models], "verify": self.verify,
                "axes": {name: list(values) for name, values in self.axes}}


def read_spec(models: tuple[Path, ...], flags: dict[str, str | None], sweep_file: Path | None = None,
              verify: str | None = None) -> Spec:
    """The sweep's spec: the file's (models relative to it), then the flags given over it."""
    given: dict[str, tuple] = {}
    file_models: list[Path] = []
    file_verify = None
    if sweep_file is not None:
        data = _load(sweep_file)
        unknown = sorted(set(data) - {"models", "verify", "axes"})
        if unknown:
            raise UsageError(f"{sweep_file}: unknown key '{unknown[0]}' (a sweep file has models, verify and axes)")
        raw_models = data.get("models", [])
        if not isinstance(raw_models, list) or not all(isinstance(m, str) and m for m in raw_models):
            raise UsageError(f"{sweep_file}: models must be a list of file names")
        file_models = [(sweep_file.parent / m) for m in raw_models]
        file_verify = data.get("verify")
        axes = data.get("axes", {})
        if not isinstance(axes, dict):
            raise UsageError(f"{sweep_file}: axes must be a table of axis -> values")
        given.update({name: parse_values(name, values) for name, values in axes.items()})
    given.update({name: parse_values(name, text) for name, text in flags.items() if text is not None})
    verify = verify or file_verify or "none"
    if verify not in VERIFY:
        raise UsageError(f"verify '{verify}' is not one of {', '.join(VERIFY)}")
    all_models = tuple(dict.fromkeys([*file_models, *map(Path, models)]))
    if not all_models:
        raise UsageError("deploy sweep needs at least one model (arguments or the sweep file's models)")
    for name, values in given.items():
        if not values:
            raise UsageError(f"sweep axis {name}: no values")
    spec = Spec(all_models, tuple((name, given.get(name, (a.default,))) for name, a in AXES.items()), verify)
    if spec.size > MAX_POINTS:
        raise UsageError(f"the sweep has {spec.size:,} points, more than {MAX_POINTS:,}: narrow a range")
    return spec


def _load(path: Path) -> dict:
    try:
        text = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the sweep file ({e.strerror or e})") from None
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(text.decode("utf-8"))
        else:
            data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'} "
                         f"sweep file ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a sweep file is a table (models, verify, axes)")
    return data
