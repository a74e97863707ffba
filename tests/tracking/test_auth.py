"""A tracking server behind MLflow's basic-auth app, for real (`mlflow server --app-name basic-auth`,
the `mlflow[auth]` extra): the sweep records through it with MLFLOW_TRACKING_USERNAME/PASSWORD (and no
file it, its report, a comparison or the UI hint writes carries the password), and
missing or wrong credentials stop the sweep in one line before Ray starts or any trial runs."""

from __future__ import annotations

import pytest
import ray
from mlflow import MlflowClient
from servers import ADMIN, ADMIN_PASSWORD, MlflowServer
from sweep_helpers import child_runs, run_captured, small_sweep

from sweeps.driver import run_sweep

USER, PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
pytestmark = pytest.mark.slow  # a basic-auth server; the refusals on no Ray at all, the sweep on the warm one


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """Session-wide: tests/conftest.py runs this module's warm-Ray test after the others, which a module
    fixture would see as two runs of the module and start the server twice (10 s each on 2 cores)."""
    server = MlflowServer(tmp_path_factory.mktemp("auth-server"), auth=True).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_sweep_records_through_an_authenticated_server(server, tmp_path, monkeypatch, warm_ray):
    monkeypatch.setenv(USER, ADMIN)
    monkeypatch.setenv(PASSWORD, ADMIN_PASSWORD)
    # one trial: the server checks the password on every request (a slow hash by design)
    status, _, err = run_captured(
        small_sweep(tmp_path, f"tracking.uri={server.url}", "grid.variant=[kv_cache]"), tmp_path
    )
    assert status == 0, err[-3000:]
    runs = child_runs(server.url)
    assert len(runs) == 1 and {r.data.tags["status"] for r in runs} == {"finished"}
    printed = [err] + readers_through(server.url, tmp_path)
    # the password was planted in the environment: no file the sweep, the report, the comparison or the UI
    # hint wrote (journal, logs, report, plan, comparison) and no line they printed carries it
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 5 and [p for p in written if ADMIN_PASSWORD.encode() in p.read_bytes()] == []
    assert not [text for text in printed if ADMIN_PASSWORD in text]
    monkeypatch.delenv(PASSWORD)
    with pytest.raises(Exception, match="401"):  # the runs are not readable without credentials
        child_runs(server.url)


def readers_through(url: str, cwd) -> list[str]:
    """The report, the comparison (the sweep against itself) and the UI hint, run in `cwd`: what they printed."""
    import contextlib
    import io
    import os

    from tracking import ui
    from tracking.compare.__main__ import main as compare_main
    from tracking.report.__main__ import main as report_main

    printed, previous = [], os.getcwd()
    os.chdir(cwd)
    try:
        for command in (
            lambda: report_main(["--uri", url]),
            lambda: compare_main(["t", "t", "--uri", url]),
            lambda: ui.main(["--uri", url, "--print-only"]),
        ):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                assert command() == 0, err.getvalue()[-2000:]
            printed += [out.getvalue(), err.getvalue()]
    finally:
        os.chdir(previous)
    return printed


@pytest.mark.parametrize(
    "credentials, line",
    [
        (
            {},
            "error: tracking server {url} needs credentials: set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD (a user of its basic-auth app)",
        ),
        (
            {USER: ADMIN, PASSWORD: "not-the-password"},
            "error: tracking server {url} refused user 'admin' (401): check MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD",
        ),
    ],
    ids=["missing", "wrong"],
)
def test_missing_or_wrong_credentials_stop_the_sweep_before_ray(
    server, tmp_path, monkeypatch, capsys, fresh_ray, credentials, line
):
    monkeypatch.delenv(USER, raising=False)
    monkeypatch.delenv(PASSWORD, raising=False)
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    config = small_sweep(tmp_path, f"tracking.uri={server.url}")
    assert run_sweep(config) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line.format(url=server.url)]
    assert not ray.is_initialized()
    assert not (tmp_path / "work").exists()  # no trial ran


def test_a_user_who_may_only_read_is_refused_before_ray(server, tmp_path, monkeypatch, capsys, fresh_ray):
    """MLflow's default permission is READ: such a user passes every read, so the check must write."""
    from mlflow.server.auth.client import AuthServiceClient

    monkeypatch.setenv(USER, ADMIN)
    monkeypatch.setenv(PASSWORD, ADMIN_PASSWORD)
    MlflowClient(tracking_uri=server.url).get_experiment_by_name("tokengen") or MlflowClient(
        tracking_uri=server.url
    ).create_experiment("tokengen")
    AuthServiceClient(server.url).create_user("reader", "reader-password-1")
    monkeypatch.setenv(USER, "reader")
    monkeypatch.setenv(PASSWORD, "reader-password-1")
    assert run_sweep(small_sweep(tmp_path, f"tracking.uri={server.url}")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: user 'reader' may read experiment 'tokengen' at {server.url} but not write to it (HTTP 403): "
        "ask its admin for EDIT permission"
    ]
    assert not ray.is_initialized()
