"""A quiet terminal: a sweep shows the project's own lines; Ray's and MLflow's routine ones go to a file.

`.sweeps/logs/<experiment>/<sweep>.log` under the directory the sweep runs from (beside its journal,
sweeps/delivery/journal.py) takes what the `ray` logger says on the driver (starting a local Ray, the token
authentication notice, the code packages it ships) and MLflow's database set-up (`mlflow.store.db.utils`,
alembic's migrations). Ray's errors still reach the terminal as well; the store's (a write SQLAlchemy
refused, its traceback) only the file, after which the driver says it in one line that names the file. Workers' output is not forwarded to
the driver at all (`log_to_driver=False` in sweeps/execution/schedule.py): each trial's log is an artifact of
its run. RAY_AUTH_MODE is left alone: setting it would silence Ray's notice but change how the
driver authenticates to a cluster it joins.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from tokengen.contract.names import path_component

LOG_ROOT = Path(".sweeps") / "logs"
ROUTINE = ("ray", "mlflow.store.db.utils", "alembic", "tracking.store")
"""Loggers whose INFO and WARNING lines are routine on a sweep's terminal."""
STORE_LOGGERS = ("mlflow.store.db.utils", "alembic", "tracking.store")
"""Their errors too go to the file only: a failed store write is the driver's own one line, naming the file."""
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Terminal(logging.StreamHandler):
    """stderr as it is when a line is written (a test or a caller may have redirected it since)."""

    def __init__(self, level: int):
        super().__init__()
        self.setLevel(level)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _FileOnFirstLine(logging.FileHandler):
    """The log file and its folder are made by the first line written: a sweep refused before
    anything is logged leaves nothing behind; one that cannot write it loses the lines, not the sweep."""

    def __init__(self, path: Path):
        super().__init__(path, delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record) -> None:
        pass


def log_path(experiment: str, sweep: str, root: Path | None = None) -> Path:
    root = Path.cwd() if root is None else root
    return root / LOG_ROOT / path_component(experiment) / f"{path_component(sweep)}.log"


def _ours(handler: logging.Handler) -> bool:
    return getattr(handler, "_tokengen_sweep", False)


def quiet_terminal(experiment: str, sweep: str, root: Path | None = None) -> Path:
    """Send the routine loggers to the sweep's log file, errors to the terminal too; returns the file
    (made by its first line)."""
    import ray  # noqa: F401 - imported first: on import Ray sets its own handlers on `ray`

    from tracking.store.connect import load_mlflow

    load_mlflow()  # and MLflow on its loggers

    path = log_path(experiment, sweep, root)
    to_file = _FileOnFirstLine(path)
    to_file.setFormatter(logging.Formatter(FORMAT))
    to_terminal = _Terminal(logging.ERROR)
    to_terminal.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    for handler in (to_file, to_terminal):
        handler._tokengen_sweep = True
    for name in ROUTINE:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            if _ours(handler):  # an earlier sweep of this process
                handler.close()
        logger.addHandler(to_file)
        if name not in STORE_LOGGERS:
            logger.addHandler(to_terminal)
        logger.propagate = False
        if name != "ray":  # MLflow sets these to WARNING on import; the file takes their INFO lines
            logger.setLevel(logging.INFO)
    return path
