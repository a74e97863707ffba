"""The sweep's own run in the store: opened with its plan (and the estimate) before the first trial,
closed once every result is in, marked KILLED after an interrupt; and the report built from the store
at the end, attached to it. A store that fails any of these loses only what it failed: every trial's
result is journaled (sweeps/delivery/journal.py)."""

from __future__ import annotations

from pathlib import Path

from sweeps.delivery.full_disk import mark_full
from sweeps.delivery.outbox import Outbox
from sweeps.execution.space import OutOfSpace, full_line, out_of_space, reason_of
from sweeps.planning.config import SweepConfig, as_stored
from sweeps.planning.grid import GridPlan, PlannedTrial
from sweeps.pricing.plan_tables import PLAN_CSV, PLAN_MD, plan_metrics, render
from sweeps.pricing.priced import PLAN_COLUMNS, Priced
from sweeps.say import say
from tokengen.contract.names import PLANNED_WORKERS
from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord
from tracking.run_names import run_names
from tracking.store.connect import sqlite_path

REPORT_BYTES = 2 << 20  # what a report's tables and plots take, about: said when its disk is full


def record_plan(recorder, priced: Priced, config: SweepConfig) -> None:
    """The estimate on the sweep's parent run before any trial starts: plan.csv and plan.md as artifacts,
    the totals as metrics, each pool's workers as the tag planned_workers."""
    pools = priced.walls()
    recorder.attach_plan(
        {PLAN_CSV: priced.table[list(PLAN_COLUMNS)].to_csv(index=False), PLAN_MD: render(priced, config, dry=False)},
        plan_metrics(priced),
        {PLANNED_WORKERS: ", ".join(f"{p}:{w}" for p, w in zip(pools["pool"], pools["workers"])) or "none"},
    )


def record_estimate(recorder, priced: Priced, config: SweepConfig, say) -> None:
    """The estimate on the parent run before the first trial; a store that fails it only loses the estimate."""
    try:
        record_plan(recorder, priced, config)
    except Exception as exc:  # noqa: BLE001 - the trials matter more than their estimate
        say(f"tracking: the sweep's estimate is not recorded ({first_line(exc)})")


def open_sweep(outbox: Outbox, config: SweepConfig, plan: GridPlan, trials: list[PlannedTrial], priced=None) -> None:
    """The sweep's parent run with its plan (the keys it covers, those it reuses, the estimate), then the
    results an earlier run left in the journal, recorded before any new one."""
    running = {t.key for t in trials}
    planned = [t.key for t in plan.trials]
    try:
        outbox.recorder.start_sweep(
            config.sweep.name,
            as_stored(config),
            resume=config.sweep.resume,
            planned=planned,
            reused=[k for k in planned if k not in running],
            names=run_names(plan.trials),
        )
    except Exception as exc:
        if not out_of_space(exc):
            raise
        where = sqlite_path(config.tracking.uri) or config.tracking.uri
        raise OutOfSpace(full_line("the tracking store", where, None, reason_of(exc))) from None
    if priced is not None:
        record_estimate(outbox.recorder, priced, config, say)
    outbox.flush()


def close_sweep(outbox: Outbox, failed: int) -> None:
    """One last try for the waiting results; the parent run is closed once every result is in (the rerun
    that records the rest resumes it)."""
    outbox.flush(now=True)
    if outbox.full:
        mark_full(outbox, outbox.full)
    if outbox.unrecorded:
        return
    try:
        outbox.recorder.end_sweep(failed)
    except Exception as exc:  # noqa: BLE001 - every trial is recorded; only the parent's status is missing
        say(f"tracking: the sweep's run is left open ({first_line(exc)})")


def publish_report(config: SweepConfig, records: list[TrialRecord]) -> None:
    """Build the sweep's report from MLflow (every trial of its plan), attach it to its run, print its main table."""
    from tracking.report.build import attach, build_report

    uri, name = config.tracking.uri, config.sweep.name
    try:
        report = build_report(uri, config.tracking.experiment, name, "reports")
        attach(uri, report)
        print(report.main)
        say(f"report: {report.directory / 'report.md'}, attached to the sweep's run")
        for line in report.warnings + report.ui:  # how to open the comparison in the MLflow UI
            say(line)
    except Exception as exc:  # noqa: BLE001 - every trial is already recorded; the report can be rebuilt
        if out_of_space(exc):
            raise OutOfSpace(
                full_line("the report", Path("reports") / name, REPORT_BYTES, reason_of(exc))
                + f": make room there and rebuild it with python -m tracking.report --uri {uri} "
                f"--sweep {name}"
            ) from None
        first = first_line(exc, 300)
        if not records:
            say(f"report: none ({first})")
            return
        say(f"report: not built ({first}): retry with python -m tracking.report --uri {uri} --sweep {name}")
        print_summary(records)


def print_summary(records: list[TrialRecord]) -> None:
    from tracking.report.summary import summary_text

    if records:
        print(summary_text(records))


def mark_killed(outbox: Outbox) -> None:
    """After an interrupt: what finished recorded, the sweep's run KILLED (a rerun resumes it)."""
    outbox.flush(now=True)
    if outbox.recorder.parent_id and not outbox.unrecorded:
        try:
            outbox.recorder.kill_sweep()
        except Exception as exc:  # noqa: BLE001 - every result is journaled; only the parent's status is missing
            say(f"tracking: the sweep's run is left open ({first_line(exc)})")
