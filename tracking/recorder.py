"""The only code that writes to MLflow: one parent run per sweep, one child run per trial.

The sweep driver alone holds a Recorder, and records each trial the moment its result arrives, so
a driver killed mid-sweep keeps every finished trial, and a rerun skips their keys.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from tokengen.names import FINISHED, PLAN_FILE, RESULT_FILE, SWEEP_CONFIG_FILE, TRIAL_LOG
from tokengen.record import METRIC, PARAM, SERIES, TAG, with_role
from tokengen.spec import LABELS

PARAMS, METRICS, SERIES_FIELDS = with_role(PARAM), with_role(METRIC), with_role(SERIES)
TAGS = with_role(TAG) + LABELS  # the label is a param and, for filtering, a tag
TRANSPORT = ("log", "files")  # what travels with a record from the node, not part of it
MAX_PARAM_CHARS = 6000


class TrackingError(RuntimeError):
    """The tracking store cannot be reached or written: said in one line, before any trial runs."""


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    if uri.startswith(("http://", "https://")):
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s).read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrackingError(f"tracking server {uri} is unreachable ({reason}): start it or fix tracking.uri") from None


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def metrics_of(record: dict, timestamp: int) -> list[Metric]:
    """The record's metrics, and each series as one metric stepped by run index."""
    metrics = [Metric(name, v, timestamp, 0) for name in METRICS if (v := _number(record.get(name))) is not None]
    for name in SERIES_FIELDS:
        for step, value in enumerate(record.get(name) or []):
            if (v := _number(value)) is not None:
                metrics.append(Metric(name, v, timestamp, step))
    return metrics


def params_of(record: dict) -> list[Param]:
    return [Param(name, str(record[name])[:MAX_PARAM_CHARS]) for name in PARAMS if name in record]


def tags_of(record: dict, sweep: str) -> dict[str, str]:
    tags = {"sweep": sweep, "trial_key": record["key"]}
    for name in TAGS:
        if record.get(name) is not None:
            tags[name] = str(record[name])[:MAX_PARAM_CHARS]
    return tags


class Recorder:
    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        check_reachable(uri)
        try:
            self.client = MlflowClient(tracking_uri=uri)
            found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise TrackingError(f"cannot write to tracking store {uri} ({first[:200]}): fix tracking.uri") from None
        self.parent_id: str | None = None
        self.sweep = ""

    def finished_keys(self) -> set[str]:
        """Keys of trials that already have a finished child run anywhere in the experiment."""
        keys, token = set(), None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.status = '{FINISHED}'", max_results=5000, page_token=token
            )
            keys.update(run.data.tags.get("trial_key") for run in page)
            token = page.token
            if not token:
                return keys - {None}

    def start_sweep(self, name: str, config: dict, resume: bool, planned: list[str] = (),
                    reused: list[str] = ()) -> str:
        """The sweep's parent run (the latest one of this name when resuming, else a new one), with its
        plan: every key it covers, and those finished by earlier runs that this one reuses."""
        self.sweep = name
        self.parent_id = self._parent(name, config, resume)
        plan = {"planned": list(planned), "reused": list(reused)}
        self.client.log_text(self.parent_id, json.dumps(plan), PLAN_FILE)
        self.client.set_tag(self.parent_id, "reused_trials", str(len(plan["reused"])))
        return self.parent_id

    def _parent(self, name: str, config: dict, resume: bool) -> str:
        if resume:
            runs = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.sweep_parent = '{name}'", max_results=1,
                order_by=["attributes.start_time DESC"],
            )
            if runs:
                self.parent_id = runs[0].info.run_id
                self.client.update_run(self.parent_id, status="RUNNING")
                self._close_orphans()
                return self.parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags={"sweep_parent": name, "sweep": name})
        self.client.log_text(run.info.run_id, json.dumps(config, indent=2, default=str), SWEEP_CONFIG_FILE)
        return run.info.run_id

    def _close_orphans(self) -> None:
        """Child runs a killed driver left half-written: KILLED, and never counted as finished."""
        orphans = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}' and attributes.status = 'RUNNING'",
            max_results=5000,
        )
        for run in orphans:
            self.client.set_terminated(run.info.run_id, "KILLED")

    def record_trial(self, record: dict) -> str:
        """One child run with the trial's params, metrics, tags and artifacts; FAILED if it failed."""
        name = f"{record.get('variant', 'trial')}-b{record.get('batch_size')}-n{record.get('max_seqlen')}"
        tags = tags_of(record, self.sweep)
        status = tags.pop("status")  # set last: a run cut short never counts as finished
        run = self.client.create_run(self.experiment_id, run_name=name, tags={"mlflow.parentRunId": self.parent_id, **tags})
        run_id = run.info.run_id
        metrics = metrics_of(record, int(time.time() * 1000))
        self.client.log_batch(run_id, metrics=metrics, params=params_of(record), synchronous=True)
        log = record.get("log", "")
        result = {k: v for k, v in record.items() if k not in TRANSPORT}
        self.client.log_text(run_id, json.dumps(result, indent=2), RESULT_FILE)
        if log:
            self.client.log_text(run_id, log, TRIAL_LOG)
        if record.get("files"):
            with tempfile.TemporaryDirectory() as tmp:
                for name, blob in record["files"].items():
                    Path(tmp, name).write_bytes(blob)
                    self.client.log_artifact(run_id, str(Path(tmp, name)))
        self.client.set_tag(run_id, "status", status)
        self.client.set_terminated(run_id, "FINISHED" if status == FINISHED else "FAILED")
        return run_id

    def log_sweep_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.parent_id, local_path, artifact_path)

    def end_sweep(self, failed: int) -> None:
        self.client.set_tag(self.parent_id, "failed_trials", str(failed))
        self.client.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")
