"""`python -m tracking.store.backup --uri sqlite:///mlflow.db DEST`: a SQLite store copied whole, into one file.

A store is copied through SQLite's backup API, which reads what is committed (its `-wal` included) under
SQLite's own locks. Copying the file itself leaves the `-wal` behind, so a store whose driver was killed copies
as an empty one, and in a process that holds SQLite's locks on the file, an `open()` and close of it outside
SQLite drops them (tracking/store/tables.py). The copy is a rollback-journal database: one file, whole, to pack or move.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
from pathlib import Path

from tracking.store.connect import TrackingError, sqlite_path
from tracking.store.tables import read_only_sqlite


def copy_store(uri: str, destination: str | Path) -> Path:
    """The store of `uri` (a SQLite file) copied to `destination`, a new file; TrackingError in one line."""
    path = sqlite_path(uri)
    if path is None:
        raise TrackingError(f"--uri {uri} is not a SQLite store: a database server's store is copied by its own tools")
    if not Path(path).is_file():
        raise TrackingError(f"--uri {uri}: no such file {path}")
    destination = Path(destination)
    if destination.exists():
        raise TrackingError(f"{destination} exists: give a new path (a copy never overwrites)")
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(read_only_sqlite(path)) as source, contextlib.closing(sqlite3.connect(partial)) as copy:
            source.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one file: no -wal to leave behind
        os.replace(partial, destination)
    except (OSError, sqlite3.Error) as exc:
        partial.unlink(missing_ok=True)
        raise TrackingError(f"cannot copy {path} to {destination} ({exc}): fix the path") from None
    return destination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.store.backup", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="sqlite:///mlflow.db", help="the store to copy (default: %(default)s)")
    parser.add_argument("destination", help="the copy's file (new)")
    args = parser.parse_args(argv)
    try:
        copied = copy_store(args.uri, args.destination)
    except TrackingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"copied {args.uri} to {copied}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
