"""A report built while its sweep runs says how many planned trials have no result yet (the parent run is
still RUNNING); built after the sweep ends, it says nothing of the kind. A store written through the Recorder."""

from __future__ import annotations

from compare_helpers import Store
from sweep_helpers import child_runs

from tracking.report.build import build_report


def test_a_report_of_a_running_sweep_says_trials_remain(tmp_path):
    store = Store(tmp_path / "store")
    store.sweep("s")
    store.trial("baseline", 1.0, seed=1)
    store.trial("kv_cache", 0.5, seed=2)
    done = [r.data.tags["trial_key"] for r in child_runs(store.uri)]
    store.recorder.start_sweep("s", {"sweep": {"name": "s"}}, resume=True, planned=done + ["not-run-yet"])
    report = build_report(store.uri, "tokengen", "s", tmp_path / "reports", write=False)
    line = "sweep 's' is still running: 1 of its 3 planned trial(s) have no result yet; rebuild the report when it ends"
    assert report.warnings == [f"report: {line}"]
    assert (report.directory / "report.md").read_text().endswith(f"\n**{line}**\n")
    store.recorder.end_sweep(0)
    report = build_report(store.uri, "tokengen", "s", tmp_path / "reports", write=False)
    assert report.warnings == [] and "still running" not in (report.directory / "report.md").read_text()
