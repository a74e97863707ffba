"""A comparison of two sweeps written to the store: one run with its files, one child run per matched point."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tracking.store.connect import failing_fast
from tracking.store.recorder import Recorder
from tracking.store.runs import MAX_PARAM_CHARS, PARENT_TAG, metric_value
from tracking.store.tables import Tables, in_bulk

RUN_NAME_TAG = "mlflow.runName"
SERVER_THREADS = 8  # children created at once through a tracking server


@dataclasses.dataclass
class ChildRun:
    """One child run of a run that is not a sweep's (a comparison's matched point), as the UI shows it."""

    name: str
    params: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    tags: dict = dataclasses.field(default_factory=dict)

    def stored_metrics(self) -> dict[str, float]:
        return {k: v for k, value in self.metrics.items() if (v := metric_value(value)) is not None}

    def stored_params(self) -> dict[str, str]:
        return {k: str(v)[:MAX_PARAM_CHARS] for k, v in self.params.items()}


@failing_fast
def record_comparison(
    recorder: Recorder,
    name: str,
    tags: dict[str, str],
    children: list["ChildRun"],
    files: Iterable[Path] = (),
    experiment_tags: dict[str, str] | None = None,
) -> str:
    """A comparison of two sweeps (tracking/compare/): one run with its files as artifacts under
    `comparison/`, one child run per matched point, and the experiment tags that save its view in the
    UI. Returns the run's id. No run here carries a trial's `status`, `trial_key` or `sweep` tag, so
    no resume, report or cost model ever takes one for a trial."""
    parent = recorder.client.create_run(recorder.experiment_id, run_name=name, tags=tags).info.run_id
    if in_bulk(recorder.uri):
        _children_in_tables(recorder.uri, parent, children, int(time.time() * 1000))
    else:
        _children_through_server(recorder, parent, children)
    for path in files:
        recorder.client.log_artifact(parent, str(path), "comparison")
    for key, value in (experiment_tags or {}).items():
        recorder.client.set_experiment_tag(recorder.experiment_id, key, value)
    recorder.client.set_terminated(parent, "FINISHED")
    return parent


def _children_in_tables(uri: str, parent: str, children: list[ChildRun], now: int) -> None:
    """Every child in one transaction, as the rows MLflow's create_run, log_batch and set_terminated write: the
    full grid's 5,520 points in about two seconds, where three calls per child took over 100 s on SQLite. Each child's
    row in `runs` is its parent's with its own id, name, times and artifact folder, so a column a newer MLflow
    adds to `runs` is filled as MLflow filled the parent's."""
    with Tables(uri, write=True) as tables:
        template = tables.run_row(parent)
        runs, tags, params, metrics = [], [], [], []
        for child in children:
            run_id = uuid.uuid4().hex
            own = dict(run_uuid=run_id, name=child.name, status="FINISHED", start_time=now, end_time=now)
            runs.append({**template, **own, "artifact_uri": template["artifact_uri"].replace(parent, run_id)})
            named = {PARENT_TAG: parent, **child.tags, RUN_NAME_TAG: child.name}
            tags += [(key, str(value), run_id) for key, value in named.items()]
            params += [(key, value, run_id) for key, value in child.stored_params().items()]
            metrics += [(key, value, now, run_id, 0, False) for key, value in child.stored_metrics().items()]
        columns = list(template)
        tables.insert("runs", columns, [tuple(row[c] for c in columns) for row in runs])
        tables.insert("tags", ["key", "value", "run_uuid"], tags)
        tables.insert("params", ["key", "value", "run_uuid"], params)
        for table in ("metrics", "latest_metrics"):
            tables.insert(table, ["key", "value", "timestamp", "run_uuid", "step", "is_nan"], metrics)
        tables.commit()


def _children_through_server(recorder: Recorder, parent: str, children: list[ChildRun]) -> None:
    """Through a tracking server, several children at once (each is three calls)."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    client = recorder.client

    def send(child: ChildRun) -> None:
        tags = {PARENT_TAG: parent, **child.tags}
        run_id = client.create_run(recorder.experiment_id, run_name=child.name, tags=tags).info.run_id
        metrics = [Metric(k, v, now, 0) for k, v in child.stored_metrics().items()]
        params = [Param(k, v) for k, v in child.stored_params().items()]
        client.log_batch(run_id, metrics=metrics, params=params, synchronous=True)
        client.set_terminated(run_id, "FINISHED")

    with ThreadPoolExecutor(SERVER_THREADS) as pool:
        list(pool.map(send, children))
