"""Where a SQLite store's artifacts live: in `mlartifacts/` beside the store's file, wherever the sweep ran.

MLflow writes an experiment's artifact location as an absolute path when the experiment is made (by
default the `mlruns/` of that process's working directory), so a second driver started elsewhere
writes beside the first one's folder, and a store copied to another machine (the GPU sweep's returned
store) looks for its artifacts at a path that is gone. Experiments this project makes live at
`<store dir>/mlartifacts/<experiment>`; `relocate` points a moved or copied store's experiments and
runs at the `mlartifacts/` beside it, where their folders are.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tokengen.contract.names import path_component

FOLDER = "mlartifacts"
SQLITE = "sqlite:///"


def store_file(uri: str) -> Path | None:
    return Path(uri.removeprefix(SQLITE)).resolve() if uri.startswith(SQLITE) else None


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment's artifacts go: beside a SQLite store's file; None (MLflow's choice) elsewhere."""
    db = store_file(uri)
    return None if db is None else str(db.parent / FOLDER / path_component(experiment))


def relocate(uri: str) -> int:
    """Point each experiment of a SQLite store whose artifact folder lies in the `mlartifacts/` beside
    the store's file, but is recorded elsewhere, at that folder (its runs too). How many it moved."""
    db = store_file(uri)
    if db is None or not db.is_file() or not (db.parent / FOLDER).is_dir():
        return 0
    moved = 0
    with sqlite3.connect(db, timeout=30) as connection:
        rows = connection.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        for experiment_id, location in rows:
            old = _local_path(location)
            if old is None:
                continue
            new = db.parent / FOLDER / Path(old).name
            if str(new) == old or not new.is_dir():
                continue
            connection.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (str(new), experiment_id)
            )
            for prefix in (old, "file://" + old):
                target = str(new) if prefix == old else "file://" + str(new)
                connection.execute(
                    "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                    "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                    (target, len(prefix) + 1, experiment_id, len(prefix), prefix),
                )
            moved += 1
    return moved


def _local_path(location: str | None) -> str | None:
    if not location or "://" in location and not location.startswith("file://"):
        return None
    return location.removeprefix("file://")
