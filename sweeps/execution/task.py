"""The Ray task of one trial, in a module that imports neither torch nor the planner.

Ray imports a remote function's module in its worker, so this module stays light: the worker
starts in about a second and is reused across trials (no `max_calls=1`), while the trial itself
runs in its own process (sweeps/execution/trial_process.py), the unit of crash and allocator isolation. Its
files lie in `<workdir>/<sweep>-<store>/<key>` on the node: per sweep and store, since two users may run the same
key at once, and one sweep name may be run against two stores; in a workdir the node proves its user's own.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from sweeps.execution.trial_process import TrialRequest, complete_record, run_trial_process
from sweeps.planning.settings import SHARED
from tokengen.contract.fidelity import DEFAULT_GATE
from tokengen.contract.machine.user_folders import own_subfolder, workdir


@dataclass
class ScheduleSettings:
    """What every trial task of a sweep is handed: where its folder is, its timeout, its share of the node."""

    workdir: str | None  # None: the node's own cache folder's sweeps/ (tokengen/contract/machine/user_folders.py)
    trial_timeout_s: float
    retries: int
    cpus_per_trial: int | None
    inductor_cache: str  # shared | cold (sweeps.planning.settings.inductor_mode)
    sweep: str
    trial_gpus: int | None = None  # None: 1 for a CUDA trial, 0 for a CPU one
    fidelity_gate: float = DEFAULT_GATE  # the top-1 agreement a gated trial's own verdict is judged at
    store: str = ""  # the store and experiment the sweep records into, as a short hash (execute.store_tag)


def sweep_folder(settings: ScheduleSettings) -> Path:
    """`<workdir>/<sweep>-<store>`, resolved on the node (its `$VAR`s and `~`: `$TMPDIR/sweeps` is each node's own
    disk) and proven its user's own there (FolderRefused, the trial's failure in one line): two sweeps running one
    key, or one sweep name run against two stores, never share a trial's folder, and the same sweep and store find
    theirs again on the next run."""
    name = f"{settings.sweep}-{settings.store}" if settings.store else settings.sweep
    return own_subfolder(workdir(settings.workdir), name)


@ray.remote
def trial_task(
    spec: dict,
    key: str,
    accelerator_type: str | None,
    settings: ScheduleSettings,
    shared_from: str | None = None,
    handed: bytes | None = None,
) -> dict:
    """One trial on its node; `handed`: a twin's compiled graphs (Ray brings the shelf's object here)."""
    started_at = time.time()
    context = ray.get_runtime_context()
    threads = int(context.get_assigned_resources().get("CPU", 0)) or None
    folder = sweep_folder(settings)
    request = TrialRequest(
        spec=spec,
        key=key,
        folder=f"{folder}/{key}",
        timeout_s=settings.trial_timeout_s,
        threads=threads,
        fidelity_gate=settings.fidelity_gate,
        shared_from=shared_from,
        share=settings.inductor_cache == SHARED,
    )
    record = run_trial_process(request, handed)
    return complete_record(
        record,
        spec,
        key,
        accelerator_type,
        node_id=context.get_node_id(),
        node_host=socket.gethostname(),
        node_gpu_ids=",".join(str(g) for g in ray.get_gpu_ids()),
        node_threads=threads,
        node_started_at=started_at,
        node_finished_at=time.time(),
    )
