"""`python -m tracking.report`: a sweep's article-style comparison report, built from MLflow alone.

Reads the sweep's runs (the latest sweep by default) from any tracking store or server, writes
`reports/<sweep>/report.md` (first how sure its numbers are, then one table per article question),
`results.csv` (every trial, one column per fact, MLflow's names), `runs.csv` (every timed run),
`points.csv` (every point, a variant's speedup per column: tracking/report/headline.py) and PNG plots, attaches them to the sweep's parent run under `report/`, and prints the main tables. The
comparison goes into MLflow too: each trial's run gets the report's figures (speedup, its interval,
vs_generate, the token verdict: tracking/store/derived.py), the sweep's run gets the overview as its
description, and the experiment gets a saved view of the sweep whose URL is printed last
(tracking/ui.py). The sweep driver calls `build_report` at the end of every sweep.

    python -m tracking.report [--uri sqlite:///mlflow.db] [--experiment tokengen] [--sweep NAME] [--out reports]
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tokengen.contract.declarations import plain
from tokengen.contract.names import FINISHED, PLAN_FILE, TRIAL_KEY, path_component
from tokengen.contract.record import first_line
from tracking.report import article_tables, comparison
from tracking.report.advance_tables import advance_tables
from tracking.report.compile_table import compile_table
from tracking.report.figures.references import summary as reference_summary
from tracking.report.figures.run_figures import figures
from tracking.report.figures.token_verdicts import HOW
from tracking.report.frames import measurement_summary, results_frame, runs_frame, system_facts
from tracking.report.gpu_tables import cost_table, gpu_cost_table, gpu_tables
from tracking.report.headline import headline, points_table
from tracking.report.knob_tables import knob_tables
from tracking.report.load_tables import goodput_table, peak_table, slo_text
from tracking.report.markdown import to_markdown
from tracking.report.marks import is_marked
from tracking.report.notes import NOTES
from tracking.report.overview import overview_table
from tracking.report.peak_search_tables import search_table
from tracking.report.plan_report import plan_against_actual
from tracking.report.plot_process import PlotDrawing
from tracking.report.profile_table import NSYS_NOTE, nsys_table
from tracking.report.serving_table import serving_table
from tracking.store.connect import redacted
from tracking.store.derived import DERIVED_METRICS, write_back
from tracking.store.reading import (
    ReportError,
    add_outside_baselines,
    fill_error_messages,
    fill_runtimes,
    load_sweep,
    parent_artifact,
)
from tracking.store.view import attach_files, publish_view, set_note
from tracking.ui import how_to_open

OWN_FILES = (
    "report.md",
    "results.csv",
    "runs.csv",
    "points.csv",
    "runtime_vs_seqlen.png",
    "speedup_vs_batch.png",
    "memory.png",
    "latency_vs_rate.png",
    "pareto.png",
)


@dataclass
class Report:
    sweep: str
    parent_id: str
    directory: Path
    main: str  # the overview and the runtime/speedup table, as Markdown
    trials: int
    failed: int
    downloads: int
    files: list[Path] = field(default_factory=list)
    experiment_id: str = ""
    view_key: str = ""  # the sweep's saved view in the MLflow UI ("" when not published)
    ui: list[str] = field(default_factory=list)  # how to open it: the server command and the URL
    warnings: list[str] = field(default_factory=list)


def _section(title: str, note: str, table: pd.DataFrame | None) -> list[str]:
    """A table under its title and note, the mark's legend added where a cell carries it."""
    if table is None or table.empty:
        return []
    note = " ".join(part for part in (note, NOTES["marked"] if is_marked(table) else "") if part)
    return [f"## {title}", ""] + ([note, ""] if note else []) + [to_markdown(table), ""]


def lead(mine: pd.DataFrame) -> list[str]:
    """The report's first lines: how sure its numbers are, then what its tokens were checked against."""
    done = mine[mine["status"] == FINISHED]
    tokens = reference_summary(done["tokens_reference"], done["tokens"])
    return [measurement_summary(mine)] + (["", tokens] if tokens else [])


def render(runs, frame: pd.DataFrame) -> tuple[str, str]:
    """(report.md's text but its plots, the main tables' text: the overview and (a))."""
    mine = frame[frame["in_sweep"].astype(bool)]
    done = int((mine["status"] == FINISHED).sum())
    borrowed = int(((~frame["baseline_in_sweep"]) & frame["in_sweep"] & frame["speedup"].notna()).sum())
    note_a = NOTES["a"].format(match=", ".join(comparison.REPORT_MATCH).replace("gpu_type", "GPU type"), how=HOW)
    if borrowed:
        note_a += f" {borrowed} speedup(s) use a baseline recorded by another sweep (resume skipped it here)."
    reused = int(mine["reused_from"].notna().sum()) if "reused_from" in mine else 0
    noisy = mine[(mine["status"] == FINISHED) & mine["noisy"].astype(bool)]
    if not noisy.empty:  # trials recorded before trials were judged
        note_a += (
            f" **Warning**: {len(noisy)} trial(s) vary by more than 5% from run to run (runtime_cv): "
            + ", ".join(sorted(set(noisy["variant"])))
            + "; their speedups deserve more runs."
        )
    first = lead(mine)
    overview = overview_table(frame)
    note_overview = NOTES["overview"] + (" " + NOTES["marked_overview"] if is_marked(overview) else "")
    if (pd.to_numeric(mine["attempts"], errors="coerce") > 1).any():
        note_a += " " + NOTES["attempts"]
    main = (
        [*first, ""]
        + _section("Overview per variant", note_overview, overview)
        + _section("(a) Runtime and speedup per trial", note_a, article_tables.runtime_table(frame))
    )
    built = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    header = [
        f"# Sweep `{runs.sweep}`",
        "",
        *first,
        "",
        f"Store `{redacted(runs.uri)}`, experiment `{runs.experiment}`, parent run `{runs.parent_id}`: {done} finished, "
        f"{len(mine) - done} failed trial(s)"
        + (
            f", {reused} of them reused by key from earlier sweeps (column `reused_from` of `results.csv`)"
            if reused
            else ""
        )
        + f". Built from MLflow {built}; every trial of the sweep's plan is in `results.csv`.",
        "",
        "## System",
        "",
        to_markdown(system_facts(mine)),
        "",
    ]
    sections = [
        ("(b) Memory", NOTES["b"], article_tables.memory_table(frame)),
        ("Compile: cold once per graph, warm beside it", NOTES["compile"], compile_table(frame)),
        ("(c) Runtime against max_seqlen", NOTES["c"], article_tables.seqlen_table(frame)),
        ("(d) Pipelining gain by batch size", NOTES["d"], article_tables.pipelining_table(frame)),
        ("(e) Stop-check overhead against the no-check upper bound", NOTES["e"], article_tables.nocheck_table(frame)),
        *[
            (f"`{knob}` against its plain value ({plain(knob).name})", NOTES["knob"], table)
            for knob, table in knob_tables(frame)
        ],
        *[
            (f"`{knob}` against its plain value ({plain(knob).name}), with the library's own", NOTES["advance"], table)
            for knob, table in advance_tables(frame)
        ],
        *[(f"(f) {value} by GPU type", NOTES["f"], table) for value, table in gpu_tables(frame)],
        ("(f) Tokens/s, cost and energy by GPU type", NOTES["f"] + " " + NOTES["cost"], gpu_cost_table(frame)),
        ("Cost and energy per useful token", NOTES["cost"], cost_table(frame)),
        ("Idle gap per variant beside its speedup", NOTES["idle"], article_tables.idle_table(frame)),
        ("Nsight Systems reports", NSYS_NOTE, nsys_table(frame)),
        (
            "Serving requests: static against continuous batching against generate_batch",
            NOTES["serving"],
            serving_table(frame),
        ),
        (
            "Serving under load: goodput against the SLO",
            NOTES["load"].format(slo=slo_text(frame)),
            goodput_table(frame),
        ),
        ("Serving under load: the highest rate meeting the SLO", NOTES["peak"], peak_table(frame)),
        ("Serving under load: the peak search", NOTES["search"], search_table(frame)),
        ("(g) Failed trials", "", article_tables.failed_table(frame)),
    ]
    body = [line for section in sections for line in _section(*section)]
    return "\n".join(header + main[len(first) + 1 :] + body), "\n".join(main)


def pictures(plots: dict[str, Path]) -> str:
    """report.md's plots section, after its tables; '' without plots."""
    lines = ["## Plots", ""] + [f"![{title}]({path.name})" for title, path in plots.items()] + [""] if plots else []
    return "\n" + "\n".join(lines) if lines else ""


def description(runs, frame: pd.DataFrame) -> str:
    """The sweep run's description in the MLflow UI (its `mlflow.note.content`): the overview table."""
    mine = frame[frame["in_sweep"].astype(bool)]
    done = int((mine["status"] == FINISHED).sum())
    table = overview_table(frame)
    point = headline(frame)
    text = "\n".join(
        [
            f"Sweep `{runs.sweep}`: {done} finished, {len(mine) - done} failed trial(s). The full report is this "
            "run's artifact report/report.md, with its plots beside it; report/points.csv holds every point, "
            "one row each, the speedup of each variant in its columns. Each trial's run carries the report's "
            f"figures (metrics {', '.join(DERIVED_METRICS)}, and ui/... at four significant digits; tags "
            "tokens_verdict, compared, baseline_run_id).",
            "",
            *lead(mine),
            "",
            *(
                [
                    f"The sweep's view in the runs table opens at its headline point, {point.label}, grouped by "
                    "variant, best speedup first: remove the filter's params clauses to see every point.",
                    "",
                ]
                if point
                else []
            ),
            *_section(
                "Overview per variant",
                NOTES["overview"] + (" " + NOTES["marked_overview"] if is_marked(table) else ""),
                table,
            ),
        ]
    )
    return text


def publish(runs, frame: pd.DataFrame) -> str:
    """The comparison in MLflow itself: the derived figures on each trial's run, the overview as the
    sweep run's description, the sweep's view in the experiment. Returns the view's key."""
    write_back(
        runs.client, runs.uri, runs.experiment_id, runs.sweep, runs.parent_id, figures(frame, comparison.REPORT_MATCH)
    )
    set_note(runs.client, runs.parent_id, description(runs, frame))
    point = headline(frame)
    at = (point.label, point.run_id, point.varying) if point else None
    return publish_view(runs.client, runs.experiment_id, runs.sweep, runs.parent_id, at, point and point.names)


def still_running(runs) -> str | None:
    """A report built while its sweep runs covers what has finished so far: how many planned trials remain."""
    parent = runs.client.get_run(runs.parent_id)
    if parent.info.status != "RUNNING":
        return None
    planned = set((parent_artifact(runs.client, parent, PLAN_FILE) or {}).get("planned", []))
    done = set(runs.trials[TRIAL_KEY]) if TRIAL_KEY in runs.trials else set()
    return (
        f"sweep '{runs.sweep}' is still running: {len(planned - done)} of its {len(planned)} planned trial(s) "
        "have no result yet; rebuild the report when it ends"
    )


def build_report(
    uri: str, experiment: str = "tokengen", sweep: str | None = None, out: str | Path = "reports", write: bool = True
) -> Report:
    """Load the sweep from MLflow, compare, and write report.md, results.csv and the plots; `write`:
    publish the comparison in MLflow too (figures on the runs, description, view)."""
    from tracking.report.load_plots import LOAD_PLOTS
    from tracking.report.plots import PLOTS

    runs = load_sweep(uri, experiment, sweep)
    if runs.trials.empty:
        raise ReportError(f"sweep '{runs.sweep}' in {uri} has no trials yet: run it with python -m sweeps.run first")
    fill_error_messages(runs.client, runs.trials)
    fill_runtimes(runs.client, runs.trials)
    if comparison.lacks_baselines(runs.trials):
        add_outside_baselines(runs)
    prices = runs.settings.prices
    frame, downloads = comparison.prepare(runs.trials, runs.outside_baselines, runs.client, prices)
    directory = Path(out) / path_component(runs.sweep)  # a folder of its own, whatever the name
    directory.mkdir(parents=True, exist_ok=True)
    for name in OWN_FILES:
        (directory / name).unlink(missing_ok=True)
    drawing = PlotDrawing({**PLOTS, **LOAD_PLOTS}, frame, directory).start()  # drawn beside the tables
    text, main = render(runs, frame)
    planned, plan_files = plan_against_actual(runs, directory)  # the estimate the sweep recorded, beside what it took
    remaining = still_running(runs)
    results_frame(frame).to_csv(directory / "results.csv", index=False)
    runs_frame(frame).to_csv(directory / "runs.csv", index=False)
    per_point = points_table(frame)
    if per_point is not None:
        per_point.to_csv(directory / "points.csv", index=False)
    mine = frame[frame["in_sweep"].astype(bool)]
    failed = int((mine["status"] != FINISHED).sum())
    report = Report(
        runs.sweep,
        runs.parent_id,
        directory,
        main,
        len(mine),
        failed,
        downloads,
        [],
        experiment_id=runs.experiment_id,
        warnings=[f"report: {remaining}"] if remaining else [],
    )
    if write:
        try:
            report.view_key = publish(runs, frame)
            report.ui = how_to_open(uri, runs.experiment_id, report.view_key, runs.sweep)
        except Exception as exc:  # noqa: BLE001 - the report's files stand; MLflow lacks the comparison
            report.warnings.append(
                f"mlflow: the comparison was not written to the runs ({first_line(exc)}): "
                f"rebuild with python -m tracking.report --uri {uri} --sweep {runs.sweep}"
            )
    plots = drawing.plots()
    text += pictures(plots)
    if planned:
        text += "\n" + planned
    if remaining:
        text += f"\n**{remaining}**\n"
    (directory / "report.md").write_text(text)
    tables_written = [directory / name for name in ("report.md", "results.csv", "runs.csv", "points.csv")]
    report.files = [path for path in tables_written if path.exists()] + [*plots.values(), *plan_files]
    return report


def attach(uri: str, report: Report) -> None:
    """The report's files as artifacts of the sweep's parent run, under report/."""
    attach_files(uri, report.parent_id, report.files, "report")
