"""The report's comparison, written back onto each trial's MLflow run, so the MLflow UI can show it.

A report (tracking/report/) derives figures no trial can measure alone: its speedup over the
matching baseline and the interval around it, its runtime against transformers' generate(), its
token verdict; and the view's columns at four significant digits (`ui/speedup`, ...: the UI shows a metric
to its last digit). `write_back` puts them on the run of every trial the report used (into a database's
tables in one transaction where its schema is one the tests wrote into, tracking/store/tables.py; else, and
through a server, one `log_batch` per run, several at once), and marks
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

from tracking.store.runs import (  # noqa: F401 - the report's
    COLUMN_OF,
    DERIVED,
    DERIVED_METRICS,
    DERIVED_TAGS,
    REPORT_MARK,  # names, declared beside the flattener that drops them
    SHOWN,
    SHOWN_METRICS,
    SHOWN_PREFIX,
    is_derived,
    mark_of,
)
from tracking.store.search import search
from tracking.store.tables import Tables, in_bulk, writes_in_bulk


def view_filter(parent_id: str, sweep: str) -> str:
    """MLflow's search filter for the runs a sweep's report used (the UI's search box takes it too)."""
    return f"tags.`{mark_of(parent_id)}` = '{sweep}'"


def _same(wanted: dict, stored: dict) -> bool:
    """Whether the run already holds every wanted value (NaN equal to NaN)."""

    def equal(a, b) -> bool:
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))

    return all(name in stored and equal(value, stored[name]) for name, value in wanted.items())


def marked_runs(client, uri: str, experiment_id: str, parent_id: str) -> dict[str, tuple[dict, dict]]:
    """The runs an earlier build of this sweep's report marked: run id -> (its metrics, its tags)."""
    if in_bulk(uri):  # only the names a report writes: a trial's own hundred are not read
        marked = {mark_of(parent_id): None}
        with Tables(uri) as tables:
            tags = tables.tags(int(experiment_id), marked, (mark_of(parent_id), *DERIVED_TAGS))
            metrics = tables.metrics(int(experiment_id), marked, DERIVED_METRICS + SHOWN_METRICS)
        return {run: (metrics.get(run, {}), tags[run]) for run in tags}
    return {
        run.info.run_id: (run.data.metrics, run.data.tags)
        for run in search(client, experiment_id, f"tags.`{mark_of(parent_id)}` LIKE '%'")
    }


def write_back(
    client,
    uri: str,
    experiment_id: str,
    sweep: str,
    parent_id: str,
    figures: dict[str, tuple[dict[str, float], dict[str, str]]],
    threads: int = 8,
) -> int:
    """The derived figures (run id -> its metrics and tags, tracking.report.figures) and the sweep's mark on the run
    of every trial the report used; returns how many runs were written. A run that already holds exactly these
    figures (a rebuild with nothing new) is not written again."""
    mark = mark_of(parent_id)
    before = marked_runs(client, uri, experiment_id, parent_id)
    batches, stale_tags, used = [], [], set()
    for run_id, (metrics, tags) in figures.items():
        used.add(run_id)
        tags[mark] = sweep
        old = before.get(run_id)
        if old is not None:  # a figure the last build wrote and this one cannot: cleared, never left stale
            old_metrics, old_tags = old
            cleared = DERIVED_METRICS + SHOWN_METRICS
            metrics.update({n: math.nan for n in cleared if n in old_metrics and n not in metrics})
            stale = [(run_id, n) for n in DERIVED_TAGS if n in old_tags and n not in tags]
            stale_tags += stale
            if not stale and _same(metrics, old_metrics) and _same(tags, old_tags):
                continue  # a rebuild writes only what changed
        batches.append((run_id, metrics, tags))
    stale_tags += [(run_id, mark) for run_id in before if run_id not in used]
    if writes_in_bulk(uri):
        _write_tables(uri, batches, stale_tags, int(time.time() * 1000))
    else:
        _write_client(client, batches, stale_tags, threads)
    return len(batches)


def _write_tables(uri: str, batches: list, stale_tags: list, now: int) -> None:
    """Every run's figures in one transaction of a few statements, into the rows MLflow's own `log_batch` and
    `delete_tag` write (a metric's history row, its latest value, a tag): thousands of runs in a second, where
    one `log_batch` per run on a database takes minutes. MLflow stores a NaN as 0 marked is_nan."""

    def value(v: float) -> tuple[float, bool]:
        return (0.0, True) if math.isnan(v) else (float(v), False)

    metrics = [(name, *value(v), now, run_id) for run_id, named, _ in batches for name, v in named.items()]
    tags = [(name, text, run_id) for run_id, _, named in batches for name, text in named.items()]
    with Tables(uri, write=True) as tables:
        tables.write(
            "INSERT INTO metrics (key, value, is_nan, timestamp, run_uuid, step) VALUES (?, ?, ?, ?, ?, 0) "
            "ON CONFLICT DO NOTHING",
            metrics,
        )
        tables.write(
            "INSERT INTO latest_metrics (key, value, is_nan, timestamp, run_uuid, step) VALUES "
            "(?, ?, ?, ?, ?, 0) ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value, "
            "is_nan = excluded.is_nan, timestamp = excluded.timestamp, step = 0",
            metrics,
        )
        tables.write(
            "INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?) ON CONFLICT (key, run_uuid) DO UPDATE "
            "SET value = excluded.value",
            tags,
        )
        tables.write("DELETE FROM tags WHERE run_uuid = ? AND key = ?", stale_tags)
        tables.commit()


def _write_client(client, batches: list, stale_tags: list, threads: int) -> None:
    """One log_batch per run through MLflow's API (a tracking server, or a schema the tests never wrote into),
    several at once."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)

    def send(batch) -> None:
        run_id, metrics, tags = batch
        client.log_batch(
            run_id,
            metrics=[Metric(n, v, now, 0) for n, v in metrics.items()],
            tags=[RunTag(n, v) for n, v in tags.items()],
            synchronous=True,
        )

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(send, batches))
        list(pool.map(lambda item: client.delete_tag(*item), stale_tags))
