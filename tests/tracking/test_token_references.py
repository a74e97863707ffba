"""Every speedup's tokens are checked against something, on a SQLite store written through the sweep's own
Recorder: a trial's reference is the workload's baseline where one ran with the same code, else its plain twin
(every knob but the cache and compile at its plain value), else a generate() peer; where none ran its tokens are
`unchecked`, and the report's first lines count them and name the fix; a baseline measured with other code is
never the reference, and says so."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from servers import seeded_uri

from tokengen.contract.machine.fingerprint import as_text
from tokengen.contract.rules import resolve
from tokengen.contract.trial_record import make_record
from tracking.report.build import build_report
from tracking.store.recorder import Recorder

FACTS = {"device": "cpu X", "torch": "2.13.0", "threads": 2, "code": "c0de"}


def record(recorder: Recorder, variant: str, n: int, tokens: str, code: str = "c0de", **knobs) -> str:
    spec = resolve(variant, model="tiny", device="cpu", batch_size=2, max_seqlen=n, prompt_len=4, runs=3, **knobs)
    runtime = 0.01 * n
    return recorder.record_trial(
        make_record(
            spec,
            key=spec.key(),
            steps=n,
            runtime_mean_s=runtime,
            runtime_std_s=runtime / 100,
            runs_done=3,
            tokens_per_s=2 * n / runtime,
            tokens_sha256=tokens,
            measurement="ok",
            env_facts=as_text({**FACTS, "code": code}),
        )
    )


def sweep(recorder: Recorder, name: str, trials: list[tuple]) -> dict[tuple, str]:
    recorder.start_sweep(name, {"sweep": {"name": name}}, resume=False)
    return {(t[0], t[1]): record(recorder, *t) for t in trials}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("refs")
    uri = seeded_uri(root)
    recorder = Recorder(uri, "tokengen")
    ids = sweep(  # the knob sweep without `baseline`: static_cache with stop_check sync and every_k
        recorder,
        "knobs",
        [
            ("static_cache", 8, "t8"),
            ("static_cache_every_k", 8, "t8"),
            ("static_cache", 48, "t48"),
            ("static_cache_every_k", 48, "t48, one step late"),
        ],
    )
    ids |= sweep(recorder, "peer", [("static_compiled", 8, "p8"), ("hf_generate_compiled", 8, "p8")])
    ids |= sweep(  # a baseline is the reference where one ran, before the plain twin
        recorder,
        "first",
        [("baseline", 16, "b16"), ("static_cache", 16, "b16, drifted"), ("static_cache_every_k", 16, "b16")],
    )
    ids |= sweep(recorder, "older", [("baseline", 32, "b32", "aaaa")])
    ids |= sweep(recorder, "newer", [("kv_cache", 32, "b32", "bbbb")])
    out = root / "reports"
    reports = {name: build_report(uri, "tokengen", name, out, write=name == "knobs") for name in ("knobs", "peer")}
    reports |= {name: build_report(uri, "tokengen", name, out, write=False) for name in ("first", "newer")}
    return uri, ids, reports


def results(report) -> dict:
    import pandas as pd

    frame = pd.read_csv(report.directory / "results.csv", keep_default_na=False)
    return {(r["variant"], int(r["max_seqlen"])): r for r in frame.to_dict("records")}


def test_a_knob_sweep_without_baseline_checks_each_trial_against_its_plain_twin(store):
    uri, ids, reports = store
    rows = results(reports["knobs"])
    assert rows[("static_cache_every_k", 8)]["tokens"] == "ok vs twin static_cache"
    assert rows[("static_cache_every_k", 8)]["tokens_reference"] == "twin static_cache"
    assert rows[("static_cache_every_k", 48)]["tokens"] == "MISMATCH (no tokens.npy) vs twin static_cache"
    for n in (8, 48):
        assert rows[("static_cache", n)]["tokens"] == "unchecked: no reference at this point"
    tags = MlflowClient(tracking_uri=uri).get_run(ids[("static_cache_every_k", 8)]).data.tags
    assert tags["tokens_verdict"] == "ok vs twin static_cache"  # the UI's column says it too


def test_the_reports_first_lines_count_the_unchecked_and_name_the_fix(store):
    _, _, reports = store
    text = (reports["knobs"].directory / "report.md").read_text()
    assert text.splitlines()[4] == (
        "Tokens: 2 checked against their plain twin; 2 unchecked: no reference at their point "
        "(add `baseline` or the plain variant to the grid (`grid.variant`))."
    )
    assert reports["knobs"].main.splitlines()[2] == text.splitlines()[4]  # the sweep prints it too
    assert "| static_cache | 2 | 0 | n/a | n/a | n/a | 0 | 2 unchecked |" in text  # the overview counts them


def test_without_a_twin_the_generate_peer_is_the_reference(store):
    _, _, reports = store
    rows = results(reports["peer"])
    assert rows[("static_compiled", 8)]["tokens"] == "ok vs peer hf_generate_compiled"
    assert rows[("hf_generate_compiled", 8)]["tokens"] == "ok vs twin static_compiled"  # ours is the peer's twin
    assert (
        "Tokens: 1 checked against their plain twin; 1 against their generate() peer."
        in (reports["peer"].directory / "report.md").read_text()
    )


def test_the_baseline_comes_first(store):
    _, _, reports = store
    rows = results(reports["first"])
    assert rows[("static_cache_every_k", 16)]["tokens"] == "ok"  # the baseline's tokens, not its twin's
    assert rows[("static_cache", 16)]["tokens"] == "MISMATCH (no tokens.npy)"
    assert "Tokens:" not in (reports["first"].directory / "report.md").read_text()  # nothing to say


def test_a_baseline_measured_with_other_code_is_never_the_reference(store):
    _, _, reports = store
    kv = results(reports["newer"])[("kv_cache", 32)]
    assert kv["speedup"] == pytest.approx(1.0)  # still divided by it, and the difference named beside it
    assert kv["env_vs_baseline"] == "code bbbb vs aaaa"
    assert kv["tokens"] == "unchecked: its reference ran other code (code aaaa vs bbbb)"
    assert bool(kv["speedup_marked"])  # unproven: marked wherever it is shown
    text = (reports["newer"].directory / "report.md").read_text()
    assert "Tokens: 1 unchecked: their reference ran other code (add `baseline` to the grid to measure one" in text
