"""The Ray task of one trial, in a module that imports neither torch nor Hydra.

Ray imports a remote function's module in its worker, so this module stays light: the worker
starts in about a second and is reused across trials (no `max_calls=1`), while the trial itself
runs in its own process (sweeps/execution/trial_process.py), the unit of crash and allocator isolation. Its
files lie in `<workdir>/<sweep>-<store>/<key>` on the node: per sweep and store, since two users may run the same
key at once, and one sweep name may be run against two stores; in a workdir the node proves its user's own. The
task is handed the sweep's own typed settings (SweepSettings, the schema's `sweep` section) and the store's tag.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import ray

from sweeps.execution.trial_process import TrialRequest, run_trial_process
from sweeps.planning.config import SweepSettings
from sweeps.planning.settings import SHARED
from tokengen.contract.machine.user_folders import own_subfolder, workdir
from tokengen.contract.slo import Slo
from tokengen.contract.trial_record import TrialRecord


def sweep_folder(sweep: SweepSettings, store: str = "") -> Path:
    """`<workdir>/<sweep>-<store>`, resolved on the node (its `$VAR`s and `~`: `$TMPDIR/sweeps` is each node's own
    disk) and proven its user's own there (FolderRefused, the trial's failure in one line): two sweeps running one
    key, or one sweep name run against two stores, never share a trial's folder, and the same sweep and store find
    theirs again on the next run. `store`: the store and experiment as a short hash (execute.store_tag)."""
    name = f"{sweep.name}-{store}" if store else sweep.name
    return own_subfolder(workdir(sweep.workdir), name)


@ray.remote
def trial_task(
    spec: dict,
    key: str,
    accelerator_type: str | None,
    sweep: SweepSettings,
    store: str,
    shared_from: str | None = None,
    handed: bytes | None = None,
) -> TrialRecord:
    """One trial on its node, its record typed (a TrialRecord: what Ray hands the driver); `handed`: a twin's
    compiled graphs (Ray brings the shelf's object here)."""
    started_at = time.time()
    context = ray.get_runtime_context()
    threads = int(context.get_assigned_resources().get("CPU", 0)) or None
    folder = sweep_folder(sweep, store)
    request = TrialRequest(
        spec=spec,
        key=key,
        folder=f"{folder}/{key}",
        timeout_s=sweep.trial_timeout_s,
        threads=threads,
        fidelity_gate=sweep.fidelity_gate,
        slo=Slo(sweep.slo_ttft_ms, sweep.slo_tpot_ms, sweep.slo_percentile),
        shared_from=shared_from,
        share=sweep.inductor_cache == SHARED,
    )
    return run_trial_process(request, handed).with_result(
        accelerator_type=accelerator_type,
        node_id=context.get_node_id(),
        node_host=socket.gethostname(),
        node_gpu_ids=",".join(str(g) for g in ray.get_gpu_ids()),
        node_threads=threads,
        node_started_at=started_at,
        node_finished_at=time.time(),
    )
