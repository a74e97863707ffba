"""The execution stage's entry: planned trials run on Ray, each result handed on the moment it arrives.

`execute` is what the driver calls, once for a sweep's trials and once per remeasure round; the
Ray part of it is `run_on_cluster` (start or join Ray, check the cluster can run the trials, schedule
them), which tests replace with a fake cluster (tests/pricing_helpers.py). What happens to a result
(journal, store) is the caller's outbox: execution imports nothing of delivery. SIGINT and SIGTERM are
caught here (`interruptible`) and raised as Interrupted between two waits on Ray.
"""

from __future__ import annotations

import hashlib
import os
import signal
from contextlib import contextmanager
from typing import Callable

from sweeps.execution.peak_rounds import test_verdict
from sweeps.execution.progress import Progress
from sweeps.execution.remeasure import stamp
from sweeps.execution.schedule import ClusterError, check_cluster, connect, schedule
from sweeps.execution.space import OutOfSpace
from sweeps.planning.config import SweepConfig
from sweeps.planning.grid import GridPlan, PlannedTrial
from sweeps.planning.settings import local_gpus
from tokengen.contract.machine.fingerprint import revision
from tokengen.contract.names import FINISHED, OUT_OF_SPACE
from tokengen.contract.trial_record import TrialRecord
from tracking.store.connect import redacted, sqlite_path


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


def store_tag(uri: str, experiment: str) -> str:
    """The store and experiment a sweep records into, as 12 hex digits in its trial folders' name: one sweep name
    run against two stores never shares a trial's folder (nor reads the other's result), and the same store finds
    its folders again on the next run. A SQLite store by its file's real path (`sqlite:///mlflow.db` in two
    folders is two stores); a server's without a user or password."""
    path = sqlite_path(uri)
    where = f"sqlite:{os.path.realpath(path)}" if path is not None else redacted(uri)
    return hashlib.sha256(f"{where}\n{experiment}".encode()).hexdigest()[:12]


def connect_ray(config: SweepConfig) -> None:
    connect(config.ray.address, config.ray.num_cpus, config.ray.num_gpus)


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def check_local_devices(plan: GridPlan, config: SweepConfig) -> None:
    """A local Ray runs on this machine: a grid of CUDA trials on a machine without a GPU is refused
    here, before Ray starts (ray.num_gpus, where set, is what Ray is told and wins)."""
    if config.ray.address or not any(t.spec.device == "cuda" for t in plan.trials):
        return
    wanted = config.ray.num_gpus
    gpus = local_gpus() if wanted is None else ["gpu"] * int(wanted)
    if not gpus:
        raise ClusterError(
            "the grid has CUDA trials but this machine has no GPU for a local Ray: use "
            "trial.device=cpu, or ray.address=auto on a GPU cluster"
        )


def run_on_cluster(
    trials: list[PlannedTrial],
    config: SweepConfig,
    stop: StopRequest,
    on_ready: Callable[[], None],
    on_result: Callable[[PlannedTrial, TrialRecord], None],
    on_tick: Callable[[int], None],
) -> None:
    """Ray's part: start or join it, refuse a plan the cluster cannot run (ClusterError, before
    `on_ready`), then schedule every trial."""
    connect_ray(config)
    stop.arm()  # again after ray.init, whose own SIGTERM handler aborts the process
    node_cpus = check_cluster(trials, config.sweep)
    on_ready()
    store = store_tag(config.tracking.uri, config.tracking.experiment)  # on the driver: a SQLite file's real path
    schedule(trials, config.sweep, store, node_cpus, on_result, on_tick)


def execute(
    trials: list[PlannedTrial],
    config: SweepConfig,
    outbox,
    records: list[TrialRecord],
    stop: StopRequest,
    open_run: Callable[[], None] | None = None,
) -> list[TrialRecord]:
    """Run the trials, handing each result to `outbox` (journal, then the store while it answers) the
    moment it arrives, and into `records`, which it returns; ClusterError if the cluster cannot run
    them. `open_run`: opens the sweep's run once the cluster is known to run them (None in a remeasure
    round: it is open)."""
    progress: Progress | None = None  # made once the cluster is known to run the trials

    def on_ready() -> None:
        nonlocal progress
        if open_run is not None:
            open_run()
        progress = Progress(len(trials))

    def on_result(trial: PlannedTrial, record: TrialRecord) -> None:
        if record.result.error_type == OUT_OF_SPACE:  # the trial's folder is full: no result, and none to come
            raise OutOfSpace(record.result.error_message)
        record = stamp(record, trial.attempt)
        if trial.search:
            record = test_verdict(record.with_result(peak_search=trial.search, peak_probe=trial.probe))
        if not record.result.env_revision:  # a node that got the code from Ray has no git
            record = record.with_result(env_revision=revision())
        records.append(outbox.put(record))
        progress.advance(failed=record.status != FINISHED, unrecorded=outbox.unrecorded)

    def on_tick(running: int) -> None:
        stop.check()
        outbox.flush()  # a store back from an outage takes the waiting results between two trials
        progress.update(running, outbox.unrecorded)

    try:
        run_on_cluster(trials, config, stop, on_ready, on_result, on_tick)
    finally:
        if progress is not None:
            progress.close()
    return records
