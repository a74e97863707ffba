"""`python -m tracking.report` and `python -m tracking.ui` on a store that is not one, a URI that carries
a password, a port already taken: one line that names the fix, exit 2, before anything is written,
printed or started. The stores are real SQLite files written by the sweep's own Recorder, then damaged."""

from __future__ import annotations

import os
import socket

import pytest
from servers import seeded_uri

from tracking import ui
from tracking.report.__main__ import main as report_main
from tracking.store import view
from tracking.store.connect import TrackingError
from tracking.store.recorder import Recorder

SECRET = "s3cret-Pa55"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with one sweep and its saved view, as a sweep and its report leave them."""
    root = tmp_path_factory.mktemp("store")
    uri = seeded_uri(root)
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("s", {}, resume=False)
    view.publish_view(recorder.client, recorder.experiment_id, "s", recorder.parent_id)
    return root / "mlflow.db"


def one_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, (out, err)
    return lines[0]


@pytest.mark.parametrize(
    "damage, reason", [("random", "file is not a database"), ("truncated", "database disk image is malformed")]
)
@pytest.mark.parametrize("command", ["report", "ui"])
def test_a_corrupt_store_is_one_line_and_exit_2(store, tmp_path, capsys, monkeypatch, damage, reason, command):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "mlflow.db"
    whole = store.read_bytes()
    path.write_bytes(os.urandom(64 * 1024) if damage == "random" else whole[: len(whole) // 3])
    before = path.read_bytes()
    uri = f"sqlite:///{path}"
    status = report_main(["--uri", uri]) if command == "report" else ui.main(["--uri", uri, "--print-only"])
    assert status == 2
    assert one_line(capsys) == f"error: cannot read tracking store {uri} ((sqlite3.DatabaseError) {reason}): fix --uri"
    assert path.read_bytes() == before  # read, never repaired or rewritten
    made = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm")))  # SQLite's, any reader's
    assert made == ["mlflow.db"]  # no reports/, no mlruns/


@pytest.mark.parametrize("command", ["report", "ui"])
def test_a_password_in_the_uri_is_refused_and_never_printed(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    uri = f"http://user:{SECRET}@127.0.0.1:9"
    assert (report_main if command == "report" else ui.main)(["--uri", uri]) == 2
    assert one_line(capsys) == (
        "error: --uri carries credentials: use --uri http://127.0.0.1:9 and put them in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, which stay with the driver"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_port_in_use_is_one_line_before_any_server_starts(store, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert ui.main(["--uri", f"sqlite:///{store}", "--port", str(port)]) == 2
        line = one_line(capsys)  # no URL, no "serving"
    assert line.startswith(
        f"error: port {port} on 127.0.0.1 is in use (Address already in use): pass a free one with --port (e.g. --port "
    ), line
    assert line.endswith("), or stop what listens there")
    assert not (tmp_path / ".sweeps").exists()  # the server's log: it never started


def test_port_0_picks_a_free_port_for_the_server_and_the_url(store, tmp_path, capsys, monkeypatch):
    """--port 0 handed to the server as it is would leave the UI waiting for a port it never learns."""
    monkeypatch.chdir(tmp_path)
    assert ui.main(["--uri", f"sqlite:///{store}", "--port", "0", "--print-only"]) == 0
    out, err = capsys.readouterr()
    port = int(out.strip().split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
    assert port > 0 and f"--port {port}" in err, err
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free, as found


def test_a_database_uri_is_named_without_its_credentials():
    """A database URI's password is refused (tests/tracking/test_credentials.py); a store that cannot be opened is
    named without the user its URI may carry, and never with a password."""
    with pytest.raises(TrackingError) as refused:
        Recorder("postgresql://user@127.0.0.1:9/mlflow", "tokengen")
    assert str(refused.value).startswith("PostgreSQL at 127.0.0.1:9 is unreachable (") and "user@" not in str(
        refused.value
    )
    with pytest.raises(TrackingError) as refused:
        Recorder(f"postgresql://user:{SECRET}@127.0.0.1:9/mlflow", "tokengen")
    assert str(refused.value).startswith("tracking.uri carries a password") and SECRET not in str(refused.value)
