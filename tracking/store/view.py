"""The sweep's saved view of the MLflow UI, written as the UI's own "Save and share view" does
(MLflow 3.17): the experiment tag `mlflow.sharedViewState.<KEY>` holds a JSON envelope whose `state` is
the runs page's state, deflated and base64'd; the UI lists it by name and opens it from
`?viewStateShareKey=KEY` (tracking/ui.py). Beside it, a report's place in the store: its files as
artifacts of the sweep's run, and its overview as that run's description."""

from __future__ import annotations

import base64
import json
import time
import zlib
from pathlib import Path

from tracking.store.derived import view_filter

VIEW_PREFIX = "mlflow.sharedViewState."  # the UI's tag prefix for saved views
MAX_VIEW_CHARS = 20000  # MLflow's limit on an experiment tag's value, which the UI checks too
PARAMS = ("variant", "batch_size", "max_seqlen", "prompt_len", "model")
METRICS = ("speedup", "speedup_low", "speedup_high", "vs_generate", "runtime_mean_s", "tokens_per_s")
TAGS = ("tokens_verdict", "measurement", "compared")


def column(kind: str, name: str) -> str:
    """A runs-table column as the UI names it: params.`variant`, metrics.`speedup`, tags.`compared`."""
    return f"{kind}.`{name}`"


COLUMNS = (
    [column("metrics", m) for m in METRICS] + [column("tags", t) for t in TAGS] + [column("params", p) for p in PARAMS]
)
"""Shown in this order after the run's name (which already reads `variant bB pP LN`): the comparison
first, so a narrow window still shows the speedup."""


def compress(text: str) -> str:
    """The UI's compressed form: "deflate;" + base64 of a zlib stream (pako.deflate's, level 6)."""
    return "deflate;" + base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def decompress(value: str) -> str:
    return zlib.decompress(base64.b64decode(value.removeprefix("deflate;"))).decode()


def view_key(parent_id: str) -> str:
    """One key per sweep run: a rebuilt report replaces its view instead of adding one."""
    return f"tokengen-{parent_id}"


def view_state(search_filter: str) -> dict:
    """The runs page's state as the UI saves it: search facets (filter, sort) and table settings."""
    return {
        "searchFilter": search_filter,
        "orderByKey": column("metrics", "speedup"),
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": COLUMNS,
        "columnOrder": COLUMNS,
        "columnWidths": {c: 110 for c in COLUMNS if c.startswith("metrics.")},
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": None,
        "viewMaximized": False,
        "runListHidden": False,
    }


def envelope(name: str, state: dict, created_ms: int, updated_ms: int) -> str:
    """The tag's value: the saved-view record the UI lists by name, its state compressed."""
    payload = compress(json.dumps(state, separators=(",", ":")))
    value = json.dumps(
        {"name": name, "createdAt": created_ms, "updatedAt": updated_ms, "state": payload}, separators=(",", ":")
    )
    if len(value) > MAX_VIEW_CHARS:
        raise ValueError(f"the view is {len(value)} characters, over MLflow's {MAX_VIEW_CHARS}")
    return value


def read_view(value: str) -> dict:
    """A saved view's state (the test's and a curious user's way back from the tag)."""
    return json.loads(decompress(json.loads(value)["state"]))


def has_view(client, experiment_id: str, key: str) -> bool:
    """Whether the experiment holds the sweep's saved view (a report built it)."""
    return VIEW_PREFIX + key in client.get_experiment(experiment_id).tags


def publish_view(client, experiment_id: str, sweep: str, parent_id: str) -> str:
    """Save the sweep's view in its experiment (created once, updated by each rebuild); returns its key."""
    key = view_key(parent_id)
    now = int(time.time() * 1000)
    old = client.get_experiment(experiment_id).tags.get(VIEW_PREFIX + key)
    created = json.loads(old).get("createdAt", now) if old else now
    value = envelope(f"sweep {sweep} ({parent_id[:8]})", view_state(view_filter(parent_id, sweep)), created, now)
    client.set_experiment_tag(experiment_id, VIEW_PREFIX + key, value)
    return key


MAX_NOTE_CHARS = 8000  # MLflow's limit on a tag's value
NOTE_TAG = "mlflow.note.content"  # the run's description, as the UI shows it


def attach_files(uri: str, parent_id: str, files: list[Path], folder: str = "report") -> None:
    """The files as artifacts of the run, under `folder`/."""
    from tracking.store.connect import open_client

    client = open_client(uri)
    for path in files:
        client.log_artifact(parent_id, str(path), folder)


def set_note(client, run_id: str, text: str) -> None:
    """The run's description, cut to what a tag holds."""
    client.set_tag(
        run_id, NOTE_TAG, text if len(text) <= MAX_NOTE_CHARS else text[: MAX_NOTE_CHARS - 20] + "\n\n(cut short)"
    )
