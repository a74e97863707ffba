"""The comparison in the MLflow UI: one run in A's store, one child run per matched point with metrics
`ratio`, `ratio_low`, `ratio_high` and a `verdict` tag, and a saved view of those children sorted by
ratio, whose URL the command prints (tracking/ui.py builds it, as for a sweep's report).

Written through the Recorder (tracking/store/recorder.py), the store's one writer. No run here carries a
trial's `status`, `trial_key` or `sweep` tag, so resume, the reports and the cost model never take a
comparison's runs for trials. The view's key comes from the two sweeps' names, so comparing the same
pair again points the same view at the newest comparison.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid

import pandas as pd

from tracking.run_names import run_name
from tracking.store.comparisons import ChildRun, record_comparison
from tracking.store.connect import is_server, redacted
from tracking.store.recorder import Recorder
from tracking.store.view import VIEW_PREFIX, column, envelope, view_state
from tracking.ui import base_url, server_command, view_url

METRICS = (
    "ratio",
    "ratio_low",
    "ratio_high",
    "runtime_mean_s_a",
    "runtime_mean_s_b",
    "useful_tokens_per_s_a",
    "useful_tokens_per_s_b",
    "cost_per_mtok_a",
    "cost_per_mtok_b",
    "energy_j_per_token_a",
    "energy_j_per_token_b",
)
TAGS = ("verdict", "tokens", "compared", "measurement_a", "measurement_b", "run_id_a", "run_id_b")
PARAMS = ("variant", "batch_size", "prompt_len", "max_seqlen", "requests", "model", "dtype", "device")
COLUMNS = (
    [column("metrics", m) for m in METRICS[:5]]
    + [column("tags", t) for t in TAGS[:3]]
    + [column("params", p) for p in PARAMS[:4]]
)
"""The view's columns after the run's name: the ratio and its interval first, so a narrow window shows them."""
COMPARISON_TAG = "comparison"  # on the comparison's run: "A vs B"
ID_TAG = "comparison_id"
"""On each child run of a comparison: one id per comparison, chosen before anything is written, so the
view's filter is known when the runs are created (the comparison's own run lacks it: the view lists points)."""
FILTER_TAG = "children_filter"  # on the comparison's run: the search filter that lists its children


def view_key(name_a: str, name_b: str) -> str:
    return "tokengen-compare-" + hashlib.sha256(f"{name_a}\0{name_b}".encode()).hexdigest()[:12]


def children_filter(comparison_id: str) -> str:
    """MLflow's search filter for one comparison's child runs (the UI's search box takes it too)."""
    return f"tags.`{ID_TAG}` = '{comparison_id}'"


def comparison_view(name: str, comparison_id: str) -> str:
    """The saved view's tag value: the children, sorted by ratio (fastest on B first), the comparison's columns."""
    state = {
        **view_state(children_filter(comparison_id)),
        "orderByKey": column("metrics", "ratio"),
        "orderByAsc": True,
        "selectedColumns": COLUMNS,
        "columnOrder": COLUMNS,
        "columnWidths": {c: 110 for c in COLUMNS if c.startswith("metrics.")},
    }
    now = int(time.time() * 1000)
    return envelope(name, state, now, now)


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def children(pairs: pd.DataFrame, comparison_id: str) -> list[ChildRun]:
    """One child run per matched point, named as its trial's run is (`kv_cache b4 p8 L48`)."""
    out = []
    for _, row in pairs.iterrows():
        fields = row.to_dict()
        out.append(
            ChildRun(
                name=run_name(fields),
                params={p: fields[p] for p in PARAMS if p in fields and _known(fields[p])},
                metrics={m: fields[m] for m in METRICS if m in fields and _known(fields[m])},
                tags={ID_TAG: comparison_id, **{t: str(fields[t]) for t in TAGS if t in fields and _known(fields[t])}},
            )
        )
    return out


def record(
    uri: str,
    experiment: str,
    name_a: str,
    name_b: str,
    uri_b: str,
    pairs: pd.DataFrame,
    files: list,
    summary: dict[str, str],
) -> tuple[str, str, str]:
    """The comparison's run in A's store (uri, experiment) with its children, files and view.
    Returns (run id, experiment id, view key). TrackingError where the store refuses the write."""
    recorder = Recorder(uri, experiment)
    key, comparison_id = view_key(name_a, name_b), uuid.uuid4().hex[:12]
    title = f"compare {name_a} vs {name_b}"
    tags = {
        COMPARISON_TAG: f"{name_a} vs {name_b}",
        FILTER_TAG: children_filter(comparison_id),
        "compare_a": name_a,
        "compare_b": name_b,
        "compare_b_uri": redacted(uri_b),
        **summary,
    }
    view = {VIEW_PREFIX + key: comparison_view(title, comparison_id)}
    run_id = record_comparison(recorder, title, tags, children(pairs, comparison_id), files, view)
    return run_id, recorder.experiment_id, key


def how_to_open(uri: str, experiment_id: str, key: str) -> list[str]:
    """The lines the command ends with: how to serve the UI on A's store, and the comparison's URL."""
    url = view_url(base_url(uri), experiment_id, key)
    if is_server(uri):
        return [f"ui: the tracking server serves the MLflow UI; this comparison: {url}"]
    return [f"ui: serve the MLflow UI on this store: {server_command(uri)}", f"ui: this comparison: {url}"]
