"""One trial, measured: warmup (compile time on its own), timed runs, one instrumented run.

Returns DESIGN.md's result record (tokengen.record) as one flat dict: spec fields, key, status,
figures, environment. A request workload (requests > 0, tokengen.serving) counts its work in
slot-steps (batch_size slots x forwards run) and its useful tokens from its requests, and adds the
requests' latency percentiles and the slots' occupancy.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy
import torch

from tokengen import measure, models
from tokengen.allocator import live_allocator_tag
from tokengen.energy import EnergyMeter
from tokengen.environment import environment, peak_bandwidth_gbs
from tokengen.engines import make_generator
from tokengen.profiling import profile_run
from tokengen.record import make_record
from tokengen.serving import request_lengths, serving_figures
from tokengen.spec import TrialSpec
from tokengen.stopping import row_lengths
from tokengen.validate import check_runnable


def run_trial(spec: TrialSpec, tokens_path: str | None = None, profile_dir: str = ".") -> dict:
    """The result record; with `tokens_path`, the last run's tokens are saved there (int64 .npy);
    with profiling on, one more run writes its trace under `profile_dir`."""
    started = time.perf_counter()
    check_runnable(spec)
    measure.set_allocator(spec.allocator, spec.device)
    torch.set_float32_matmul_precision(spec.matmul_precision)
    model = models.build_model(spec.model, spec.dtype, spec.device, spec.seed)
    generate = make_generator(model, spec)

    first, first_run_s = measure.timed(generate, spec.device)
    for _ in range(spec.warmup - 1):
        measure.timed(generate, spec.device)

    runtimes, checksums, checksum, served = [], set(), "", []
    meter = EnergyMeter(spec.device)  # NVML's board counter over all timed runs together (null without one)
    meter.start()
    for run in range(spec.runs):
        if run == 0 and spec.warmup == 0:
            result, seconds = first, first_run_s
        else:
            measure.reset_memory(spec.device)
            result, seconds = measure.timed(generate, spec.device)
        runtimes.append(seconds)
        if spec.requests:
            served.append(result)  # each run's request latencies
        checksum = measure.tokens_sha256(result.tokens)
        checksums.add(checksum)
    energy_j = meter.stop()
    metered = spec.runs - (spec.warmup == 0)  # with no warmup the first timed run ran before the meter
    memory = measure.memory_stats(spec.device)
    allocator_live = live_allocator_tag(spec.device)  # read while the model's memory is held

    timer = measure.StepTimer(spec.device)
    generate(wrap_step=timer.wrap)
    step_latencies = timer.latencies()
    profiled = profile_run(generate, spec, Path(profile_dir)) if spec.profile != "off" else {}

    steps = result.steps
    if tokens_path:
        numpy.save(tokens_path, measure.tokens_array(result.tokens))
    stats = measure.runtime_stats(runtimes)
    median = stats["runtime_median_s"]
    ttft = step_latencies[0]  # step 0: the prompt's forward and the first sampled token
    if spec.requests:
        useful = int(request_lengths(spec, result.tokens, models.eos_ids(model.config)).sum())
        requests = serving_figures(served, useful)
    else:
        eos = models.eos_ids(model.config)
        useful = int(row_lengths(spec.stop, spec.seed, spec.max_seqlen, spec.prompt_len, result.tokens, eos, steps).sum())
        requests = {}
    generated = spec.batch_size * steps  # slot-steps for requests: padding and idle slots included
    env = environment(spec.device)
    weight_bytes = models.weight_bytes(model)
    bandwidth = weight_bytes * steps / median / 1e9
    peak = peak_bandwidth_gbs(env["env_gpu_name"])
    return make_record(
        spec,
        key=spec.key(),
        steps=steps,
        tokens_generated=generated,
        useful_tokens=useful,
        runtime_s=runtimes,
        **stats,
        tokens_per_s=generated / median,
        useful_tokens_per_s=useful / median,
        **requests,
        ttft_s=ttft,
        tpot_s=(median - ttft) / (steps - 1) if steps > 1 else None,
        step_latency_median_s=statistics.median(step_latencies),
        step_latency_p90_s=measure.percentile(step_latencies, 90),
        first_run_s=first_run_s,
        **memory,
        allocator_live=allocator_live,
        energy_j=energy_j,
        energy_j_per_token=energy_j / (useful * metered) if energy_j is not None and useful and metered else None,
        weight_bytes=weight_bytes,
        weight_bandwidth_gbs=bandwidth,
        weight_bandwidth_pct_of_peak=100.0 * bandwidth / peak if peak else None,
        tokens_sha256=checksum,  # the last timed run's
        deterministic=len(checksums) == 1,
        **profiled,
        trial_wall_s=time.perf_counter() - started,  # model build, compile, every run
        **env,
    )
