"""Whether a URI holds an MLflow store yet, asked without making one. MLflow makes what it opens: a SQLite
file, a database's tables (printing "Creating initial MLflow database tables", and failing after it where the
user may not create them), a file store's .trash in whatever folder it is given (file:///etc included) and a
default experiment in a new one. A reader (the report, the comparison, the UI, the dry run's history) must
never make a store, and a writer must not make one in a folder of other files: both are asked here first.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from pathlib import Path

from tokengen.writable import unwritable
from tracking.store.postgres import engine_uri

DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy store; "+driver" allowed


def sqlite_path(uri: str) -> str | None:
    """The file of a sqlite:/// URI (relative to the current directory, as MLflow reads it), else None."""
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme.split("+", 1)[0] != "sqlite" or ":///" not in uri:
        return None
    return uri.split(":///", 1)[1].split("?", 1)[0]


def file_store_path(uri: str) -> str | None:
    """The folder of MLflow's file store a URI names (file:///PATH, or a bare path), else None."""
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme == "file":
        return urllib.request.url2pathname(parsed.path)
    return uri if not parsed.scheme else None


def is_file_store(folder: str) -> bool:
    """A folder MLflow's file store has opened: it makes .trash in every folder it is given."""
    return os.path.isdir(os.path.join(folder, ".trash"))


def file_store_problem(uri: str) -> str | None:
    """Why MLflow's file store must not be opened in the URI's folder, in one line, or None: a folder of other
    files that is not one (MLflow would put .trash and experiments among them), or one that cannot be written."""
    folder = file_store_path(uri)
    if folder is None:
        return None
    if os.path.isdir(folder) and not is_file_store(folder) and next(os.scandir(folder), None) is not None:
        return (
            f"tracking.uri={uri} is a folder of other files, not MLflow's file store (no .trash in it): "
            "give a new or empty folder, or use tracking.uri=sqlite:///mlflow.db"
        )
    why = unwritable(folder, folder=True)
    return f"cannot write tracking store {uri} ({why}): make it writable or fix tracking.uri" if why else None


def missing_store(uri: str) -> str | None:
    """Why the URI holds no MLflow store yet (no SQLite file, no MLflow tables in a database, a folder that is
    not a file store), or None where it holds one, or where MLflow alone can tell (a server; a database that
    cannot be asked, whose open then says why)."""
    path = sqlite_path(uri)
    if path is not None and not Path(path).is_file():
        return f"no file {path}"
    folder = file_store_path(uri)
    if folder is not None:
        return None if is_file_store(folder) else f"no MLflow file store in {folder}"
    if urllib.parse.urlsplit(uri).scheme.split("+", 1)[0] in DATABASE_SCHEMES and not _has_tables(uri):
        return "its database has no MLflow tables"
    return None


def _has_tables(uri: str) -> bool:
    """The database holds MLflow's experiments table (MLflow makes every table where it is missing); True where
    the database cannot be asked."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(engine_uri(uri), poolclass=sqlalchemy.pool.NullPool)
    try:
        return sqlalchemy.inspect(engine).has_table("experiments")
    except Exception:  # noqa: BLE001 - not a database, no driver, a refused login: MLflow's open says it in one line
        return True
    finally:
        engine.dispose()
