"""How many trials of each pool (CPU, CUDA pinned to an accelerator type, unpinned CUDA) run at once, found
without starting Ray: `sweep.workers`, else ray.address's cluster read from its GCS (1 per pool where it cannot be
read), else a local Ray's CPUs // sweep.cpus_per_trial and its GPUs (1 assumed where none is found)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from sweeps.planning.config import SweepConfig
from sweeps.planning.settings import local_gpus

CPU, GPU = "cpu", "gpu"  # pool names; a pinned pool is named by its accelerator type
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Node:
    cpus: float
    gpus: float
    accelerator_types: tuple = ()


@dataclass
class Workers:
    sizes: dict = field(default_factory=dict)  # pool -> trials at once
    source: str = ""  # where the sizes come from, said in the plan
    assumed: bool = False  # a size was assumed (the cluster could not be read)
    types: tuple = ()  # the cluster's accelerator types, where it was read

    def of(self, pool: str) -> int:
        return max(1, int(self.sizes.get(pool, 1)))


def pool_of(device: str, accelerator_type: str | None) -> str:
    return (accelerator_type or GPU) if device == "cuda" else CPU


class ClusterUnread(RuntimeError):
    """Why the cluster's nodes could not be read."""


def read_cluster(address: str, timeout_s: float = READ_TIMEOUT_S) -> list[Node]:
    """The alive nodes of the Ray cluster at `address` ("auto" or host:port), from its GCS with Ray's own client: no
    driver connects, nothing starts. A cluster with token authentication answers a client with RAY_AUTH_MODE=token,
    which Ray reads once per process: it is read again here, a token on disk taken to mean token mode as `ray.init`
    does (Ray's internal APIs, best effort)."""
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
        from ray._raylet import Config

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        Config.initialize("")
    except Exception:  # noqa: BLE001 - another Ray's internals: the read below says what went wrong
        pass
    try:
        from ray._private.services import canonicalize_bootstrap_address
        from ray._raylet import GcsClient
        from ray.core.generated.gcs_pb2 import GcsNodeInfo

        bootstrap = canonicalize_bootstrap_address(address)
        if not bootstrap:
            raise ClusterUnread("no cluster found")
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass  # nothing listens: say so now, not after the client's 40 s of retries
        infos = GcsClient(address=bootstrap).get_all_node_info(timeout=timeout_s).values()
    except ClusterUnread:
        raise
    except Exception as exc:  # noqa: BLE001 - an internal API, a cluster that does not answer or refuses us
        raise ClusterUnread(
            str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        ) from None
    nodes = []
    for info in infos:
        if info.state == GcsNodeInfo.GcsNodeState.ALIVE:
            resources = dict(info.resources_total)
            types = tuple(sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")))
            nodes.append(Node(resources.get("CPU", 0.0), resources.get("GPU", 0.0), types))
    if not nodes:
        raise ClusterUnread("no alive node")
    return nodes


def cluster_sizes(nodes: list[Node], pools: set[str], cpus_per_trial: int | None) -> dict:
    """Pool sizes on these nodes, as sweeps.execution.schedule places trials: a CPU trial takes cpus_per_trial, else
    the largest node's CPUs; a CUDA trial one GPU of a node with its accelerator type."""
    need = cpus_per_trial or max((n.cpus for n in nodes), default=0.0)
    sizes = {}
    for pool in pools:
        if pool == CPU:
            sizes[pool] = int(sum(n.cpus // need for n in nodes)) if need else 0
        else:
            sizes[pool] = int(sum(n.gpus for n in nodes if pool == GPU or pool in n.accelerator_types))
    return sizes


def find_workers(config: SweepConfig, pools: set[str], reader=read_cluster) -> Workers:
    """Each pool's size for this configuration (see the module's docstring)."""
    sweep, address = config.sweep, config.ray.address
    if sweep.workers:
        return Workers({p: int(sweep.workers) for p in pools}, f"sweep.workers={sweep.workers}")
    if address:
        try:
            nodes = reader(address)
        except ClusterUnread as exc:
            why = f"cannot read the cluster at ray.address={address} without starting Ray ({exc}; set sweep.workers)"
            return Workers({p: 1 for p in pools}, f"assumes 1 per pool: {why}", assumed=True)
        types = tuple(sorted({t for n in nodes for t in n.accelerator_types}))
        source = f"the cluster at ray.address={address}: {len(nodes)} node(s), {int(sum(n.gpus for n in nodes))} GPU(s)"
        source += f" ({', '.join(types)})" if types else ""
        return Workers(cluster_sizes(nodes, pools, sweep.cpus_per_trial), source, types=types)
    cpus, gpus, on_gpu = config.ray.num_cpus or os.cpu_count() or 1, config.ray.num_gpus, pools - {CPU}
    if gpus is None and on_gpu and (local := local_gpus()) is not None:
        gpus = len(local)
    per_trial = sweep.cpus_per_trial or cpus
    sizes = {p: max(1, int(cpus // per_trial)) if p == CPU else max(1, int(gpus or 1)) for p in pools}
    gpu_note = f"{gpus} GPU(s)" if gpus else "assumes 1 GPU (none found here)"
    notes = [f"cpu: {cpus} CPU(s) // {per_trial} per trial" if p == CPU else f"{p}: {gpu_note}" for p in pools]
    return Workers(sizes, "local Ray, " + "; ".join(sorted(notes)), assumed=bool(on_gpu) and not gpus)
