"""The store's finished trials, read without writing a byte: the history a sweep is priced from.

A SQLite store is opened by sqlite3 in read-only mode (`mode=ro`): a missing file is an empty history
and stays missing, nothing MLflow would do on opening (create tables, a default experiment, an
artifact folder) happens, and MLflow itself is not imported (seconds on a busy host); the writes are
SQLite's own: the recovery of a rollback journal a killed writer left beside an older store
(_read_after_rollback), and the empty -wal and -shm its read-only connection creates beside a WAL store
(the Recorder's: connect.write_ahead) whose writer closed it. A PostgreSQL
database is read the same way (`Tables`, through psycopg); a tracking server through
`MlflowClient.search_runs` alone. The report, compare and resume's index read a database's runs
through `Tables` too.

Both give tracking/store/runs.py's flat rows (tags, then metrics, then params, typed; the spec's defaults
filled in): one row per finished child run of the experiment, whichever sweep ran it. Resume skips
every such key; the cost model (sweeps/pricing/) drops runs whose `measurement` is not ok.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tokengen.contract.names import FINISHED, STATUS, TRIAL_KEY
from tokengen.contract.record import first_line
from tokengen.measure.interference import OK
from tracking.store.connect import TrackingError, check_reachable, check_uri, sqlite_path
from tracking.store.postgres import engine_uri, is_postgres
from tracking.store.presence import file_store_path, is_file_store
from tracking.store.runs import PARENT_TAG, flat_row
from tracking.store.search import search
from tracking.store.tables import Tables

TRUSTED_MEASUREMENT = (OK,)  # the `measurement` tag, where a run has one


class StoreReadError(RuntimeError):
    """The store cannot be read: one line that names the fix."""


@dataclass
class History:
    frame: pd.DataFrame  # finished child runs, flat
    source: str  # how it was read, for the plan's header
    missing: bool = False  # a SQLite file that does not exist (left uncreated)
    notes: list[str] = field(default_factory=list)

    @property
    def finished_keys(self) -> set[str]:
        if self.frame.empty or TRIAL_KEY not in self.frame:
            return set()
        return {k for k in self.frame[TRIAL_KEY] if isinstance(k, str)}

    def trusted(self) -> pd.DataFrame:
        """The runs a fit may learn from: measured ok where a run carries a `measurement` tag."""
        if self.frame.empty or "measurement" not in self.frame:
            return self.frame
        tag = self.frame["measurement"]
        return self.frame[tag.isna() | tag.astype(str).str.lower().isin(TRUSTED_MEASUREMENT)]


def _read_tables(uri: str, experiment: str) -> pd.DataFrame:
    with Tables(uri) as tables:
        found = tables.experiment_id(experiment)
        if found is None:
            return pd.DataFrame()
        return tables.runs(found, {STATUS: FINISHED, PARENT_TAG: None})


def _read_mlflow(uri: str, experiment: str) -> pd.DataFrame:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=engine_uri(uri))
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return pd.DataFrame()
    runs = [
        r for r in search(client, found.experiment_id, f"tags.{STATUS} = '{FINISHED}'") if PARENT_TAG in r.data.tags
    ]
    return pd.DataFrame(
        [
            flat_row(
                r.info.run_id,
                r.info.status,
                r.info.start_time,
                r.info.artifact_uri,
                r.data.tags,
                r.data.metrics,
                r.data.params,
            )
            for r in runs
        ]
    )


def _read_after_rollback(uri: str, path: str, experiment: str) -> pd.DataFrame:
    """A writer killed mid-transaction leaves a hot rollback journal (`<file>-journal`) that a read-only
    connection may not roll back ("attempt to write a readonly database"): one connection that may write
    rolls it back, as SQLite does for any writer, and the store is read only again; where even that fails,
    the line names the journal and who can recover it."""
    try:
        connection = sqlite3.connect(os.path.abspath(path), timeout=20)
        try:
            connection.execute("PRAGMA schema_version").fetchone()  # any read by a writer rolls the journal back
        finally:
            connection.close()
        return _read_tables(uri, experiment)
    except sqlite3.Error as exc:
        raise StoreReadError(
            f"tracking store {uri} has a rollback journal {path}-journal left by a writer that was "
            f"killed, and it cannot be rolled back here ({exc}): open the store once as a user who "
            f"may write {os.path.dirname(os.path.abspath(path))}, e.g. sqlite3 {path} "
            "'PRAGMA integrity_check'"
        ) from None


def load_history(uri: str, experiment: str) -> History:
    """Every finished child run of the experiment, read only; StoreReadError if the store cannot be read."""
    path = sqlite_path(uri)
    if path is not None:
        if not Path(path).is_file():
            return History(pd.DataFrame(), f"{uri} (no such file: an empty history, the file left uncreated)", True)
        try:
            frame = _read_tables(uri, experiment)
        except sqlite3.Error as exc:
            if not Path(path + "-journal").is_file():
                raise StoreReadError(f"cannot read tracking store {uri} ({exc}): fix tracking.uri") from None
            frame = _read_after_rollback(uri, path, experiment)
        return History(frame, f"{uri}, read only")
    try:
        check_uri(uri)
        if file_store_path(uri) is not None and not is_file_store(file_store_path(uri)):  # MLflow would make it
            return History(pd.DataFrame(), f"{uri} (no file store yet: an empty history, the folder left unmade)", True)
        check_reachable(uri)
        frame = _read_tables(uri, experiment) if is_postgres(uri) else _read_mlflow(uri, experiment)
    except TrackingError as exc:
        raise StoreReadError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
        raise StoreReadError(f"cannot read tracking store {uri} ({first_line(exc)}): fix tracking.uri") from None
    return History(frame, f"{uri}, searched (read only)")
