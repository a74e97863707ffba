"""Ray scheduling: one task per trial, one trial per GPU, results handed over as they arrive.

Each task runs in a fresh worker (`max_calls=1`) and runs its trial in a child process
(sweeps.child), so nothing a trial does can take the driver or another trial with it. A task
lost with its node or worker is retried by Ray (`max_retries`); a trial's own failure comes
back as a failed record and is never retried.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Callable

import ray

import sweeps
import tokengen
from sweeps.child import failure, run_child
from sweeps.grid import PlannedTrial


@dataclass
class ScheduleSettings:
    workdir: str
    trial_timeout_s: float
    retries: int
    cpus_per_trial: int | None
    inductor_cache: str  # per_trial | per_sweep
    sweep: str


class ClusterError(RuntimeError):
    """The cluster cannot run the plan: said in one line, before any trial runs."""


@ray.remote(max_calls=1)
def trial_task(spec: dict, key: str, accelerator_type: str | None, settings: dict) -> dict:
    started_at = time.time()
    context = ray.get_runtime_context()
    threads = int(context.get_assigned_resources().get("CPU", 0)) or None
    inductor = None
    if settings["inductor_cache"] == "per_sweep":
        inductor = f"{settings['workdir']}/{settings['sweep']}-inductor"
    record = run_child(spec, key, settings["workdir"], settings["trial_timeout_s"], threads, inductor)
    record.update(
        node_id=context.get_node_id(),
        node_host=socket.gethostname(),
        node_gpu_ids=",".join(str(g) for g in ray.get_gpu_ids()),
        node_threads=threads,
        node_started_at=started_at,
        node_finished_at=time.time(),
    )
    return record


def connect(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Start or join Ray, shipping the project's code to every worker through the runtime env."""
    if ray.is_initialized():
        return
    kwargs = {} if address else {"num_cpus": num_cpus, "num_gpus": num_gpus, "include_dashboard": False}
    try:
        ray.init(
            address=address or "local",  # None means a new local Ray, even where RAY_ADDRESS is set
            runtime_env={"py_modules": [tokengen, sweeps], "env_vars": {"HF_HUB_OFFLINE": "1"}},
            log_to_driver=False,
            **kwargs,
        )
    except ConnectionError as exc:
        first = (str(exc).strip().splitlines() or ["no answer"])[0][:200]
        raise ClusterError(f"cannot join Ray at ray.address={address} ({first}): run `ray start --head` there, or drop ray.address for a local Ray") from None


def task_options(trial: PlannedTrial, settings: ScheduleSettings, node_cpus: int) -> dict:
    options = {"max_retries": settings.retries, "retry_exceptions": False}
    if trial.spec.device == "cuda":
        options.update(num_gpus=1, num_cpus=settings.cpus_per_trial or 1)
    else:
        options.update(num_gpus=0, num_cpus=settings.cpus_per_trial or node_cpus)
    if trial.accelerator_type:
        options["resources"] = {f"accelerator_type:{trial.accelerator_type}": 0.001}
    return options


def check_cluster(trials: list[PlannedTrial], settings: ScheduleSettings) -> int:
    """Refuse a plan the cluster can never run; returns the CPUs of the largest node."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    node_cpus = int(max((n.get("CPU", 0) for n in nodes), default=0))
    if settings.cpus_per_trial and settings.cpus_per_trial > node_cpus:
        raise ClusterError(f"sweep.cpus_per_trial={settings.cpus_per_trial} but the largest node has {node_cpus} CPUs")
    total_gpus = sum(n.get("GPU", 0) for n in nodes)
    if any(t.spec.device == "cuda" for t in trials) and not total_gpus:
        raise ClusterError("the grid has CUDA trials but the Ray cluster has no GPU: use trial.device=cpu or ray.address=auto on a GPU cluster")
    present = {k.split(":", 1)[1] for n in nodes for k in n if k.startswith("accelerator_type:")}
    missing = sorted({t.accelerator_type for t in trials if t.accelerator_type} - present)
    if missing:
        raise ClusterError(f"no node has accelerator type {', '.join(missing)} (cluster has: {', '.join(sorted(present)) or 'none'}): fix sweep.accelerator_types")
    return node_cpus


def capacity(trials: list[PlannedTrial], settings: ScheduleSettings, node_cpus: int) -> int:
    """How many trials can run at once: the progress bar's 'running' estimate."""
    resources = ray.cluster_resources()
    if any(t.spec.device == "cuda" for t in trials):
        return max(1, int(resources.get("GPU", 1)))
    return max(1, int(resources.get("CPU", 1) // (settings.cpus_per_trial or node_cpus or 1)))


def schedule(trials: list[PlannedTrial], settings: ScheduleSettings, node_cpus: int,
             on_result: Callable[[PlannedTrial, dict], None], progress=None) -> None:
    """Submit every trial, then hand each result to `on_result` the moment it arrives.

    `node_cpus` is what check_cluster returned: call it first, before anything is recorded."""
    as_dict = {k: v for k, v in vars(settings).items()}
    pending = {}
    for trial in trials:
        ref = trial_task.options(**task_options(trial, settings, node_cpus)).remote(
            trial.spec.to_dict(), trial.key, trial.accelerator_type, as_dict
        )
        pending[ref] = trial
    slots = capacity(trials, settings, node_cpus)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in done:
            trial = pending.pop(ref)
            try:
                record = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a lost node after its retries: a failed trial
                record = failure(type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "", "")
            on_result(trial, record)
        if progress is not None:
            progress(running=min(slots, len(pending)))
        if not done:
            time.sleep(0.05)
