"""State that heals or says so: a journal's damaged lines (a byte that is not UTF-8, `42`, `{"result": {}}`,
a line cut mid-write) are set aside beside it, named once, never a result; a journaled result is recorded
only for a key of the plan; a journal path that cannot take a result is one line before any trial runs;
a killed writer's rollback journal beside an older SQLite store is rolled back, not blamed on tracking.uri, and
a WAL store (the Recorder's) is read after a killed writer, and from a folder the reader may not write."""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from disk_helpers import fill, tmpfs
from mlflow import MlflowClient
from servers import seeded_uri
from sweep_helpers import child_runs, small_sweep, store_left_by

from sweeps.delivery.full_disk import stopped_full
from sweeps.delivery.journal import Journal, JournalError, JournalUnwritable, journaled_results
from sweeps.delivery.outbox import Outbox
from sweeps.driver import run_sweep
from sweeps.planning.grid import plan_sweep
from sweeps.planning.resume import trials_to_run
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tracking.store.history import load_history
from tracking.store.recorder import Recorder

DAMAGED = [
    b'{"result": {"key": "k9", "status": "fini\xff"}, "files": []}',
    b"42",
    b'{"result":{}}',
    b'{"result": {"key": "k3"',
]  # not UTF-8, not an entry, a result without its key, cut short


def result(key: str, status: str = "finished") -> TrialRecord:
    return make_record(TrialSpec(), key=key, status=status)


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
    assert [r.key for r in journaled_results("tokengen", "s")] == ["k1"]


def test_a_journaled_result_outside_the_plan_is_never_recorded(tmp_path):
    uri = seeded_uri(tmp_path, "m.db")
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("s", {"sweep": {"name": "s"}}, resume=False)
    journal = Journal.open("tokengen", "s", root=tmp_path)
    planned, stray = journal.append(result("k1")), journal.append(result("not-planned"))
    outbox = Outbox(journal, recorder)
    assert outbox.take_over({}, {}, {"k1"}) == [planned] and outbox.outside == 1
    outbox.flush(now=True)
    assert [r.data.tags["key"] for r in child_runs(uri)] == ["k1"]
    assert Journal.open("tokengen", "s", root=tmp_path).unrecorded() == [stray]  # kept, for the grid that planned it


def test_a_result_the_journal_marks_recorded_and_the_store_lost_is_recorded_again(tmp_path, capsys):
    """A store that lost its last writes (its -wal unlinked under the driver, a copy made without it): the
    journal's recorded result goes back in from the journal, once, said in a line; never measured again."""
    config = small_sweep(tmp_path)
    plan = plan_sweep(config)
    trial = plan.trials[0]
    record = make_record(trial.spec, key=trial.key, env_fingerprint="here")
    journal = Journal.open("tokengen", "t", root=tmp_path)
    kept = Outbox(journal, Recorder(seeded_uri(tmp_path / "before"), "tokengen"))
    kept.recorder.start_sweep("t", config, resume=False)
    kept.put(record)
    assert kept.unrecorded == 0 and journal.unrecorded() == []
    recorder = Recorder(seeded_uri(tmp_path / "lost"), "tokengen")  # the same store, its last writes gone
    recorder.start_sweep("t", config, resume=True)
    outbox = Outbox(Journal.open("tokengen", "t", root=tmp_path), recorder)
    capsys.readouterr()
    assert (
        trials_to_run(plan, outbox, True, {trial.key: {"here": ""}}) == plan.trials[1:]
    )  # its result stands: not measured again
    assert capsys.readouterr().err.splitlines()[0] == (
        "journal: 1 result(s) the journal marks recorded are missing from the store: recording them again "
        "from the journal, without running their trials again"
    )
    outbox.flush(now=True)
    assert [r.data.tags["trial_key"] for r in child_runs(recorder.uri)] == [trial.key]
    again = Outbox(Journal.open("tokengen", "t", root=tmp_path), recorder)
    assert again.take_over(recorder.index().attempts) == [] and again.restored == 0


@pytest.mark.parametrize("store", ["takes-it", "full"])
def test_a_journal_that_turns_read_only_loses_no_finished_result(tmp_path, capsys, store):
    """The journal's disk is remounted read-only mid-sweep: the sweep stops in one line (exit 3's OutOfSpace
    path), the result is in the store, or, where the store refuses it too (its own disk full), in a journal of
    its own the line names; the sweep's run is closed FAILED, never left RUNNING."""
    with tmpfs(tmp_path / "journal", "4m") as journal_disk, tmpfs(tmp_path / "store", "6m") as store_disk:
        uri = seeded_uri(store_disk)
        recorder = Recorder(uri, "tokengen")
        recorder.start_sweep("s", {}, resume=False)
        outbox = Outbox(Journal.open("tokengen", "s", root=journal_disk), recorder)
        outbox.put(result("k1"))
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(journal_disk)], capture_output=True, text=True)
        if remounted.returncode:
            pytest.skip(f"cannot remount a tmpfs read-only here ({remounted.stderr.strip()})")
        if store == "full":
            fill(store_disk)
        with pytest.raises(JournalUnwritable) as stopped:
            outbox.put(dataclasses.replace(result("k2"), files={TOKENS_FILE: b"\x01" * (64 << 10)}))
        capsys.readouterr()
        stopped_full(outbox, [], stopped.value)
        said = capsys.readouterr().err.strip().splitlines()[-1]
        journal = outbox.journal.path
        assert said.startswith(f"error: the sweep's journal {journal} could not be written (Read-only file system): ")
        if store == "takes-it":
            assert said.endswith(
                "every finished result is in the store; make it writable and rerun the same command to run the rest"
            ), said
            assert sorted(r.data.tags["trial_key"] for r in child_runs(uri)) == ["k1", "k2"]
            assert MlflowClient(tracking_uri=uri).get_run(recorder.parent_id).info.status == "FAILED"
            return
        kept = Path(said.split(" are kept in ")[1].split(" (move it")[0])
        assert [r.key for r in Journal(kept).unrecorded()] == ["k2"]
        assert Journal(kept).unrecorded()[0].files == {TOKENS_FILE: b"\x01" * (64 << 10)}
        assert [r.data.tags["trial_key"] for r in child_runs(uri)] == ["k1"]
        shutil.rmtree(kept.parent)


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
ONE_TRIAL = """
import sys
from tokengen.contract.names import FINISHED
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tracking.store.recorder import Recorder
recorder = Recorder(sys.argv[1], "tokengen")
recorder.start_sweep("t", {}, resume=False)
recorder.record_trial(make_record(TrialSpec(), key=TrialSpec().key(), status=FINISHED))
"""


@pytest.fixture(scope="module")
def one_trial_store(tmp_path_factory) -> Path:
    """A store with one finished trial, by a driver process that ended."""
    return store_left_by(tmp_path_factory.mktemp("one_trial"), ONE_TRIAL)


def one_trial_then_killed_writer(store: Path, db: Path, journal_mode: str | None = None) -> None:
    """A copy of `store` at `db` (`journal_mode`: then set, as an older store's), and a writer killed
    mid-transaction on it."""
    shutil.copyfile(store, db)
    if journal_mode:
        with closing(sqlite3.connect(db)) as connection:
            assert connection.execute(f"PRAGMA journal_mode={journal_mode}").fetchone() == (journal_mode.lower(),)
    assert subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db)]).returncode == -9


def test_a_rollback_journal_a_killed_writer_left_is_rolled_back(one_trial_store, tmp_path, monkeypatch, capsys):
    """An older store, in rollback-journal mode: SQLite rolls the journal back for the reader."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    one_trial_then_killed_writer(one_trial_store, db, "DELETE")
    assert (tmp_path / "mlflow.db-journal").is_file()
    assert len(load_history(f"sqlite:///{db}", "tokengen").frame) == 1  # read, not "fix tracking.uri"
    assert not (tmp_path / "mlflow.db-journal").exists()
    assert run_sweep(small_sweep(tmp_path, "sweep.dry_run=true")) == 0, capsys.readouterr().err


def test_a_killed_writer_of_a_wal_store_leaves_no_journal_and_the_store_reads(
    one_trial_store, tmp_path, monkeypatch, capsys
):
    """The Recorder switches a store to WAL: a killed writer leaves its log (-wal), which readers skip past."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    one_trial_then_killed_writer(one_trial_store, db)
    assert (tmp_path / "mlflow.db-wal").is_file() and not (tmp_path / "mlflow.db-journal").exists()
    assert len(load_history(f"sqlite:///{db}", "tokengen").frame) == 1
    assert run_sweep(small_sweep(tmp_path, "sweep.dry_run=true")) == 0, capsys.readouterr().err


@pytest.mark.parametrize("writer", ["closed", "killed"])
def test_a_wal_store_in_a_folder_the_reader_may_not_write_reads(one_trial_store, tmp_path, writer):
    """SQLite's read-only connection creates -wal and -shm where none are (a writer that closed the store
    removed them): on a read-only filesystem the history reads the file alone instead of failing."""
    with tmpfs(tmp_path / "ro", "8m") as disk:
        db = disk / "mlflow.db"
        one_trial_then_killed_writer(one_trial_store, db)
        if writer == "closed":
            with closing(sqlite3.connect(db)) as connection:
                connection.execute("PRAGMA schema_version")  # the last connection checkpoints, removes -wal
        assert (disk / "mlflow.db-wal").exists() == (writer == "killed")
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remounted.returncode:
            pytest.skip(f"cannot remount a tmpfs read-only here ({remounted.stderr.strip()})")
        assert len(load_history(f"sqlite:///{db}", "tokengen").frame) == 1
