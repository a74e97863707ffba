"""Remeasuring on known inputs: which attempt speaks for a key, which keys run again and as which attempt,
every attempt journaled and recorded as its own run, rounds that resume from MLflow, and the test hook
that makes a result look contended. No Ray: `execute` is a stand-in that returns scripted results."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from servers import seeded_uri

from sweeps.delivery.journal import Journal, result_id
from sweeps.delivery.outbox import Outbox
from sweeps.execution.remeasure import TEST_CONTENDED, pending, remeasure, stamp
from sweeps.planning.config import load_config
from sweeps.planning.grid import GridPlan, PlannedTrial
from tokengen.contract.names import FAILED, FINISHED
from tokengen.contract.rules import resolve
from tokengen.contract.trial_record import TrialRecord, make_record
from tracking.measurement import best, latest_series, reason_kind, summary_line
from tracking.store.recorder import Recorder


def run(attempt, measurement, cv=0.01, status=FINISHED, start=0):
    return {"attempt": attempt, "measurement": measurement, "runtime_cv": cv, "status": status, "start_time": start}


def test_the_best_attempt_is_ok_first_then_the_steadiest():
    assert (
        best([run(1, "contended", 0.01, start=1), run(2, "ok", 0.2, start=2), run(3, "ok", 0.05, start=3)])["attempt"]
        == 3
    )
    assert best([run(1, "noisy", 0.3, start=1), run(2, "contended", 0.1, start=2)])["attempt"] == 2
    assert best([run(1, "noisy", 0.1, start=1), run(2, "contended", 0.3, start=2)])["attempt"] == 1  # not the latest
    assert (
        best([run(1, "ok", 0.05, start=1), run(2, "ok", 0.02, start=2), run(3, "contended", 0.01, start=3)])["attempt"]
        == 2
    )  # ok before a steadier contended one
    assert best([run(1, "contended", 0.1, start=1), run(2, None, 0.0, status=FAILED, start=2)])["attempt"] == 1
    assert best([run(1, None, 0.0, status=FAILED, start=1)])["attempt"] == 1
    assert best([run(None, None, 0.05, start=1), run(None, None, 0.02, start=2)])["start_time"] == 2  # before verdicts


def test_a_rerun_from_scratch_starts_a_new_series():
    old = [run(1, "ok", 0.01, start=1), run(2, "ok", 0.001, start=2)]
    new = [run(1, "contended", 0.2, start=5)]
    assert latest_series(old + new) == new
    assert best(old + new)["start_time"] == 5  # the old ok attempts no longer speak for the key


@pytest.mark.parametrize(
    "runs,rounds,expected",
    [
        ([run(1, "ok")], 1, None),
        ([run(1, "contended")], 1, 2),
        ([run(1, "noisy")], 2, 2),
        ([run(1, "contended"), run(2, "contended", start=1)], 1, None),  # its one round is used
        ([run(1, "contended"), run(2, "contended", start=1)], 2, 3),
        ([run(1, "contended"), run(2, "ok", start=1)], 2, None),
        ([run(1, None, status=FAILED)], 1, None),  # its own error would come back
        ([run(1, None)], 1, None),  # recorded before verdicts: left as it is
        ([run(1, "contended"), run(2, None, status=FAILED, start=1)], 1, None),
        ([], 1, None),
    ],
)
def test_pending_names_the_next_attempt(runs, rounds, expected):
    assert pending(runs, rounds) == expected


def record_of(spec, measurement: str, attempt: int = 1, cv: float = 0.01) -> TrialRecord:
    reasons = {"ok": "", "noisy": "CI target not met (cv 30.0%)", "contended": "others used 1.8 of 2 cores"}[
        measurement
    ]
    return make_record(
        spec,
        key=spec.key(),
        attempt=attempt,
        runtime_mean_s=1.0,
        runtime_cv=cv,
        runtime_s=[1.0, 1.0],
        runtime_ci_rel=cv,
        measurement=measurement,
        measurement_reasons=reasons,
        interference_cores=2,
        interference_device="cpu",
        interference_cpu_util=0.95,
        interference_others_cores=0.1,
    )


class Sweep:
    """A plan of three keys, an Outbox over a real journal and SQLite store, and a scripted `execute`."""

    def __init__(self, root, script: dict, rounds: int = 1):
        self.specs = {v: resolve(v, model="tiny", runs=0) for v in ("baseline", "kv_cache", "static_cache")}
        self.plan = GridPlan([PlannedTrial(s) for s in self.specs.values()])
        self.recorder = Recorder(seeded_uri(root, "m.db"), "tokengen")
        self.recorder.start_sweep("r", {}, resume=False)
        self.outbox = Outbox(Journal.open("tokengen", "r", root), self.recorder)
        self.script, self.rounds, self.calls = script, rounds, []

    def execute(self, trials):
        self.calls.append([(t.spec.variant, t.attempt) for t in trials])
        out = []
        for t in trials:
            rec = stamp(record_of(t.spec, self.script[t.spec.variant][t.attempt - 1]), t.attempt)
            out.append(self.outbox.put(rec))
        return out

    def first_pass(self):
        return self.execute(self.plan.trials)

    def remeasure(self):
        return remeasure(load_config({"sweep": {"remeasure": self.rounds}}), self.plan, self.outbox, self.execute)


def test_rounds_run_what_is_not_ok_until_ok_or_used_up(tmp_path):
    sweep = Sweep(
        tmp_path,
        {"baseline": ["ok"], "kv_cache": ["contended", "ok"], "static_cache": ["noisy", "contended", "contended"]},
        rounds=2,
    )
    sweep.first_pass()
    done = sweep.remeasure()
    assert sweep.calls[1:] == [[("kv_cache", 2), ("static_cache", 2)], [("static_cache", 3)]]
    assert done.rounds == 2 and len(done.records) == 3
    assert done.keys == {sweep.specs["kv_cache"].key(), sweep.specs["static_cache"].key()}
    assert done.now_ok == {sweep.specs["kv_cache"].key()} and done.said == "; 2 remeasured (1 now ok)"
    found = sweep.recorder.attempts_of({s.key() for s in sweep.specs.values()})
    assert sorted(int(r["attempt"]) for r in found[sweep.specs["static_cache"].key()]) == [1, 2, 3]
    # each attempt is a line of its own in the journal, its files in a folder of its own, all recorded
    assert sweep.outbox.journal.unrecorded() == []
    folders = {p.name for p in sweep.outbox.journal.files_dir.iterdir()}
    assert f"{sweep.specs['static_cache'].key()}@3" in folders and sweep.specs["static_cache"].key() in folders


def test_a_resumed_sweep_picks_up_its_rounds_from_mlflow(tmp_path):
    sweep = Sweep(
        tmp_path, {"baseline": ["ok"], "kv_cache": ["contended", "contended", "ok"], "static_cache": ["ok"]}, rounds=1
    )
    sweep.first_pass()
    sweep.remeasure()
    assert sweep.calls[1:] == [[("kv_cache", 2)]]
    again = Sweep.__new__(Sweep)  # a later driver, same store: nothing left at one round
    again.__dict__.update(sweep.__dict__, calls=[])
    assert again.remeasure().records == [] and again.calls == []
    again.rounds = 2  # one more round asked for: attempt 3, numbered after what MLflow holds
    assert [r.result.attempt for r in again.remeasure().records] == [3] and again.calls == [[("kv_cache", 3)]]


def test_no_round_while_results_wait_for_the_store(tmp_path, capsys):
    sweep = Sweep(tmp_path, {"baseline": ["contended"], "kv_cache": ["ok"], "static_cache": ["ok"]})
    sweep.first_pass()
    sweep.outbox.waiting.append(make_record(sweep.specs["baseline"], key="x"))
    assert sweep.remeasure().records == [] and len(sweep.calls) == 1
    assert "remeasure: not now, 1 result(s) wait for the tracking store" in capsys.readouterr().err
    assert remeasure(load_config({"sweep": {"remeasure": 0}}), sweep.plan, sweep.outbox, sweep.execute).records == []


def test_the_journal_keeps_every_attempt_of_a_key_apart(tmp_path):
    journal = Journal.open("tokengen", "j", tmp_path)
    spec = resolve("kv_cache", model="tiny")
    first, second = record_of(spec, "contended", 1), record_of(spec, "ok", 2)
    for rec in (first, second):
        attempt = rec.result.attempt
        journal.append(replace(rec, files={"tokens.npy": str(attempt).encode()}, log=f"attempt {attempt}"))
    waiting = journal.unrecorded()
    assert [r.result.attempt for r in waiting] == [1, 2]
    assert [r.files["tokens.npy"] for r in waiting] == [b"1", b"2"] and waiting[1].log == "attempt 2"
    journal.mark_recorded(waiting[1], "run-2")
    assert [r.result.attempt for r in journal.unrecorded()] == [1]
    assert (result_id(first.result), result_id(second.result)) == (spec.key(), f"{spec.key()}@2")


def test_a_recorded_remeasure_is_not_sent_again_after_a_driver_died(tmp_path):
    recorder = Recorder(seeded_uri(tmp_path, "m.db"), "tokengen")
    recorder.start_sweep("d", {}, resume=False)
    spec = resolve("kv_cache", model="tiny")
    second = record_of(spec, "ok", 2)
    journal = Journal.open("tokengen", "d", tmp_path)
    second = journal.append(second)  # the journal first, as Outbox.put does: it names the attempt
    recorder.record_trial(second)  # recorded, but the driver died before the journal noted it
    assert second.result.attempt_id in recorder.index().attempts
    assert Outbox(journal, recorder).take_over(recorder.index().attempts) == []


def test_the_test_hook_makes_chosen_attempts_look_contended(monkeypatch):
    spec = resolve("kv_cache", model="tiny", runs=0)
    monkeypatch.setenv(TEST_CONTENDED, "kv_cache@1,static_cache")
    first = stamp(record_of(spec, "ok"), 1).result
    assert (first.attempt, first.measurement) == (1, "contended")
    assert first.measurement_reasons == "others used 2.0 of 2 cores"
    assert stamp(record_of(spec, "ok"), 2).result.measurement == "ok"  # only attempt 1 was asked for
    always = resolve("static_cache", model="tiny", runs=0)
    assert stamp(record_of(always, "ok"), 5).result.measurement == "contended"
    failed = record_of(spec, "ok").with_result(status=FAILED)
    assert stamp(failed, 1).result.measurement == "ok"  # a failed trial has nothing to judge
    monkeypatch.delenv(TEST_CONTENDED)
    assert stamp(record_of(spec, "ok"), 1).result.measurement == "ok"
    assert os.environ.get(TEST_CONTENDED) is None


def test_the_line_counts_verdicts_and_the_most_common_reasons():
    line = summary_line(
        ["ok", "ok", "contended", "contended", "noisy", None],
        [
            "",
            "",
            "others used 1.6 of 2 cores",
            "others used 1.9 of 2 cores; CPU time 0.41 of 2 threads x wall",
            "CI target not met (cv 30.0%)",
            None,
        ],
        remeasured="2 remeasured",
    )
    assert line.startswith(
        "Measurement: 2 ok, 1 noisy, 2 contended, 1 not judged of 6 finished trials; most common "
        "reasons: others used 1.6-1.9 of 2 cores (2), CPU time 0.41 of 2 threads x wall (1), CI target "
        "not met (cv 30.0%) (1); 2 remeasured."
    )
    assert "; 2 remeasured. Speedups marked ! come from" in line
    assert summary_line(["ok"] * 3, [""] * 3) == (
        "Measurement: all 3 finished trials ok (no interference seen, every spread within target)."
    )
    assert reason_kind("CI target not met (cv 30.0%)") == "CI target not met (cv N%)"
    assert reason_kind("2 other processes on the GPU") == "N other processes on the GPU"
