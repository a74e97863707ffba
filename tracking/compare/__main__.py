"""`python -m tracking.compare A B`: sweep B against sweep A, point by point, from MLflow alone.

Writes OUT/<A>-vs-<B>/comparison.md, comparison.csv and ratio_by_point.png, records them in A's store (unless
--no-record) and prints what differs, the overview and the points; bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tokengen.contract.names import path_component
from tokengen.contract.record import first_line as one_line
from tokengen.writable import unwritable
from tracking.compare.comparison_run import record
from tracking.compare.points import compare
from tracking.compare.render import CSV_FIRST, FILE, has_ratio, ratio_plot, render
from tracking.compare.sides import DEFAULT_EXPERIMENT, load_side
from tracking.store.reading import ReportError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", metavar="A", help="the sweep compared against: SWEEP or EXPERIMENT/SWEEP")
    parser.add_argument("b", metavar="B", help="the sweep compared: SWEEP or EXPERIMENT/SWEEP")
    parser.add_argument(
        "--uri", default="sqlite:///mlflow.db", help="the store both sweeps are in (default: %(default)s)"
    )
    parser.add_argument("--uri-a", help="A's store, where the comparison is recorded (default: --uri)")
    parser.add_argument("--uri-b", help="B's store (default: --uri)")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="for names without one (default: %(default)s)")
    parser.add_argument("--out", default="reports", help="files go to OUT/<A>-vs-<B>/ (default: %(default)s)")
    parser.add_argument("--no-record", action="store_true", help="write nothing to the store, only the files")
    args = parser.parse_args(argv)
    uri_a, uri_b = args.uri_a or args.uri, args.uri_b or args.uri
    try:
        why = unwritable(args.out, folder=True)
        if why:
            raise ReportError(f"cannot write --out {args.out}: {why}: give another folder")
        a, b = load_side("A", args.a, uri_a, args.experiment), load_side("B", args.b, uri_b, args.experiment)
        pairs, only, columns = compare(a, b)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    directory = Path(args.out) / path_component(f"{a.name}-vs-{b.name}")
    directory.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(1) as pool:  # the plot drawn on the second core while the rest is written and recorded
        plotting = pool.submit(ratio_plot, pairs, directory, f"B = {b.name} against A = {a.name}")
        text, shown = render(a, b, pairs, only, columns, FILE if has_ratio(pairs) else "")
        (directory / "comparison.md").write_text(text)
        table = pairs[CSV_FIRST + [c for c in pairs.columns if c not in [*CSV_FIRST, "_a", "_b"]]]
        table.to_csv(directory / "comparison.csv", index=False)

        def files():  # the plot last: the store takes the run and the other files while it is drawn
            yield from (directory / "comparison.md", directory / "comparison.csv")
            yield from [plot for plot in [plotting.result()] if plot]

        run_id, after = "", []
        if not args.no_record:
            try:
                run_id, after = record(a, b, table, files(), shown)
            except Exception as exc:  # noqa: BLE001 - TrackingError or any refused write: the files stand
                why = f"the comparison was not recorded in {uri_a} ({one_line(exc)})"
                after = [f"mlflow: {why}: rerun when the store takes writes, or pass --no-record"]
        plotting.result()
    print(shown)
    where = f", recorded as run {run_id} in {uri_a}" if run_id else ""
    said = f"comparison: {directory / 'comparison.md'} ({len(table)} matched points){where}"
    print("\n".join([said, *after]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
