"""A whole sweep: the points of a spec, those the folder's journal lacks run on an executor, the
tables and the report written from the journal."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from network_parser.errors import UsageError

from . import execute, journal, report
from .axes import Spec
from ..test_vectors import model_input_type
from .point import Point, sources_digest


@dataclass(frozen=True)
class Outcome:
    rows: tuple[dict, ...]  # one per point, in the sweep's order
    computed: int  # points run now
    reused: int  # points the journal already held


def load_models(spec: Spec) -> tuple[list[tuple[str, str, str | None]], dict[str, bytes]]:
    """[(name, sha256, input type)] per model in order, and sha256 -> bytes."""
    named, data = [], {}
    for path in spec.models:
        try:
            content = Path(path).read_bytes()
        except OSError as e:
            raise UsageError(f"{path}: cannot read the model ({e.strerror or e})") from None
        sha = hashlib.sha256(content).hexdigest()
        name = Path(path).name
        clash = next((n for n, s, _ in named if n == name and s != sha), None)
        if clash:
            raise UsageError(f"two different models are named {name}: rename one (a sweep's rows name models by file)")
        named.append((name, sha, model_input_type(Path(path), None)))
        data[sha] = content
    return list(dict.fromkeys(named)), data


def points(spec: Spec, named: list[tuple[str, str, str | None]]) -> list[Point]:
    settings = list(spec.settings())
    return [Point(i * len(settings) + j, name, sha, s, spec.verify, input_type)
            for i, (name, sha, input_type) in enumerate(named) for j, s in enumerate(settings)]


def run_sweep(spec: Spec, folder: Path, executor: str = "pool", jobs: int = 1, ray_address: str | None = None,
              on_row=lambda row, fresh: None) -> Outcome:
    """Every point of ``spec`` in ``folder``'s journal (those missing run on ``executor``: serial,
    pool or ray), then the tables and report.html. ``on_row(row, fresh)`` hears each row."""
    named, models = load_models(spec)
    folder = journal.open_folder(folder)
    done = journal.read_journal(folder)
    sources = sources_digest()
    keyed = [(p, p.key(sources)) for p in points(spec, named)]
    todo = [(p, k) for p, k in keyed if k not in done]
    for p, k in keyed:
        if k in done:
            on_row(done[k], False)
    if executor == "serial":
        rows = execute.serial(todo, models)
    elif executor == "ray":
        rows = execute.ray_cluster(todo, models, ray_address or "auto", jobs)
    else:
        rows = execute.pool(todo, models, jobs)
    log = journal.Journal(folder)
    try:
        for row in rows:
            log.append(row)
            done[row["key"]] = row
            on_row(row, True)
    finally:
        log.close()
    ordered = tuple(done[k] for _, k in keyed)
    journal.compact(folder, list(ordered))  # rows of other sweeps or of older sources are dropped
    journal.write_tables(folder, list(ordered), spec.as_dict())
    report.write_report(folder, list(ordered), spec)
    return Outcome(ordered, len(todo), len(keyed) - len(todo))
