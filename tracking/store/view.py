"""The sweep's saved view of the MLflow UI, written as the UI's own "Save and share view" does
(MLflow 3.17): the experiment tag `mlflow.sharedViewState.<KEY>` holds a JSON envelope whose `state` is
the runs page's state, deflated and base64'd; the UI lists it by name and opens it from
`?viewStateShareKey=KEY` (tracking/ui.py), grouped by variant at the sweep's headline point
(tracking/report/headline.py), best speedup first, its figures at four significant digits. Beside it, a report's place in the store: its files as
artifacts of the sweep's run, and its overview as that run's description."""

from __future__ import annotations

import base64
import json
import time
import zlib
from pathlib import Path

from tracking.store.derived import SHOWN_METRICS, SHOWN_PREFIX, view_filter

VIEW_PREFIX = "mlflow.sharedViewState."  # the UI's tag prefix for saved views
MAX_VIEW_CHARS = 20000  # MLflow's limit on an experiment tag's value, which the UI checks too
PARAMS = ("variant", "batch_size", "max_seqlen", "prompt_len", "model")
VERDICTS = ("tokens_verdict", "measurement")  # is the speedup proven, and was its trial disturbed
TAGS = (*VERDICTS, "compared")
NAME = "attributes.`Run Name`"  # the UI's id of the run-name column
CREATED = "runDateAndNestInfo"  # the UI's id of its pinned Created column (a run's age and a group's expander)
FIRST_PX = 856
"""What a 1600 px window leaves the run name, Created and the first figures: less the UI's side bar, the
table's margins and checkbox column, and the assistant panel MLflow opens on a local server's first visit
(measured in MLflow 3.17 by tests/end_to_end/test_ui_browser.py, with 10 px to spare)."""
CREATED_PX, SPEEDUP_PX, MEASUREMENT_PX = 110, 88, 92  # `5 minutes ago`, `11.65 (max)` (headers cut), `contended`
TOKENS_PX = (110, 240)  # the tokens verdict's width, least and most: `ok vs twin static_cache_every_k` at most
GROUP_BY = {"aggregateFunction": "max", "groupByKeys": [{"mode": "param", "groupByData": "variant"}]}
"""The runs table's "Group by" (MLflow 3.17: a list of param/tag keys and the group row's aggregate): one
group per variant, in the order of its first run, so the best variant's group comes first. At one point a
group holds one run, so the aggregate is that run's figure; `max` is the shortest label beside it."""
CHAR_PX, NAME_PAD_PX, NAME_MIN_PX, NAME_MAX_PX = 6.2, 48, 190, 640
"""A run name's width in the UI's 13 px font (5.8 px a character measured, a little more for wide letters),
plus the row's nesting; 190 px is the column's own width, which cuts `static_cudagraph_pipelined b32 p1
L100` short."""
METRIC_CHARS = 12  # `11.65 (max)`: a group row's figure and its aggregate


def column(kind: str, name: str) -> str:
    """A runs-table column as the UI names it: params.`variant`, metrics.`speedup`, tags.`compared`."""
    return f"{kind}.`{name}`"


SPEEDUP = tuple(SHOWN_PREFIX + name for name in ("speedup", "speedup_low", "speedup_high"))  # and its interval
COLUMNS = (
    [column("metrics", m) for m in SPEEDUP]
    + [column("tags", t) for t in VERDICTS]
    + [column("metrics", m) for m in SHOWN_METRICS if m not in SPEEDUP]
    + [column("tags", t) for t in TAGS if t not in VERDICTS]
    + [column("params", p) for p in PARAMS]
)
"""Shown in this order after the run's name (which already reads `variant bB pP LN`) and its age: the speedup,
its interval and the two verdicts that say whether to believe it first, narrow enough that a window 1600 px
wide shows them all without scrolling (FIRST_PX; tests/end_to_end/test_ui_browser.py); then the other figures,
then the params."""


def compress(text: str) -> str:
    """The UI's compressed form: "deflate;" + base64 of a zlib stream (pako.deflate's, level 6)."""
    return "deflate;" + base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def decompress(value: str) -> str:
    return zlib.decompress(base64.b64decode(value.removeprefix("deflate;"))).decode()


def view_key(parent_id: str) -> str:
    """One key per sweep run: a rebuilt report replaces its view instead of adding one."""
    return f"tokengen-{parent_id}"


def name_width(names: list[str]) -> int:
    """The run-name column's width in pixels: the longest name whole, within reason."""
    longest = max((len(n) for n in names), default=0)
    return int(min(max(longest * CHAR_PX + NAME_PAD_PX, NAME_MIN_PX), NAME_MAX_PX))


def view_state(search_filter: str, names: list[str] | None = None) -> dict:
    """The runs page's state as the UI saves it: search facets (filter, sort) and table settings (columns,
    their widths, the grouping); `names`: the run names the view shows, for the name column's width."""
    widths = {column("metrics", m): int(max(len(m), METRIC_CHARS) * 7 + 32) for m in SHOWN_METRICS}  # headers whole
    name = name_width(names or [])
    widths |= {column("metrics", m): SPEEDUP_PX for m in SPEEDUP} | {column("tags", "measurement"): MEASUREMENT_PX}
    room = FIRST_PX - name - CREATED_PX - SPEEDUP_PX * len(SPEEDUP) - MEASUREMENT_PX  # what the tokens verdict gets
    widths[column("tags", "tokens_verdict")] = min(max(room, TOKENS_PX[0]), TOKENS_PX[1])
    return {
        "searchFilter": search_filter,
        "orderByKey": column("metrics", SHOWN_METRICS[0]),
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": COLUMNS,
        "columnOrder": [NAME, CREATED, *COLUMNS],  # Created named to set its width: it is always shown
        "columnWidths": {NAME: name, CREATED: CREATED_PX, **widths},
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": GROUP_BY,
        "groupsExpanded": {},  # every group open: its runs show under it
        "viewMaximized": False,
        "runListHidden": False,
    }


def point_filter(client, run_id: str, fields: list[str]) -> list[str]:
    """The search clauses that pin a point down: each of `fields` as the run `run_id` stored it (params,
    `gpu_type` as Ray's accelerator_type, else the GPU's name); a field the run has no value for is left out."""
    data = client.get_run(run_id).data
    clauses = []
    for name in fields:
        if name == "gpu_type":
            gpu = data.params.get("accelerator_type") or ""
            kind, key, value = ("params", "accelerator_type", gpu) if gpu else ("tags", "env_gpu_name", None)
            value = value or data.tags.get("env_gpu_name")
        else:
            kind, key, value = "params", name, data.params.get(name)
        if value not in (None, "", "None") and "'" not in value:  # the filter has no escape for a quote
            clauses.append(f"{column(kind, key)} = '{value}'")
    return clauses


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


def publish_view(
    client,
    experiment_id: str,
    sweep: str,
    parent_id: str,
    point: tuple[str, str, list[str]] | None = None,
    names: list[str] | None = None,
) -> str:
    """Save the sweep's view in its experiment (created once, updated by each rebuild); returns its key.
    `point`: (its label, a run at it, the fields that pin it down): the view opens there, else on every run."""
    key = view_key(parent_id)
    now = int(time.time() * 1000)
    old = client.get_experiment(experiment_id).tags.get(VIEW_PREFIX + key)
    created = json.loads(old).get("createdAt", now) if old else now
    where, title = view_filter(parent_id, sweep), f"sweep {sweep} ({parent_id[:8]})"
    if point:
        label, run_id, fields = point
        where, title = " and ".join([where, *point_filter(client, run_id, fields)]), f"{title} at {label}"
    value = envelope(f"{title}, by variant", view_state(where, names), created, now)
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
