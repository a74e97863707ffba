"""The comparison in A's store (tracking/store/comparisons.py): one run, a child run per matched point, and a saved
view of the children sorted by ratio, keyed by the two names so that comparing a pair again updates it."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from tracking.compare.points import FIGURES
from tracking.compare.sides import Side
from tracking.rows import plain_rows
from tracking.run_names import run_name
from tracking.store.comparisons import ChildRun, record_comparison
from tracking.store.connect import is_server, redacted
from tracking.store.reading import is_missing
from tracking.store.recorder import Recorder
from tracking.store.view import VIEW_PREFIX, column, envelope, view_state
from tracking.ui import base_url, server_command, view_url

METRICS = ("ratio", "ratio_low", "ratio_high", *(f"{name}_{side}" for name in FIGURES for side in "ab"))
TAGS = ("verdict", "tokens", "compared", "measurement_a", "measurement_b", "run_id_a", "run_id_b")
PARAMS = ("variant", "batch_size", "prompt_len", "max_seqlen", "requests", "model", "dtype", "device")
# the view's columns after the run's name: the ratio and its interval first, so a narrow window shows them
COLUMNS = [column("metrics", m) for m in METRICS[:5]] + [column("tags", t) for t in TAGS[:3]]
COLUMNS += [column("params", p) for p in PARAMS[:4]]
COMPARISON_TAG = "comparison"  # on the comparison's run: "A vs B"
ID_TAG = "comparison_id"  # on each child: chosen before any write, so the view's filter is known as the runs are made
FILTER_TAG = "children_filter"  # on the comparison's run: the search filter that lists its children
MAX_NOTE_CHARS = 8000  # MLflow's limit on a tag's value (the run's description)


def view_key(name_a: str, name_b: str) -> str:
    return "tokengen-compare-" + hashlib.sha256(f"{name_a}\0{name_b}".encode()).hexdigest()[:12]


def record(a: Side, b: Side, pairs: pd.DataFrame, files: Iterable[Path], note: str) -> tuple[str, list[str]]:
    """The comparison's run with its children, files, view and `note` (what the command printed, its first line what
    differs): its id and the lines that say how to open it; TrackingError where the store refuses the write."""
    recorder = Recorder(a.runs.uri, a.runs.experiment)
    key, comparison_id = view_key(a.name, b.name), uuid.uuid4().hex[:12]
    children_filter = f"tags.`{ID_TAG}` = '{comparison_id}'"  # the UI's search box takes it too
    title = f"compare {a.name} vs {b.name}"
    note = note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 20] + "\n\n(cut short)"
    tags = {COMPARISON_TAG: f"{a.name} vs {b.name}", FILTER_TAG: children_filter, "mlflow.note.content": note}
    differs = note.split("\n")[0][:6000]  # the note's first line
    tags |= dict(compare_a=a.name, compare_b=b.name, compare_b_uri=redacted(b.runs.uri), differs=differs)
    tags |= dict(points=str(len(pairs)), sweep_a_run_id=a.runs.parent_id, sweep_b_run_id=b.runs.parent_id)
    children = []
    named = dict.fromkeys([*METRICS, *TAGS, *PARAMS, "key"])  # what a child holds, and its name's fields
    for row in plain_rows(pairs, named).values():  # named as its trial's run is (`kv_cache b4 p8 L48`)
        known = {name: value for name, value in row.items() if not is_missing(value)}
        metrics, params = {m: known[m] for m in METRICS if m in known}, {p: known[p] for p in PARAMS if p in known}
        tags_of = {ID_TAG: comparison_id, **{t: str(known[t]) for t in TAGS if t in known}}
        children.append(ChildRun(run_name(row), params, metrics, tags_of))
    state = view_state(children_filter)  # the children, fastest on B first, the comparison's columns
    state.update(orderByKey=column("metrics", "ratio"), orderByAsc=True, selectedColumns=COLUMNS, columnOrder=COLUMNS)
    state["columnWidths"] = {c: 110 for c in COLUMNS if c.startswith("metrics.")}
    now = int(time.time() * 1000)
    view = {VIEW_PREFIX + key: envelope(title, state, now, now)}
    run_id = record_comparison(recorder, title, tags, children, files, view)
    url = view_url(base_url(a.runs.uri), recorder.experiment_id, key)
    if is_server(a.runs.uri):
        return run_id, [f"ui: the tracking server serves the MLflow UI; this comparison: {url}"]
    serve = f"ui: serve the MLflow UI on this store: {server_command(a.runs.uri)}"
    return run_id, [serve, f"ui: this comparison: {url}"]
