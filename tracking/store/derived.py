"""The report's comparison, written back onto each trial's MLflow run, so the MLflow UI can show it.

A report (tracking/report/) derives figures no trial can measure alone: its speedup over the
matching baseline and the interval around it, its runtime against transformers' generate(), its
token verdict. `write_back` puts them on the run of every trial the report used (one `log_batch`
per run: a few hundred runs over HTTP are a few hundred calls, not one per figure), and marks
those runs with the tag `in_report.<parent run id>`, which the sweep's view in the UI filters on:
the trials the report used, reused ones from other sweeps included, and not the runs a retry
replaced. A rebuilt report writes the figures that changed (a metric's latest value is what the UI
shows); a figure that became unknown is cleared (NaN for a metric, the tag deleted), and a run the
report no longer uses loses its mark.

These names are the report's, never a trial's: the flattener (tracking/store/runs.py) ignores them when
it loads runs, so a report is always computed afresh and results.csv never carries an old copy.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

from tracking.store.connect import is_server
from tracking.store.search import search

DERIVED_METRICS = ("speedup", "speedup_low", "speedup_high", "vs_generate")
DERIVED_TAGS = ("tokens_verdict", "baseline_run_id", "compared")
"""`measurement` is shown beside them in the UI, but it is the trial's own tag (its record), never derived."""
DERIVED = DERIVED_METRICS + DERIVED_TAGS
"""Every name the report writes on a trial's run; the reader drops them."""
REPORT_MARK = "in_report."
"""Tag prefix: `in_report.<parent run id>` = the sweep's name, on each run that sweep's report used."""
COLUMN_OF = {"tokens_verdict": "tokens"}
"""A derived tag whose column in the report's frame has another name."""


def is_derived(name: str) -> bool:
    return name in DERIVED or name.startswith(REPORT_MARK)


def mark_of(parent_id: str) -> str:
    return REPORT_MARK + parent_id


def view_filter(parent_id: str, sweep: str) -> str:
    """MLflow's search filter for the runs a sweep's report used (the UI's search box takes it too)."""
    return f"tags.`{mark_of(parent_id)}` = '{sweep}'"


def _same(wanted: dict, stored: dict) -> bool:
    """Whether the run already holds every wanted value (NaN equal to NaN)."""
    def equal(a, b) -> bool:
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return all(name in stored and equal(value, stored[name]) for name, value in wanted.items())


def marked_runs(client, experiment_id: str, parent_id: str) -> dict[str, object]:
    """The runs an earlier build of this sweep's report marked, by id."""
    return {run.info.run_id: run for run in search(client, experiment_id, f"tags.`{mark_of(parent_id)}` LIKE '%'")}


def write_back(client, uri: str, experiment_id: str, sweep: str, parent_id: str,
               figures: dict[str, tuple[dict[str, float], dict[str, str]]], threads: int = 8) -> int:
    """The derived figures (run id -> its metrics and tags, tracking.report.figures) and the sweep's mark on the run of every trial the report used; returns
    how many runs were written. One log_batch per run, several at once on a tracking server; a run
    that already holds exactly these figures (a rebuild with nothing new) is not written again."""
    from mlflow.entities import Metric, RunTag

    mark = mark_of(parent_id)
    before = marked_runs(client, experiment_id, parent_id)
    now = int(time.time() * 1000)
    batches, stale_tags, used = [], [], set()
    for run_id, (metrics, tags) in figures.items():
        used.add(run_id)
        tags[mark] = sweep
        old = before.get(run_id)
        if old is not None:  # a figure the last build wrote and this one cannot: cleared, never left stale
            metrics.update({n: math.nan for n in DERIVED_METRICS if n in old.data.metrics and n not in metrics})
            stale = [(run_id, n) for n in DERIVED_TAGS if n in old.data.tags and n not in tags]
            stale_tags += stale
            if not stale and _same(metrics, old.data.metrics) and _same(tags, old.data.tags):
                continue  # a rebuild writes only what changed
        batch_metrics = [Metric(name, value, now, 0) for name, value in metrics.items()]
        batch_tags = [RunTag(name, value) for name, value in tags.items()]
        batches.append((run_id, batch_metrics, batch_tags))
    stale_tags += [(run_id, mark) for run_id in before if run_id not in used]

    def send(batch) -> None:
        run_id, metrics, tags = batch
        client.log_batch(run_id, metrics=metrics, tags=tags, synchronous=True)

    workers = threads if is_server(uri) else 1  # one SQLite file takes one writer at a time anyway
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(send, batches))
        list(pool.map(lambda item: client.delete_tag(*item), stale_tags))
    return len(batches)
