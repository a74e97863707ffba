"""Connecting to a tracking store and checking it: every way a URI can be wrong (an unknown scheme,
a secret in it, a server that is down, missing or wrong credentials, a SQLite file on a network
filesystem) said in one line before any trial runs, and a client that gives up on a dead server in
about a second instead of MLflow's minutes of retries (the driver's journal keeps what it could not send).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tokengen.contract.record import first_line
from tracking.store.artifact_root import relocate
from tracking.store.credentials import CREDENTIALS, SERVER_SCHEMES, credentials_problem, redacted
from tracking.store.postgres import engine_uri, is_postgres, one_opener, postgres_problem
from tracking.store.presence import DATABASE_SCHEMES, file_store_problem, sqlite_path


class TrackingError(RuntimeError):
    """The tracking store cannot be reached or written: said in one line, before any trial runs."""


FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"
FAIL_FAST_HTTP = {  # MLflow's default: 7 retries with exponential back-off, minutes per call
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


def is_server(uri: str) -> bool:
    return urllib.parse.urlparse(uri).scheme in SERVER_SCHEMES


def check_credentials(uri: str, option: str = "tracking.uri=") -> None:
    """Refuse a URI that carries a secret in any part, or a server's URI that carries a user, in one line that
    names the variable to use instead (tracking/store/credentials.py); `option`: `tracking.uri=` or `--uri `."""
    problem = credentials_problem(uri, option)
    if problem:
        raise TrackingError(problem)


def check_uri(uri: str) -> None:
    """Refuse a URI MLflow would misread, before anything is created: one line that names the fix
    (and never the secret a URI may carry)."""
    check_credentials(uri)
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+", 1)[0]
    if scheme in SERVER_SCHEMES + DATABASE_SCHEMES:
        return
    if scheme in ("file", ""):
        if os.environ.get(FILE_STORE_OPT_IN, "").lower() not in ("1", "true"):
            raise TrackingError(
                f"tracking.uri={uri} is MLflow's file store, which MLflow 3 refuses without "
                f"{FILE_STORE_OPT_IN}=true: use tracking.uri=sqlite:///mlflow.db"
            )
        problem = file_store_problem(uri)
        if problem:
            raise TrackingError(problem)
        return
    raise TrackingError(
        f"tracking.uri={uri} has scheme {scheme!r}, which MLflow cannot store runs in: use "
        "sqlite:///PATH, http(s)://HOST:PORT (a tracking server) or postgresql:// / mysql://"
    )


def _get(url: str, timeout_s: float, headers: dict | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read()


def server_answers(uri: str, timeout_s: float = 2.0) -> bool:
    """The server's health endpoint answers (no credentials needed): a probe cheap enough for every write."""
    try:
        _get(uri.rstrip("/") + "/health", timeout_s)
        return True
    except (urllib.error.URLError, OSError):
        return False


def _basic_auth() -> dict:
    user, password = (os.environ.get(name) for name in CREDENTIALS)
    if not user or password is None:
        return {}
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _credentials_problem(uri: str, status: int) -> str:
    user = os.environ.get(CREDENTIALS[0])
    if status == 401 and not _basic_auth():
        return (
            f"tracking server {uri} needs credentials: set {CREDENTIALS[0]} and {CREDENTIALS[1]} "
            "(a user of its basic-auth app)"
        )
    if status == 401:
        return f"tracking server {uri} refused user {user!r} (401): check {CREDENTIALS[0]} and {CREDENTIALS[1]}"
    return f"tracking server {uri} denies user {user!r} (HTTP {status}): ask its admin for permission on the experiment"


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """A server answers, and takes our credentials (MLflow's basic-auth app wants them on every call); a
    PostgreSQL database takes our login."""
    if is_postgres(uri):
        problem = postgres_problem(uri, timeout_s)
        if problem:
            raise TrackingError(problem)
        return
    if not is_server(uri):
        return
    base = uri.rstrip("/")
    try:
        _get(base + "/health", timeout_s)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackingError(f"tracking server {uri} is unreachable ({reason}): start it or fix tracking.uri") from None
    try:
        _get(base + "/api/2.0/mlflow/experiments/search?max_results=1", timeout_s, _basic_auth())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise TrackingError(_credentials_problem(uri, exc.code)) from None
    except (urllib.error.URLError, OSError):
        pass  # it answered /health a moment ago; the store's own error, if any, comes next


@contextlib.contextmanager
def _fail_fast_http():
    """MLflow reads its retry settings at each call: lower them for the driver's writes only (a value
    the user set wins), and put back what was there."""
    saved = {name: os.environ.get(name) for name in FAIL_FAST_HTTP}
    for name, value in FAIL_FAST_HTTP.items():
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)


def failing_fast(method):
    """A Recorder method whose HTTP calls give up in about a second on a dead server (see FAIL_FAST_HTTP)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _fail_fast_http():
            return method(*args, **kwargs)

    return wrapper


NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "ceph", "glusterfs", "lustre", "9p"}


def filesystem_of(path: str, mounts: str) -> str:
    """The type of the filesystem holding `path`, from a mount table (/proc/mounts): the longest mount point."""
    best, kind = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def sqlite_sharing_problem(uri: str, mounts: str | None = None) -> str | None:
    """SQLite's locks hold on a local disk (MLflow waits up to 20 s for one), so drivers on one machine
    share a file safely; on a network filesystem they do not, and two machines can corrupt it."""
    if not uri.startswith("sqlite:///"):
        return None
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    kind = filesystem_of(os.path.dirname(os.path.abspath(uri.removeprefix("sqlite:///"))), mounts)
    if kind not in NETWORK_FILESYSTEMS:
        return None
    return (
        f"tracking: {uri} is on a network filesystem ({kind}), where SQLite's locks do not hold: for sweeps "
        "from several machines use one tracking server (docs/cluster.md: One tracking server for a cluster)"
    )


@contextlib.contextmanager
def _one_opener(uri: str):
    """Two drivers opening one new store at once both create MLflow's tables (its tracking store takes no lock):
    the first to open it does, the second waits for it (SQLite: a file lock; PostgreSQL: postgres.one_opener)."""
    if is_postgres(uri):
        with one_opener(uri):
            yield
        return
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"tokengen-mlflow-{digest}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def write_ahead(uri: str) -> None:
    """A SQLite store switched to a write-ahead log, once (the mode is kept in the file): a commit then
    syncs one append to <file>-wal, where a rollback journal takes several syncs, a third of the time to
    record a result (benchmarks/record_rate.py). synchronous stays FULL: a commit is on disk when the
    journal (sweeps/delivery/journal.py) marks the result recorded, even across a power cut. Best effort:
    a store that cannot switch (read-only, busy for 20 s) keeps its mode, and the write check names why."""
    path = sqlite_path(uri)
    if path is None:
        return
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(path, timeout=20)) as connection:
        if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            connection.execute("PRAGMA journal_mode=WAL")


def load_mlflow() -> None:
    """MLflow imported now: on import it sets its own handlers on its loggers, which the sweep's log
    (sweeps/execution/logs.py) then takes over."""
    import mlflow  # noqa: F401 - imported for what importing it does


STORE_LOG = logging.getLogger("tracking.store")
"""Where a store's failure leaves its traceback: the sweep's log file (sweeps/execution/logs.py), nowhere else."""


def open_client(uri: str, use: str = "write to"):
    """A client on the store, or TrackingError in one line (`use`: what the caller came to do, "write to"
    or "read"): MLflow opens a database store (and creates or migrates its tables) as the client is
    made, so a file that is not a database, or a truncated one, fails here, not as a traceback."""
    from mlflow import MlflowClient  # here, not at the top: a SQLite history is read without MLflow

    try:
        with _fail_fast_http():
            client = MlflowClient(tracking_uri=engine_uri(uri))
        relocate(uri)  # a store moved or copied with its mlartifacts/: its artifacts are beside it
        if use == "write to":
            write_ahead(uri)
        return client
    except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI, or its folder's mode
        STORE_LOG.info("cannot %s tracking store %s", use, redacted(uri), exc_info=True)  # the sweep's log file
        path = sqlite_path(uri)  # a WAL store where -wal and -shm cannot be made fails to open at all
        fix = "make it writable or " if path and not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK) else ""
        raise TrackingError(
            f"cannot {use} tracking store {redacted(uri)} ({first_line(exc)}): {fix}fix tracking.uri"
        ) from None
