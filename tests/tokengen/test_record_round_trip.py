"""A result record knows itself (tokengen/contract/record.py): TrialResult saves to a dict and to JSON and
builds itself back from either, so what a trial wrote to result.json reads back as the same object; a
failed trial's record, fields left None and figures that are NaN included."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from sweeps.execution import trial_process
from tokengen.contract.names import FAILED, FINISHED, RESULT_FILE
from tokengen.contract.record import RESULT_FIELDS, TrialResult, base_type
from tokengen.contract.rules import resolve
from tokengen.contract.spec import SpecError, TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tokengen.measure import trial


def round_trips(result: TrialResult) -> list[TrialResult]:
    """The result read back from its dict, from its JSON, and from its dict through json as text."""
    return [
        TrialResult.from_dict(result.to_dict()),
        TrialResult.from_json(result.to_json()),
        TrialResult.from_dict(json.loads(json.dumps(result.to_dict()))),
    ]


def every_field_set() -> TrialResult:
    """Every field holds a value of its declared type, a few of them NaN or None on purpose."""
    values = {}
    for index, name in enumerate(RESULT_FIELDS):
        kind = base_type(name)
        values[name] = {
            int: index,
            float: index + 0.25,
            bool: index % 2 == 0,
            str: f"text-{name}",
            list: [0.3, float("nan"), 0.25],
        }[kind]
    return TrialResult(**{**values, "ttft_s": math.nan, "energy_j": None, "error_message": None, "status": FINISHED})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real tiny trial on the CPU, its result.json written by the trial process's own writer."""
    spec = resolve("kv_cache", model="tiny", device="cpu", batch_size=2, max_seqlen=4, runs=2, stop="fixed:3")
    record = trial.run_trial(spec)
    path = tmp_path_factory.mktemp("trial") / RESULT_FILE
    trial_process._write(path, record)
    return record, path


def test_a_real_trials_result_json_reads_back_as_the_same_record(finished):
    record, path = finished
    result = TrialResult.from_dict(record)
    assert result.status == FINISHED and result.steps == 3 and len(result.runtime_s) == 2
    assert TrialResult.from_json(path.read_text()) == result
    assert all(again == result for again in round_trips(result))
    assert {**TrialSpec().to_dict(), **result.to_dict()}.keys() == record.keys()
    made = make_record(resolve(**{k: record[k] for k in TrialSpec().to_dict()}), **result.to_dict())
    assert made.to_dict() == record and TrialRecord.from_dict(record) == made


def test_a_failed_record_reads_back_the_same():
    fields = trial_process.failure("Crashed", "the trial process died of SIGKILL", log="one\ntwo\n")
    failed = TrialResult.from_dict(fields)
    assert (failed.status, failed.error_type, failed.log_tail, failed.steps) == (FAILED, "Crashed", "one\ntwo", None)
    assert all(again == failed for again in round_trips(failed))
    assert failed.to_dict() == TrialResult(**fields).to_dict()


def test_every_field_none_and_nan_included_reads_back_the_same():
    full = every_field_set()
    for again in round_trips(full):
        assert again == full
        assert [f for f in RESULT_FIELDS if type(getattr(again, f)) is not type(getattr(full, f))] == []
        assert math.isnan(again.ttft_s) and again.energy_j is None and math.isnan(again.runtime_s[1])


def test_equality_still_tells_records_apart():
    full = every_field_set()
    assert dataclasses.replace(full, ttft_s=None) != full  # a NaN is not a None
    assert dataclasses.replace(full, runtime_s=[0.3, float("nan"), 0.26]) != full
    assert dataclasses.replace(full, log_tail="another") != full
    assert TrialResult() == TrialResult() and TrialResult() != TrialResult(status=FAILED)


def test_a_field_nobody_declares_is_refused():
    with pytest.raises(TypeError, match="speedup"):
        TrialResult.from_dict({**TrialResult().to_dict(), "speedup": 2.0})


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrialResult(steps="ten"),
        lambda: TrialResult.from_dict({"steps": "ten"}),
        lambda: TrialRecord.from_dict({**TrialSpec().to_dict(), "steps": "ten"}),
        lambda: make_record(TrialSpec(), steps="ten"),
        lambda: TrialResult.from_json('{"steps": "ten"}'),
    ],
)
def test_a_mistyped_field_is_refused_where_the_record_is_made(make):
    with pytest.raises(TypeError) as refused:
        make()
    assert str(refused.value) == "TrialResult.steps='ten': a str where int is declared"


def test_every_declared_type_is_held_to():
    for name, wrong in (("runtime_mean_s", "fast"), ("deterministic", 1), ("runtime_s", 0.3), ("status", None)):
        with pytest.raises(TypeError, match=f"^TrialResult.{name}="):
            TrialResult(**{name: wrong})
    with pytest.raises(TypeError, match="^TrialResult.steps=True: a bool where int is declared$"):
        TrialResult(steps=True)  # a bool is never a count
    with pytest.raises(SpecError, match="batch_size='two' is not a valid int"):
        TrialRecord.from_dict({"batch_size": "two", "status": FINISHED})
    with pytest.raises(TypeError, match="TrialRecord.result: a dict where TrialResult is declared"):
        TrialRecord(TrialSpec(), {"steps": 3})
    widened = TrialResult(runtime_mean_s=1, steps=3, runtime_s=(0.5, 0.25))  # a whole number is a float's value
    assert (type(widened.runtime_mean_s), widened.runtime_s) == (float, [0.5, 0.25])
