"""A sweep's folder: its marker, the journal of finished points and the tables made from it.

    sweep/.deploy-sweep     the marker: only a folder carrying it is written into
    sweep/journal.jsonl     one row per finished point, appended (and synced) as each arrives;
                            compacted to the run's points when it ends
    sweep/sweep.json        the axes of the last run
    sweep/results.parquet   the last run's points, in their order (compacted from the journal)
    sweep/results.csv       the same rows
    sweep/report.html

A run killed at any moment leaves a journal whose whole lines are finished points; the rerun
reads them, redoes only the rest and writes the tables again.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from network_parser.errors import UsageError

from .point import COLUMNS

MARKER = ".deploy-sweep"
MARKER_TEXT = json.dumps({"written_by": "deploy sweep", "version": 1}) + "\n"
JOURNAL = "journal.jsonl"


def open_folder(folder: Path) -> Path:
    """The sweep folder, created with its marker; an existing folder only when it is empty or
    carries the marker (never a folder of something else)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UsageError(f"-o {folder}: not a folder")
    if folder.exists():
        marker = folder / MARKER
        if marker.is_file() and not marker.is_symlink():
            try:
                ok = json.loads(marker.read_text()).get("written_by") == "deploy sweep"
            except (ValueError, OSError, AttributeError):
                ok = False
            if not ok:
                raise UsageError(f"-o {folder}: its {MARKER} is not a sweep's marker; not writing there")
            return folder
        if any(folder.iterdir()):
            raise UsageError(f"-o {folder}: a folder that is not a sweep's (no {MARKER}); choose an empty "
                             f"or new folder")
    folder.mkdir(parents=True, exist_ok=True)
    _write_whole(folder / MARKER, MARKER_TEXT.encode())
    return folder


def read_journal(folder: Path) -> dict[str, dict]:
    """key -> row of every whole line of the journal (a line cut by a kill is dropped, and cut
    off the file so the next row starts on a line of its own)."""
    path = folder / JOURNAL
    if not path.exists():
        return {}
    data = path.read_bytes()
    whole = data[:data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        with open(path, "r+b") as f:
            f.truncate(len(whole))
    rows = {}
    names = {name for name, _ in COLUMNS}
    for line in whole.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and set(row) == names and isinstance(row.get("key"), str):
            rows[row["key"]] = row
    return rows


class Journal:
    """Appends rows, one JSON line each, flushed to disk before the next."""

    def __init__(self, folder: Path):
        self.file = open(folder / JOURNAL, "a", encoding="utf-8")

    def append(self, row: dict) -> None:
        self.file.write(json.dumps(row, sort_keys=False, allow_nan=False) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


def compact(folder: Path, rows: list[dict]) -> None:
    """The journal rewritten to hold ``rows`` alone (whole: a kill leaves the old one or this)."""
    _write_whole(folder / JOURNAL, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows).encode())


def write_tables(folder: Path, rows: list[dict], spec: dict) -> None:
    """results.parquet and results.csv of ``rows`` (the run's points, in order), and sweep.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = pa.schema([(name, pa.bool_() if kind == "bool" else getattr(pa, kind)()) for name, kind in COLUMNS])
    table = pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    _write_whole(folder / "results.parquet", sink.getvalue().to_pybytes())
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(schema.names)
    for row in rows:
        writer.writerow(["" if row.get(n) is None else row[n] for n in schema.names])
    _write_whole(folder / "results.csv", text.getvalue().encode())
    _write_whole(folder / "sweep.json", (json.dumps(spec, indent=2) + "\n").encode())


def _write_whole(path: Path, data: bytes) -> None:
    """Written to a temporary name and renamed: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
