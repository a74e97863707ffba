"""Rows go into MLflow's tables by SQL only where the store's schema is one the tests wrote into
(tracking/store/tables.py TESTED_SCHEMAS, its `alembic_version`); any other store takes the report's figures through
MLflow's API, and the two paths leave the same runs behind. A newer MLflow is played by a copied store whose
`alembic_version` names a revision no test ran against, with MLflow told that revision is its own."""

from __future__ import annotations

import copy
import math
import sqlite3

import pytest
from compare_helpers import Store
from mlflow import MlflowClient
from servers import migrated_store

from tracking.store import derived
from tracking.store.tables import TESTED_SCHEMAS, Tables, UntestedSchema, writes_in_bulk

NEWER = "feedfacecafe"  # a revision no test wrote into


def test_the_installed_mlflows_schema_is_one_the_tests_ran_against():
    """The revision MLflow migrates a new store to: a new MLflow fails here until its tables are tested and named."""
    with sqlite3.connect(migrated_store()) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    assert revision in TESTED_SCHEMAS


@pytest.fixture
def two_stores(tmp_path, monkeypatch):
    """One sweep of four trials, and its store copied with the copy's schema a newer MLflow's."""
    store = Store(tmp_path / "tested")
    parent = store.sweep("s")
    runs = [
        store.trial(v, 0.5 + i / 10, seed=i, batch=b)
        for i, (v, b) in enumerate([("baseline", 2), ("kv_cache", 2), ("baseline", 4), ("kv_cache", 4)])
    ]
    newer = tmp_path / "newer"
    newer.mkdir()
    with (
        sqlite3.connect(store.uri.removeprefix("sqlite:///")) as source,
        sqlite3.connect(newer / "mlflow.db") as copied,
    ):
        source.backup(copied)  # its -wal's pages too
        copied.execute("UPDATE alembic_version SET version_num = ?", [NEWER])
    import mlflow.store.db.utils

    monkeypatch.setattr(mlflow.store.db.utils, "_get_latest_schema_revision", lambda: NEWER)  # the newer MLflow's
    return store.uri, f"sqlite:///{newer / 'mlflow.db'}", parent, runs


def written(uri: str, parent: str, runs: list[str], figures: dict, monkeypatch) -> str:
    """write_back on the store, and which path took it: `sql` or `api`."""
    taken = []
    for name, path in (("_write_tables", "sql"), ("_write_client", "api")):
        real = getattr(derived, name)
        monkeypatch.setattr(derived, name, lambda *a, real=real, path=path: (taken.append(path), real(*a))[1])
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen").experiment_id
    derived.write_back(client, uri, experiment, "s", parent, copy.deepcopy(figures))
    monkeypatch.undo()
    return "".join(taken)


def stored(uri: str, runs: list[str]) -> dict:
    """Each run's report figures as MLflow reads them: metrics (NaN as a string, to compare), their histories, tags."""
    client = MlflowClient(tracking_uri=uri)
    found = {}
    for run in runs:
        data = client.get_run(run).data
        metrics = {k: "nan" if math.isnan(v) else v for k, v in data.metrics.items() if derived.is_derived(k)}
        history = {k: len(client.get_metric_history(run, k)) for k in metrics}
        tags = {k: v for k, v in data.tags.items() if derived.is_derived(k) or k.startswith(derived.REPORT_MARK)}
        found[run] = (metrics, history, tags)
    return found


def test_the_api_writes_what_sql_writes_where_the_schema_is_untested(two_stores, monkeypatch):
    tested, newer, parent, runs = two_stores
    first = {
        run: ({"speedup": 1.0 + i, "speedup_low": 0.9 + i, "ui/speedup": 1.0 + i}, {"compared": "run"})
        for i, run in enumerate(runs)
    }
    first[runs[1]][1]["tokens_verdict"] = "ok"
    again = copy.deepcopy(first)  # a rebuild: a figure and a verdict become unknown, a run leaves the report
    del again[runs[1]][0]["speedup_low"], again[runs[1]][1]["tokens_verdict"], again[runs[3]]
    import mlflow.store.db.utils

    for figures in (first, again):
        monkeypatch.setattr(mlflow.store.db.utils, "_get_latest_schema_revision", lambda: NEWER)
        assert written(newer, parent, runs, figures, monkeypatch) == "api"
        assert written(tested, parent, runs, figures, monkeypatch) == "sql"
        assert stored(newer, runs) == stored(tested, runs)
    metrics, history, tags = stored(tested, runs)[runs[1]]
    assert metrics["speedup_low"] == "nan" and history["speedup_low"] == 2 and "tokens_verdict" not in tags
    assert derived.mark_of(parent) not in stored(tested, runs)[runs[3]][2]  # the report no longer uses it


def test_no_row_is_written_by_sql_into_an_untested_schema(two_stores):
    tested, newer, _, _ = two_stores
    assert writes_in_bulk(tested) and not writes_in_bulk(newer)
    assert not writes_in_bulk("http://127.0.0.1:5000")  # a server: its API alone
    with pytest.raises(UntestedSchema, match=NEWER):
        Tables(newer, write=True)
    with Tables(newer) as tables:  # reading in bulk stays
        assert tables.revision() == NEWER and tables.experiment_id("tokengen") is not None
