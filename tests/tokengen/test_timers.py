"""The timed runs time the step, not the allocator: the CUDA cache is emptied once, before the
warmup, and between timed runs only the peak counters start afresh (a spy on torch.cuda's calls)."""

from __future__ import annotations

import torch

from tokengen.contract.rules import resolve
from tokengen.decode.loop import Generation
from tokengen.measure import trial


def test_timed_runs_reset_peaks_and_never_empty_the_cache(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset_peaks"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    spec = resolve("kv_cache", model="tiny", device="cuda", warmup=1, runs=4)
    tokens = torch.zeros((2, 3), dtype=torch.long)

    def generate():
        calls.append("run")
        return Generation(tokens=tokens, steps=2)

    first, seconds = trial.clocks.timed(generate, spec.device)
    runs = trial.timed_runs(generate, spec, first, seconds)
    assert len(runs.runtimes) == 4 and runs.checksums
    assert calls == ["run"] + ["reset_peaks", "run"] * 4, "no cache emptied between timed runs"
    calls.clear()
    trial.memory.release_cached(spec.device)
    assert calls == ["empty_cache"]
