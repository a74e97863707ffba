"""The one place a trial's record is completed: the planned spec wins, except what the trial settled."""

from __future__ import annotations

from sweeps.execution.trial_process import complete_record


def test_the_planned_spec_wins_but_a_profiler_the_trial_resolved_is_kept():
    record = {"profile": "torch", "batch_size": 2, "runtime_mean_s": 0.1}
    planned = {"profile": "auto", "batch_size": 4}
    done = complete_record(record, planned, key="k", accelerator_type=None, node_ip="127.0.0.1")
    assert done["profile"] == "torch"  # `auto` on a CPU trial ran torch.profiler: the param says so
    assert done["batch_size"] == 4 and done["key"] == "k" and done["node_ip"] == "127.0.0.1"
    assert done["env_host"]


def test_a_failure_without_a_profile_keeps_the_planned_one():
    done = complete_record({"status": "failed"}, {"profile": "auto"}, key="k", accelerator_type="H200")
    assert done["profile"] == "auto" and done["accelerator_type"] == "H200"
