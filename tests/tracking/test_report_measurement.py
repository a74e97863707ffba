"""The report says how sure it is, first: on a SQLite store written through the sweep's own Recorder with
every verdict known in advance, it counts ok/noisy/contended trials and their reasons in its first line,
marks each speedup whose trial or baseline is not ok, leaves those out of the overview's geometric means,
speaks for a remeasured key with its best attempt, and on a quiet machine changes nothing. Its files: a
results.csv with one column per fact and every timed run, a runs.csv, plots wide enough to read."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from PIL import Image
from servers import seeded_uri

from tokengen.contract.rules import resolve
from tokengen.contract.trial_record import make_record
from tracking.report.build import build_report
from tracking.report.plots import OKABE_ITO, WIDTH_PX, palette
from tracking.store.recorder import Recorder

REASONS = {"ok": "", "noisy": "CI target not met (cv 12.0%)", "contended": "others used 1.8 of 2 cores"}
ENV = dict(env_torch="2.13.0", env_host="node-a", env_cpu="x86_64", env_cpu_count=2)


def write(store: str, sweep: str, trials: list[tuple], judged: bool = True) -> Recorder:
    """trials: (variant, batch, n, runtime, measurement, attempt): CPU trials of the tiny model, 5 runs each."""
    recorder = Recorder(store, "tokengen")
    recorder.start_sweep(sweep, {"sweep": {"name": sweep, "prices": {}}}, resume=False)
    for variant, batch, n, runtime, measurement, attempt in trials:
        spec = resolve(variant, model="tiny", device="cpu", batch_size=batch, max_seqlen=n, prompt_len=8, runs=0)
        runs = [runtime * f for f in (0.99, 1.01, 1.0, 0.995, 1.005)]
        verdict = dict(measurement=measurement, measurement_reasons=REASONS[measurement]) if judged else {}
        record = make_record(
            spec,
            key=spec.key(),
            attempt=attempt,
            steps=n,
            runtime_s=runs,
            runtime_mean_s=runtime,
            runtime_std_s=runtime * 0.008,
            runtime_cv=0.008,
            runs_done=5,
            runtime_ci_rel=0.01,
            tokens_per_s=batch * n / runtime,
            useful_tokens_per_s=batch * n / runtime,
            tokens_sha256=f"sha-{batch}-{n}",
            **verdict,
            **ENV,
        )
        recorder.record_trial(record)
    return recorder


DISTURBED = [
    ("baseline", 4, 8, 0.09, "ok", 1),
    ("baseline", 4, 48, 1.2, "ok", 1),
    ("baseline", 8, 48, 2.0, "noisy", 1),
    ("kv_cache", 4, 8, 0.05, "ok", 1),
    ("kv_cache", 4, 48, 0.6, "contended", 1),
    ("kv_cache", 8, 48, 0.5, "ok", 1),
    ("static_cache", 4, 8, 0.5, "contended", 1),
    ("static_cache", 4, 8, 0.045, "ok", 2),  # remeasured: ok
    ("static_cache", 4, 48, 0.3, "ok", 1),
]


@pytest.fixture(scope="module")
def disturbed(tmp_path_factory):
    root = tmp_path_factory.mktemp("disturbed")
    store = seeded_uri(root, "m.db")
    write(store, "busy", DISTURBED)
    report = build_report(store, "tokengen", "busy", root / "reports")
    return report, (report.directory / "report.md").read_text()


def section(text: str, title: str) -> str:
    return text.split(title)[1].split("\n## ")[0]


def rows_of(table: str) -> dict:
    """Markdown rows by their first three cells (variant, batch_size, prompt_len) and max_seqlen."""
    lines = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[1:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        out[(cells["variant"], cells.get("batch_size"), cells.get("max_seqlen"))] = cells
    return out


def test_the_first_line_counts_the_verdicts_and_their_reasons(disturbed):
    report, text = disturbed
    first = text.splitlines()[2]
    assert first.startswith(
        "Measurement: 6 ok, 1 noisy, 1 contended of 8 finished trials; most common reasons: "
        "CI target not met (cv 12.0%) (1), others used 1.8 of 2 cores (1); 1 remeasured, 1 of them ok on a "
        "later attempt"
    )
    assert report.main.splitlines()[0] == first  # the sweep prints the same line first


def test_a_speedup_from_a_trial_or_baseline_not_ok_is_marked(disturbed):
    _, text = disturbed
    rows = rows_of(section(text, "## (a) Runtime and speedup per trial"))
    contended = rows[("kv_cache", "4", "48")]
    assert (contended["speedup"], contended["measurement"]) == ("2.00x !", "contended")
    spoiled = rows[("kv_cache", "8", "48")]
    assert (spoiled["speedup"], spoiled["measurement"]) == ("4.00x !", "ok (baseline noisy)")
    sure = rows[("kv_cache", "4", "8")]
    assert (sure["speedup"], sure["measurement"]) == ("1.80x", "ok")
    remeasured = rows[("static_cache", "4", "8")]
    assert (remeasured["speedup"], remeasured["attempt"], remeasured["runtime_mean_s"]) == ("2.00x", "2 of 2", "0.045")


def test_the_overview_leaves_marked_speedups_out_of_its_means(disturbed):
    _, text = disturbed
    kv = rows_of(section(text, "## Overview per variant"))[("kv_cache", None, None)]
    assert (kv["speedup_geomean"], kv["speedup_min"], kv["speedup_max"], kv["marked"]) == (
        "1.80x",
        "1.80x",
        "1.80x",
        "2",
    )
    static = rows_of(section(text, "## Overview per variant"))[("static_cache", None, None)]
    assert static["speedup_geomean"] == f"{math.sqrt(2.0 * 4.0):.2f}x" and static["marked"] == "0"


def test_results_csv_has_one_column_per_fact_and_every_run(disturbed):
    report, _ = disturbed
    results = pd.read_csv(report.directory / "results.csv")
    assert len(results) == 8 and results.columns.is_unique
    assert not {"key", "run_status", "interval"} & set(results.columns)
    assert {
        "trial_key",
        "status",
        "attempt",
        "attempts",
        "measurement",
        "measurement_reasons",
        "speedup_marked",
        "runs_done",
        "runtime_ci_rel",
        "speedup_low",
        "speedup_high",
    } <= set(results.columns)
    static = results[(results["variant"] == "static_cache") & (results["max_seqlen"] == 8)].iloc[0]
    assert (static["attempt"], static["attempts"], static["measurement"]) == (2, 2, "ok")
    assert json.loads(static["runtime_s"]) == pytest.approx([0.045 * f for f in (0.99, 1.01, 1.0, 0.995, 1.005)])
    runs = pd.read_csv(report.directory / "runs.csv")
    assert len(runs) == 8 * 5 and list(runs["run"][:5]) == [0, 1, 2, 3, 4]
    assert set(runs.columns) >= {"trial_key", "attempt", "variant", "batch_size", "max_seqlen", "run", "runtime_s"}


def test_plots_are_wide_and_colour_blind_safe(disturbed):
    report, text = disturbed
    pictures = [p for p in report.files if p.suffix == ".png"]
    assert {p.name for p in pictures} == {"runtime_vs_seqlen.png", "speedup_vs_batch.png"}
    for path in pictures:
        assert Image.open(path).size[0] >= max(1000, WIDTH_PX), path
        assert f"]({path.name})" in text
    styles = palette(
        pd.DataFrame({"variant": ["baseline", "kv_cache", "static_cache"], "variant_rank": [0, 1, 3], "in_sweep": True})
    )
    colours = [s["color"] for s in styles.values()]
    assert len(set(colours)) == 3 and set(colours) <= set(OKABE_ITO)


def test_a_marked_point_is_drawn_hollow_and_the_others_filled():
    import matplotlib.pyplot as plt

    from tracking.report.plots import _line, speedup_bars

    speedups = {"steps": [8, 16, 32], "speedup": [1.5, 2.0, 3.0], "speedup_low": [1.4, 1.9, 2.5]}
    points = pd.DataFrame({**speedups, "speedup_high": [1.6, 2.1, 3.5], "speedup_marked": [False, True, False]})
    style = palette(points.assign(variant="kv_cache", variant_rank=1))["kv_cache"]
    fig, ax = plt.subplots()
    _line(ax, points, "steps", "speedup", style, speedup_bars)
    marked = [line for line in ax.get_lines() if line.get_marker() == style["marker"]]  # not the error bars' caps
    hollow = [line for line in marked if line.get_markerfacecolor() == "white"]
    filled = [line for line in marked if line not in hollow]
    plt.close(fig)
    assert [list(line.get_xdata()) for line in hollow] == [[16]]  # the marked point alone
    assert [list(line.get_xdata()) for line in filled] == [[8, 16, 32]]  # the line, every point filled


def test_on_a_quiet_machine_nothing_is_marked(tmp_path):
    store = seeded_uri(tmp_path, "m.db")
    quiet = [(v, b, n, r, "ok", 1) for v, b, n, r, _, a in DISTURBED if a == 1]
    write(store, "quiet", quiet)
    report = build_report(store, "tokengen", "quiet", tmp_path / "reports")
    text = (report.directory / "report.md").read_text()
    assert text.splitlines()[2] == (
        "Measurement: all 8 finished trials ok (no interference seen, every spread within target)."
    )
    assert (
        " !" not in text
        and "| marked |" not in text
        and "| measurement |" not in text
        and "attempt" not in section(text, "## (a)")
    )
    kv = rows_of(section(text, "## Overview per variant"))[("kv_cache", None, None)]
    assert kv["speedup_geomean"] == f"{(1.8 * 2.0 * 4.0) ** (1 / 3):.2f}x"


def test_trials_recorded_before_verdicts_are_never_marked(tmp_path):
    store = seeded_uri(tmp_path, "m.db")
    write(store, "old", [t for t in DISTURBED if t[5] == 1], judged=False)
    report = build_report(store, "tokengen", "old", tmp_path / "reports")
    text = (report.directory / "report.md").read_text()
    assert text.splitlines()[2].startswith("Measurement: 8 not judged of 8 finished trials")
    assert " !" not in text and "| measurement |" not in text
