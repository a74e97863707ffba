"""One trial, measured: warmup (compile time on its own), timed runs, one instrumented run.

Returns DESIGN.md's result record as one flat dict: spec fields, key, status, figures, environment.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy

from tokengen import measure, models
from tokengen.environment import environment, peak_bandwidth_gbs
from tokengen.generate import Generator
from tokengen.profiling import profile_run
from tokengen.spec import TrialSpec
from tokengen.validate import check_runnable


def run_trial(spec: TrialSpec, tokens_path: str | None = None, profile_dir: str = ".") -> dict:
    """The result record; with `tokens_path`, the last run's tokens are saved there (int64 .npy);
    with profiling on, one more run writes its trace under `profile_dir`."""
    started = time.perf_counter()
    check_runnable(spec)
    measure.set_allocator(spec.allocator, spec.device)
    model = models.build_model(spec.model, spec.dtype, spec.device, spec.seed)
    generate = Generator(model, spec)

    first, first_run_s = measure.timed(generate, spec.device)
    for _ in range(spec.warmup - 1):
        measure.timed(generate, spec.device)

    runtimes, checksums, checksum = [], set(), ""
    for run in range(spec.runs):
        if run == 0 and spec.warmup == 0:
            result, seconds = first, first_run_s
        else:
            measure.reset_memory(spec.device)
            result, seconds = measure.timed(generate, spec.device)
        runtimes.append(seconds)
        checksum = measure.tokens_sha256(result.tokens)
        checksums.add(checksum)
    memory = measure.memory_stats(spec.device)

    timer = measure.StepTimer(spec.device)
    generate(wrap_step=timer.wrap)
    step_latencies = timer.latencies()
    profiled = profile_run(generate, spec, Path(profile_dir)) if spec.profile != "off" else {}

    steps = result.steps
    if tokens_path:
        numpy.save(tokens_path, measure.tokens_array(result.tokens))
    stats = measure.runtime_stats(runtimes)
    median = stats["runtime_median_s"]
    env = environment(spec.device)
    weight_bytes = models.weight_bytes(model)
    bandwidth = weight_bytes * steps / median / 1e9
    peak = peak_bandwidth_gbs(env["env_gpu_name"])
    return {
        **spec.to_dict(),
        "key": spec.key(),
        "status": "finished",
        "steps": steps,
        "tokens_generated": spec.batch_size * steps,
        **stats,
        "tokens_per_s": spec.batch_size * steps / median,
        "step_latency_median_s": statistics.median(step_latencies),
        "step_latency_p90_s": measure.percentile(step_latencies, 90),
        "first_run_s": first_run_s,
        **memory,
        "weight_bytes": weight_bytes,
        "weight_bandwidth_gbs": bandwidth,
        "weight_bandwidth_pct_of_peak": 100.0 * bandwidth / peak if peak else None,
        "tokens_sha256": checksum,  # the last timed run's
        "deterministic": len(checksums) == 1,
        **profiled,
        "trial_wall_s": time.perf_counter() - started,  # model build, compile, every run
        **env,
    }

