"""Does the sweep driver keep up with 64 GPUs? Milliseconds to record one result, per store.

64 GPUs finishing a 30-second trial each hand the driver about 2 results a second; the driver must
record each (journal line and files, the MLflow run with its params, metrics, tags and artifacts,
the progress line) in well under half a second, or results queue behind it. This replays records
shaped like a `+grid=full` sweep's (benchmarks/report_speed.py's synthetic trials, tokens.npy
included) through the driver's own path: `Outbox.put` (sweeps/delivery/outbox.py: the journal, then
the Recorder's write) and `Progress.advance` (sweeps/execution/progress.py), one after another as
`execute` does. By default into a temporary SQLite store and into a throwaway PostgreSQL server
(tests/postgres_helpers.py: initdb and pg_ctl in a temporary folder, as a non-root user where this
runs as root). Target: at most 50 ms per result on each. The last line is JSON:
{"sqlite": {"ms_per_result": ...}, "postgresql": {"ms_per_result": ...}}.

    python benchmarks/record_rate.py [--runs 5520] [--store sqlite|postgresql ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

from report_speed import BATCHES, DTYPES, GPUS, LENGTHS, PROMPTS, trial  # noqa: E402

from sweeps.delivery.journal import Journal  # noqa: E402
from sweeps.delivery.outbox import Outbox  # noqa: E402
from sweeps.execution.progress import Progress  # noqa: E402
from tokengen.contract.names import TOKENS_FILE  # noqa: E402
from tokengen.contract.trial_record import TrialRecord  # noqa: E402
from tokengen.contract.variants import VARIANTS  # noqa: E402
from tracking.store.recorder import Recorder  # noqa: E402

TARGET_MS = 50


def records(n: int) -> list[TrialRecord]:
    """n finished trials' records as a trial process returns them, each with its tokens.npy and a log."""
    rng = np.random.default_rng(0)
    points = [
        (v, b, s, d, g, p)
        for p in PROMPTS
        for g in GPUS
        for d in DTYPES
        for s in LENGTHS
        for b in BATCHES
        for v in VARIANTS
    ]
    out = []
    for i in range(n):
        variant, batch, length, dtype, gpu, prompt = points[i % len(points)]
        record, tokens = trial(variant, batch, length, dtype, gpu, rng, prompt)
        buffer = io.BytesIO()
        np.save(buffer, tokens)
        out.append(
            dataclasses.replace(
                record.with_result(key=hashlib.sha256(f"{i}".encode()).hexdigest()[:16], attempt=1),
                files={TOKENS_FILE: buffer.getvalue()},
                log=f"trial {variant} b{batch} p{prompt} n{length}: done\n",
            )
        )
    return out


def replay(uri: str, folder: Path, batch: list[TrialRecord]) -> float:
    """Milliseconds per result through the driver's recording path, the store opened and the sweep's run made first."""
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("rate", {"sweep": {"name": "rate"}}, resume=False)
    outbox = Outbox(Journal.open("tokengen", "rate", folder), recorder)
    with open(os.devnull, "w") as quiet, redirect_stderr(quiet):
        progress = Progress(len(batch))
        started = time.perf_counter()
        for record in batch:
            outbox.put(record)
            progress.advance(failed=False, unrecorded=outbox.unrecorded)
        took = time.perf_counter() - started
        progress.close()
    if outbox.unrecorded:
        raise RuntimeError(f"{outbox.unrecorded} result(s) were not recorded: {outbox.last_error}")
    recorder.end_sweep(0)
    return took / len(batch) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5520)
    parser.add_argument(
        "--store",
        action="append",
        choices=("sqlite", "postgresql"),
        help="measure only this store (repeatable; default: both)",
    )
    args = parser.parse_args()
    stores = args.store or ["sqlite", "postgresql"]
    batch = records(args.runs)
    result = {}
    for store in stores:
        folder = Path(tempfile.mkdtemp(prefix=f"record-rate-{store}-"))
        server = None
        try:
            if store == "postgresql":
                from postgres_helpers import missing, started

                if missing():
                    raise SystemExit(f"error: {missing()}")
                server = started()
                uri = server.create_database("rate")
            else:
                uri = f"sqlite:///{folder}/mlflow.db"
            os.chdir(folder)  # MLflow's artifacts for a PostgreSQL store (./mlruns), the journal
            ms = replay(uri, folder, batch)
        finally:
            if server is not None:
                server.stop()
                shutil.rmtree(server.root, ignore_errors=True)
            os.chdir(ROOT)
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{store}: {args.runs} results recorded, {ms:.1f} ms per result (target: at most {TARGET_MS} ms)")
        result[store] = {"ms_per_result": round(ms, 2), "runs": args.runs}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
