"""The only code that writes to MLflow: one parent run per sweep, one child run per trial.

The sweep driver alone holds a Recorder, and records each trial the moment its result arrives, so
a driver killed mid-sweep keeps every finished trial, and a rerun skips their keys. Everything
wrong with the store (an unknown scheme, a server that is down, missing or wrong credentials) is
one line before any trial runs; a server that goes down later fails a write in about a second
instead of MLflow's minutes of retries, and the driver's journal (sweeps/journal.py) keeps the
result until the server answers again.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import math
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from tokengen.contract.names import FINISHED, PLAN_FILE, RESULT_FILE, SWEEP_CONFIG_FILE, TRANSPORT, TRIAL_LOG
from tokengen.contract.record import METRIC, PARAM, SERIES, TAG, first_line, with_role
from tokengen.contract.spec import LABELS
from tracking.artifact_root import artifact_location, relocate
from tracking.run_names import run_name

PARAMS, METRICS, SERIES_FIELDS = with_role(PARAM), with_role(METRIC), with_role(SERIES)
TAGS = with_role(TAG) + LABELS  # the label is a param and, for filtering, a tag
MAX_PARAM_CHARS = 6000


class TrackingError(RuntimeError):
    """The tracking store cannot be reached or written: said in one line, before any trial runs."""


SERVER_SCHEMES = ("http", "https")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy store; "+driver" allowed
FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")  # MLflow's own names, read by its client
# The driver's client gives up on a dead server in about a second, not after MLflow's default 7
# retries with exponential back-off (minutes per call): the journal keeps what it could not send.
FAIL_FAST_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def is_server(uri: str) -> bool:
    return urllib.parse.urlparse(uri).scheme in SERVER_SCHEMES


def redacted(uri: str) -> str:
    """The URI without the user and password its authority may carry, for a printed line."""
    parsed = urllib.parse.urlsplit(uri)
    if "@" not in parsed.netloc:
        return uri
    return parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]).geturl()


def check_credentials(uri: str, option: str = "tracking.uri=") -> None:
    """Refuse a server's URI that carries a user or a password (`option` is how the user gave it:
    `tracking.uri=` or `--uri `), naming it without them: a password on a command line ends up in files
    and printed lines, and MLflow's client takes it from the environment anyway."""
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme in SERVER_SCHEMES and "@" in parsed.netloc:
        raise TrackingError(f"{option.rstrip('= ')} carries credentials: use {option}{redacted(uri)} and put them in "
                            f"{CREDENTIALS[0]} and {CREDENTIALS[1]}, which stay with the driver")


def check_uri(uri: str) -> None:
    """Refuse a URI MLflow would misread, before anything is created: one line that names the fix
    (and never the password a URI may carry)."""
    check_credentials(uri)
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+", 1)[0]
    if scheme in SERVER_SCHEMES + DATABASE_SCHEMES:
        return
    if scheme in ("file", ""):
        if os.environ.get(FILE_STORE_OPT_IN, "").lower() in ("1", "true"):
            return
        raise TrackingError(f"tracking.uri={uri} is MLflow's file store, which MLflow 3 refuses without "
                            f"{FILE_STORE_OPT_IN}=true: use tracking.uri=sqlite:///mlflow.db")
    raise TrackingError(f"tracking.uri={uri} has scheme {scheme!r}, which MLflow cannot store runs in: use "
                        "sqlite:///PATH, http(s)://HOST:PORT (a tracking server) or postgresql:// / mysql://")


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
        return (f"tracking server {uri} needs credentials: set {CREDENTIALS[0]} and {CREDENTIALS[1]} "
                "(a user of its basic-auth app)")
    if status == 401:
        return f"tracking server {uri} refused user {user!r} (401): check {CREDENTIALS[0]} and {CREDENTIALS[1]}"
    return f"tracking server {uri} denies user {user!r} (HTTP {status}): ask its admin for permission on the experiment"


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """A server answers, and takes our credentials (MLflow's basic-auth app wants them on every call)."""
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
    return (f"tracking: {uri} is on a network filesystem ({kind}), where SQLite's locks do not hold: for sweeps "
            "from several machines use one tracking server (docs/cluster.md: One tracking server for a cluster)")


@contextlib.contextmanager
def _one_opener(uri: str):
    """Two drivers opening one new SQLite file at once both create MLflow's tables (its tracking store
    takes no lock there): the first to open it does, the second waits for it."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = os.path.abspath(uri.removeprefix("sqlite:///"))
    lock = Path(tempfile.gettempdir()) / f"tokengen-mlflow-{hashlib.sha256(path.encode()).hexdigest()[:16]}.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_client(uri: str, use: str = "write to") -> MlflowClient:
    """A client on the store, or TrackingError in one line (`use`: what the caller came to do, "write to"
    or "read"): MLflow opens a database store (and creates or migrates its tables) as the client is
    made, so a file that is not a database, or a truncated one, fails here, not as a traceback."""
    try:
        with _fail_fast_http():
            client = MlflowClient(tracking_uri=uri)
        relocate(uri)  # a store moved or copied with its mlartifacts/: its artifacts are beside it
        return client
    except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
        raise TrackingError(f"cannot {use} tracking store {redacted(uri)} ({first_line(exc)}): "
                            "fix tracking.uri") from None


def _metric_value(value) -> float | None:
    """What MLflow can store as a metric: a finite number (bools as 0/1), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def metrics_of(record: dict, timestamp: int) -> list[Metric]:
    """The record's metrics, and each series as one metric stepped by run index."""
    metrics = [Metric(name, v, timestamp, 0) for name in METRICS if (v := _metric_value(record.get(name))) is not None]
    for name in SERIES_FIELDS:
        for step, value in enumerate(record.get(name) or []):
            if (v := _metric_value(value)) is not None:
                metrics.append(Metric(name, v, timestamp, step))
    return metrics


def params_of(record: dict) -> list[Param]:
    return [Param(name, str(record[name])[:MAX_PARAM_CHARS]) for name in PARAMS if name in record]


def tags_of(record: dict, sweep: str) -> dict[str, str]:
    """The record's tags, and each series whole as a JSON list (a search returns tags, not metric history:
    the report reads every timed run from there)."""
    tags = {"sweep": sweep, "trial_key": record["key"]}
    for name in TAGS:
        if record.get(name) is not None:
            tags[name] = str(record[name])[:MAX_PARAM_CHARS]
    for name in SERIES_FIELDS:
        values = [v for v in record.get(name) or [] if _metric_value(v) is not None]
        text = _series_text(values)
        if text:
            tags[name] = text
    return tags


@dataclasses.dataclass
class StoreIndex:
    finished: dict = dataclasses.field(default_factory=dict)  # trial key -> {fingerprint: its facts text}
    attempts: dict = dataclasses.field(default_factory=dict)  # attempt id -> the run that holds it whole
    half_written: dict = dataclasses.field(default_factory=dict)  # attempt id -> runs cut short (no status tag)


def _series_text(values: list[float]) -> str | None:
    """A JSON list within the tag limit: 9 significant digits, fewer if it must; None if even 4 do not fit
    (the metric history still holds every value)."""
    for digits in (9, 6, 4):
        text = json.dumps([float(f"{v:.{digits}g}") for v in values], separators=(",", ":"))
        if len(text) <= MAX_PARAM_CHARS:
            return text if values else None
    return None


class Recorder:
    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        check_uri(uri)
        check_reachable(uri)
        try:
            with _one_opener(uri), _fail_fast_http():
                self.client = open_client(uri)
                self.experiment_id = self._experiment_id(experiment)
        except TrackingError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
            raise TrackingError(f"cannot write to tracking store {redacted(uri)} ({first_line(exc)}): "
                                "fix tracking.uri") from None
        self._check_writable(experiment)
        self.parent_id: str | None = None
        self.sweep = ""
        self.names: dict[str, str] = {}  # run name per trial key (tracking.run_names), set by start_sweep
        self._cut: dict[str, list[str]] = {}  # attempt id -> runs left without their status, deleted before it is recorded

    def _check_writable(self, experiment: str) -> None:
        """A write the sweep would make anyway (the experiment's last-sweep tag), so a user who may read
        but not write (MLflow's default READ permission), or an unwritable SQLite file, is told now,
        before Ray starts, not by a traceback from the first trial's run."""
        try:
            with _fail_fast_http():
                self.client.set_experiment_tag(self.experiment_id, "tokengen.last_sweep_check", str(int(time.time())))
        except Exception as exc:  # noqa: BLE001 - any refused write here means: fix the permission
            text = str(exc)
            if "403" in text or "PERMISSION_DENIED" in text:
                user = os.environ.get(CREDENTIALS[0])
                raise TrackingError(f"user {user!r} may read experiment {experiment!r} at {redacted(self.uri)} but not "
                                    "write to it (HTTP 403): ask its admin for EDIT permission") from None
            raise TrackingError(f"cannot write to tracking store {redacted(self.uri)} ({first_line(exc)}): make it "
                                "writable or fix tracking.uri") from None

    def _experiment_id(self, name: str) -> str:
        """The experiment's id, created if missing; another driver creating it at the same moment is fine."""
        found = self.client.get_experiment_by_name(name)
        if found:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=artifact_location(self.uri, name))
        except Exception:  # noqa: BLE001 - lost the race to a concurrent driver: use its experiment
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def answers(self) -> bool:
        """Whether the store can take a write now: a server's health probe (2 s at most); a database is
        assumed up, and a write that fails says otherwise."""
        return server_answers(self.uri) if is_server(self.uri) else True

    @failing_fast
    def finished_keys(self) -> set[str]:
        """Keys of trials that already have a finished child run anywhere in the experiment."""
        return set(self.index().finished)

    @failing_fast
    def index(self) -> "StoreIndex":
        """What the experiment already holds: each finished key's fingerprints, every attempt recorded whole,
        and the runs of attempts whose recording was cut short (a full disk, a store gone mid-write)."""
        index, token = StoreIndex(), None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string="tags.trial_key != ''",
                                           max_results=5000, page_token=token)
            for run in page:
                tags = run.data.tags
                attempt = tags.get("attempt_id")
                if attempt and not tags.get("status"):  # the status tag comes last: a write cut short lacks it
                    index.half_written.setdefault(attempt, []).append(run.info.run_id)
                    continue
                if attempt:
                    index.attempts[attempt] = run.info.run_id
                if tags.get("status") == FINISHED and tags.get("trial_key"):
                    index.finished.setdefault(tags["trial_key"], {})[tags.get("env_fingerprint")] = tags.get("env_facts")
            token = page.token
            if not token:
                return index

    @failing_fast
    def start_sweep(self, name: str, config: dict, resume: bool, planned: list[str] = (),
                    reused: list[str] = (), names: dict[str, str] | None = None) -> str:
        """The sweep's parent run (the latest one of this name when resuming, else a new one), with its
        plan: every key it covers, and those finished by earlier runs that this one reuses; `names`:
        each trial's run name (tracking.run_names.run_names of the plan)."""
        self.sweep = name
        self.names = dict(names or {})
        self.parent_id = self._parent(name, config, resume)
        plan = {"planned": list(planned), "reused": list(reused)}
        self.client.log_text(self.parent_id, json.dumps(plan), PLAN_FILE)
        self.client.set_tag(self.parent_id, "reused_trials", str(len(plan["reused"])))
        return self.parent_id

    def _parent(self, name: str, config: dict, resume: bool) -> str:
        if resume:
            runs = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.sweep_parent = '{name}'", max_results=1,
                order_by=["attributes.start_time DESC"],
            )
            if runs:
                self.parent_id = runs[0].info.run_id
                self.client.update_run(self.parent_id, status="RUNNING")
                self._close_orphans()
                return self.parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags={"sweep_parent": name, "sweep": name})
        self.client.log_text(run.info.run_id, json.dumps(config, indent=2, default=str), SWEEP_CONFIG_FILE)
        return run.info.run_id

    def _close_orphans(self) -> None:
        """Child runs a killed driver left half-written: KILLED, and never counted as finished."""
        orphans = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}' and attributes.status = 'RUNNING'",
            max_results=5000,
        )
        for run in orphans:
            self.client.set_terminated(run.info.run_id, "KILLED")

    def cut_short(self, attempt: str, run_ids: list[str]) -> None:
        """Runs whose recording of `attempt` was cut short (no status tag: a full disk, a store gone mid-write),
        found by a rerun's index: deleted when the attempt is recorded, so it is recorded whole, once."""
        self._cut.setdefault(attempt, []).extend(run_ids)

    @failing_fast
    def record_trial(self, record: dict) -> str:
        """One child run with the trial's params, metrics, tags and artifacts; FAILED if it failed. A try cut
        short by the store (full, gone) leaves a run without its status tag: the next try of the same
        attempt deletes it first, and a rerun's index finds any it could not."""
        tags = tags_of(record, self.sweep)
        status = tags.pop("status")  # set last: a run cut short never counts as finished
        attempt = record.get("attempt_id")
        while self._cut.get(attempt):  # one run per key and attempt: what an earlier try left goes first
            self.client.delete_run(self._cut[attempt][-1])
            self._cut[attempt].pop()
        run = self.client.create_run(self.experiment_id, run_name=run_name(record, self.names),
                                     tags={"mlflow.parentRunId": self.parent_id, **tags})
        run_id = run.info.run_id
        if attempt:
            self._cut[attempt] = [run_id]  # until its status tag is set
        metrics = metrics_of(record, int(time.time() * 1000))
        self.client.log_batch(run_id, metrics=metrics, params=params_of(record), synchronous=True)
        log = record.get("log", "")
        result = {k: v for k, v in record.items() if k not in TRANSPORT}
        self.client.log_text(run_id, json.dumps(result, indent=2), RESULT_FILE)
        if log:
            self.client.log_text(run_id, log, TRIAL_LOG)
        if record.get("files"):
            with tempfile.TemporaryDirectory() as tmp:
                for name, blob in record["files"].items():
                    Path(tmp, name).write_bytes(blob)
                    self.client.log_artifact(run_id, str(Path(tmp, name)))
        self.client.set_tag(run_id, "status", status)
        self._cut.pop(attempt, None)
        self.client.set_terminated(run_id, "FINISHED" if status == FINISHED else "FAILED")
        return run_id

    @failing_fast
    def kill_sweep(self) -> None:
        """The sweep was interrupted: its run says so (a rerun of the same command resumes it)."""
        self.client.set_terminated(self.parent_id, "KILLED")

    @failing_fast
    def fail_sweep(self, why: str) -> None:
        """The sweep stopped on something it could not write (a full disk): its run says why, FAILED."""
        self.client.set_tag(self.parent_id, "stopped", why[:MAX_PARAM_CHARS])
        self.client.set_terminated(self.parent_id, "FAILED")

    @failing_fast
    def end_sweep(self, failed: int) -> None:
        self.client.set_tag(self.parent_id, "failed_trials", str(failed))
        self.client.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")

    @failing_fast
    def record_comparison(self, name: str, tags: dict[str, str], children: list["ChildRun"], files: list = (),
                          experiment_tags: dict[str, str] | None = None) -> str:
        """A comparison of two sweeps (tracking/compare/): one run with its files as artifacts under
        `comparison/`, one child run per matched point, and the experiment tags that save its view in the
        UI. Returns the run's id. No run here carries a trial's `status`, `trial_key` or `sweep` tag, so
        no resume, report or cost model ever takes one for a trial."""
        parent = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id
        now = int(time.time() * 1000)
        for child in children:
            run_id = self.client.create_run(self.experiment_id, run_name=child.name,
                                            tags={"mlflow.parentRunId": parent, **child.tags}).info.run_id
            metrics = [Metric(k, v, now, 0) for k, value in child.metrics.items()
                       if (v := _metric_value(value)) is not None]
            params = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in child.params.items()]
            self.client.log_batch(run_id, metrics=metrics, params=params, synchronous=True)
            self.client.set_terminated(run_id, "FINISHED")
        for path in files:
            self.client.log_artifact(parent, str(path), "comparison")
        for key, value in (experiment_tags or {}).items():
            self.client.set_experiment_tag(self.experiment_id, key, value)
        self.client.set_terminated(parent, "FINISHED")
        return parent


@dataclasses.dataclass
class ChildRun:
    """One child run of a run that is not a sweep's (a comparison's matched point), as the UI shows it."""
    name: str
    params: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    tags: dict = dataclasses.field(default_factory=dict)
