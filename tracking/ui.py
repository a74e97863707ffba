"""`python -m tracking.ui`: open a sweep's comparison in the MLflow UI.

Every report (tracking/report/build.py) saves a view of its sweep in the experiment, the way the UI's own
"Save and share view" does (MLflow 3.17): the experiment tag `mlflow.sharedViewState.<KEY>`, KEY
derived from the sweep's parent run id, so a rebuilt report updates the same view. The URL

    <server>/#/experiments/<id>/runs?viewStateShareKey=<KEY>&compareRunsMode=TABLE&workflowType=machine_learning

lands on the experiment's runs table in Model-training mode (without `workflowType` MLflow 3 opens
its GenAI overview), showing the report's runs at the sweep's headline point grouped by variant, best
speedup first, at four significant digits (tracking/store/view.py). The URL must carry no search
parameter (searchFilter, orderByKey, ...): the UI would drop the view for it, grouping included, which
only a saved view (or the user's own browser state) holds. A comparison of two sweeps (tracking/compare/) is one
run, and its link is that run's page, `<server>/#/experiments/<id>/runs/<run id>` (`run_url`).

This command starts a light `mlflow server` on a database store (one worker, no job runner: about
480 MiB and 2 processes instead of 1.8 GiB and 15), waits until it answers, prints the URL and
serves until Ctrl-C; on a tracking server's URI it only prints the URL.

    python -m tracking.ui [--uri sqlite:///mlflow.db] [--experiment tokengen] [--sweep NAME] [--port 5000] [--print-only]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tokengen.contract.names import SWEEP_PARENT
from tracking.store.connect import is_server
from tracking.store.view import has_view, view_key

DEFAULT_PORT = 5000
LIGHT_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no GenAI job runner and its consumers


def store_uri(uri: str) -> str:
    """A SQLite URI with an absolute path, so the printed command works from any directory."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    return uri


def base_url(uri: str, port: int = DEFAULT_PORT) -> str:
    return uri.rstrip("/") if is_server(uri) else f"http://127.0.0.1:{port}"


def view_url(base: str, experiment_id: str, key: str) -> str:
    query = urllib.parse.urlencode(
        {"viewStateShareKey": key, "compareRunsMode": "TABLE", "workflowType": "machine_learning"}
    )
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """One run's page in the UI (a comparison's): its description, metrics and tags, its files a tab away."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def server_argv(uri: str, port: int = DEFAULT_PORT) -> list[str]:
    return [
        "mlflow",
        "server",
        "--backend-store-uri",
        store_uri(uri),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def server_command(uri: str, port: int = DEFAULT_PORT) -> str:
    """The light server's command line, for a user to paste."""
    env = " ".join(f"{k}={v}" for k, v in LIGHT_ENV.items())
    return f"{env} {shlex.join(server_argv(uri, port))}"


def how_to_open(uri: str, experiment_id: str, key: str, sweep: str = "", port: int = DEFAULT_PORT) -> list[str]:
    """The lines a sweep and a report end with: how to serve the UI on this store, and the view's URL."""
    url = view_url(base_url(uri, port), experiment_id, key)
    if is_server(uri):
        return [f"ui: the tracking server serves the MLflow UI; this sweep's comparison: {url}"]
    helper = shlex.join(["python", "-m", "tracking.ui", "--uri", uri] + (["--sweep", sweep] if sweep else []))
    return [
        f"ui: serve the MLflow UI on this store: {server_command(uri, port)}",
        f"ui:   (or {helper}, which starts it and waits until it answers)",
        f"ui: this sweep's comparison: {url}",
    ]


def wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the server answers /health before it exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    return False


def port_problem(port: int, host: str = "127.0.0.1") -> str | None:
    """Why the light server could not listen on the port now, or None: found before it starts, since a
    server already there would answer the health probe in its place (gunicorn and uvicorn set
    SO_REUSEADDR, so a closed connection's TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OverflowError:
            return f"--port {port} is not a port: give one from 1 to 65535"
        except OSError as exc:
            return (
                f"port {port} on {host} is in use ({exc.strerror}): pass a free one with --port (e.g. --port "
                f"{_free_port(host)}), or stop what listens there"
            )
    return None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def serve(uri: str, port: int, url: str, log: Path, timeout_s: float = 300) -> int:
    """Run the light server until Ctrl-C (or SIGTERM), its output in `log`; 1 if it does not come up or stops
    on its own (the port was checked free before: main)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", *server_argv(uri, port)]  # python -m mlflow server ...
    print(f"ui: starting `{server_command(uri, port)}` (its output: {log})", file=sys.stderr, flush=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **LIGHT_ENV}, start_new_session=True
        )
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or a `kill` stops the server too (even started with &)
        signal.signal(sig, _interrupt)
    try:
        if not wait_until_up(base_url(uri, port), proc, timeout_s):
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            print(f"error: the MLflow server did not answer on port {port}: " + " / ".join(tail), file=sys.stderr)
            return 1
        print(url, flush=True)
        print("ui: serving until Ctrl-C", file=sys.stderr, flush=True)
        status = proc.wait()
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        print(f"error: the MLflow server stopped on its own (exit {status}): " + " / ".join(tail), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    from tracking.store.reading import ReportError, open_experiment, parent_run

    parser = argparse.ArgumentParser(prog="python -m tracking.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="sqlite:///mlflow.db", help="tracking store or server (default: %(default)s)")
    parser.add_argument("--experiment", default="tokengen", help="default: %(default)s")
    parser.add_argument("--sweep", help="sweep name (default: the latest sweep in the experiment)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="the UI's port on 127.0.0.1, 0 for any free one (default: %(default)s)",
    )
    parser.add_argument("--print-only", action="store_true", help="print the URL and the server command, start nothing")
    args = parser.parse_args(argv)
    if args.port == 0:  # any free port, as a socket takes it: the server and the URL get the one found
        args.port = _free_port("127.0.0.1")
    try:
        client, experiment_id = open_experiment(args.uri, args.experiment)
        if args.sweep and "'" in args.sweep:
            raise ReportError(f"sweep name {args.sweep!r} has a quote: pass the name without it")
        parent = parent_run(client, experiment_id, args.sweep)
        if parent is None:
            raise ReportError(
                f"no sweep{' named ' + repr(args.sweep) if args.sweep else ''} in {args.uri} "
                f"experiment '{args.experiment}': run python -m sweeps.run +grid=smoke first"
            )
        sweep, key = parent.data.tags[SWEEP_PARENT], view_key(parent.info.run_id)
        if not has_view(client, experiment_id, key):
            raise ReportError(
                f"sweep '{sweep}' has no comparison view yet: build its report with python -m "
                f"tracking.report --uri {args.uri} --experiment {args.experiment} --sweep {sweep}"
            )
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    url = view_url(base_url(args.uri, args.port), experiment_id, key)
    if args.print_only or is_server(args.uri):
        for line in how_to_open(args.uri, experiment_id, key, sweep, args.port):
            print(line, file=sys.stderr)
        print(url)
        return 0
    taken = port_problem(args.port)
    if taken:
        print(f"error: {taken}", file=sys.stderr)
        return 2
    return serve(args.uri, args.port, url, Path(".sweeps") / "logs" / f"mlflow-ui-{args.port}.log")


if __name__ == "__main__":
    sys.exit(main())
