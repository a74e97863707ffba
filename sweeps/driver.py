"""The sweep driver: `run_sweep(config)` tells a sweep's story, stage by stage.

Planning (sweeps/planning/: the grid, resume, fingerprints), pricing (sweeps/pricing/: the cost
model, the budget guard, the order of submission), execution (sweeps/execution/: Ray, one trial
process per trial, remeasure rounds) and delivery (sweeps/delivery/: the journal, the outbox, the
sweep's run, the report). Everything that can be wrong with the config, the tracking store, the
working directory or (for a local Ray) the machine's GPUs and memory is found before Ray starts
(exit 2); a failed trial never stops the others (exit 1). Every result goes to the journal before
MLflow: results that a store which stopped answering did not take make the exit 3, and rerunning the
same command records them without running their trials again; a full disk (journal, store, workdir,
report) is one line naming the path and the space it needs, exit 3 too. Ctrl-C or SIGTERM stops the
running trials, keeps every finished result, marks the sweep's run KILLED and exits 130 (SIGINT) or
143 (SIGTERM).
"""

from __future__ import annotations

import os
import signal
import time

from sweeps.delivery.full_disk import stopped_full
from sweeps.delivery.journal import Journal, JournalError, journaled_results
from sweeps.delivery.outbox import Outbox
from sweeps.delivery.sweep_run import close_sweep, mark_killed, open_sweep, print_summary, publish_report
from sweeps.execution.execute import Interrupted, check_local_devices, connect_ray, execute, interruptible, stop_ray
from sweeps.execution.logs import quiet_terminal
from sweeps.execution.peak_rounds import search_rounds
from sweeps.execution.remeasure import Remeasured, remeasure
from sweeps.execution.schedule import ClusterError
from sweeps.execution.space import OutOfSpace
from sweeps.planning.config import SweepConfig, load_config
from sweeps.planning.grid import GridPlan, PlannedTrial, plan_sweep
from sweeps.planning.resume import expected_fingerprints, trials_to_run
from sweeps.planning.settings import prepare_workdir
from sweeps.pricing.memory_guard import check_local_memory
from sweeps.pricing.price import Refused, calibration_contradicted, price_for_run
from sweeps.pricing.priced import Priced, summary_line
from sweeps.say import say
from tokengen.contract.names import FINISHED
from tokengen.contract.spec import SpecError
from tokengen.contract.trained import trained
from tokengen.contract.trial_record import TrialRecord
from tokengen.train import ensure
from tracking.store.connect import TrackingError, check_credentials, check_uri, redacted, sqlite_sharing_problem
from tracking.store.history import StoreReadError
from tracking.store.lock.sweep_lock import SweepLock
from tracking.store.recorder import Recorder

FAILED_TRIALS, BAD_INPUT, UNRECORDED = 1, 2, 3  # exit statuses; an interrupt exits 128 + its signal
REFUSED_INPUT = (SpecError, TrackingError, JournalError, ClusterError, StoreReadError, Refused)


def run_sweep(config) -> int:
    """The sweep: price it, check everything before Ray, run what is not finished (then the remeasure
    rounds), record every result, publish the report; returns the exit status."""
    try:
        config = load_config(config)  # typed once, here: every stage takes the SweepConfig
        check_credentials(config.tracking.uri)  # before any file or line could carry the password
    except (TrackingError, SpecError) as exc:
        say(f"error: {exc}")
        return BAD_INPUT
    if config.sweep.dry_run:
        from sweeps.dry_run import dry_run

        return dry_run(config)
    started = time.perf_counter()  # the sweep's wall: the store, Ray, every trial and MLflow write
    log = quiet_terminal(config.tracking.experiment, str(config.sweep.name))  # Ray's and MLflow's lines
    try:
        waiting = journaled_results(config.tracking.experiment, config.sweep.name)
        priced = price_for_run(config, say, waiting)  # the store read only: a refused sweep leaves no trace
        plan, outbox = prepare(config, priced.plan if priced else None)
        lock = SweepLock(
            outbox.recorder.client, config.tracking.experiment, config.sweep.name, answers=outbox.recorder.answers
        ).acquire()
    except REFUSED_INPUT as exc:
        details = f" (details: {os.path.relpath(log)})" if isinstance(exc, TrackingError) and log.exists() else ""
        say(f"error: {exc}{details}")
        return BAD_INPUT
    try:
        return run_locked(config, plan, outbox, priced, started, log)
    finally:
        lock.release()


def run_locked(config: SweepConfig, plan: GridPlan, outbox: Outbox, priced: Priced | None, started: float, log) -> int:
    """The sweep once this driver holds its lock: run, remeasure, record, report; the exit status."""
    caveat = sqlite_sharing_problem(config.tracking.uri)
    for line in plan.describe() + ([caveat] if caveat else []):
        say(line)
    records: list[TrialRecord] = []
    trials: list[PlannedTrial] = []
    again = Remeasured()
    try:
        with interruptible() as stop:
            trials, priced = choose_trials(plan, outbox, config, priced)
            stop.check()

            def open_run() -> None:
                open_sweep(outbox, config, plan, trials, priced)

            if trials:
                execute(trials, config, outbox, records, stop, open_run)
            else:  # every trial reused: the sweep still gets its parent run and its report
                open_run()
            # finished trials judged noisy or contended run again (sweep.remeasure rounds)
            again = remeasure(config, plan, outbox, lambda t: execute(t, config, outbox, [], stop))
            # a peak search's later rounds, one middle rate per search a round, until each knows its peak
            search_rounds(
                config, plan, outbox, records, lambda t: execute(t, config, outbox, records, stop), again.records
            )
    except ClusterError as exc:
        say(f"error: {exc}")
        return BAD_INPUT
    except Interrupted as stop:
        return interrupted(outbox, records + again.records, len(trials), stop)
    except OutOfSpace as exc:
        stopped_full(outbox, records + again.records, exc)
        return UNRECORDED
    return finish(config, outbox, records, again, time.perf_counter() - started, log, priced)


def prepare(config: SweepConfig, plan: GridPlan | None = None) -> tuple[GridPlan, Outbox]:
    """Everything that can be wrong before Ray starts, in the order a user fixes it: the settings and the
    grid (unless the pricing planned it already), this machine's GPUs and memory for a local Ray, the
    tracking URI, a local Ray's workdir, the journal's directory, then the store itself (reachable,
    credentials, writable); last, a trained model the plan needs and this machine lacks is built, once (under a
    lock: two drivers build it once), never inside a trial's time limit."""
    plan = plan or plan_sweep(config)
    check_local_devices(plan, config)
    check_local_memory(plan.trials, config)
    tracking = config.tracking
    check_uri(tracking.uri)
    if not config.ray.address:
        prepare_workdir(config.sweep.workdir)
    journal = Journal.open(tracking.experiment, config.sweep.name)
    outbox = Outbox(journal, Recorder(tracking.uri, tracking.experiment))
    ensure(sorted({t.spec.model for t in plan.trials if trained(t.spec.model)}), say)
    return plan, outbox


def choose_trials(
    plan: GridPlan, outbox: Outbox, config: SweepConfig, priced: Priced | None
) -> tuple[list[PlannedTrial], Priced | None]:
    """The trials to run (resume), longest first where the sweep is priced, with the estimate said
    before the first trial."""
    if config.ray.address:
        connect_ray(config)  # the fingerprints are the cluster nodes'
    trials = trials_to_run(plan, outbox, config.sweep.resume, expected_fingerprints(plan, config))
    say(f"sweep {config.sweep.name}: {len(trials)} trial(s) to run")
    if priced is not None:
        priced = priced.running(trials)
        trials = priced.submission_order(trials)
        say(summary_line(priced))
    return trials, priced


def finish(
    config: SweepConfig, outbox: Outbox, records: list[TrialRecord], again: Remeasured, wall: float, log, priced=None
) -> int:
    """Close the sweep's run, publish its report, say how it went; the exit status."""
    name = config.sweep.name
    failed = [r for r in records if r.status != FINISHED]
    close_sweep(outbox, len(failed))
    contradicted = calibration_contradicted(priced, records + again.records)
    if contradicted:
        say(contradicted)
    if outbox.unrecorded:
        print_summary(records + again.records)  # the store is down: no report from it, the records in hand
    else:
        try:
            publish_report(config, records + again.records)
        except OutOfSpace as exc:
            say(f"error: {exc}")
            return UNRECORDED
    say(f"sweep {name}: {len(records) - len(failed)} finished, {len(failed)} failed{again.said}, in {wall:.1f} s")
    for record in failed:
        result = record.result
        say(f"  failed {result.key} {record.spec.variant}: {result.error_type}: {result.error_message}")
    if log.exists():
        say(f"log: Ray's and MLflow's own lines are in {os.path.relpath(log)}")
    if outbox.unrecorded and outbox.full:
        say(
            f"error: {outbox.full}: make room there and rerun the same command; {outbox.unrecorded} result(s) wait "
            f"in {os.path.relpath(outbox.journal.path)} and are recorded without running their trials again"
        )
        return UNRECORDED
    if outbox.unrecorded:
        say(
            f"error: {outbox.unrecorded} result(s) not yet recorded in {redacted(config.tracking.uri)} "
            f"({outbox.last_error}); they wait in {outbox.journal.path}, and rerunning the same command records "
            "them without running their trials again"
        )
        return UNRECORDED
    return FAILED_TRIALS if failed else 0


def interrupted(outbox: Outbox, records: list[TrialRecord], planned: int, stop: Interrupted) -> int:
    """After SIGINT or SIGTERM: the running trials are already stopped (sweeps/execution/schedule.py
    cancels their tasks, and a trial whose launcher is gone ends itself); record what finished, mark
    the sweep's run KILLED, say so in one line."""
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        stop_ray()
        mark_killed(outbox)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    done = len(records)
    say(f"interrupted ({stop}): {done} finished, {max(0, planned - done)} stopped; rerun the same command to resume")
    return 128 + stop.signum
