"""How long does `python -m tracking.compare A B` take on two sweeps of the full grid's size?

Builds the store benchmarks/report_speed.py builds (5,520 child runs a sweep by default, through the sweep
driver's own Recorder), twice over: sweep `full`, then `full-b` with its runtimes and drifting bfloat16 tokens
drawn anew (seed 1), so ratios scatter within a few percent and some points' tokens differ and are downloaded,
as on two real machines. A store that holds them already (`--keep DIR` used before, or a `--uri` database) is
used as it is. Then it times, in this process as the report benchmark times its report (imports and the store's
first opening done before), the whole comparison with recording (reading both sweeps, matching, token verdicts,
the plot, the files, the comparison's one run through MLflow's API with its figures and files) and without
(`--no-record`); and the command itself in a fresh interpreter, imports included. Target: `compare_s` under 10 s on
2 cores. The comparison each timing records is deleted after it (its run and its rows, and the child runs of a
comparison recorded before it became one run; no trial is touched), so every timing meets the store as built, and
`runs_added` says how many runs one recorded comparison left in the store. Timings read a warm page cache: on this
VM the first read of a store just written can take tens of seconds. The last line is JSON.

    python benchmarks/compare_speed.py [--runs 5520] [--keep DIR] [--uri postgresql://USER@HOST/DB] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # this checkout's packages, wherever it is installed from

from report_speed import SWEEP, build_store, has_sweep  # noqa: E402

from tracking.compare.__main__ import main as compare  # noqa: E402
from tracking.store.connect import open_client  # noqa: E402
from tracking.store.runs import PARENT_TAG  # noqa: E402
from tracking.store.tables import Tables  # noqa: E402

OTHER = "full-b"
CHILDREN = "SELECT run_uuid FROM tags WHERE key = ? AND value = ?"


def forget_comparisons(uri: str) -> None:
    """Delete the comparisons the timings recorded (their runs and rows), so each timing meets the store as built:
    two sweeps, not two sweeps and every comparison timed before."""
    with Tables(uri, write=True) as tables:
        found = tables.rows("SELECT run_uuid FROM tags WHERE key = ?", ["comparison"])
        parents = [run for (run,) in found]
        children = [run for p in parents for (run,) in tables.rows(CHILDREN, [PARENT_TAG, p])]
        for table in ("tags", "params", "metrics", "latest_metrics", "runs"):
            tables.write(f"DELETE FROM {table} WHERE run_uuid = ?", [(run,) for run in parents + children])
        tables.commit()
        if tables.sqlite:  # the deletions' log written into the file now, not by the next timing's first write
            tables.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def run_count(uri: str) -> int:
    with Tables(uri) as tables:
        return tables.rows("SELECT count(*) FROM runs")[0][0]


ADDED: list[int] = []  # runs each recorded comparison left in the store, counted before it is forgotten


def timed(argv: list[str], fresh: bool) -> float:
    """Seconds the comparison takes: in this process, or as `python -m tracking.compare` in a new one."""
    uri = argv[argv.index("--uri") + 1]
    before = run_count(uri)
    started = time.perf_counter()
    if fresh:
        command = [sys.executable, "-m", "tracking.compare", *argv]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    else:
        with open(os.devnull, "w") as quiet:
            stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, quiet, quiet
            try:
                status = compare(argv)
            finally:
                sys.stdout, sys.stderr = stdout, stderr
        if status != 0:
            raise SystemExit(f"tracking.compare {' '.join(argv)} exited {status}")
    seconds = time.perf_counter() - started
    if "--no-record" not in argv:
        ADDED.append(run_count(uri) - before)
        forget_comparisons(uri)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5520, help="child runs in each sweep (default: %(default)s)")
    parser.add_argument("--keep", help="build the store in this directory and keep it (a second call reuses it)")
    parser.add_argument(
        "--uri", help="the store (default: a SQLite file in the directory); PostgreSQL must start empty"
    )
    parser.add_argument("--repeat", type=int, default=1, help="timings of each kind; their medians are printed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        uri = args.uri or f"sqlite:///{root}/mlflow.db"
        for sweep, seed in ((SWEEP, 0), (OTHER, 1)):
            if has_sweep(uri, sweep):
                print(f"store: {uri} holds sweep {sweep!r} already: used as it is", file=sys.stderr)
                continue
            started = time.perf_counter()
            build_store(uri, args.runs, root, sweep, seed)
            print(
                f"store: sweep {sweep!r}, {args.runs} runs, in {time.perf_counter() - started:.1f} s", file=sys.stderr
            )
        open_client(uri, "read")  # MLflow's store classes imported, as the report benchmark has them before timing
        argv = [SWEEP, OTHER, "--uri", uri, "--out", str(root / "compared")]
        kinds = {
            "compare_s": (argv, False),
            "compare_no_record_s": ([*argv, "--no-record"], False),
            "command_s": (argv, True),
        }
        seconds = {name: [timed(a, fresh) for _ in range(args.repeat)] for name, (a, fresh) in kinds.items()}
    medians = {name: round(statistics.median(values), 2) for name, values in seconds.items()}
    print(
        f"compare of two {args.runs}-run sweeps: {medians['compare_s']} s recorded, {medians['compare_no_record_s']} s "
        f"files only, {medians['command_s']} s as a command (imports included; target: compare_s under 10 s on 2 "
        f"cores); {max(ADDED)} run(s) added to the store by each"
    )
    summary = {"runs": args.runs, "store": uri.split(":", 1)[0], **medians, "runs_added": max(ADDED)}
    print(json.dumps({**summary, "all": seconds}))


if __name__ == "__main__":
    main()
