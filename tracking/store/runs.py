"""Runs as flat rows: the one flattener.

Every reader of the store (the report, the cost model's history, remeasure, the resume index) sees a
run through `flat_row`: tags, then metrics, then params (params win a shared name); a series
(runtime_s) is the whole list its tag holds, None for a run recorded before series had one; the
report's derived figures (tracking/store/derived.py) are never read back as data; a field added to
the spec since the run was recorded gets its default; a run without its status tag was cut short.
"""

from __future__ import annotations

import json

import pandas as pd

from tokengen.contract.names import FAILED
from tokengen.contract.record import SERIES, typed, with_role
from tokengen.contract.spec import TrialSpec
from tracking.measurement import attempt_of
from tracking.store.derived import is_derived

PARENT_TAG = "mlflow.parentRunId"
SERIES_FIELDS = with_role(SERIES)
_SPEC_DEFAULTS = TrialSpec().to_dict()


def series_of(text) -> list | None:
    try:
        values = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return values if isinstance(values, list) else None


def flat_row(run_id: str, status: str, start_time, artifact_uri, tags: dict, metrics: dict, params: dict) -> dict:
    """One run as a flat record, from its parts (a search's run or rows of MLflow's own tables)."""
    row = {"run_id": run_id, "run_name": tags.get("mlflow.runName"), "run_status": status, "start_time": start_time,
           "artifact_uri": artifact_uri, "parent_run_id": tags.get(PARENT_TAG)}
    row.update({k: typed(k, v) for k, v in tags.items() if not k.startswith("mlflow.") and not is_derived(k)})
    row.update({k: typed(k, v) for k, v in metrics.items() if not is_derived(k)})
    row.update({k: typed(k, v) for k, v in params.items()})
    for name in SERIES_FIELDS:
        row[name] = series_of(tags.get(name))
    row["attempt"] = attempt_of(row.get("attempt"))
    for name, default in _SPEC_DEFAULTS.items():  # a field added since the run was recorded: its default
        row.setdefault(name, default)
    if "status" not in row:  # the driver tags a trial's status last: without it, the run was cut short
        row.update(status=FAILED, error_type="Incomplete",
                   error_message=f"the driver stopped before recording this trial in full (run {status})")
    gpu = row.get("accelerator_type") or row.get("env_gpu_name")
    row["gpu_type"] = gpu if isinstance(gpu, str) and gpu else None
    return row


def flatten(run) -> dict:
    """One run of a search as a flat record."""
    return flat_row(run.info.run_id, run.info.status, run.info.start_time, run.info.artifact_uri, run.data.tags,
                    run.data.metrics, run.data.params)


def frame_of(runs: list) -> pd.DataFrame:
    return pd.DataFrame([flatten(run) for run in runs])
