"""A full disk wherever the sweep writes (the store, its journal, the trials' workdir, the report) is one
line naming the path and the space needed, exit 3, with everything finished kept; a run the store took
only half of is never counted as recorded, and a rerun leaves one run per key and attempt. On a real
tmpfs, filled by a real ballast file: the kernel's ENOSPC, no patched function."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest
from disk_helpers import fill, free, tmpfs
from mlflow import MlflowClient
from sweep_helpers import child_runs, small_sweep

from sweeps.delivery.journal import Journal
from sweeps.delivery.outbox import Outbox
from sweeps.driver import run_sweep
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tracking.store.recorder import Recorder


def finished(key: str, tokens: int) -> TrialRecord:
    record = make_record(TrialSpec(model="tiny", batch_size=1), key=key, status="finished", runtime_mean_s=0.5)
    return replace(record, files={TOKENS_FILE: b"\x01" * tokens}, log="a line\n")


def journal_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.parametrize("again", ["same-driver", "rerun"])
def test_a_run_the_full_store_took_half_of_is_replaced_never_counted(tmp_path, monkeypatch, again):
    """The store's disk fills while a result's artifact is written: the run is left without its status (RUNNING,
    its artifact cut). The same driver's next try, or a rerun's take-over, deletes it and records the attempt
    whole, once, under a real run id."""
    with tmpfs(tmp_path / "disk", "6m") as disk:
        monkeypatch.chdir(disk)  # the SQLite experiment's artifacts go under the directory that made it
        uri = f"sqlite:///{disk}/m.db"
        recorder = Recorder(uri, "tokengen")
        recorder.start_sweep("s", {}, resume=False)
        journal = Journal.open("tokengen", "s", root=tmp_path)
        outbox = Outbox(journal, recorder)
        fill(disk, leave=512 * 1024)  # room for the run's rows, not for its 2 MB of tokens
        outbox.put(finished("k1", 2 << 20))
        assert outbox.unrecorded == 1
        assert outbox.full.startswith(f"out of space: the tracking store {disk}/"), outbox.full
        assert "(No space left on device; " in outbox.full and " needed)" in outbox.full
        [cut] = child_runs(uri)
        assert cut.info.status == "RUNNING" and "status" not in cut.data.tags
        free(disk)
        if again == "rerun":
            recorder = Recorder(uri, "tokengen")
            recorder.start_sweep("s", {}, resume=True)
            outbox = Outbox(Journal.open("tokengen", "s", root=tmp_path), recorder)
            index = recorder.index()
            assert list(index.half_written) == [journal.unrecorded()[0].result.attempt_id] and not index.attempts
            assert len(outbox.take_over(index.attempts, index.half_written)) == 1
        outbox.flush(now=True)
        assert outbox.unrecorded == 0 and outbox.full is None
        [run] = child_runs(uri)
        assert run.info.run_id != cut.info.run_id and run.data.tags["status"] == "finished"
        assert run.info.status == "FINISHED" and run.data.metrics["runtime_mean_s"] == 0.5
        assert MlflowClient(tracking_uri=uri).get_run(cut.info.run_id).info.lifecycle_stage == "deleted"
        recorded = [e for e in journal_lines(journal.path) if "recorded" in e]
        assert [e["run_id"] for e in recorded] == [run.info.run_id], "counted once, under its real run id"
        assert Journal.open("tokengen", "s", root=tmp_path).unrecorded() == []


def fill_after_first_result(journal, disk, stop: threading.Event) -> threading.Thread:
    """Fills `disk` the moment the journal holds its first result: the next result meets a full disk."""

    def watch():
        while not stop.is_set():
            if any("result" in e for e in journal_lines(journal)):
                fill(disk)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_journal_that_fills_mid_sweep_stops_it_in_one_line_and_the_rerun_loses_nothing(tmp_path, capsys, warm_ray):
    config = small_sweep(
        tmp_path,
        "grid.variant=[kv_cache]",
        "grid.batch_size=[1,2]",
        "sweep.cpus_per_trial=2",
        "trial.warmup=0",
        "trial.runs=1",
    )
    uri = config.tracking.uri
    with tmpfs(tmp_path / ".sweeps", "2m") as disk:
        journal = Journal.path_for("tokengen", "t")
        stop = threading.Event()
        filler = fill_after_first_result(journal, disk, stop)
        try:
            assert run_sweep(config) == 3
        finally:
            stop.set()
            filler.join()
        last = capsys.readouterr().err.strip().splitlines()[-1]
        kept = [e["result"] for e in journal_lines(journal) if "result" in e]
        assert last.startswith(
            f"error: out of space: the sweep's journal {journal} could not be written (No space left on device; "
        ), last
        assert " needed): make room there and rerun the same command; the " in last
        assert kept and all(r["status"] == "finished" for r in kept)
        runs = child_runs(uri)
        assert {r["key"] for r in kept} <= {r.data.tags["trial_key"] for r in runs}, "every journaled result recorded"
        client = MlflowClient(tracking_uri=uri)
        [parent] = client.search_runs(
            [client.get_experiment_by_name("tokengen").experiment_id], "tags.sweep_parent = 't'"
        )
        assert parent.info.status == "FAILED" and parent.data.tags["stopped"].startswith("out of space:")
        free(disk)
        assert run_sweep(config) == 0
        runs = child_runs(uri)
        keys = [r.data.tags["trial_key"] for r in runs]
        assert len(keys) == len(set(keys)) == 2, "one run per key and attempt"
        assert all(r.info.status == "FINISHED" for r in runs)
        assert all(e["run_id"] for e in journal_lines(journal) if "recorded" in e)


@pytest.mark.slow
def test_a_full_workdir_or_report_disk_is_one_line_and_exit_3(tmp_path, capsys, warm_ray):
    """The trials' workdir full from the start: the first trial cannot even leave its outcome, and the sweep
    stops there, nothing recorded as a failed trial. Then a report directory that is full: every trial is
    recorded, the sweep's run closed, and the line says where the report could not go."""
    config = small_sweep(tmp_path, "grid.variant=[kv_cache]", "grid.batch_size=[1]", "trial.warmup=0", "trial.runs=1")
    uri = config.tracking.uri
    with tmpfs(tmp_path / "work", "1m") as work:
        work.chmod(0o700)  # a new tmpfs is open to all (1777): a workdir must be the user's alone
        fill(work)
        assert run_sweep(config) == 3
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith(f"error: out of space: the trial's folder {work}/t-"), last
        assert "could not be written (No space left on device; 0 B free, about " in last
        assert child_runs(uri) == []
    with tmpfs(tmp_path / "reports", "1m") as reports:
        fill(reports)
        assert run_sweep(config) == 3
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith(
            "error: out of space: the report reports/t could not be written (No space left on "
            "device; 0 B free, about 2.0 MB needed): make room there and rebuild it with "
            f"python -m tracking.report --uri {uri} --sweep t"
        ), last
    [run] = child_runs(uri)
    assert run.info.status == "FINISHED"
