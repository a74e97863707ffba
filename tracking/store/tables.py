"""MLflow's own tables, read and written in bulk: a SQLite file through sqlite3, a PostgreSQL database through psycopg.
Four queries read a sweep of thousands of runs where MLflow's search builds an object per run, tag, param and
metric page by page; the columns read are those MLflow 3 has kept since its first database schema. Rows are
written by SQL (the report's figures, in one transaction) only into a schema the tests ran those writes against
(TESTED_SCHEMAS, the store's `alembic_version`); any other store is written through MLflow's API
(`writes_in_bulk` says which)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import urllib.parse

import pandas as pd

from tracking.store.connect import sqlite_path
from tracking.store.postgres import CONNECT_TIMEOUT_S, is_postgres, libpq_uri
from tracking.store.runs import flat_row


def read_only_sqlite(path: str) -> sqlite3.Connection:
    """A read-only connection on a SQLite store, opened by SQLite alone: no `open()` of the file outside SQLite,
    whose close would drop every POSIX lock this process holds on it (SQLite's included), so that the next process
    to close its connection would take itself for the last one and checkpoint and unlink `-wal` and `-shm` under
    a live driver. Where SQLite cannot open it read-only (a WAL store whose folder this reader may not write:
    read-only media, another user's folder), the store is read from a private copy that replays its `-wal`,
    or, with no `-wal`, as immutable."""
    quoted = urllib.parse.quote(os.path.abspath(path))
    connection = sqlite3.connect(f"file:{quoted}?mode=ro", uri=True, timeout=30)
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opening is lazy: the header is read here
        return connection
    except sqlite3.OperationalError:
        connection.close()
        if not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
            return _out_of_reach(path)
        raise


def _out_of_reach(path: str) -> sqlite3.Connection:
    """A WAL store in a folder this process may not write, where SQLite cannot make the `-shm` a reader needs."""
    wal = path + "-wal"
    if not (os.path.isfile(wal) and os.path.getsize(wal) > 0):
        quoted = urllib.parse.quote(os.path.abspath(path))
        return sqlite3.connect(f"file:{quoted}?mode=ro&immutable=1", uri=True, timeout=30)
    folder = tempfile.mkdtemp(prefix="tokengen-store-")  # this user's alone (0700)
    try:
        copy = os.path.join(folder, "store.db")
        shutil.copyfile(path, copy)  # this process holds no lock on the store: it could not open it
        shutil.copyfile(wal, f"{copy}-wal")
        snapshot = sqlite3.connect(":memory:")
        with contextlib.closing(sqlite3.connect(copy)) as replayed:  # replays the copied -wal
            replayed.backup(snapshot)
        return snapshot
    finally:
        shutil.rmtree(folder, ignore_errors=True)


WRITE_CACHE_KIB = 128 * 1024
TESTED_SCHEMAS = frozenset({"dc11669786a5"})
"""The revisions of MLflow's schema (alembic's, in the store's `alembic_version`) that tests/tracking wrote rows into
by SQL and read back through MLflow: MLflow 3.17's head. A newer MLflow may rename, add or constrain a column; its
store is written through the API until the tests have run against it and its revision is added here
(tests/tracking/test_schema_gate.py fails while the installed MLflow's is missing)."""


class UntestedSchema(RuntimeError):
    """Rows were about to be written by SQL into a schema no test wrote into."""


class Tables:
    """MLflow's own tables, read in bulk: four queries for a sweep of thousands of runs, where MLflow's search
    builds an object per run, tag, param and metric page by page. A SQLite file (sqlite3, `mode=ro`) or a
    PostgreSQL database (psycopg, a read-only session); the columns read are those MLflow 3 has kept since its
    first database schema. Written only where the schema is one the tests wrote into (`write`)."""

    def __init__(self, uri: str, write: bool = False):
        """Read only, unless `write` (tracking/store/derived.py's figures, in one transaction: `commit`), which only
        a schema in TESTED_SCHEMAS allows (UntestedSchema otherwise)."""
        path = sqlite_path(uri)
        if path is not None:
            if write:
                self.connection = sqlite3.connect(os.path.abspath(path), timeout=30)
                # this connection's page cache (the default 2 MB): thousands of rows land in random index pages
                self.connection.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")
            else:
                self.connection = read_only_sqlite(path)
            self.mark = "?"
        else:
            import psycopg

            self.connection = psycopg.connect(libpq_uri(uri), connect_timeout=CONNECT_TIMEOUT_S, autocommit=not write)
            self.connection.read_only, self.mark = not write, "%s"
        self.sqlite = path is not None
        if write and (found := self.revision()) not in TESTED_SCHEMAS:
            self.connection.close()
            raise UntestedSchema(f"MLflow schema {found} is not one whose tables were tested: write through the API")

    def revision(self) -> str | None:
        """The store's schema revision (its `alembic_version`), None where it has none (MLflow never opened it)."""
        if "version_num" not in self.columns("alembic_version"):
            return None
        found = self.rows("SELECT version_num FROM alembic_version")
        return found[0][0] if found else None

    def write(self, sql: str, rows: list[tuple]) -> None:
        if rows:
            if self.sqlite:
                self.connection.executemany(sql, rows)
            else:
                self.connection.cursor().executemany(sql.replace("?", self.mark), rows)

    def commit(self) -> None:
        self.connection.commit()

    def __enter__(self) -> "Tables":
        return self

    def __exit__(self, *_) -> None:
        self.connection.close()

    def rows(self, sql: str, args=()) -> list[tuple]:
        return self.connection.execute(sql.replace("?", self.mark), tuple(args)).fetchall()

    def columns(self, table: str) -> set[str]:
        if self.sqlite:
            return {row[1] for row in self.rows(f"PRAGMA table_info({table})")}
        return {
            row[0]
            for row in self.rows(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "AND table_schema = current_schema()",
                [table],
            )
        }

    def experiment_id(self, name: str):
        """The active experiment's id, or None (a store MLflow never opened has no experiments table)."""
        columns = self.columns("experiments")
        if not columns:
            return None
        where, args = "name = ? AND lifecycle_stage = 'active'", [name]
        if "workspace" in columns:
            where += " AND workspace = ?"
            args.append(os.environ.get("MLFLOW_WORKSPACE", "default"))
        found = self.rows(f"SELECT experiment_id FROM experiments WHERE {where}", args)
        return found[0][0] if found else None

    def _chosen(self, experiment_id, tags: dict) -> tuple[str, list]:
        """The active runs of the experiment with every tag given (a value, or None: present and not empty), found
        from the first tag's rows (MLflow's key on `tags` leads with the key), not by scanning every run of the
        experiment: a store may hold thousands of runs that are no sweep's (an older comparison's child run per
        point: at the full grid's size a few comparisons made every read of a sweep a third slower)."""

        def has(alias: str, key: str, value) -> tuple[str, list]:
            if value is None:
                return f"{alias}.key = ? AND {alias}.value <> ''", [key]
            return f"{alias}.key = ? AND {alias}.value = ?", [key, value]

        (first, value), *others = tags.items()
        where, args = has("d", first, value)
        sql = f"SELECT d.run_uuid FROM tags d JOIN runs r ON r.run_uuid = d.run_uuid WHERE {where}"
        sql += " AND r.experiment_id = ? AND r.lifecycle_stage = 'active'"
        args.append(experiment_id)
        for key, value in others:
            where, more = has("t", key, value)
            sql += f" AND EXISTS (SELECT 1 FROM tags t WHERE t.run_uuid = r.run_uuid AND {where})"
            args += more
        return sql, args

    def _named(self, experiment_id, tags: dict, keys) -> tuple[str, list]:
        """The chosen runs (_chosen), and of their rows only those named `keys` where given."""
        chosen, args = self._chosen(experiment_id, tags)
        if keys is None:
            return f"run_uuid IN ({chosen})", args
        return f"run_uuid IN ({chosen}) AND key IN ({', '.join('?' * len(keys))})", [*args, *keys]

    def tags(self, experiment_id, tags: dict, keys=None) -> dict[str, dict]:
        """Run id -> its tags (those named `keys`, or all), for the runs with every tag given."""
        where, args = self._named(experiment_id, tags, keys)
        found: dict[str, dict] = {}
        for run, key, value in self.rows(f"SELECT run_uuid, key, value FROM tags WHERE {where}", args):
            found.setdefault(run, {})[key] = value
        return found

    def metrics(self, experiment_id, tags: dict, keys=None) -> dict[str, dict]:
        """Run id -> its latest metrics (those named `keys`, or all; NaN where MLflow marks one), for the runs with
        every tag given."""
        where, args = self._named(experiment_id, tags, keys)
        found: dict[str, dict] = {}
        for run, key, value, is_nan in self.rows(
            f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE {where}", args
        ):
            found.setdefault(run, {})[key] = float("nan") if is_nan else value
        return found

    def runs(self, experiment_id, tags: dict) -> pd.DataFrame:
        """The runs with every tag given, as flat rows (tracking/store/runs.py), oldest first."""
        chosen, args = self._chosen(experiment_id, tags)
        runs = {
            run: (status, start, uri)
            for run, status, start, uri in self.rows(
                f"SELECT run_uuid, status, start_time, artifact_uri FROM runs WHERE run_uuid IN ({chosen}) "
                "ORDER BY start_time",
                args,
            )
        }
        parts: dict[str, dict] = {name: {run: {} for run in runs} for name in ("tags", "metrics", "params")}
        for table in ("tags", "params"):
            for run, key, value in self.rows(
                f"SELECT run_uuid, key, value FROM {table} WHERE run_uuid IN ({chosen})", args
            ):
                parts[table][run][key] = value
        for run, key, value, is_nan in self.rows(
            f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({chosen})", args
        ):
            parts["metrics"][run][key] = float("nan") if is_nan else value
        return pd.DataFrame(
            [
                flat_row(run, *info, parts["tags"][run], parts["metrics"][run], parts["params"][run])
                for run, info in runs.items()
            ]
        )


def in_bulk(uri: str) -> bool:
    """Whether the store's tables can be read directly (a SQLite file or a PostgreSQL database)."""
    return sqlite_path(uri) is not None or is_postgres(uri)


def writes_in_bulk(uri: str) -> bool:
    """Whether rows may be written into the store's tables by SQL: a database (never a server, reached over HTTP
    alone) whose schema revision is one the tests wrote into (TESTED_SCHEMAS); else MLflow's API writes them."""
    if not in_bulk(uri):
        return False
    with Tables(uri) as tables:
        return tables.revision() in TESTED_SCHEMAS
