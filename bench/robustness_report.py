"""Robustness report: the readers' fuzz campaigns, the findings fixed, and every hostile model
with the error it gets, its time and its peak memory.

    python bench/robustness_report.py [--seconds 300] [--readers tflite,onnx] [--work DIR]

Each reader gets an atheris (libFuzzer) campaign of --seconds over read -> plan -> emit,
seeded with the real models of tests/model_files and the project's own; every hostile case
runs through the `deploy` command in a subprocess under a 2 GiB address-space limit.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fuzz.campaign import campaign  # noqa: E402
from tests.fuzz.findings import FIXED  # noqa: E402
from tests.hostile import CASES, LIMIT_BYTES, run_deploy, write_case  # noqa: E402



def table(headers: list[str], rows: list[list], right: set[int] = frozenset()) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def fmt(r):
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(r, widths))) + " |"
    sep = "|" + "|".join(("-" * (w + 1) + ":") if i in right else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return "\n".join([fmt(headers), sep, *map(fmt, cells)])


def fuzz_rows(readers: list[str], seconds: float, work: Path) -> tuple[list[list], dict]:
    rows, found = [], {}
    for reader in readers:
        start = time.monotonic()
        r = campaign(reader, seconds, work / reader)
        wall = time.monotonic() - start
        o = r["outcomes"]
        rows.append([reader, r["seeds"], f"{r['executions']:,}", f"{r['executions'] / wall:,.0f}",
                     f"{o.get('ok', 0):,}", f"{o.get('ModelFormatError', 0):,}", f"{o.get('UnsupportedOperator', 0):,}",
                     r["distinct_findings"]])
        found[reader] = r["findings"]
    return rows, found


def run_case(case, work: Path) -> list:
    """One hostile model through the deploy command: its exit status, time, peak memory, error."""
    work = Path(tempfile.mkdtemp(prefix="hostile-", dir=work))  # its own folder: config.json beside it
    model = write_case(case, work, "hostile")
    returncode, err, wall, peak_kib = run_deploy(model, work / "out", timeout=300)
    err = err.strip()
    line = err.splitlines()[-1] if err else "(no error)"
    ok = (returncode == 1 and len(err.splitlines()) == 1 and line.startswith(f"error: {case.kind}: ")
          and case.where in line and not (work / "out").exists())
    message = line.split(": ", 2)[-1].replace(str(model), model.name)
    return [case.name, case.suffix[1:], returncode, case.kind, f"{wall:.1f}", f"{peak_kib / 1024:.0f}",
            "yes" if ok else "NO", message[:110] + ("…" if len(message) > 110 else "")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300, help="fuzzing time per reader")
    ap.add_argument("--readers", default="tflite,onnx")
    ap.add_argument("--work", type=Path, default=None, help="keep corpora and findings here")
    ap.add_argument("--no-hostile", action="store_true")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="robustness-"))
    work.mkdir(parents=True, exist_ok=True)

    rows, found = fuzz_rows(args.readers.split(","), args.seconds, work)
    print(f"## Fuzzing: {args.seconds:g} s per reader (atheris), read -> plan -> emit\n")
    print(table(["reader", "seeds", "executions", "exec/s", "ok", "ModelFormatError", "UnsupportedOperator",
                 "distinct findings"], rows, right={1, 2, 3, 4, 5, 6, 7}))
    for reader, findings in found.items():
        for sig, f in findings.items():
            print(f"  NEW {reader}: {sig}: {f['message']} (input {work / reader / 'findings' / str(f['input'])})")
    print(f"\n## Findings fixed ({len(FIXED)}), each kept by a hostile case\n")
    print(table(["reader", "found by", "failure before the fix", "fix", "regression case"],
                [[f.reader, f.found_by, f.failure, f.fix, f.regression] for f in FIXED]))
    if not args.no_hostile:
        hostile = [run_case(case, work) for case in CASES]
        bad = sum(r[6] != "yes" for r in hostile)
        print(f"\n## Hostile models ({len(hostile)}): the deploy command under a {LIMIT_BYTES >> 30} GiB "
              f"address-space limit\n")
        print(table(["case", "format", "exit", "error", "s", "peak MiB", "as expected", "message"], hostile,
                    right={2, 4, 5}))
        print(f"\n{len(hostile) - bad} of {len(hostile)} hostile cases get the expected one-line error")


if __name__ == "__main__":
    main()
