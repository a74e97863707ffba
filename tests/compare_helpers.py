"""Synthetic sweeps for the comparison's tests, written through the sweep's own Recorder.

Each trial's timed runs are drawn from a seeded normal distribution around a runtime chosen in
advance, so a pair of sweeps has known true ratios; the record carries what a trial's would (mean,
std, cv, every run, the token checksum and tokens.npy, the fingerprint's facts), and the reader
reads it back as it reads a real sweep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path

import numpy as np
from mlflow import MlflowClient
from servers import seeded_uri

from tokengen.contract.machine.fingerprint import as_text
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tokengen.contract.variants import VARIANTS
from tracking.store.recorder import Recorder

FACTS = {
    "device": "cpu Test CPU",
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "driver": None,
    "threads": 2,
    "project": "0.1.0",
    "model_files": "preset",
}
RUNS = 8
NOISE = 0.02  # each timed run's relative spread


def tokens_for(seed: int, batch: int = 2, steps: int = 6) -> np.ndarray:
    """A batch's tokens, (B, 1 + steps), BOS (0) first, distinct per row."""
    tokens = np.random.default_rng(seed).integers(1, 500, size=(batch, 1 + steps), dtype=np.int64)
    tokens[:, 0] = 0
    return tokens


class Store:
    """A SQLite store with sweeps written as the driver writes them."""

    def __init__(self, root: Path):
        self.uri = seeded_uri(root)
        MlflowClient(tracking_uri=self.uri).create_experiment("tokengen", artifact_location=str(root / "art"))
        self.recorder = Recorder(self.uri, "tokengen")

    def failed(self, variant: str, *, batch: int = 2) -> str:
        """A trial that failed (its record holds no figures), as a trial's OutOfMemory would be recorded."""
        spec = TrialSpec(
            variant=variant,
            model="tiny",
            device="cpu",
            batch_size=batch,
            max_seqlen=6,
            **VARIANTS[variant],
            warmup=2,
            runs=RUNS,
        )
        record = make_record(spec, key=spec.key(), status="failed", error_type="OutOfMemory", error_message="no memory")
        return self.recorder.record_trial(record)

    def sweep(self, name: str, config: dict | None = None) -> str:
        return self.recorder.start_sweep(
            name, {"sweep": {"name": name, "cpus_per_trial": None, **(config or {})}}, resume=False
        )

    def trial(
        self,
        variant: str,
        runtime: float,
        *,
        seed: int,
        threads: int = 2,
        batch: int = 2,
        model: str = "tiny",
        tokens: np.ndarray | None = None,
        measurement: str = "ok",
        runs: int = RUNS,
        warmup: int = 1,
        torch: str = "2.13.0",
    ) -> str:
        spec = TrialSpec(
            variant=variant,
            model=model,
            device="cpu",
            batch_size=batch,
            max_seqlen=6,
            **VARIANTS[variant],
            warmup=warmup,
            runs=runs,
        )
        samples = runtime * (1 + NOISE * np.random.default_rng(seed).standard_normal(runs))
        tokens = tokens_for(batch) if tokens is None else tokens
        steps = tokens.shape[1] - 1
        mean, std = float(samples.mean()), float(samples.std(ddof=1))
        facts = {**FACTS, "threads": threads, "torch": torch}
        record = make_record(
            spec,
            key=spec.key(),
            status="finished",
            steps=steps,
            runtime_s=[float(s) for s in samples],
            runtime_mean_s=mean,
            runtime_std_s=std,
            runtime_cv=std / mean,
            runs_done=runs,
            tokens_per_s=batch * steps / mean,
            useful_tokens_per_s=batch * steps / mean,
            measurement=measurement,
            measurement_reasons="others used 1.8 of 2 cores" if measurement == "contended" else None,
            tokens_sha256=hashlib.sha256(tokens.tobytes()).hexdigest(),
            env_facts=as_text(facts),
            env_torch=torch,
            env_torch_threads=threads,
            env_host="node-a",
            env_cpu_count=2,
        )
        buffer = io.BytesIO()
        np.save(buffer, tokens)
        return self.recorder.record_trial(dataclasses.replace(record, files={TOKENS_FILE: buffer.getvalue()}))


def recorded_comparison(uri: str, comparison: str):
    """The comparison tagged `comparison` (e.g. 'a vs b'), as MlflowClient reads it back, checked to be one whole
    run: finished, its figures as metrics of one history entry each, its three files, and no child run."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen").experiment_id
    (run,) = client.search_runs([experiment], f"tags.comparison = '{comparison}'")
    assert run.info.status == "FINISHED" and run.info.run_name == f"compare {comparison}", run.info
    assert run.data.metrics["points"] == int(run.data.tags["points"])
    for name, value in run.data.metrics.items():
        assert [m.value for m in client.get_metric_history(run.info.run_id, name)] == [value]
    files = {a.path for a in client.list_artifacts(run.info.run_id, "comparison")}
    assert {"comparison/comparison.md", "comparison/comparison.csv", "comparison/ratio_by_point.png"} <= files
    assert client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{run.info.run_id}'") == []
    return run


def old_comparison(uri: str, comparison: str, points: list[dict]) -> str:
    """A comparison as tracking.compare recorded one before it became one run: a run tagged `comparison` and a child
    run per matched point (`points`: each its name, params, metrics and tags), written through MlflowClient."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen").experiment_id
    parent = client.create_run(experiment, run_name=f"compare {comparison}", tags={"comparison": comparison})
    parent_id = parent.info.run_id
    for point in points:
        tags = {"mlflow.parentRunId": parent_id, "comparison_id": parent_id[:12], **point["tags"]}
        child = client.create_run(experiment, run_name=point["name"], tags=tags).info.run_id
        for name, value in point["params"].items():
            client.log_param(child, name, value)
        for name, value in point["metrics"].items():
            client.log_metric(child, name, value)
        client.set_terminated(child, "FINISHED")
    client.set_terminated(parent_id, "FINISHED")
    return parent_id


def recorded_children(uri: str, parent_id: str) -> list:
    """An older comparison's child runs (old_comparison), as MlflowClient reads them back, each checked to be a whole
    run: finished, named as its point, its params and metrics with one history entry each, its artifact folder its
    own."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen").experiment_id
    children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    for child in children:
        run = client.get_run(child.info.run_id)
        assert run.info.status == "FINISHED" and run.info.lifecycle_stage == "active", run.info
        assert run.info.run_name.startswith(run.data.params["variant"]) and run.info.end_time
        assert run.data.tags["mlflow.runName"] == run.info.run_name
        assert run.info.artifact_uri.rstrip("/").endswith(f"{run.info.run_id}/artifacts")
        for name, value in run.data.metrics.items():
            assert [m.value for m in client.get_metric_history(run.info.run_id, name)] == [value]
    return children
