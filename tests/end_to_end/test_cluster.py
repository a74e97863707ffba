"""Scheduling across a real multi-node Ray cluster with logical GPUs of two accelerator types."""

from __future__ import annotations

from collections import defaultdict

import pytest
import ray
from ray.cluster_utils import Cluster
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep

pytestmark = pytest.mark.slow  # starts Ray (a local cluster) and runs real trials


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    l40s = {"num_cpus": 2, "num_gpus": 1, "resources": {"accelerator_type:L40S": 1}}
    cluster = Cluster(initialize_head=True, head_node_args={**l40s, "include_dashboard": False})  # the head: a node too
    nodes = {
        "L40S": cluster.head_node,
        "H100": cluster.add_node(num_cpus=2, num_gpus=1, resources={"accelerator_type:H100": 1}),
    }
    cluster.wait_for_nodes()
    yield cluster, {name: node.node_id for name, node in nodes.items()}
    ray.shutdown()
    cluster.shutdown()


def test_pinned_trials_run_one_per_gpu_on_their_type(cluster, tmp_path):
    cluster, node_ids = cluster
    config = small_sweep(
        tmp_path,
        "trial.device=cuda",
        "sweep.accelerator_types=[L40S,H100]",
        "grid.batch_size=[1,2]",
        f"ray.address={cluster.address}",
        "ray.num_cpus=null",
    )
    # No real GPU here: each trial reaches its node, then its child process refuses device=cuda.
    assert run_sweep(config) == 1
    runs = child_runs(config.tracking.uri)
    assert len(runs) == 8  # 2 variants x 2 batches x 2 GPU types
    intervals = defaultdict(list)
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["error_type"] == "SpecError", tags.get("error_message")
        assert tags["node_id"] == node_ids[run.data.params["accelerator_type"]]
        assert tags["node_gpu_ids"] == "0"
        intervals[tags["node_id"]].append((metrics["node_started_at"], metrics["node_finished_at"]))
    for spans in intervals.values():
        spans.sort()
        assert len(spans) == 4
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans
