"""Ray scheduling: one task per trial, one trial per GPU, results handed over as they arrive.

The task (sweeps/execution/task.py) imports no torch, so Ray reuses its workers; each trial runs in a
process of its own (sweeps/execution/trial_process.py), so nothing a trial does can take the driver or another
trial with it. GPU types are Ray's own `accelerator_type` option. A task
lost with its node or worker is retried by Ray (`max_retries`); a trial's own failure comes
back as a failed record and is never retried. What comes back is a `TrialRecord`
(tokengen/contract/trial_record.py), and a task lost for good becomes one here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from contextlib import contextmanager
from typing import Callable

import ray
from ray.exceptions import RayTaskError

import sweeps
import tokengen
from sweeps.execution.compile_share import Shelf
from sweeps.execution.reaper import children_of, watch
from sweeps.execution.space import full_line, out_of_space, reason_of
from sweeps.execution.task import trial_task
from sweeps.execution.trial_process import complete_record, failure
from sweeps.planning.config import SweepSettings
from sweeps.planning.grid import PlannedTrial
from sweeps.planning.settings import SHARED
from tokengen.contract.machine.process_env import SECRETS
from tokengen.contract.names import OUT_OF_SPACE
from tokengen.contract.record import first_line, without_colours
from tokengen.contract.trial_record import TrialRecord


class ClusterError(RuntimeError):
    """The cluster cannot run the plan: said in one line, before any trial runs."""


def connect(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Start or join Ray, shipping the project's code to every worker through the runtime env."""
    if ray.is_initialized():
        return
    secrets = {name: os.environ.pop(name) for name in SECRETS if name in os.environ}  # Ray's processes inherit ours
    kwargs = {} if address else {"num_cpus": num_cpus, "num_gpus": num_gpus, "include_dashboard": False}
    if not address:
        os.environ.setdefault("RAY_worker_niceness", "0")  # the local raylet's workers at normal priority
    ours = set(children_of().get(os.getpid(), []))
    try:
        with loopback_only(not address or is_loopback(address)):
            ray.init(
                address=address or "local",  # None means a new local Ray, even where RAY_ADDRESS is set
                runtime_env={"py_modules": [tokengen, sweeps], "env_vars": {"HF_HUB_OFFLINE": "1"}},
                log_to_driver=False,
                logging_level=logging.INFO,  # into the sweep's log file (sweeps/execution/logs.py), not the terminal
                **kwargs,
            )
    except ConnectionError as exc:
        raise ClusterError(
            f"cannot join Ray at ray.address={address} ({first_line(exc)}): run `ray start --head` there, or drop ray.address for a local Ray"
        ) from None
    finally:
        os.environ.update(secrets)  # the driver's own MLflow client still needs them
    if not address:  # the Ray this driver started ends with it, even after a SIGKILL (sweeps/execution/reaper.py)
        watch([pid for pid in children_of().get(os.getpid(), []) if pid not in ours])


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def is_loopback(address: str) -> bool:
    """A Ray address on this machine's loopback (a local Ray another driver started): joined as a local one."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1")


@contextmanager
def loopback_only(local: bool):
    """A local Ray that listens on 127.0.0.1 alone. Ray 2.60 binds its GCS, raylet, agents and metrics ports
    to every interface (its node address is the machine's outside one, and `_node_ip_address=127.0.0.1` is
    turned back into it), and nothing there asks for credentials; in the mode Ray keeps for a laptop (this
    variable at 0: no cluster), every process it starts takes 127.0.0.1. The variable is read when `ray` is
    imported, so the driver's copy of the flag is set for the start too; both are put back after it, so
    the same process can later join a cluster as a cluster's driver."""
    if not local:
        yield
        return
    from ray._private import ray_constants

    saved_env, saved_flag = os.environ.get(LOOPBACK_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = saved_env


def task_options(trial: PlannedTrial, sweep: SweepSettings, node_cpus: int) -> dict:
    # SPREAD: trials go to the least busy feasible node, not queued behind each other on the one that ran the last
    options = {"max_retries": sweep.retries, "retry_exceptions": False, "scheduling_strategy": "SPREAD"}
    if trial.spec.device == "cuda":
        options.update(num_gpus=1, num_cpus=sweep.cpus_per_trial or 1)
    else:
        options.update(num_gpus=0, num_cpus=sweep.cpus_per_trial or node_cpus)
    if sweep.trial_gpus is not None:
        options["num_gpus"] = sweep.trial_gpus
    if trial.accelerator_type:
        options["accelerator_type"] = trial.accelerator_type  # Ray's resource accelerator_type:<T>
    return options


def check_cluster(trials: list[PlannedTrial], sweep: SweepSettings) -> int:
    """Refuse a plan the cluster can never run; returns the CPUs of the largest node."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    node_cpus = int(max((n.get("CPU", 0) for n in nodes), default=0))
    if sweep.cpus_per_trial and sweep.cpus_per_trial > node_cpus:
        raise ClusterError(f"sweep.cpus_per_trial={sweep.cpus_per_trial} but the largest node has {node_cpus} CPUs")
    total_gpus = sum(n.get("GPU", 0) for n in nodes)
    if any(t.spec.device == "cuda" for t in trials) and not total_gpus:
        raise ClusterError(
            "the grid has CUDA trials but the Ray cluster has no GPU: use trial.device=cpu or ray.address=auto on a GPU cluster"
        )
    present = {k.split(":", 1)[1] for n in nodes for k in n if k.startswith("accelerator_type:")}
    missing = sorted({t.accelerator_type for t in trials if t.accelerator_type} - present)
    if missing:
        raise ClusterError(
            f"no node has accelerator type {', '.join(missing)} (cluster has: {', '.join(sorted(present)) or 'none'}): fix sweep.accelerator_types"
        )
    return node_cpus


def capacity(trials: list[PlannedTrial], sweep: SweepSettings, node_cpus: int) -> int:
    """How many trials can run at once: the progress bar's 'running' estimate."""
    resources = ray.cluster_resources()
    if any(t.spec.device == "cuda" for t in trials):
        return max(1, int(resources.get("GPU", 1)))
    return max(1, int(resources.get("CPU", 1) // (sweep.cpus_per_trial or node_cpus or 1)))


def crossed_failure(exc: Exception) -> dict:
    """A failed record from an error that came back through Ray: a task's own exception (Ray wraps it in a
    RayTaskError whose first line is `ray::trial_task() (pid=..)` in colour) by its own type and message,
    which name the path and the reason; Ray's traceback, without colour codes, as the log's tail."""
    cause = exc.cause if isinstance(exc, RayTaskError) and exc.cause is not None else exc
    if out_of_space(cause):  # the trial's folder could not even be made
        where = getattr(cause, "filename", None) or "sweep.workdir"
        return failure(
            OUT_OF_SPACE,
            full_line("the trial's folder", where, None, reason_of(cause)),
            trace=without_colours(str(exc)),
        )
    return failure(type(cause).__name__, first_line(cause, 2000), trace=without_colours(str(exc)))


_SHELVES: dict[tuple, Shelf] = {}


def shelf_of(sweep: SweepSettings) -> Shelf:
    """The sweep's shelf of compiled graphs: one per sweep folder and Ray session, so a remeasure round finds
    the graphs its first round compiled, and a Ray started again (a new driver) starts an empty one."""
    key = (sweep.workdir, sweep.name, ray.get_runtime_context().get_job_id())
    return _SHELVES.setdefault(key, Shelf())


def schedule(
    trials: list[PlannedTrial],
    sweep: SweepSettings,
    store: str,
    node_cpus: int,
    on_result: Callable[[PlannedTrial, TrialRecord], None],
    progress=None,
) -> None:
    """Submit every trial, then hand each record to `on_result` the moment it arrives.

    `node_cpus` is what check_cluster returned: call it first, before anything is recorded; `store`: the store's
    tag in the trials' folder names (execute.store_tag)."""
    pending = {}
    shelf = shelf_of(sweep)
    sharing = sweep.inductor_cache == SHARED

    def submit(trial: PlannedTrial) -> None:
        shared_from, handed = shelf.handed(trial) if sharing else (None, None)
        ref = trial_task.options(**task_options(trial, sweep, node_cpus)).remote(
            trial.spec.to_dict(), trial.key, trial.accelerator_type, sweep, store, shared_from, handed
        )
        pending[ref] = trial

    for trial in shelf.split(trials, sharing):  # each graph's first; its twins once it is done
        submit(trial)
    slots = capacity(trials, sweep, node_cpus)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                trial = pending.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost node after its retries: a failed trial
                    record = complete_record(
                        crossed_failure(exc), trial.spec.to_dict(), trial.key, accelerator_type=trial.accelerator_type
                    )
                for twin in shelf.done(trial, record.compile_offer, ray.put):
                    submit(twin)
                on_result(trial, dataclasses.replace(record, compile_offer=None))  # the offer stays on the shelf
            if progress is not None:
                progress(running=min(slots, len(pending)))
            if not done:
                time.sleep(0.05)
    finally:  # an interrupt: the tasks still queued or running are ended (their trials end with them)
        for ref in pending:
            ray.cancel(ref, force=True)
