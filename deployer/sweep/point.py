"""One point of a sweep: a model and a value for every axis, deployed in-process through the
plan ``deploy`` makes, measured into one row (COLUMNS). A point that fails is a row too.

A point's key digests the model's bytes, its axes, how it is checked and the deployer's own
sources, so a finished point is never redone and a change of the deployer redoes them all.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from network_parser.errors import DeployError, InfeasibleBudget

from .axes import AXES

# the packages whose sources decide a point's result (the build cache's entries are keyed by
# the generated files instead; a sweep's rows by what generates them)
SOURCE_PACKAGES = ("deployer", "solver", "layer_analyzer", "network_parser", "backends", "templates")
VERIFY_SEEDS = 2  # samples per verified point (random_inputs seeds 0 and 1)

# (column, Arrow type) of a row, in order: the axes, then what was measured; columns ending in
# _s are wall times, the only ones that differ between two runs of a sweep
COLUMNS = (
    ("key", "string"), ("model", "string"), ("model_sha256", "string"),
    ("target", "string"), ("sram", "int64"), ("flash", "int64"), ("l1", "int64"), ("l3", "int64"),
    ("planner", "string"), ("tiler", "string"), ("patch", "string"), ("kernels", "string"), ("order", "string"),
    ("overlap", "string"), ("max_overhead", "float64"), ("time_limit", "float64"), ("verify", "string"),
    ("status", "string"),  # fits | over budget | failed
    ("over", "string"),  # each memory over its budget and by how much
    ("sram_need", "int64"), ("flash_need", "int64"), ("l3_need", "int64"),
    ("sram_budget", "int64"), ("flash_budget", "int64"), ("l1_budget", "int64"),
    ("arena_bytes", "int64"), ("state_bytes", "int64"), ("weights_bytes", "int64"), ("code_bytes", "int64"),
    ("l1_bytes", "int64"),  # the largest L1 a tiled layer uses
    ("macs", "int64"), ("macs_recomputed", "int64"), ("modeled_cycles", "int64"),
    ("tiled_layers", "int64"), ("patch_stages", "int64"), ("relaxed", "string"), ("run_order", "string"),
    ("arena_method", "string"), ("arena_status", "string"), ("arena_gap", "float64"),
    ("tiling_status", "string"), ("fusion_method", "string"),
    ("watchdog", "bool"),  # a wall-clock watchdog stopped a solver: this row may differ run to run
    ("verified_on", "string"), ("bit_exact", "bool"), ("reference", "string"), ("instructions", "int64"),
    ("error_type", "string"), ("error_message", "string"),
    ("plan_s", "float64"), ("verify_s", "float64"),
)
TIMING = tuple(name for name, _ in COLUMNS if name.endswith("_s"))


@dataclass(frozen=True)
class Point:
    index: int  # its place in the sweep (the tables' order)
    model: str  # the file's name
    model_sha256: str
    settings: tuple[tuple[str, object], ...]  # (axis, value) for every axis in AXES order
    verify: str = "none"
    # an integer ONNX graph's input range, read from the test vectors beside the model as deploy
    # reads them (the workers have the model's bytes, not its folder)
    input_type: str | None = None

    def key(self, sources: str) -> str:
        text = json.dumps([self.model_sha256, list(map(list, self.settings)), self.verify, self.input_type, sources])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def options(self):
        from ..pipeline import Options
        values = dict(self.settings)
        fields = {AXES[name].field: value for name, value in values.items() if name != "overlap"}
        options = Options(**fields, input_type=self.input_type)
        return replace(options, overlap=values.get("overlap", "on") == "on")


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """The deployer's own sources (every file of its packages but bytecode), as one digest."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def empty_row(point: Point, key: str) -> dict:
    row = {name: None for name, _ in COLUMNS}
    row.update(key=key, model=point.model, model_sha256=point.model_sha256, verify=point.verify,
               **dict(point.settings))
    return row


_TEMP = re.compile(re.escape(tempfile.gettempdir().rstrip("/")) + r"/[^\s'\":,;)]*")


def normalised(message: str, model_path: Path, name: str) -> str:
    """A message without the paths a run made: the model's copy is its name, temporary files <tmp>."""
    return _TEMP.sub("<tmp>", message.replace(str(model_path), name)).replace("\n", " ")


def run_point(point: Point, model_path: Path, key: str) -> dict:
    """The row of one point; ``model_path`` holds the model's bytes under its own name."""
    row = empty_row(point, key)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _measure(point, model_path, row)
        except InfeasibleBudget as e:
            row.update(status="over budget", error_type=e.kind, error_message=normalised(str(e.args[0]), model_path, point.model))
            for flag, need in (e.needs or {}).items():
                row[f"{flag.lstrip('-')}_need"] = need
        except DeployError as e:
            row.update(status="failed", error_type=e.kind,
                       error_message=normalised(str(e.args[0]) if e.args else "", model_path, point.model))
        except Exception as e:  # noqa: BLE001 - our own bug: the sweep goes on, the row says where
            at = traceback.extract_tb(e.__traceback__)[-1]
            row.update(status="failed", error_type="InternalError",
                       error_message=normalised(f"{type(e).__name__}: {e} (at {Path(at.filename).name}:{at.lineno})",
                                                model_path, point.model))
    from solver.cpsat import WATCHDOG_WARNING
    row["watchdog"] = any(WATCHDOG_WARNING in str(w.message) for w in caught)
    if row["plan_s"] is None:
        row["plan_s"] = round(time.perf_counter() - started, 4)
    return row


def _measure(point: Point, model: Path, row: dict) -> None:
    from ..pipeline import finish, over_budget, plan_deployment
    started = time.perf_counter()
    plan = plan_deployment(model, point.options())
    row["plan_s"] = round(time.perf_counter() - started, 4)
    o = plan.options
    row.update(sram_budget=o.sram, flash_budget=o.flash, l1_budget=o.l1)
    if plan.kind != "network":
        raise DeployError("deploy sweep plans networks; language models are swept with deploy suggest")
    _plan_columns(plan, row)
    over = over_budget(plan.memory, o)
    row["status"] = "over budget" if over else "fits"
    row["over"] = "; ".join(f"{name} by {need - budget:,} B" for _, name, need, budget in over) or None
    if over or point.verify == "none":
        return
    started = time.perf_counter()
    _verify(point, model, finish(plan), row)
    row["verify_s"] = round(time.perf_counter() - started, 4)


def _plan_columns(plan, row: dict) -> None:
    from layer_analyzer.tiling import geometry
    from solver.tiling_cost import compute_cycles, cost_params
    m = plan.memory
    tiled = [t for _, t in plan.tilings.values()]
    cost = cost_params(plan.backend.costs)
    cycles = 0
    for layer in plan.layers:  # the target's cost model: tiles as planned, other modelled layers whole
        if layer.tiling is not None:
            cycles += layer.tiling[1].modeled_cycles
        elif (g := geometry(layer.kernel, layer.index)) is not None:
            cycles += compute_cycles(g, g.out_h, g.out_w, g.out_c, cost)
    fusion = plan.fusion
    row.update(
        sram_need=m.sram_bytes, flash_need=m.flash_bytes, l3_need=m.l3_bytes or None,
        arena_bytes=m.arena_bytes, state_bytes=m.state_bytes, weights_bytes=m.weights_bytes,
        code_bytes=m.code_bytes_estimate, l1_bytes=max((t.l1_bytes for t in tiled), default=None),
        macs=plan.macs, macs_recomputed=fusion.macs_extra if fusion is not None and plan.patches else 0,
        modeled_cycles=cycles, tiled_layers=len(tiled), patch_stages=len(plan.patches),
        relaxed=", ".join(plan.relaxed) or None, run_order="file" if plan.order is None else "least peak",
        arena_method=plan.arena.method, arena_status=plan.arena.status, arena_gap=round(plan.arena.gap, 6),
        tiling_status=", ".join(f"{s} {sum(1 for t in tiled if t.status == s)}"
                                for s in sorted({t.status for t in tiled})) or None,
        fusion_method=fusion.method if fusion is not None else None)


def _verify(point: Point, model: Path, dep, row: dict) -> None:
    """Bit-exactness where the target's engine runs: QEMU's board (``qemu``, with the instructions
    of one inference), else this machine (the host, or the target's emulation)."""
    from ..verify import random_inputs, verify
    backend = dep.backend
    samples = [random_inputs(dep.graph, seed) for seed in range(VERIFY_SEEDS)]
    if point.verify == "qemu" and backend.qemu_machine is not None:
        from ..qemu import verify_on_qemu
        result = verify_on_qemu(dep, model, samples)
        row.update(verified_on="qemu", instructions=result["instructions"])
    elif backend.runs_on_host or backend.emulation is not None:
        result = verify(dep, model, samples)
        row["verified_on"] = "host"
    else:
        return  # an engine that needs a board this sweep does not run
    row.update(bit_exact=all(o["max_abs_diff"] == 0 for o in result["outputs"]), reference=result["reference"])
