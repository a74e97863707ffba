"""A sweep that loses nothing when its tracking server goes down: every result waits in the driver's
journal, the trials go on at their pace, and rerunning the same command records what waits without
running it again. A real `mlflow server`, killed mid-sweep and restarted on the same port and store."""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest
from servers import MlflowServer, seeded_uri
from sweep_helpers import (
    child_runs,
    driver_command,
    driver_environment,
    joining_warm_ray,
    run_captured,
    small_sweep,
    wait_for_finished_runs,
)

from sweeps.delivery.journal import Journal
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tracking.store.recorder import Recorder

TRIALS = 4
FOUR_TRIALS = ("grid.batch_size=[1,2]", "sweep.cpus_per_trial=2")  # 2 variants x 2 batches, one at a time


def test_the_journal_gives_back_what_waits_with_its_files(tmp_path, capsys):
    journal = Journal.open("tokengen", "s", root=tmp_path)
    assert journal.path == tmp_path / ".sweeps/journal/tokengen/s.jsonl"
    assert not journal.path.exists(), "a sweep refused before its first result leaves no journal file"
    first = replace(
        make_record(TrialSpec(), key="k1", status="finished", node_started_at=1764480000.123456, runtime_s=[0.1, 0.2]),
        files={TOKENS_FILE: b"\x00\x01tokens"},
        log="line 1\nline 2\n",
    )
    first = journal.append(first)
    second = journal.append(make_record(TrialSpec(), key="k2", status="failed", error_type="Crashed"))
    journal.mark_recorded(second, "run-2")
    with open(journal.path, "a") as handle:
        handle.write('{"result": {"key": "k3"')  # a line cut short (power loss)
    fourth = journal.append(make_record(TrialSpec(), key="k4"))  # never glued to the cut line
    assert Journal.open("tokengen", "s", root=tmp_path).unrecorded() == [first, fourth]
    assert "set aside 1 damaged line(s)" in capsys.readouterr().err
    assert (journal.files_dir / "k1" / TOKENS_FILE).read_bytes() == b"\x00\x01tokens"
    assert first.result.attempt_id != fourth.result.attempt_id


def test_an_attempt_already_in_mlflow_is_noted_not_recorded_again(tmp_path):
    """The driver died after MLflow took a failed result but before the journal noted it: the rerun
    finds the attempt in the store and records it no second time."""
    from sweeps.delivery.outbox import Outbox

    uri = seeded_uri(tmp_path, "m.db")
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("s", {"sweep": {"name": "s"}}, resume=False)
    journal = Journal.open("tokengen", "s", root=tmp_path)
    failed = make_record(TrialSpec(), key="k1", status="failed", error_type="Crashed", error_message="x")
    failed = journal.append(failed)
    recorder.record_trial(failed)  # ...and the driver dies before mark_recorded
    outbox = Outbox(Journal.open("tokengen", "s", root=tmp_path), recorder)
    assert outbox.take_over(recorder.index().attempts) == []
    assert Journal.open("tokengen", "s", root=tmp_path).unrecorded() == []
    assert len(child_runs(uri)) == 1


@pytest.mark.slow
def test_an_outage_keeps_every_result_and_the_rerun_records_them_without_running(tmp_path, warm_ray):
    server = MlflowServer(tmp_path / "server").start()
    overrides = (f"tracking.uri={server.url}", *FOUR_TRIALS)  # the driver's sweep, and the rerun's
    command = driver_command(tmp_path, *overrides, *joining_warm_ray())
    try:
        recorder = Recorder(server.url, "tokengen")  # the driver's client, made while the server is up
        log = tmp_path / "driver.log"
        with open(log, "w") as sink:
            driver = subprocess.Popen(command, cwd=tmp_path, env=driver_environment(), stdout=sink, stderr=sink)
        wait_for_finished_runs(server.url, 2, driver, log)
        server.stop()  # the outage: connections are refused from here on
        stopped = time.monotonic()
        driver.wait(timeout=120)  # MLflow's own retries would stall each write for minutes
        after_outage_s = time.monotonic() - stopped
        err = log.read_text()
        lines = err.strip().splitlines()
        assert driver.returncode == 3, err[-3000:]
        assert f"sweep t: {TRIALS} finished, 0 failed" in err
        unrecorded = int(lines[-1].split()[1])
        assert lines[-1].startswith("error: ") and 1 <= unrecorded <= TRIALS - 2, lines[-1]
        assert lines[-1].endswith("rerunning the same command records them without running their trials again")
        assert after_outage_s < 60, f"the sweep stalled for {after_outage_s:.0f} s after the server went down"
        journaled = journal_results(tmp_path)
        assert len(journaled) == TRIALS
        # a write that meets the outage fails in about a second, not after MLflow's minutes of back-off
        assert seconds_to_fail(recorder.finished_keys) < 10

        server.start()  # same port, same store
        # the same sweep rerun in this process, on the warm Ray the driver joined (no trial is to run)
        status, _, rerun_err = run_captured(small_sweep(tmp_path, *overrides), tmp_path)
        assert status == 0, rerun_err[-3000:]
        assert "sweep t: 0 trial(s) to run" in rerun_err and "sweep t: 0 finished, 0 failed" in rerun_err
        finished = defaultdict(list)
        for run in child_runs(server.url):
            if run.data.tags.get("status") == "finished":
                finished[run.data.tags["trial_key"]].append(run)
        assert sorted(finished) == sorted(journaled)
        for key, runs in finished.items():
            assert len(runs) == 1, f"{key} recorded {len(runs)} times"
            # the recorded result is the one the first driver journaled: its trial did not run again
            assert runs[0].data.metrics["node_started_at"] == pytest.approx(journaled[key]["node_started_at"], abs=1e-3)
    finally:
        server.stop()


def seconds_to_fail(call, limit_s: float = 30) -> float:
    """How long `call` takes to raise (inf if it is still trying after limit_s: it is left to finish)."""
    took = {}

    def attempt():
        started = time.monotonic()
        try:
            call()
        except Exception:  # noqa: BLE001 - any error will do: the point is how soon it comes
            took["s"] = time.monotonic() - started

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(limit_s)
    return took.get("s", math.inf)


def journal_results(cwd) -> dict[str, dict]:
    """The journal's results by key, read as plain JSON lines (not through the code under test)."""
    path = cwd / ".sweeps" / "journal" / "tokengen" / "t.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {entry["result"]["key"]: entry["result"] for entry in lines if "result" in entry}
