"""State that heals or says so: a journal's damaged lines (a byte that is not UTF-8, `42`, `{"result": {}}`,
a line cut mid-write) are set aside beside it, named once, never a result; a journaled result is recorded
only for a key of the plan; a journal path that cannot take a result is one line before any trial runs;
a rollback journal a killed writer left beside a SQLite store is rolled back, not blamed on tracking.uri."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sweep_helpers import child_runs, small_sweep

from sweeps.delivery.journal import Journal, JournalError, journaled_results
from sweeps.delivery.outbox import Outbox
from sweeps.driver import run_sweep
from tracking.store.history import load_history
from tracking.store.recorder import Recorder

DAMAGED = [
    b'{"result": {"key": "k9", "status": "fini\xff"}, "files": []}',
    b"42",
    b'{"result":{}}',
    b'{"result": {"key": "k3"',
]  # not UTF-8, not an entry, a result without its key, cut short


def result(key: str, status: str = "finished") -> dict:
    return {"key": key, "status": status, "files": {}, "log": ""}


def test_damaged_lines_are_set_aside_named_once_and_never_a_result(tmp_path, capsys):
    journal = Journal.open("tokengen", "s", root=tmp_path)
    first = journal.append(result("k1"))
    with open(journal.path, "ab") as handle:
        handle.write(b"\n".join(DAMAGED[:3]) + b"\n" + DAMAGED[3])
    fourth = journal.append(result("k4"))
    again = Journal.open("tokengen", "s", root=tmp_path)
    assert again.unrecorded() == [first, fourth]
    side = journal.path.with_name("s.jsonl.set-aside")
    assert side.read_bytes().splitlines() == DAMAGED
    assert capsys.readouterr().err.splitlines() == [
        f"journal: set aside 4 damaged line(s) of {journal.path} in {side} (never a result: their trials run again)"
    ]
    Journal.open("tokengen", "s", root=tmp_path).unrecorded()
    assert capsys.readouterr().err == ""  # said once: the journal is whole now


def test_a_reader_skips_damaged_lines_without_a_traceback(tmp_path, monkeypatch):
    """The pricing and the dry run read the journal without writing: its damaged lines are no result."""
    monkeypatch.chdir(tmp_path)
    journal = Journal.open("tokengen", "s")
    journal.append(result("k1"))
    with open(journal.path, "ab") as handle:
        handle.write(b"\n".join(DAMAGED) + b"\n")
    assert [r["key"] for r in journaled_results("tokengen", "s")] == ["k1"]


def test_a_journaled_result_outside_the_plan_is_never_recorded(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("s", {"sweep": {"name": "s"}}, resume=False)
    journal = Journal.open("tokengen", "s", root=tmp_path)
    planned, stray = journal.append(result("k1")), journal.append(result("not-planned"))
    outbox = Outbox(journal, recorder)
    assert outbox.take_over({}, {}, {"k1"}) == [planned] and outbox.outside == 1
    outbox.flush(now=True)
    assert [r.data.tags["key"] for r in child_runs(uri)] == ["k1"]
    assert Journal.open("tokengen", "s", root=tmp_path).unrecorded() == [stray]  # kept, for the grid that planned it


@pytest.mark.parametrize("how", ["journal-a-folder", "files-a-file"])
def test_a_journal_that_cannot_take_a_result_is_one_line_before_any_trial(tmp_path, monkeypatch, capsys, how):
    """Without the check the first trial runs, its result cannot be journaled, and a traceback ends the sweep."""
    monkeypatch.chdir(tmp_path)
    path = Journal.path_for("tokengen", "t")
    path.parent.mkdir(parents=True)
    where, kind = (path, "file") if how == "journal-a-folder" else (path.with_suffix(""), "folder")
    where.mkdir() if kind == "file" else where.write_text("")
    with pytest.raises(JournalError):
        Journal.open("tokengen", "t")
    assert run_sweep(small_sweep(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"error: the sweep's journal {kind} {tmp_path / where} is not a {kind}: move it "
        "away or make it writable (another sweep.name starts a journal of its own)"
    ), err
    assert not list((tmp_path / "work").glob("*/*"))  # no trial ran


KILLED_WRITER = """
import os, signal, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA cache_size=1")  # pages spill into the file mid-transaction, as a big write's do
connection.execute("BEGIN")
connection.execute("CREATE TABLE ballast AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                   "WHERE i < 3000) SELECT randomblob(600) AS b FROM n")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_rollback_journal_a_killed_writer_left_is_rolled_back(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    recorder = Recorder(f"sqlite:///{db}", "tokengen")
    recorder.start_sweep("t", {"sweep": {"name": "t"}}, resume=False)
    del recorder
    assert subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db)]).returncode == -9
    assert (tmp_path / "mlflow.db-journal").is_file()
    assert load_history(f"sqlite:///{db}", "tokengen").frame.empty  # read, not "fix tracking.uri"
    assert not (tmp_path / "mlflow.db-journal").exists()
    assert run_sweep(small_sweep(tmp_path, "sweep.dry_run=true")) == 0, capsys.readouterr().err
