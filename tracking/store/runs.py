"""A record as a run (its params, metrics and tags), and a run as a flat row: the one flattener.

Every reader of the store (the report, the cost model's history, remeasure, the resume index) sees a
run through `flat_row`: tags, then metrics, then params (params win a shared name); a series
(runtime_s) is the whole list its tag holds, None for a run recorded before series had one; the
report's derived figures (tracking/store/derived.py) are never read back as data; a field added to
the spec since the run was recorded gets its default; a run without its status tag was cut short. Each run is
read typed first (`stored_run`: a StoredRun holding the trial's TrialRecord, a value of the wrong type refused in
one line that names the run), then flattened into the frame's row. A record is written as a run from its
TrialRecord (`tags_of`, `params_of`, `metrics_of`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import pandas as pd

from tokengen.contract.declarations import KNOBS, plain
from tokengen.contract.names import FAILED, SWEEP_TAG, TRIAL_KEY
from tokengen.contract.record import METRIC, PARAM, RECORD_FIELDS, SERIES, TAG, base_type, typed, with_role
from tokengen.contract.spec import LABELS, SPEC_FIELDS, TrialSpec
from tokengen.contract.trial_record import TrialRecord
from tracking.measurement import attempt_of

PARENT_TAG = "mlflow.parentRunId"

# The report's figures on a trial's run (tracking/store/derived.py writes them): never read back as data.
DERIVED_METRICS = ("speedup", "speedup_low", "speedup_high", "vs_generate")
DERIVED_TAGS = ("tokens_verdict", "baseline_run_id", "compared")
"""`measurement` is shown beside them in the UI, but it is the trial's own tag (its record), never derived."""
DERIVED = DERIVED_METRICS + DERIVED_TAGS
"""Every name the report writes on a trial's run; the reader drops them."""
REPORT_MARK = "in_report."
"""Tag prefix: `in_report.<parent run id>` = the sweep's name, on each run that sweep's report used."""
COLUMN_OF = {"tokens_verdict": "tokens"}
"""A derived tag whose column in the report's frame has another name."""
SHOWN_PREFIX = "ui/"
SHOWN = ("speedup", "speedup_low", "speedup_high", "vs_generate", "runtime_mean_s", "tokens_per_s")
"""The view's figures, copied at four significant digits as `ui/<name>`: the UI prints a metric's every digit
and cannot round, and the figures themselves keep theirs."""
SHOWN_METRICS = tuple(SHOWN_PREFIX + name for name in SHOWN)


def is_derived(name: str) -> bool:
    return name in DERIVED or name.startswith((REPORT_MARK, SHOWN_PREFIX))


def mark_of(parent_id: str) -> str:
    return REPORT_MARK + parent_id


PARAMS, METRICS, SERIES_FIELDS = with_role(PARAM), with_role(METRIC), with_role(SERIES)
TAGS = with_role(TAG) + LABELS  # the label is a param and, for filtering, a tag
MAX_PARAM_CHARS = 6000
_SPEC_DEFAULTS = TrialSpec().to_dict()
_DECLARED = frozenset(RECORD_FIELDS)


def series_of(text) -> list | None:
    try:
        values = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return values if isinstance(values, list) else None


_TYPED: dict[tuple[str, str], object] = {}
_TYPED_MAX = 100_000


def typed_text(key: str, text: str):
    """typed(key, text) for a tag's or param's text, remembered: a sweep's thousands of runs repeat a few
    values per field (gpt2, float32, ok), and typing each again costs seconds. Only immutable results."""
    found = _TYPED.get((key, text), _TYPED)
    if found is not _TYPED:
        return found
    value = typed(key, text)
    if (value is None or isinstance(value, (str, int, float))) and len(_TYPED) < _TYPED_MAX:
        _TYPED[(key, text)] = value
    return value


@functools.cache
def _read_back(name: str, tag: bool) -> bool:
    """Whether a tag (`tag`) or metric of that name is read back as the trial's data: never the report's, nor a tag
    of MLflow's own (`mlflow.`); remembered per name, as every run repeats the same few dozen."""
    return not (tag and name.startswith("mlflow.")) and not is_derived(name)


_FLOATS = frozenset(name for name in METRICS if name not in SPEC_FIELDS and base_type(name) is float)


def typed_metric(name: str, value):
    """typed(name, value) for a metric as MLflow returns it (a float): a float field's value as it is, NaN as None,
    without typed's checks, which 150,000 metrics a sweep would pay for one by one."""
    if name in _FLOATS:
        return None if value != value else value
    return typed(name, value)


RUN_FACTS = ("run_id", "run_name", "run_status", "start_time", "artifact_uri", "parent_run_id")
"""A run's own facts, first in its row: MLflow's, not the trial's."""


@dataclass(frozen=True)
class StoredRun:
    """One trial's run as the store holds it, read typed before it is a frame's row: the run's own facts, the
    trial's record (TrialRecord: each value of its field's declared type), and what else its tags and metrics
    say (the sweep, the trial key, the GPU type). `names`: what the run holds, in the order read, so its row
    has the columns the current frame has and no more."""

    run_id: str  # RUN_FACTS, in their order
    run_name: str | None
    run_status: str
    start_time: object
    artifact_uri: object
    parent_run_id: str | None
    record: TrialRecord
    other: dict
    names: tuple[str, ...]

    def row(self) -> dict:
        """The run as a flat row: its facts, then each name it holds."""
        flat = self.record.to_dict()
        row = {name: getattr(self, name) for name in RUN_FACTS}
        row.update((name, flat[name] if name in flat else self.other[name]) for name in self.names)
        return row


def flat_row(run_id: str, status: str, start_time, artifact_uri, tags: dict, metrics: dict, params: dict) -> dict:
    """One run as a flat row, from its parts (a search's run or rows of MLflow's own tables), read typed first
    (stored_run)."""
    return stored_run(run_id, status, start_time, artifact_uri, tags, metrics, params).row()


def stored_run(
    run_id: str, status: str, start_time, artifact_uri, tags: dict, metrics: dict, params: dict
) -> StoredRun:
    """One run, typed: its record read through the door (TrialRecord.from_dict; a name nobody declares is one of
    the run's other values), a value of the wrong type refused in one line that names the run."""
    row = {k: typed_text(k, v) for k, v in tags.items() if _read_back(k, True)}
    row.update({k: typed_metric(k, v) for k, v in metrics.items() if _read_back(k, False)})
    row.update({k: typed_text(k, v) for k, v in params.items()})
    for name in SERIES_FIELDS:
        row[name] = series_of(tags.get(name))
    row["attempt"] = attempt_of(row.get("attempt"))
    for name, default in _SPEC_DEFAULTS.items():  # a field added since the run was recorded: its default
        row.setdefault(name, default)
    if "status" not in row:  # the driver tags a trial's status last: without it, the run was cut short
        row.update(
            status=FAILED,
            error_type="Incomplete",
            error_message=f"the driver stopped before recording this trial in full (run {status})",
        )
    gpu = row.get("accelerator_type") or row.get("env_gpu_name")
    row["gpu_type"] = gpu if isinstance(gpu, str) and gpu else None
    try:
        record = TrialRecord.from_dict(row, drop_undeclared=True)
    except (TypeError, ValueError) as exc:  # SpecError is a ValueError
        raise TypeError(f"run {run_id} in the store: {exc}") from None
    return StoredRun(
        run_id,
        tags.get("mlflow.runName"),
        status,
        start_time,
        artifact_uri,
        tags.get(PARENT_TAG),
        record,
        {name: value for name, value in row.items() if name not in _DECLARED},
        tuple(row),
    )


def flatten(run) -> dict:
    """One run of a search as a flat record."""
    return flat_row(
        run.info.run_id,
        run.info.status,
        run.info.start_time,
        run.info.artifact_uri,
        run.data.tags,
        run.data.metrics,
        run.data.params,
    )


def frame_of(runs: list) -> pd.DataFrame:
    """One row per run; a knob a run was recorded without (it predates the knob) reads as its plain value."""
    frame = pd.DataFrame([flatten(run) for run in runs])
    if frame.empty:
        return frame
    for knob in KNOBS:
        column = frame[knob] if knob in frame else pd.Series(None, index=frame.index, dtype=object)
        frame[knob] = column.where(column.notna(), plain(knob).name)
    return frame


def metric_value(value) -> float | None:
    """What MLflow can store as a metric: a finite number (bools as 0/1), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def metrics_of(record: TrialRecord, timestamp: int) -> list:
    """The record's metrics, and each series as one metric stepped by run index."""
    from mlflow.entities import Metric  # here: the SQLite history reads runs without MLflow

    flat = record.to_dict()
    metrics = [Metric(name, v, timestamp, 0) for name in METRICS if (v := metric_value(flat[name])) is not None]
    for name in SERIES_FIELDS:
        for step, value in enumerate(flat[name] or []):
            if (v := metric_value(value)) is not None:
                metrics.append(Metric(name, v, timestamp, step))
    return metrics


def params_of(record: TrialRecord) -> list:
    from mlflow.entities import Param

    flat = record.to_dict()
    return [Param(name, str(flat[name])[:MAX_PARAM_CHARS]) for name in PARAMS]


def tags_of(record: TrialRecord, sweep: str) -> dict[str, str]:
    """The record's tags, and each series whole as a JSON list (a search returns tags, not metric history:
    the report reads every timed run from there)."""
    flat = record.to_dict()
    tags = {SWEEP_TAG: sweep, TRIAL_KEY: record.key}
    for name in TAGS:
        if flat[name] is not None:
            tags[name] = str(flat[name])[:MAX_PARAM_CHARS]
    for name in SERIES_FIELDS:
        values = [v for v in flat[name] or [] if metric_value(v) is not None]
        text = _series_text(values)
        if text:
            tags[name] = text
    return tags


def _series_text(values: list[float]) -> str | None:
    """A JSON list within the tag limit: 9 significant digits, fewer if it must; None if even 4 do not fit
    (the metric history still holds every value)."""
    for digits in (9, 6, 4):
        text = json.dumps([float(f"{v:.{digits}g}") for v in values], separators=(",", ":"))
        if len(text) <= MAX_PARAM_CHARS:
            return text if values else None
    return None
