"""The comparison in A's store (tracking/store/comparisons.py): one run, its figures as metrics (the verdicts' counts,
the geometric mean of B/A, and per variant its overview row), its tables, per-point CSV and plot as artifacts, the
printed text as its description; the UI's link opens that run."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from tracking.compare.findings import overview
from tracking.compare.sides import Side
from tracking.rows import plain_rows
from tracking.store.comparisons import record_comparison
from tracking.store.connect import is_server, redacted
from tracking.store.recorder import Recorder
from tracking.ui import base_url, run_url, server_command

COMPARISON_TAG = "comparison"  # on the comparison's run: "A vs B"
MAX_NOTE_CHARS = 8000  # MLflow's limit on a tag's value (the run's description)


def figures(pairs: pd.DataFrame) -> dict[str, float]:
    """The run's metrics: `points`, each verdict's count (`faster`, `not_significant`, `failed_on_B`),
    `tokens_differ`, and `ratio_geomean` over the points neither side judged noisy or contended; then per variant
    each figure of its overview row, `ratio_geomean/kv_cache`, `faster/kv_cache`, ..."""
    found: dict[str, float] = {"points": len(pairs)}
    found |= {str(v).replace(" ", "_"): int(n) for v, n in pairs["verdict"].value_counts().items()}
    found["tokens_differ"] = int(pairs["tokens"].astype(str).str.startswith("differ").sum())
    ratios = pd.to_numeric(pairs.loc[~pairs["marked"].astype(bool), "ratio"], errors="coerce")
    ratios = ratios[ratios > 0]
    found["ratio_geomean"] = math.exp(np.log(ratios).mean()) if len(ratios) else math.nan
    for row in plain_rows(overview(pairs)).values():
        variant = row.pop("variant")
        found |= {f"{name}/{variant}": value for name, value in row.items()}
    return found


def record(a: Side, b: Side, pairs: pd.DataFrame, files: Iterable[Path], note: str) -> tuple[str, list[str]]:
    """The comparison's run with its figures, files and `note` (what the command printed, its first line what
    differs): its id and the lines that say how to open it; TrackingError where the store refuses the write."""
    recorder = Recorder(a.runs.uri, a.runs.experiment)
    note = note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 20] + "\n\n(cut short)"
    tags = {COMPARISON_TAG: f"{a.name} vs {b.name}", "mlflow.note.content": note}
    differs = note.split("\n")[0][:6000]  # the note's first line
    tags |= dict(compare_a=a.name, compare_b=b.name, compare_b_uri=redacted(b.runs.uri), differs=differs)
    tags |= dict(points=str(len(pairs)), sweep_a_run_id=a.runs.parent_id, sweep_b_run_id=b.runs.parent_id)
    run_id = record_comparison(recorder, f"compare {a.name} vs {b.name}", tags, figures(pairs), files)
    url = run_url(base_url(a.runs.uri), recorder.experiment_id, run_id)
    if is_server(a.runs.uri):
        return run_id, [f"ui: the tracking server serves the MLflow UI; this comparison: {url}"]
    serve = f"ui: serve the MLflow UI on this store: {server_command(a.runs.uri)}"
    return run_id, [serve, f"ui: this comparison: {url}"]
