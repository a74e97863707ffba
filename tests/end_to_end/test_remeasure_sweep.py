"""End to end: a real local Ray sweep in which the driver's test hook makes kv_cache's first attempt and every
static_cache attempt look contended. Both are measured again at the end of the sweep, each attempt a run of
its own with its `attempt` tag and a journal line of its own; the report and the sweep's output start with the
measurement line and mark static_cache's speedup; a resumed sweep runs nothing more, one with another round
runs static_cache once more.

The machine may be busy for real (a shared CI host): then baseline is remeasured too and kv_cache's second
attempt may be contended; the assertions hold either way."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep
from sweeps.execution.remeasure import TEST_CONTENDED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("warm_ray"),
]  # real trials on the session's warm Ray (the hook is read by the driver)

VARIANTS = ("grid.variant=[baseline,kv_cache,static_cache]",)


def attempts_by_variant(uri: str) -> dict[str, list[tuple[int, str]]]:
    found: dict[str, list[tuple[int, str]]] = {}
    for run in child_runs(uri):
        tags = run.data.tags
        found.setdefault(tags["variant"], []).append((int(tags["attempt"]), tags.get("measurement")))
    return {v: sorted(a) for v, a in found.items()}


def test_a_trial_made_to_look_contended_is_remeasured_and_its_speedup_marked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TEST_CONTENDED, "kv_cache@1,static_cache")
    config = small_sweep(tmp_path, *VARIANTS, "sweep.remeasure=1")
    uri = config.tracking.uri
    assert run_sweep(config) == 0
    out = capsys.readouterr()

    found = attempts_by_variant(uri)
    assert found["static_cache"] == [(1, "contended"), (2, "contended")]  # its one round used, still contended
    assert found["kv_cache"][0] == (1, "contended") and [a for a, _ in found["kv_cache"]] == [1, 2]
    assert [a for a, _ in found["baseline"]] in ([1], [1, 2])  # 2 only if the machine itself was busy
    remeasured = 2 + (len(found["baseline"]) == 2)
    assert re.search(
        rf"remeasure round 1 of 1: {remeasured} trial\(s\) not ok \(.*others used [0-9.-]+ of \d+ cores", out.err
    ), out.err[-3000:]
    last = next(line for line in reversed(out.err.splitlines()) if line.startswith("sweep t:"))  # the summary
    assert last.startswith(f"sweep t: 3 finished, 0 failed; {remeasured} remeasured (") and " now ok), in " in last

    first = out.out.splitlines()[0]  # the sweep's printed report starts with the measurement line
    assert first.startswith("Measurement: ") and "contended" in first and f"{remeasured} remeasured" in first
    report = (tmp_path / "reports" / "t" / "report.md").read_text()
    assert report.splitlines()[2] == first
    table = report.split("## (a) Runtime and speedup per trial")[1].split("\n## ")[0]
    static = next(line for line in table.splitlines() if line.startswith("| static_cache |"))
    assert "x ! |" in static and "| contended |" in static and re.search(r"\| [12] of 2 \|", static), static

    results = pd.read_csv(tmp_path / "reports" / "t" / "results.csv").set_index("variant")
    assert results.loc["static_cache", "attempts"] == 2 and bool(results.loc["static_cache", "speedup_marked"])
    assert len(json.loads(results.loc["static_cache", "runtime_s"])) == 2  # trial.runs=2

    journal = [json.loads(line) for line in (tmp_path / ".sweeps" / "journal" / "tokengen" / "t.jsonl").open()]
    journaled = [(e["result"]["variant"], e["result"]["attempt"]) for e in journal if "result" in e]
    assert ("static_cache", 1) in journaled and ("static_cache", 2) in journaled
    recorded = [e["recorded"] for e in journal if "recorded" in e]
    assert len(recorded) == len(journaled) == len(child_runs(uri))

    # the same command again: every key is done (ok, or its round used up)
    assert run_sweep(small_sweep(tmp_path, *VARIANTS, "sweep.remeasure=1")) == 0
    err = capsys.readouterr().err
    assert "resume: skipping 3 trial(s)" in err and "remeasure round" not in err
    assert attempts_by_variant(uri) == found

    # one more round asked for: static_cache (still contended) runs a third time
    assert run_sweep(small_sweep(tmp_path, *VARIANTS, "sweep.remeasure=2")) == 0
    assert [a for a, _ in attempts_by_variant(uri)["static_cache"]] == [1, 2, 3]
