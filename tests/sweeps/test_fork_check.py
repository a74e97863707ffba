"""The fork check (sweeps/execution/fork_check.py) that scripts/gpu_probe.py runs before a sweep: a real fork of
the trials' warm parent, its imports as a sweep's, that answers; and a fork that cannot do what was asked stops
the probe with the fork's own error. On the H200's image every trial failed at its first CUDA call because the
parent had started CUDA: this is the check that says so in seconds instead of after a sweep."""

from __future__ import annotations

import pytest

from sweeps.execution.fork_check import fork_check


@pytest.mark.slow  # the trials' warm parent started in a process of its own
def test_a_fork_of_the_warm_parent_answers_and_one_that_cannot_start_cuda_is_one_line():
    ok, line = fork_check(expect_cuda=False)
    assert ok, line
    assert line.startswith("fork: a fork of the trials' warm parent answered: no CUDA device to start"), line
    # a CPU build asked for CUDA: the fork fails as a poisoned parent's forks do, and the line names the fork's error
    ok, line = fork_check(expect_cuda=True)
    assert not ok
    assert "failed (RuntimeError: torch in the fork sees no CUDA device" in line and "no trial can run" in line
    assert "started CUDA" not in line  # the import hint is for a fork that could not re-initialize CUDA
