"""One contended trial, marked wherever the report shows it: a store written through the sweep's own Recorder
where `static_compiled` at L40S, batch 2, max_seqlen 8 (C) was judged contended and every other trial ok. Every
table of report.md with a row from C, or a figure derived from it (its speedup, its twins' ratios, its growth
exponent, its cost per token), carries the mark `!` there and the mark's legend under it; the rows of ok trials
carry none; the overview counts it; points.csv names it. And where every trial of a variant is marked, the
overview shows their figures, marked, instead of n/a."""

from __future__ import annotations

import pandas as pd
import pytest
from servers import seeded_uri

from tokengen.contract.rules import resolve
from tokengen.contract.trial_record import TrialRecord, make_record
from tracking.report.build import build_report
from tracking.report.notes import NOTES
from tracking.store.recorder import Recorder

PRICES = {"L40S": 2.0, "H100": 4.0}
MEMORY = {"mem_allocated_peak_bytes": 100 * 2**20, "mem_reserved_peak_bytes": 150 * 2**20}
PROFILE = {"gpu_idle_us_per_step": 120.0, "gpu_busy_pct": 80.0, "host_sync_us_per_step": 95.0}
CONTENDED = ("static_compiled", "L40S", 8)
TRIALS = [  # (variant, gpu, max_seqlen, runtime, extra fields)
    ("baseline", "L40S", 8, 0.64, {}),
    ("static_compiled", "L40S", 8, 0.16, {"compile_cache": "cold", "first_run_s": 9.0, **PROFILE}),  # C
    ("static_compiled_pipelined", "L40S", 8, 0.12, {}),
    ("static_compiled_nocheck", "L40S", 8, 0.14, {}),
    ("static_compiled", "L40S", 8, 0.15, {"allocator": "expandable", "compile_cache": "warm", "first_run_s": 1.0}),
    ("hf_generate_compiled", "L40S", 8, 0.2, {}),
    ("baseline", "L40S", 16, 2.56, {}),
    ("static_compiled", "L40S", 16, 0.32, {**PROFILE}),
    ("baseline", "H100", 8, 0.32, {}),
    ("static_compiled", "H100", 8, 0.04, {}),
]


def write(recorder: Recorder, sweep: str, trials: list, contended: tuple | None) -> None:
    recorder.start_sweep(sweep, {"sweep": {"name": sweep, "prices": PRICES}}, resume=False)
    for variant, gpu, n, runtime, extra in trials:
        knobs = {k: extra[k] for k in ("allocator",) if k in extra}
        spec = resolve(variant, model="tiny", device="cuda", batch_size=2, max_seqlen=n, stop="never", runs=3, **knobs)
        judged = "contended" if (variant, gpu, n) == contended and not knobs else "ok"
        record = make_record(
            spec,
            key=spec.key() + gpu,
            accelerator_type=gpu,
            steps=n,
            runtime_mean_s=runtime,
            runtime_std_s=runtime / 100,
            runs_done=3,
            tokens_per_s=2 * n / runtime,
            useful_tokens_per_s=2 * n / runtime,
            energy_j_per_token=0.5,
            tokens_sha256=f"tokens-{n}",
            measurement=judged,
            measurement_reasons="another process shares the GPU" if judged == "contended" else "",
            **MEMORY,
            **{k: v for k, v in extra.items() if k not in knobs},
        )
        recorder.record_trial(record)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("marks")
    store = seeded_uri(root)
    recorder = Recorder(store, "tokengen")
    write(recorder, "one", TRIALS, CONTENDED)
    write(
        recorder,
        "alone",
        [("baseline", "L40S", 8, 0.64, {}), ("kv_cache", "L40S", 8, 0.32, {})],
        ("kv_cache", "L40S", 8),
    )
    built = build_report(store, "tokengen", "one", root / "reports", write=False)
    alone = build_report(store, "tokengen", "alone", root / "reports", write=False)
    return built, (built.directory / "report.md").read_text(), (alone.directory / "report.md").read_text()


def sections(text: str) -> dict[str, tuple[str, list[dict]]]:
    """Each `## ` section with a table: its note and its rows as {column: cell}."""
    out = {}
    for part in text.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        lines = [line for line in body.splitlines() if line.startswith("| ")]
        if not lines:
            continue
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]
        out[title] = (body.split("\n| ")[0], rows)
    return out


def from_contended(row: dict) -> bool:
    """Whether a row shows C or a figure derived from it: a variant column names static_compiled (its own, its sync
    or plain twin's) and the row's point and GPU, where it has them, are C's."""
    variant, gpu, n = CONTENDED
    named = {row.get(c) for c in ("variant", "sync_variant", "plain_variant")}
    return variant in named and row.get("gpu_type", gpu) == gpu and row.get("max_seqlen", str(n)) == str(n)


def test_every_table_that_shows_the_contended_trial_marks_it(report):
    _, text, _ = report
    tables = sections(text)
    showing = {title for title, (_, rows) in tables.items() if any(map(from_contended, rows))}
    assert showing == {
        "Overview per variant",
        "(a) Runtime and speedup per trial",
        "(b) Memory",
        "Compile: cold once per graph, warm beside it",
        "(c) Runtime against max_seqlen",
        "(d) Pipelining gain by batch size",
        "(e) Stop-check overhead against the no-check upper bound",
        "`allocator` against its plain value (default)",
        "(f) runtime_mean_s by GPU type",
        "(f) speedup by GPU type",
        "(f) tokens_per_s by GPU type",
        "(f) Tokens/s, cost and energy by GPU type",
        "Cost and energy per useful token",
        "Idle gap per variant beside its speedup",
    }
    expected = {  # the cells C's figures, or those derived from them, are in
        "(a) Runtime and speedup per trial": ["runtime_mean_s", "speedup", "vs_generate"],
        "(b) Memory": ["mem_allocated_peak_bytes", "mem_reserved_peak_bytes"],
        "Compile: cold once per graph, warm beside it": ["cold_first_run_s", "warm_over_cold"],
        "(c) Runtime against max_seqlen": ["n=8", "exponent"],
        "(d) Pipelining gain by batch size": ["sync_runtime_mean_s", "gain_pct"],
        "(e) Stop-check overhead against the no-check upper bound": ["step_ms", "overhead_pct"],
        "`allocator` against its plain value (default)": ["plain_runtime_mean_s", "vs_plain"],
        "(f) runtime_mean_s by GPU type": ["L40S"],
        "(f) speedup by GPU type": ["L40S"],
        "(f) tokens_per_s by GPU type": ["L40S"],
        "(f) Tokens/s, cost and energy by GPU type": ["L40S tokens/s", "L40S $/Mtok", "L40S J/token"],
        "Cost and energy per useful token": ["useful_tokens_per_s", "cost_per_mtok", "energy_j_per_token"],
        "Idle gap per variant beside its speedup": ["speedup", "gpu_idle_us_per_step"],
    }
    for title in showing - {"Overview per variant"}:
        note, rows = tables[title]
        [row] = [r for r in rows if from_contended(r)]
        assert all(row[c].endswith(" !") for c in expected[title]), (title, row)
        assert NOTES["marked"] in note, title  # the legend under every marked table
        others = [r for r in rows if not from_contended(r)]
        unmarked = {  # figures of ok trials only: no mark
            "(c) Runtime against max_seqlen": ["n=16"],
            "(d) Pipelining gain by batch size": ["runtime_mean_s"],
            "(e) Stop-check overhead against the no-check upper bound": ["nocheck_step_ms"],
            "`allocator` against its plain value (default)": ["runtime_mean_s"],
        }.get(title, [])
        assert not any(row[c].endswith("!") for c in unmarked), (title, row)
        assert not any(" !" in cell for r in others for cell in r.values()), (title, others)


def test_the_overview_counts_the_marked_trial_and_the_measurement_column_names_it(report):
    _, text, _ = report
    tables = sections(text)
    [compiled] = [r for r in tables["Overview per variant"][1] if r["variant"] == "static_compiled"]
    assert compiled["marked"] == "1" and not compiled["speedup_geomean"].endswith("!")  # over the ok ones
    [row] = [r for r in tables["(a) Runtime and speedup per trial"][1] if from_contended(r)]
    assert row["measurement"] == "contended"


def test_points_csv_names_the_marked_speedup(report):
    built, _, _ = report
    points = pd.read_csv(built.directory / "points.csv")
    marked = dict(zip(zip(points["gpu_type"], points["max_seqlen"]), points["marked"].fillna("")))
    assert marked == {("H100", 8): "", ("L40S", 8): "static_compiled", ("L40S", 16): ""}


def test_a_variant_whose_every_trial_is_marked_shows_its_figures_marked(report):
    _, _, alone = report
    overview = sections(alone)["Overview per variant"]
    [kv] = [r for r in overview[1] if r["variant"] == "kv_cache"]
    assert (kv["speedup_geomean"], kv["speedup_min"], kv["speedup_max"], kv["marked"]) == (
        "2.00x !",
        "2.00x !",
        "2.00x !",
        "1",
    )
    assert NOTES["marked_overview"] in overview[0] and NOTES["marked"] in overview[0]


def test_the_sweeps_fallback_summary_marks_the_speedup_too():
    """When the store cannot give a report, the sweep prints its own table: the same mark on the same speedup."""
    from tracking.report.summary import summary_text

    point = dict(model="tiny", dtype="float32", device="cpu", batch_size=4, max_seqlen=8, prompt_len=8, steps=8, runs=3)
    records = [
        dict(point, key="b", variant="baseline", status="finished", runtime_mean_s=0.4, measurement="ok"),
        dict(point, key="k", variant="kv_cache", status="finished", runtime_mean_s=0.2, measurement="contended"),
        dict(point, key="s", variant="static_cache", status="finished", runtime_mean_s=0.25, measurement="ok"),
    ]
    typed = [TrialRecord.from_dict(record) for record in records]  # as the driver holds them
    rows = {line.split()[0]: line.split() for line in summary_text(typed).splitlines()[2:]}
    assert rows["kv_cache"][8:10] == ["2", "!"] and rows["static_cache"][8:10] == ["1.6", "ok"]
