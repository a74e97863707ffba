"""`python -m sweeps.run +grid=NAME [overrides]`: expand the grid, run it on Ray, record it in MLflow.

`main` is the thin Hydra entry point; `run_sweep(config)` is the plain function tests call with a
config from `hydra.compose`. Everything that can be wrong with the config, the tracking store, the working directory or (for a
local Ray) the machine's GPUs is found before Ray starts (exit 2); a failed trial never stops the
others (exit 1). Every result goes to the driver's journal before MLflow (sweeps/journal.py): results
that a store which stopped answering did not take make the exit 3, and rerunning the same command
records them without running their trials again; a full disk (journal, store, workdir, report) is one
line naming the path and the space it needs, exit 3 too (sweeps/full_disk.py). Ctrl-C or SIGTERM stops
the running trials, keeps every finished result, marks the sweep's run KILLED and exits 130 (SIGINT)
or 143 (SIGTERM).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from sweeps import pricing
from sweeps.dry_run import record_estimate
from sweeps.config import register
from sweeps.entry_errors import refuse_bad_command_line
from sweeps.estimate.memory import check_local_memory
from sweeps.fingerprints import cluster_fingerprints, environment_change, local_fingerprints
from sweeps.full_disk import mark_full, stopped_full
from sweeps.grid import GridPlan, PlannedTrial, plan_sweep
from sweeps.journal import Journal, JournalError, Outbox
from sweeps.logs import quiet_terminal
from sweeps.progress import Progress
from sweeps.remeasure import Remeasured, remeasure, stamp
from sweeps.schedule import ClusterError, ScheduleSettings, check_cluster, connect, schedule
from sweeps.settings import local_gpus, prepare_workdir
from sweeps.space import OutOfSpace, full_line, out_of_space, reason_of, sqlite_path
from tokengen.contract.machine.fingerprint import revision
from tokengen.contract.names import FINISHED, OUT_OF_SPACE
from tokengen.contract.record import first_line
from tokengen.contract.spec import SpecError
from tracking.run_names import run_names

FAILED_TRIALS, BAD_INPUT, UNRECORDED = 1, 2, 3  # exit statuses; an interrupt exits 128 + its signal
REPORT_BYTES = 2 << 20  # what a report's tables and plots take, about: said when its disk is full


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the driver: stop the trials, keep what finished."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """Set by SIGINT or SIGTERM; `check()` raises Interrupted where the driver can stop cleanly (between
    two waits on Ray: an exception raised inside Ray's C code would come out as a SystemError)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None

    def arm(self) -> dict:
        """(Re)install the handlers; again after ray.init, whose own SIGTERM handler aborts the process."""
        return {s: signal.signal(s, self._interrupt) for s in self.SIGNALS}

    def _interrupt(self, signum, frame) -> None:
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextmanager
def interruptible():
    """SIGINT and SIGTERM stop the sweep cleanly (not Hydra's traceback, not Ray's abort)."""
    stop = StopRequest()
    previous = stop.arm()
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def execute(trials: list[PlannedTrial], config: dict, outbox: Outbox, plan: GridPlan, records: list[dict],
            stop: StopRequest, priced=None, opened: bool = False) -> list[dict]:
    """Run the trials on Ray, journaling each result the moment it arrives (into `records` too, which
    it returns) and recording it in MLflow while the store answers; ClusterError if the cluster cannot
    run them. `opened`: the sweep's run is open already (a remeasure round)."""
    sweep = config["sweep"]
    connect_ray(config)
    stop.arm()
    settings = ScheduleSettings(
        workdir=sweep["workdir"], trial_timeout_s=sweep["trial_timeout_s"], retries=sweep["retries"],
        cpus_per_trial=sweep["cpus_per_trial"], inductor_cache=sweep["inductor_cache"], sweep=sweep["name"],
        trial_gpus=sweep.get("trial_gpus"),
    )
    node_cpus = check_cluster(trials, settings)
    if not opened:
        open_sweep(outbox, config, plan, trials, priced)
    progress = Progress(len(trials))

    def on_result(trial: PlannedTrial, record: dict) -> None:
        if record.get("error_type") == OUT_OF_SPACE:  # the trial's folder is full: no result, and none to come
            raise OutOfSpace(record["error_message"])
        stamp(record, trial.attempt)
        record["env_revision"] = record.get("env_revision") or revision()  # a node that got the code from Ray has no git
        outbox.put(record)
        records.append(record)
        progress.advance(failed=record["status"] != FINISHED, unrecorded=outbox.unrecorded)

    def on_tick(running: int) -> None:
        stop.check()
        outbox.flush()  # a store back from an outage takes the waiting results between two trials
        progress.update(running, outbox.unrecorded)

    try:
        schedule(trials, settings, node_cpus, on_result, on_tick)
    finally:
        progress.close()
    return records


def connect_ray(config: dict) -> None:
    connect(config["ray"]["address"], config["ray"].get("num_cpus"), config["ray"].get("num_gpus"))


def check_local_devices(plan: GridPlan, config: dict) -> None:
    """A local Ray runs on this machine: a grid of CUDA trials on a machine without a GPU is refused
    here, before Ray starts (ray.num_gpus, where set, is what Ray is told and wins)."""
    if config["ray"]["address"] or not any(t.spec.device == "cuda" for t in plan.trials):
        return
    wanted = config["ray"].get("num_gpus")
    gpus = local_gpus() if wanted is None else ["gpu"] * int(wanted)
    if not gpus:
        raise ClusterError("the grid has CUDA trials but this machine has no GPU for a local Ray: use "
                           "trial.device=cpu, or ray.address=auto on a GPU cluster")


def open_sweep(outbox: Outbox, config: dict, plan: GridPlan, trials: list[PlannedTrial], priced=None) -> None:
    """The sweep's parent run with its plan (the keys it covers, those it reuses, the estimate), then the
    results an earlier run left in the journal, recorded before any new one."""
    running = {t.key for t in trials}
    planned = [t.key for t in plan.trials]
    try:
        outbox.recorder.start_sweep(config["sweep"]["name"], config, resume=config["sweep"]["resume"],
                                    planned=planned, reused=[k for k in planned if k not in running],
                                    names=run_names(plan.trials))
    except Exception as exc:
        if not out_of_space(exc):
            raise
        where = sqlite_path(config["tracking"]["uri"]) or config["tracking"]["uri"]
        raise OutOfSpace(full_line("the tracking store", where, None, reason_of(exc))) from None
    if priced is not None:
        record_estimate(outbox.recorder, priced, config, _say)
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
        for line in report.warnings + report.ui:  # how to open the comparison in the MLflow UI
            _say(line)
    except Exception as exc:  # noqa: BLE001 - every trial is already recorded; the report can be rebuilt
        if out_of_space(exc):
            raise OutOfSpace(full_line("the report", Path("reports") / name, REPORT_BYTES, reason_of(exc))
                             + f": make room there and rebuild it with python -m tracking.report --uri {uri} "
                             f"--sweep {name}") from None
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


def prepare(config: dict, plan: GridPlan | None = None) -> tuple[GridPlan, Outbox]:
    """Everything that can be wrong before Ray starts, in the order a user fixes it: the settings and the
    grid (unless the pricing planned it already), this machine's GPUs for a local Ray, the tracking URI,
    a local Ray's workdir, the journal's directory, then the store itself (reachable, credentials, writable)."""
    from tracking.recorder import Recorder, check_uri

    plan = plan or plan_sweep(config)
    check_local_devices(plan, config)
    check_local_memory(plan.trials, config)
    tracking = config["tracking"]
    check_uri(tracking["uri"])
    if not config["ray"]["address"]:
        prepare_workdir(config["sweep"]["workdir"])
    journal = Journal.open(tracking["experiment"], config["sweep"]["name"])
    return plan, Outbox(journal, Recorder(tracking["uri"], tracking["experiment"]))


def expected_fingerprints(plan: GridPlan, config: dict) -> dict[str, set]:
    """key -> the environment fingerprints the trial may be measured with now (sweeps/fingerprints.py)."""
    cpus = config["sweep"]["cpus_per_trial"]
    if config["ray"]["address"]:
        connect_ray(config)
        return cluster_fingerprints(plan.trials, cpus)
    return local_fingerprints(plan.trials, cpus, config["ray"].get("num_cpus"))


def trials_to_run(plan: GridPlan, outbox: Outbox, resume: bool, expected: dict[str, set]) -> list[PlannedTrial]:
    """The plan less, when resuming, every key finished in MLflow or in the journal with a fingerprint
    this sweep would measure it with again (`expected`); a key finished elsewhere runs here again.
    Results an earlier run journaled but did not record are queued to be recorded first, whatever
    `resume` says."""
    index = outbox.recorder.index()
    earlier = outbox.take_over(index.attempts, index.half_written)
    if earlier:
        _say(f"journal: {len(earlier)} result(s) of an earlier run are not yet recorded: recording them first, "
             "without running their trials again")
    if not resume:
        return plan.trials
    finished = {key: dict(prints) for key, prints in index.finished.items()}
    for record in earlier:
        if record.get("status") == FINISHED:
            finished.setdefault(record["key"], {})[record.get("env_fingerprint")] = record.get("env_facts")
    trials = [t for t in plan.trials if not finished.get(t.key, {}).keys() & expected.get(t.key, {}).keys()]
    elsewhere = [t for t in trials if t.key in finished]
    _say(f"resume: skipping {len(plan.trials) - len(trials)} trial(s) already finished in the experiment"
         + (f"; measuring {len(elsewhere)} again that finished in another environment "
            f"({environment_change(elsewhere, finished, expected)})" if elsewhere else ""))
    return trials


def run_sweep(config: DictConfig | dict) -> int:
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    from tracking.recorder import TrackingError, sqlite_sharing_problem

    sweep = config["sweep"]
    if sweep.get("dry_run"):
        from sweeps.dry_run import dry_run

        return dry_run(config)
    started = time.perf_counter()  # the sweep's wall: the store, Ray, every trial and MLflow write
    log = quiet_terminal(config["tracking"]["experiment"], str(sweep["name"]))  # Ray's and MLflow's routine lines
    try:
        priced = pricing.price_for_run(config, _say)  # the store read only: a refused sweep leaves no trace
        plan, outbox = prepare(config, priced.plan if priced else None)
    except (SpecError, TrackingError, JournalError, ClusterError, pricing.StoreReadError, pricing.Refused) as exc:
        _say(f"error: {exc}")
        return BAD_INPUT
    caveat = sqlite_sharing_problem(config["tracking"]["uri"])
    for line in plan.describe() + ([caveat] if caveat else []):
        _say(line)
    records: list[dict] = []
    trials: list[PlannedTrial] = []
    again = Remeasured()
    try:
        with interruptible() as stop:
            trials = trials_to_run(plan, outbox, sweep["resume"], expected_fingerprints(plan, config))
            _say(f"sweep {sweep['name']}: {len(trials)} trial(s) to run")
            if priced is not None:  # longest first, and the estimate said before the first trial
                priced = priced.running(trials)
                trials = priced.submission_order(trials)
                _say(pricing.summary_line(priced))
            stop.check()
            if trials:
                execute(trials, config, outbox, plan, records, stop, priced)
            else:  # every trial reused: the sweep still gets its parent run and its report
                open_sweep(outbox, config, plan, trials, priced)
            # finished trials judged noisy or contended run again (sweep.remeasure rounds)
            again = remeasure(config, plan, outbox, lambda t: execute(t, config, outbox, plan, [], stop, opened=True))
    except ClusterError as exc:
        _say(f"error: {exc}")
        return BAD_INPUT
    except Interrupted as stop:
        return interrupted(outbox, records + again.records, len(trials), stop)
    except OutOfSpace as exc:
        stopped_full(outbox, records + again.records, exc)
        return UNRECORDED
    failed = [r for r in records if r["status"] != FINISHED]
    close_sweep(outbox, len(failed))
    wall = time.perf_counter() - started
    if outbox.unrecorded:
        print_summary(records + again.records)  # the store is down: no report from it, the records in hand
    else:
        try:
            publish_report(config, records + again.records)
        except OutOfSpace as exc:
            _say(f"error: {exc}")
            return UNRECORDED
    _say(f"sweep {sweep['name']}: {len(records) - len(failed)} finished, {len(failed)} failed{again.said}, "
         f"in {wall:.1f} s")
    for record in failed:
        _say(f"  failed {record['key']} {record.get('variant')}: {record['error_type']}: {record['error_message']}")
    if log.exists():
        _say(f"log: Ray's and MLflow's own lines are in {os.path.relpath(log)}")
    if outbox.unrecorded and outbox.full:
        _say(f"error: {outbox.full}: make room there and rerun the same command; {outbox.unrecorded} result(s) wait "
             f"in {os.path.relpath(outbox.journal.path)} and are recorded without running their trials again")
        return UNRECORDED
    if outbox.unrecorded:
        _say(f"error: {outbox.unrecorded} result(s) not yet recorded in {config['tracking']['uri']} "
             f"({outbox.last_error}); they wait in {outbox.journal.path}, and rerunning the same command records "
             "them without running their trials again")
        return UNRECORDED
    return FAILED_TRIALS if failed else 0


def interrupted(outbox: Outbox, records: list[dict], planned: int, stop: Interrupted) -> int:
    """After SIGINT or SIGTERM: the running trials are already stopped (sweeps/schedule.py cancels
    their tasks, and a trial whose launcher is gone ends itself); record what finished, mark the
    sweep's run KILLED, say so in one line."""
    import ray

    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        if ray.is_initialized():
            ray.shutdown()
        outbox.flush(now=True)
        if outbox.recorder.parent_id and not outbox.unrecorded:
            try:
                outbox.recorder.kill_sweep()
            except Exception as exc:  # noqa: BLE001 - every result is journaled; only the parent's status is missing
                _say(f"tracking: the sweep's run is left open ({first_line(exc)})")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    done = len(records)
    _say(f"interrupted ({stop}): {done} finished, {max(0, planned - done)} stopped; rerun the same command to resume")
    return 128 + stop.signum


register()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(config: DictConfig) -> None:
    status = run_sweep(config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    refuse_bad_command_line()  # Hydra's own errors and a URI's password: one line, exit 2, before Hydra writes a file
    main()
