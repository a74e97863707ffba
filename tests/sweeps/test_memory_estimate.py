"""A trial's peak memory, estimated before it runs (tokengen/contract/memory_estimate.py): against what trials measured
(the H200 baseline's reserved bytes in docs/results.md; real trial processes' peak RSS here), shown by the dry
run, and a trial that would not fit refused before Ray starts in one line, unless the guard is off."""

from __future__ import annotations

import pandas as pd
import pytest
from sweep_helpers import small_sweep

from sweeps.driver import run_sweep
from sweeps.execution.trial_process import TrialRequest, run_trial_process
from sweeps.planning.grid import PlannedTrial
from sweeps.pricing.memory_guard import sweep_refusal as memory_refusal
from tokengen.contract.memory_estimate import FreeMemory, estimate_memory
from tokengen.contract.rules import resolve

H200_BASELINE_RESERVED = 33.684e9  # docs/results.md: gpt2 float32, batch 32, 100 steps, prompt 1, on an H200


def test_the_h200_baseline_is_estimated_within_30_percent_of_what_it_reserved():
    spec = resolve("baseline", model="gpt2", device="cuda", batch_size=32, max_seqlen=100, prompt_len=1)
    assert 0.7 < estimate_memory(spec).cuda / H200_BASELINE_RESERVED < 1.3
    expandable = resolve(
        "baseline", model="gpt2", device="cuda", batch_size=32, max_seqlen=100, prompt_len=1, allocator="expandable"
    )  # segments that grow: what is live, not every step's block
    assert estimate_memory(expandable).cuda < 3e9


@pytest.mark.slow
def test_a_baseline_trial_process_peaks_within_30_percent_of_its_estimate(tmp_path):
    """A real trial process's peak RSS, for a baseline whose last step's logits (32 x 41 x 50,257 floats,
    0.26 GB) weigh as much as half of torch itself: the estimate's parts, not its constant, decide it. (The
    smoke grid's 16 trials, measured by a sweep, are in docs/sweeps.md.)"""
    spec = resolve("baseline", model="tiny", batch_size=32, max_seqlen=2, prompt_len=40, warmup=0, runs=1)
    record = run_trial_process(
        TrialRequest(spec=spec.to_dict(), key="k", folder=str(tmp_path / "k"), timeout_s=300, threads=2)
    )
    assert record.status == "finished", record.result.error_message
    found = estimate_memory(spec)
    assert found.logits > 0.25e9
    ratio = found.rss / record.result.peak_rss_bytes
    assert 0.7 < ratio < 1.3, (ratio, record.result.peak_rss_bytes)


def test_a_trial_that_would_not_fit_is_refused_in_one_line_unless_the_guard_is_off(tmp_path, capsys):
    assert run_sweep(small_sweep(tmp_path, "grid.batch_size=[100000]", "trial.prompt_len=1")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert " would take about " in line and "GB of host memory (weights " in line and "logits " in line, line
    assert line.endswith("free: narrow the grid, or set sweep.memory_guard=null to run it anyway"), line
    huge = [PlannedTrial(resolve("baseline", model="tiny", batch_size=100000, max_seqlen=6, prompt_len=1))]
    free = FreeMemory(host=16e9, gpus=[])
    assert memory_refusal(huge, free, 0.9) and memory_refusal(huge, free, None) is None
    assert memory_refusal(huge, FreeMemory(host=1e15, gpus=[]), 0.9) is None


def test_the_dry_run_shows_each_trials_estimate(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_sweep(small_sweep(tmp_path, "sweep.dry_run=true")) == 0
    assert "## Memory" in capsys.readouterr().out
    plan = pd.read_csv(tmp_path / "reports" / "t" / "plan.csv")
    assert (plan["memory_rss_gb"] > 0.3).all() and plan["memory_cuda_gb"].isna().all()
