"""One record end to end: after the trial process a trial is a TrialRecord (a TrialSpec and a TrialResult) at
every boundary, never a dict: what Ray's task returns, what the outbox keeps and sends, what the recorder takes,
what a journal line reads back as, and what the report reads per run before its frame. The sweep is real (local
Ray, a SQLite MLflow store, one tiny trial); the boundaries are watched by wrapping the functions that cross them.
The doors stay open to what older code wrote: a journal line of today's format loads, a value of the wrong type
is refused where the record is made."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from servers import seeded_uri
from sweep_helpers import small_sweep

import sweeps.execution.execute as execute_module
import sweeps.execution.schedule as schedule_module
import tracking.store.runs as runs_module
from sweeps.delivery.journal import Journal
from sweeps.delivery.outbox import Outbox
from sweeps.driver import run_sweep
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.record import TrialResult
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tracking.store.reading import fill_error_messages, load_sweep
from tracking.store.recorder import Recorder
from tracking.store.runs import StoredRun, stored_run


@dataclass
class Seen:
    """What crossed each boundary during the sweep, as it crossed."""

    planned: list = field(default_factory=list)  # each PlannedTrial's spec, as the execution stage got it
    from_ray: list = field(default_factory=list)
    put: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    journaled: list = field(default_factory=list)
    recorded: list = field(default_factory=list)
    read: list = field(default_factory=list)


class RayWatched:
    """The schedule's `ray` with its `get` watched: the value Ray's task returned, as the driver got it."""

    def __init__(self, ray, seen: list):
        self._ray, self._seen = ray, seen

    def __getattr__(self, name):
        return getattr(self._ray, name)

    def get(self, *args, **kwargs):
        value = self._ray.get(*args, **kwargs)
        self._seen.append(value)
        return value


def watch(monkeypatch, seen: Seen) -> None:
    """Wrap every boundary's function to keep what crossed it; each still does its own work."""
    monkeypatch.setattr(schedule_module, "ray", RayWatched(schedule_module.ray, seen.from_ray))
    scheduled = execute_module.schedule

    def schedule(trials, *args, **kwargs):
        seen.planned.extend(trial.spec for trial in trials)
        return scheduled(trials, *args, **kwargs)

    monkeypatch.setattr(execute_module, "schedule", schedule)
    for owner, name, kept in (
        (Outbox, "put", seen.put),
        (Journal, "append", seen.journaled),
        (Recorder, "record_trial", seen.recorded),
    ):
        monkeypatch.setattr(owner, name, _keeping(getattr(owner, name), kept))
    flush = Outbox.flush

    def flushed(self, *args, **kwargs):
        seen.waiting.extend(self.waiting)
        return flush(self, *args, **kwargs)

    monkeypatch.setattr(Outbox, "flush", flushed)

    def read(*args, **kwargs):
        run = stored_run(*args, **kwargs)
        seen.read.append(run)
        return run

    monkeypatch.setattr(runs_module, "stored_run", read)


def _keeping(method, kept: list):
    def kept_method(self, record, *args, **kwargs):
        kept.append(record)
        return method(self, record, *args, **kwargs)

    return kept_method


def typed(record) -> bool:
    return type(record) is TrialRecord and type(record.spec) is TrialSpec and type(record.result) is TrialResult


@pytest.mark.slow  # a real trial on the session's warm Ray
def test_a_trial_is_one_typed_record_from_ray_to_the_report(tmp_path, monkeypatch, capsys, warm_ray):
    config = small_sweep(tmp_path, "grid.variant=[kv_cache]")
    seen = Seen()
    watch(monkeypatch, seen)
    assert run_sweep(config) == 0, capsys.readouterr().err[-3000:]
    assert "sweep t: 1 finished, 0 failed" in capsys.readouterr().err

    assert [type(spec) for spec in seen.planned] == [TrialSpec]  # PlannedTrial.spec, priced and ordered
    [returned] = seen.from_ray
    assert typed(returned), type(returned)  # what Ray's task returned
    assert returned.status == "finished" and TOKENS_FILE in returned.files and returned.log
    assert returned.result.node_id and returned.result.accelerator_type is None  # the task added where it ran
    assert returned.spec == seen.planned[0]  # the spec as planned, not the trial's own reading of it
    for boundary in ("put", "journaled", "waiting", "recorded"):
        [record] = getattr(seen, boundary)
        assert typed(record), (boundary, type(record))
        assert record.key == returned.key and record.compile_offer is None  # the offer stayed on the driver's shelf
    [recorded] = seen.recorded
    assert recorded.result.attempt == 1 and recorded.result.attempt_id  # stamped and named by the driver

    journal = Journal.open(config.tracking.experiment, config.sweep.name)
    [read_back] = journal.recorded_elsewhere_than(set())  # its line, read back through the journal's door
    assert typed(read_back) and read_back == recorded  # the same record: spec, result, files and log

    [run] = seen.read  # the report's reading of the run, before its frame
    assert type(run) is StoredRun and typed(run.record), type(run)
    assert run.record.key == returned.key and run.record.result.tokens_sha256 == returned.result.tokens_sha256
    assert run.record.result.runtime_s == pytest.approx(returned.result.runtime_s, rel=1e-6)
    assert run.other["sweep"] == "t" and run.row()["run_id"] == run.run_id


def test_a_journal_line_of_todays_format_reads_back_as_its_record(tmp_path):
    """A line as the journal has always written it (the flat record; a field an older driver wrote and nobody
    declares now; spec fields it left out) loads, typed, with its files and log."""
    journal = Journal.open("tokengen", "old", root=tmp_path)
    flat = make_record(TrialSpec(model="tiny"), key="k1", steps=3, runtime_s=[0.5, 0.25]).to_dict()
    del flat["batch_size"]
    folder = journal.files_dir / "k1"
    folder.mkdir(parents=True)
    (folder / TOKENS_FILE).write_bytes(b"tokens")
    (folder / "trial.log").write_text("a log")
    line = {"result": {**flat, "since_dropped": 1.0}, "files": [TOKENS_FILE]}
    journal.path.write_text(json.dumps(line) + "\n")
    [record] = Journal.open("tokengen", "old", root=tmp_path).unrecorded()
    assert typed(record) and record.result.steps == 3 and record.result.runtime_s == [0.5, 0.25]
    assert record.spec == TrialSpec(model="tiny") and record.files == {TOKENS_FILE: b"tokens"}
    assert record.log == "a log"


def test_a_journal_line_with_a_value_of_the_wrong_type_is_set_aside_never_a_result(tmp_path, capsys):
    journal = Journal.open("tokengen", "bad", root=tmp_path)
    kept = journal.append(make_record(TrialSpec(), key="k1"))
    wrong = {"result": {**make_record(TrialSpec(), key="k2").to_dict(), "steps": "ten"}, "files": []}
    with open(journal.path, "a") as handle:
        handle.write(json.dumps(wrong) + "\n")
    assert Journal.open("tokengen", "bad", root=tmp_path).unrecorded() == [kept]
    assert "set aside 1 damaged line(s)" in capsys.readouterr().err


def test_a_run_holding_a_value_of_the_wrong_type_is_refused_in_one_line_naming_it():
    tags = {"status": "finished", "trial_key": "k", "key": "k", "compile_cache": "warm"}
    read = stored_run("r1", "FINISHED", 0, "file:///a", tags, {"steps": 3.0}, {"model": "tiny"})
    assert typed(read.record) and read.record.result.steps == 3 and read.other["trial_key"] == "k"
    with pytest.raises(TypeError, match=r"^run r2 in the store: batch_size='two' is not a valid int$"):
        stored_run("r2", "FINISHED", 0, "file:///a", tags, {}, {"batch_size": "two"})


def test_a_failed_runs_message_is_read_from_its_result_json_as_its_record(tmp_path):
    """A run without its error_message tag (an older store's) gets the message from its result.json, read through
    the record's door."""
    recorder = Recorder(seeded_uri(tmp_path, "m.db"), "tokengen")
    recorder.start_sweep("f", {}, resume=False)
    failed = make_record(TrialSpec(model="tiny"), key="k", status="failed", error_type="Crashed", error_message="why")
    run_id = recorder.record_trial(failed)
    recorder.client.delete_tag(run_id, "error_message")
    runs = load_sweep(recorder.uri, "tokengen", "f")
    assert "error_message" not in runs.trials  # no run holds the tag
    fill_error_messages(runs.client, runs.trials)
    assert runs.trials.at[0, "error_message"] == "why"
