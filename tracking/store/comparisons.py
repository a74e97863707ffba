"""A comparison of two sweeps written to the store through MLflow's own API: one run, its figures as metrics, its files
(the tables, the per-point CSV, the plot) as artifacts. No run per matched point: the full grid's 5,520 would be
5,520 runs in the experiment per comparison, and every later read of the experiment pays for them. A store that
holds an older comparison's child runs keeps them, still read as runs that are no sweep's trials."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path

from tracking.store.connect import failing_fast
from tracking.store.recorder import Recorder
from tracking.store.runs import metric_value

ARTIFACT_FOLDER = "comparison"
MAX_BATCH = 1000  # MLflow's limit on the metrics of one log_batch
NOT_IN_A_NAME = re.compile(r"[^\w\-. /]")  # what MLflow refuses in a metric's name


def metric_name(name: str) -> str:
    """`ratio_geomean/kv_cache`, with anything MLflow refuses in a metric's name made `_`."""
    return NOT_IN_A_NAME.sub("_", name)


@failing_fast
def record_comparison(
    recorder: Recorder, name: str, tags: dict[str, str], metrics: dict[str, float], files: Iterable[Path] = ()
) -> str:
    """A comparison of two sweeps (tracking/compare/): one run named `name` with `tags`, `metrics` (those MLflow can
    hold: finite numbers) and its files as artifacts under `comparison/`; its id. It carries no trial's `status`,
    `trial_key` or `sweep` tag, so no resume, report or cost model ever takes it for a trial."""
    from mlflow.entities import Metric

    client = recorder.client
    run_id = client.create_run(recorder.experiment_id, run_name=name, tags=tags).info.run_id
    now = int(time.time() * 1000)
    stored = [
        Metric(metric_name(k), v, now, 0) for k, value in metrics.items() if (v := metric_value(value)) is not None
    ]
    for start in range(0, len(stored), MAX_BATCH):
        client.log_batch(run_id, metrics=stored[start : start + MAX_BATCH], synchronous=True)
    for path in files:
        client.log_artifact(run_id, str(path), ARTIFACT_FOLDER)
    client.set_terminated(run_id, "FINISHED")
    return run_id
