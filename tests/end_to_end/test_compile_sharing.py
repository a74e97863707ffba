"""Each graph compiled once for the sweep, on any node: its twins load it warm, through the driver, not a disk.

A real three-node Ray cluster whose nodes each have their own disk folder (`sweep.workdir` is `$NODE_DISK/...`,
each node's raylet given its own NODE_DISK): static_compiled with three stop checks that run on a CPU share one
graph key (the stop check does not change what torch.compile traces). The first compiles cold; the other two
get its cache from the driver's shelf and load it warm, on whichever node they land, as inductor's own cache-hit
counters say. With the hand-over cut (the shelf hands nothing), every twin compiles cold: the test's assertion
fails then, so it is the hand-over that makes them warm, not a folder two nodes happen to share.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import ray
from ray._raylet import Config
from ray.cluster_utils import Cluster
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep
from sweeps.execution import compile_share
from tokengen.contract.declarations import declared, names

CPU_CHECKS = [c for c in names("stop_check") if not declared("stop_check", c).cuda_only]  # sync, every_k, none


@pytest.fixture
def three_nodes(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # one auth mode for the nodes and the driver: token, with the token a local Ray leaves in ~/.ray (Ray reads the
    # mode once per process, and a driver that enforces it while its nodes send none never hears where a result is)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    Config.initialize("")  # re-read the mode: an earlier Ray in this process may have cached another one
    if not (Path.home() / ".ray" / "auth_token").is_file():
        subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"],
            check=True,
            capture_output=True,
        )
    disk = {"NODE_DISK": str(tmp_path / "node0")}
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "env_vars": disk}
    )
    nodes = [cluster.head_node]  # the head is one of the three: a node fewer to start on 2 cores
    nodes += [cluster.add_node(num_cpus=1, env_vars={"NODE_DISK": str(tmp_path / f"node{i}")}) for i in (1, 2)]
    cluster.wait_for_nodes()
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()
    monkeypatch.undo()
    Config.initialize("")


def compile_tags(uri: str) -> list[dict]:
    return [{**run.data.tags, "first_run_s": run.data.metrics.get("first_run_s")} for run in child_runs(uri)]


def shared_sweep(tmp_path, cluster):
    return small_sweep(
        tmp_path,
        "grid.variant=[static_compiled]",
        f"grid.stop_check=[{','.join(CPU_CHECKS)}]",
        "sweep.cpus_per_trial=1",
        "sweep.workdir=$NODE_DISK/work",
        f"ray.address={cluster.address}",
        "ray.num_cpus=null",
        "sweep.trial_timeout_s=600",
    )


@pytest.mark.slow
def test_a_graph_compiled_on_one_node_is_loaded_warm_on_another(three_nodes, tmp_path):
    cluster, _ = three_nodes
    config = shared_sweep(tmp_path, cluster)
    assert run_sweep(config) == 0
    tags = compile_tags(config.tracking.uri)
    cold = [t for t in tags if t.get("compile_cache") == "cold"]
    warm = [t for t in tags if t.get("compile_cache") == "warm"]
    assert len(cold) == 1 and len(warm) == len(CPU_CHECKS) - 1, tags
    assert all(t["compile_shared_from"] == cold[0]["trial_key"] for t in warm)
    assert any(t["node_id"] != cold[0]["node_id"] for t in warm), "no twin ran on another node"
    folders = {p.parts[-5] for p in tmp_path.glob("node*/work/*/*/inductor")}  # each node's own disk
    assert len(folders) >= 2, folders
    assert all(w["first_run_s"] < cold[0]["first_run_s"] for w in warm)


def test_graphs_from_another_torch_or_gpu_are_not_loaded(tmp_path):
    cache = tmp_path / "cache"
    (cache / "fxgraph").mkdir(parents=True)
    (cache / "fxgraph" / "entry").write_text("graph")
    facts = {"torch": "2.13.0", "triton": None, "cuda": None, "transformers": "5.24.0", "gpu": None, "code": "abc"}
    blob = compile_share.pack(cache, facts)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        assert json.loads(tar.extractfile(compile_share.MANIFEST).read()) == facts
    assert compile_share.unpack(blob, tmp_path / "same", facts) is None
    assert (tmp_path / "same" / "fxgraph" / "entry").read_text() == "graph"
    for name, value in (("torch", "2.11.0+cu130"), ("gpu", "NVIDIA H200")):
        refused = compile_share.unpack(blob, tmp_path / name, {**facts, name: value})
        assert refused == f"compiled with other {name} {facts[name]} vs {value}"
        assert not (tmp_path / name).exists()
    for damage, blob_now in (("cut", blob[: len(blob) - 40]), ("not-a-tar", b"\x1f\x8b garbage")):
        refused = compile_share.unpack(blob_now, tmp_path / damage, facts)  # an EOFError, before: the trial failed
        assert refused.startswith("the handed cache is damaged (") and refused.endswith("): compiled cold"), refused
        assert not (tmp_path / damage).exists(), "a half-unpacked cache would be loaded as if whole"
