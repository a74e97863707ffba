"""The one place a trial's record is completed: the planned spec wins, except what the trial settled."""

from __future__ import annotations

import pytest

from sweeps.execution.trial_process import complete_record
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord


def test_the_planned_spec_wins_but_a_profiler_the_trial_resolved_is_kept():
    outcome = {"profile": "torch", "batch_size": 2, "runtime_mean_s": 0.1}
    planned = {**TrialSpec().to_dict(), "profile": "auto", "batch_size": 4}
    done = complete_record(outcome, planned, key="k", accelerator_type=None, node_host="127.0.0.1")
    assert isinstance(done, TrialRecord) and done.spec.profile == "torch"  # `auto` on a CPU ran torch.profiler
    assert done.spec.batch_size == 4 and done.key == "k" and done.result.node_host == "127.0.0.1"
    assert done.result.runtime_mean_s == 0.1 and done.result.env_host


def test_a_failure_without_a_profile_keeps_the_planned_one():
    done = complete_record({"status": "failed"}, {"profile": "auto"}, key="k", accelerator_type="H200")
    assert done.spec.profile == "auto" and done.result.accelerator_type == "H200"


def test_an_outcome_of_the_wrong_type_fails_where_it_becomes_a_record():
    with pytest.raises(TypeError, match=r"^TrialResult.steps='3': a str where int is declared$"):
        complete_record({"steps": "3"}, {}, key="k")
    with pytest.raises(TypeError, match="node_ip"):  # a name nobody declares
        complete_record({}, {}, key="k", node_ip="127.0.0.1")
