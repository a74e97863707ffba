"""`python -m sweeps.run +grid=NAME [overrides]`: expand the grid, run it on Ray, record it in MLflow.

`main` is the thin Hydra entry point; `run_sweep(config)` is the plain function tests call with a
config from `hydra.compose`. Everything that can be wrong with the config, the tracking store or the
working directory is found before Ray starts (exit 2); a failed trial never stops the others (exit
1). Every result goes to the driver's journal before MLflow (sweeps/journal.py): results that a store
which stopped answering did not take make the exit 3, and rerunning the same command records them
without running their trials again.
"""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig, OmegaConf

from sweeps.config import register
from sweeps.grid import GridPlan, PlannedTrial, count_points, expand
from sweeps.journal import Journal, JournalError, Outbox
from sweeps.progress import Progress
from sweeps.remeasure import remeasure, stamp
from sweeps.schedule import ClusterError, ScheduleSettings, check_cluster, connect, schedule
from tokengen.contract.names import FINISHED
from tokengen.contract.record import first_line
from tokengen.contract.spec import SpecError

FAILED_TRIALS, BAD_INPUT, UNRECORDED = 1, 2, 3  # exit statuses


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plan_sweep(config: dict) -> GridPlan:
    name = str(config["sweep"]["name"])
    if not name or any(c in name for c in "'\"/\\"):
        raise SpecError(f"sweep.name={name!r}: use a name without quotes or slashes (it names runs and report folders)")
    if not config.get("grid"):
        raise SpecError("no grid: append one with +grid=NAME (smoke, article, full, scaling)")
    points, limit = count_points(config["grid"]), int(config["sweep"]["max_trials"])
    if points > limit:
        raise SpecError(f"the grid has {points:,} points, more than sweep.max_trials={limit}: narrow its axes, "
                        "or raise sweep.max_trials to run them all")
    return expand(config["trial"], config["grid"], config["sweep"]["accelerator_types"])


def execute(trials: list[PlannedTrial], config: dict, outbox: Outbox, plan: GridPlan, opened: bool = False) -> list[dict]:
    """Run the trials on Ray, journaling each result the moment it arrives and recording it in MLflow
    while the store answers; ClusterError if the cluster cannot run them. `opened`: the sweep's run is
    open already (a remeasure round)."""
    sweep = config["sweep"]
    connect(config["ray"]["address"], config["ray"].get("num_cpus"), config["ray"].get("num_gpus"))
    settings = ScheduleSettings(
        workdir=sweep["workdir"], trial_timeout_s=sweep["trial_timeout_s"], retries=sweep["retries"],
        cpus_per_trial=sweep["cpus_per_trial"], inductor_cache=sweep["inductor_cache"], sweep=sweep["name"],
    )
    node_cpus = check_cluster(trials, settings)
    if not opened:
        open_sweep(outbox, config, plan, trials)
    records: list[dict] = []
    progress = Progress(len(trials))

    def on_result(trial: PlannedTrial, record: dict) -> None:
        stamp(record, trial.attempt)
        outbox.put(record)
        records.append(record)
        progress.advance(failed=record["status"] != FINISHED, unrecorded=outbox.unrecorded)

    def on_tick(running: int) -> None:
        outbox.flush()  # a store back from an outage takes the waiting results between two trials
        progress.update(running, outbox.unrecorded)

    try:
        schedule(trials, settings, node_cpus, on_result, on_tick)
    finally:
        progress.close()
    return records


def open_sweep(outbox: Outbox, config: dict, plan: GridPlan, trials: list[PlannedTrial]) -> None:
    """The sweep's parent run with its plan (the keys it covers, those it reuses), then the results an
    earlier run left in the journal, recorded before any new one."""
    running = {t.key for t in trials}
    planned = [t.key for t in plan.trials]
    outbox.recorder.start_sweep(config["sweep"]["name"], config, resume=config["sweep"]["resume"],
                                planned=planned, reused=[k for k in planned if k not in running])
    outbox.flush()


def close_sweep(outbox: Outbox, failed: int) -> None:
    """One last try for the waiting results; the parent run is closed once every result is in (the rerun
    that records the rest resumes it)."""
    outbox.flush(now=True)
    if outbox.unrecorded:
        return
    try:
        outbox.recorder.end_sweep(failed)
    except Exception as exc:  # noqa: BLE001 - every trial is recorded; only the parent's status is missing
        _say(f"tracking: the sweep's run is left open ({first_line(exc)})")


def publish_report(config: dict, records: list[dict]) -> None:
    """Build the sweep's report from MLflow (every trial of its plan), attach it to its run, print its main table."""
    from tracking.report import attach, build_report

    uri, name = config["tracking"]["uri"], config["sweep"]["name"]
    try:
        report = build_report(uri, config["tracking"]["experiment"], name, "reports")
        attach(uri, report)
        print(report.main)
        _say(f"report: {report.directory / 'report.md'}, attached to the sweep's run")
    except Exception as exc:  # noqa: BLE001 - every trial is already recorded; the report can be rebuilt
        first = first_line(exc, 300)
        if not records:
            _say(f"report: none ({first})")
            return
        _say(f"report: not built ({first}): retry with python -m tracking.report --uri {uri} --sweep {name}")
        print_summary(records)


def print_summary(records: list[dict]) -> None:
    from tracking.summary import summary_text

    if records:
        print(summary_text(records))


def prepare(config: dict) -> tuple[GridPlan, Outbox]:
    """Everything that can be wrong before Ray starts, in the order a user fixes it: the grid, the
    tracking URI, the journal's directory, then the store itself (reachable, credentials, writable)."""
    from tracking.recorder import Recorder, check_uri

    plan = plan_sweep(config)
    tracking = config["tracking"]
    check_uri(tracking["uri"])
    journal = Journal.open(tracking["experiment"], config["sweep"]["name"])
    return plan, Outbox(journal, Recorder(tracking["uri"], tracking["experiment"]))


def trials_to_run(plan: GridPlan, outbox: Outbox, resume: bool) -> list[PlannedTrial]:
    """The plan less, when resuming, every key finished in MLflow or in the journal. Results an earlier
    run journaled but did not record are queued to be recorded first, whatever `resume` says."""
    finished = outbox.recorder.finished_keys()
    earlier = outbox.take_over(finished)
    if earlier:
        _say(f"journal: {len(earlier)} result(s) of an earlier run are not yet recorded: recording them first, "
             "without running their trials again")
    if not resume:
        return plan.trials
    finished |= {r["key"] for r in earlier if r.get("status") == FINISHED}
    trials = [t for t in plan.trials if t.key not in finished]
    _say(f"resume: skipping {len(plan.trials) - len(trials)} trial(s) already finished in the experiment")
    return trials


def run_sweep(config: DictConfig | dict) -> int:
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    from tracking.recorder import TrackingError, sqlite_sharing_problem

    sweep = config["sweep"]
    started = time.perf_counter()  # the sweep's wall: the store, Ray, every trial and MLflow write
    try:
        plan, outbox = prepare(config)
    except (SpecError, TrackingError, JournalError) as exc:
        _say(f"error: {exc}")
        return BAD_INPUT
    caveat = sqlite_sharing_problem(config["tracking"]["uri"])
    for line in plan.describe() + ([caveat] if caveat else []):
        _say(line)
    trials = trials_to_run(plan, outbox, sweep["resume"])
    _say(f"sweep {sweep['name']}: {len(trials)} trial(s) to run")

    try:
        records = execute(trials, config, outbox, plan) if trials else []
    except ClusterError as exc:
        _say(f"error: {exc}")
        return BAD_INPUT
    if not trials:  # every trial reused: the sweep still gets its parent run and its report
        open_sweep(outbox, config, plan, trials)
    try:  # finished trials judged noisy or contended run again (sweep.remeasure rounds)
        again = remeasure(config, plan, outbox, lambda t: execute(t, config, outbox, plan, opened=True))
    except ClusterError as exc:
        _say(f"error: {exc}")
        return BAD_INPUT
    failed = [r for r in records if r["status"] != FINISHED]
    close_sweep(outbox, len(failed))
    wall = time.perf_counter() - started
    if outbox.unrecorded:
        print_summary(records + again.records)  # the store is down: no report from it, the records in hand
    else:
        publish_report(config, records + again.records)
    _say(f"sweep {sweep['name']}: {len(records) - len(failed)} finished, {len(failed)} failed{again.said}, "
         f"in {wall:.1f} s")
    for record in failed:
        _say(f"  failed {record['key']} {record.get('variant')}: {record['error_type']}: {record['error_message']}")
    if outbox.unrecorded:
        _say(f"error: {outbox.unrecorded} result(s) not yet recorded in {config['tracking']['uri']} "
             f"({outbox.last_error}); they wait in {outbox.journal.path}, and rerunning the same command records "
             "them without running their trials again")
        return UNRECORDED
    return FAILED_TRIALS if failed else 0


register()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(config: DictConfig) -> None:
    status = run_sweep(config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
