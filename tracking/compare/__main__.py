"""`python -m tracking.compare A B`: sweep B against sweep A, point by point, from MLflow alone.

A and B are sweep names (`EXPERIMENT/SWEEP` for another experiment than --experiment's), read from
--uri, or from --uri-a and --uri-b where the two sweeps live in two stores (two clusters' servers,
two checkouts' SQLite files). Writes `reports/<A>-vs-<B>/comparison.md`, `comparison.csv` and
`ratio_by_point.png`, records the comparison in A's store (one run, one child run per matched point,
the files attached under `comparison/`), prints what differs, the overview and the points, and ends
with the URL of the comparison in the MLflow UI. Bad input (an unknown sweep, a store that cannot be
read, two sweeps with no point in common) is one line and exit 2.

    python -m tracking.compare smoke-1t smoke-2t [--uri sqlite:///mlflow.db] [--out reports] [--no-record]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tokengen.contract.names import path_component
from tokengen.contract.record import first_line as one_line
from tokengen.writable import unwritable
from tracking.compare.overview import models_warning, overview, ranking_changes
from tracking.compare.plot import ratio_plot
from tracking.compare.points import compare
from tracking.compare.render import csv_frame, render
from tracking.compare.sides import DEFAULT_EXPERIMENT, Side, differences, first_line, load_side
from tracking.store.reading import ReportError

DEFAULT_URI = "sqlite:///mlflow.db"
FILES = ("comparison.md", "comparison.csv")
MAX_NOTE_CHARS = 8000  # MLflow's limit on a tag's value (the run's description)


@dataclass
class Comparison:
    a: Side
    b: Side
    directory: Path
    main: str  # what the command prints: what differs, the overview, the points
    pairs: pd.DataFrame  # the matched points, as comparison.csv holds them
    files: list[Path] = field(default_factory=list)
    run_id: str = ""  # the comparison's run in A's store ("" when not recorded)
    ui: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def no_common_point(a: Side, b: Side) -> ReportError:
    """Two sweeps that share no point: the line says what each ran, so the fix is plain."""

    def ran(side: Side, column: str) -> str:
        return ", ".join(sorted({str(v) for v in side.runs.trials[column]}))

    named = [
        f"{c} {ran(a, c)} vs {ran(b, c)}" for c in ("model", "dtype", "device", "variant") if ran(a, c) != ran(b, c)
    ]
    return ReportError(
        f"{a.name} and {b.name} have no point in common (same knobs and workload)"
        + (f": {'; '.join(named)}" if named else "")
        + ": compare two sweeps of the same grid"
    )


def build_comparison(
    a_name: str,
    b_name: str,
    uri_a: str,
    uri_b: str,
    experiment: str = DEFAULT_EXPERIMENT,
    out: str | Path = "reports",
    write: bool = True,
) -> Comparison:
    """Load both sweeps, match and compare them, write the files and (`write`) record the comparison in A's store."""
    a, b = load_side("A", a_name, uri_a, experiment), load_side("B", b_name, uri_b, experiment)
    pairs, only, columns = compare(a, b)
    if pairs.empty:
        raise no_common_point(a, b)
    found = differences(a, b)
    changes, noise = ranking_changes(pairs, columns)
    table = overview(pairs)
    directory = Path(out) / path_component(f"{a.name}-vs-{b.name}")
    directory.mkdir(parents=True, exist_ok=True)
    title = f"B = {b.name} against A = {a.name}"
    plot = ratio_plot(pairs, directory, title)
    text, main = render(
        a,
        b,
        found,
        pairs,
        columns,
        table,
        changes,
        noise,
        only,
        models_warning(pairs, only),
        plot.name if plot else None,
    )
    (directory / FILES[0]).write_text(text)
    csv_frame(pairs).to_csv(directory / FILES[1], index=False)
    files = [directory / name for name in FILES] + ([plot] if plot else [])
    result = Comparison(a, b, directory, main, csv_frame(pairs), files)
    if write:
        _record(result, uri_a, uri_b, first_line(found), main)
    return result


def _record(result: Comparison, uri_a: str, uri_b: str, differs: str, main: str) -> None:
    """The comparison in A's store; a store that refuses the write leaves the files standing, said in one line."""
    from tracking.compare.record import how_to_open, record

    note = main if len(main) <= MAX_NOTE_CHARS else main[: MAX_NOTE_CHARS - 20] + "\n\n(cut short)"
    summary = {
        "mlflow.note.content": note,
        "differs": differs[:6000],
        "points": str(len(result.pairs)),
        "sweep_a_run_id": result.a.runs.parent_id,
        "sweep_b_run_id": result.b.runs.parent_id,
    }
    experiment = result.a.runs.experiment
    try:
        result.run_id, experiment_id, key = record(
            uri_a, experiment, result.a.name, result.b.name, uri_b, result.pairs, result.files, summary
        )
    except Exception as exc:  # noqa: BLE001 - TrackingError or any refused write: the files stand
        result.warnings.append(
            f"mlflow: the comparison was not recorded in {uri_a} ({one_line(exc)}): "
            "rerun when the store takes writes, or pass --no-record"
        )
        return
    result.ui = how_to_open(uri_a, experiment_id, key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", metavar="A", help="the sweep compared against: SWEEP or EXPERIMENT/SWEEP")
    parser.add_argument("b", metavar="B", help="the sweep compared: SWEEP or EXPERIMENT/SWEEP")
    parser.add_argument("--uri", default=DEFAULT_URI, help="the store both sweeps are in (default: %(default)s)")
    parser.add_argument("--uri-a", help="A's store, where the comparison is recorded (default: --uri)")
    parser.add_argument("--uri-b", help="B's store (default: --uri)")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="for names without one (default: %(default)s)")
    parser.add_argument("--out", default="reports", help="files go to OUT/<A>-vs-<B>/ (default: %(default)s)")
    parser.add_argument("--no-record", action="store_true", help="write nothing to the store, only the files")
    args = parser.parse_args(argv)
    uri_a, uri_b = args.uri_a or args.uri, args.uri_b or args.uri
    why = unwritable(args.out, folder=True)
    if why:
        print(f"error: cannot write --out {args.out}: {why}: give another folder", file=sys.stderr)
        return 2
    try:
        result = build_comparison(args.a, args.b, uri_a, uri_b, args.experiment, args.out, write=not args.no_record)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.main)
    where = "" if not result.run_id else f", recorded as run {result.run_id} in {uri_a}"
    print(f"comparison: {result.directory / FILES[0]} ({len(result.pairs)} matched points){where}", file=sys.stderr)
    for line in result.warnings + result.ui:
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
