"""Real MLflow tracking servers for the tests: `python -m mlflow server` on 127.0.0.1 with a SQLite store
and proxied artifacts, optionally behind MLflow's basic-auth app; stopped, killed and restarted on the
same port and store, as an outage would."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ADMIN, ADMIN_PASSWORD = "admin", "tokengen-test-admin-pw"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with status {proc.returncode}")
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=2).read().strip() == b"OK":
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise TimeoutError(f"mlflow server at {url} not healthy after {timeout_s} s")


def auth_environment(root: Path) -> dict[str, str]:
    """What the basic-auth app needs to start: its own user store (an ini naming it, so nothing is
    written to the working directory), the admin's first password, and a CSRF secret."""
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = sqlite:///{root}/auth.db\n"
        f"admin_username = {ADMIN}\n"
        "auth_cache_ttl_seconds = 300\n"  # a password that passed is not hashed again on every call
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "tokengen-test-csrf-secret",
    }


_migrated: dict[str, Path] = {}


def migrated_store() -> Path:
    """An empty SQLite store with MLflow's tables made, once per test session: a new server's store starts
    as its copy instead of running every migration again (about 3 s on 2 cores). Made in a process of its own:
    MLflow's and alembic's lines on making the tables would land in whichever test asked first (one that holds
    its stderr to one line failed when it ran first)."""
    if "db" not in _migrated:
        folder = Path(tempfile.mkdtemp(prefix="mlflow-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # each xdist worker's own, gone with it
        make = f"from mlflow import MlflowClient; MlflowClient(tracking_uri='sqlite:///{folder}/m.db').search_experiments()"
        subprocess.run([sys.executable, "-c", make], capture_output=True, check=True, timeout=300)
        _migrated["db"] = folder / "m.db"
    return _migrated["db"]


def seeded_uri(folder: Path, name: str = "mlflow.db") -> str:
    """The URI of a new SQLite store at folder/name, a copy of migrated_store(): for tests that read and write
    a store, not ones of what MLflow or a sweep does to a missing or new one."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_store(), folder / name)
    return f"sqlite:///{folder / name}"


@dataclass
class MlflowServer:
    root: Path  # the store (m.db), the artifacts (art/), the server's log
    auth: bool = False  # behind `--app-name basic-auth`
    backend: str | None = None  # its store (a PostgreSQL URI); None: a SQLite file, root/m.db
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> MlflowServer:
        """Start it (again: same port, same store) and wait until /health answers."""
        return self.launch().wait_until_healthy(timeout_s)

    def launch(self) -> MlflowServer:
        """Start it without waiting, so a test can do other work while it comes up."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.backend is None and not (self.root / "m.db").exists():
            shutil.copyfile(migrated_store(), self.root / "m.db")
        store = self.backend or f"sqlite:///{self.root}/m.db"
        argv = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            store,
            "--artifacts-destination",
            str(self.root / "art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        # no background job runner (GenAI jobs): fewer processes on a 2-core machine, same tracking server
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        if self.auth:
            argv += ["--app-name", "basic-auth"]
            env.update(auth_environment(self.root))
        with open(self.root / "server.log", "a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self

    def wait_until_healthy(self, timeout_s: float = 120) -> MlflowServer:
        try:
            wait_for_health(self.url, self.proc, timeout_s)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server and the uvicorn worker it started (SIGKILL: as a crashed machine would)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
