"""`python -m tracking.report`: the command line over tracking/report/build.py."""

from __future__ import annotations

import argparse
import sys

from tokengen.writable import unwritable
from tracking.report.build import __doc__ as ABOUT
from tracking.report.build import attach, build_report
from tracking.store.reading import ReportError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.report", description=ABOUT.splitlines()[0])
    parser.add_argument("--uri", default="sqlite:///mlflow.db", help="tracking store or server (default: %(default)s)")
    parser.add_argument("--experiment", default="tokengen", help="default: %(default)s")
    parser.add_argument("--sweep", help="sweep name (default: the latest sweep in the experiment)")
    parser.add_argument("--out", default="reports", help="reports go to OUT/<sweep>/ (default: %(default)s)")
    parser.add_argument(
        "--no-attach",
        action="store_true",
        help="write nothing to the store: no report files on the sweep's run, no figures on the trials' runs, no view",
    )
    args = parser.parse_args(argv)
    why = unwritable(args.out, folder=True)
    if why:
        print(f"error: cannot write --out {args.out}: {why}: give another folder", file=sys.stderr)
        return 2
    try:
        report = build_report(args.uri, args.experiment, args.sweep, args.out, write=not args.no_attach)
        if not args.no_attach:
            attach(args.uri, report)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.main)
    where = "" if args.no_attach else f", attached to run {report.parent_id} under report/"
    print(
        f"report: {report.directory / 'report.md'} ({report.trials} trials, {report.failed} failed){where}",
        file=sys.stderr,
    )
    for line in report.warnings + report.ui:
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
