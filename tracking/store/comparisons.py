"""A comparison of two sweeps written to the store: one run with its files, one child run per matched point."""

from __future__ import annotations

import dataclasses
import time

from tracking.store.connect import failing_fast
from tracking.store.recorder import Recorder
from tracking.store.runs import MAX_PARAM_CHARS, metric_value


@dataclasses.dataclass
class ChildRun:
    """One child run of a run that is not a sweep's (a comparison's matched point), as the UI shows it."""

    name: str
    params: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    tags: dict = dataclasses.field(default_factory=dict)


@failing_fast
def record_comparison(
    recorder: Recorder,
    name: str,
    tags: dict[str, str],
    children: list["ChildRun"],
    files: list = (),
    experiment_tags: dict[str, str] | None = None,
) -> str:
    """A comparison of two sweeps (tracking/compare/): one run with its files as artifacts under
    `comparison/`, one child run per matched point, and the experiment tags that save its view in the
    UI. Returns the run's id. No run here carries a trial's `status`, `trial_key` or `sweep` tag, so
    no resume, report or cost model ever takes one for a trial."""
    from mlflow.entities import Metric, Param

    parent = recorder.client.create_run(recorder.experiment_id, run_name=name, tags=tags).info.run_id
    now = int(time.time() * 1000)
    for child in children:
        run_id = recorder.client.create_run(
            recorder.experiment_id, run_name=child.name, tags={"mlflow.parentRunId": parent, **child.tags}
        ).info.run_id
        metrics = [Metric(k, v, now, 0) for k, value in child.metrics.items() if (v := metric_value(value)) is not None]
        params = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in child.params.items()]
        recorder.client.log_batch(run_id, metrics=metrics, params=params, synchronous=True)
        recorder.client.set_terminated(run_id, "FINISHED")
    for path in files:
        recorder.client.log_artifact(parent, str(path), "comparison")
    for key, value in (experiment_tags or {}).items():
        recorder.client.set_experiment_tag(recorder.experiment_id, key, value)
    recorder.client.set_terminated(parent, "FINISHED")
    return parent
