"""Shared by the pricing tests: a sweep driver without Ray (a fake cluster that 'runs' each trial with
known timings, in the order it was submitted), and a fixed CPU speed so nothing calibrates this host."""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass, field

from sweeps.pricing.estimate import CpuSpeed
from sweeps.pricing.estimate.hardware import Calibration
from tokengen.contract.names import FINISHED
from tokengen.contract.trial_record import TrialRecord, make_record

CPU = CpuSpeed(gflops=20.0, gbs=5.0)
FIXED = Calibration(CPU, measured_at=0.0, quiet=True)  # the process's calibration: nothing measures this host
T0 = 1_796_000_000.0  # the fake cluster's clock (time.time()) at the sweep's start


def fake_runtime(spec) -> float:
    """One timed run's seconds for a trial: a recompute loop grows with the square of its steps."""
    steps = spec.max_seqlen
    per_step = 0.002 * (1 + spec.batch_size / 8) * (steps / 16 if spec.cache == "none" else 1.0)
    return per_step * steps


def fake_record(trial, started: float, cold_start_s: float = 0.0) -> TrialRecord:
    """A finished trial as the task returns it: its run, walls and node span from fake_runtime; a worker's
    first trial waits `cold_start_s` for the worker's warm parent to start."""
    spec = trial.spec
    run = fake_runtime(spec)
    trial_wall = 0.3 + (spec.warmup + spec.runs + 1) * run + 0.2  # build, every run, the first run's extra
    child_wall = trial_wall + 0.05 + cold_start_s
    steps = spec.max_seqlen
    tokens = hashlib.sha256(f"{spec.batch_size}-{steps}".encode()).hexdigest()
    return make_record(
        spec,
        key=trial.key,
        accelerator_type=trial.accelerator_type,
        status=FINISHED,
        steps=steps,
        tokens_generated=spec.batch_size * steps,
        useful_tokens=spec.batch_size * steps,
        runtime_s=[run] * spec.runs,
        runtime_mean_s=run,
        runtime_std_s=0.0,
        runtime_median_s=run,
        runtime_min_s=run,
        runtime_max_s=run,
        runtime_cv=0.0,
        tokens_per_s=spec.batch_size * steps / run,
        useful_tokens_per_s=spec.batch_size * steps / run,
        first_run_s=run + 0.2,
        trial_wall_s=trial_wall,
        child_wall_s=child_wall,
        tokens_sha256=tokens,
        env_host="fake-node",
        env_torch="2.9.0",
        env_python="3.11",
        node_started_at=started,
        node_finished_at=started + child_wall + 0.01,
        node_id="fake-node",
    )


@dataclass
class FakeCluster:
    """Stands in for the execution stage's Ray part (sweeps.execution.execute.run_on_cluster): `workers` trials at once, each
    taken in the order submitted by the first free worker (Ray's FIFO for equal resources)."""

    workers: int = 1
    cold_start_s: float = 0.0  # each worker's first trial waits this long for the worker to start
    submitted: list = field(default_factory=list)

    def install(self, monkeypatch) -> "FakeCluster":
        import sweeps.execution.execute

        monkeypatch.setattr(sweeps.execution.execute, "run_on_cluster", self.run_on_cluster)
        return self

    def run_on_cluster(self, trials, config, stop, on_ready, on_result, on_tick) -> None:
        on_ready()
        self.schedule(trials, None, 2, on_result)

    def schedule(self, trials, settings, node_cpus, on_result, progress=None) -> None:
        self.submitted.extend(trials)
        free = [(T0, w) for w in range(self.workers)]
        done, started = [], set()
        for trial in trials:
            at, worker = heapq.heappop(free)
            record = fake_record(trial, at, 0.0 if worker in started else self.cold_start_s)
            started.add(worker)
            heapq.heappush(free, (record.result.node_finished_at, worker))
            done.append((record.result.node_finished_at, trial, record))
        for _, trial, record in sorted(done, key=lambda item: item[0]):
            on_result(trial, record)
