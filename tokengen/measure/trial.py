"""One trial, measured: warmup (compile time on its own), timed runs, one instrumented run.

The timed runs are `spec.runs` of them, or with runs=auto (0) as many as make the mean sure
(tokengen/measure/run_count.py: min_runs, then until the 95% interval is within target_ci, at most
max_runs); with runs=auto the warmup also goes on past `spec.warmup` runs (at most AUTO_MAX_WARMUP)
until a run is within 10% of the one before, and the runs stop short of the target (past min_runs)
once the Watch sees interference, or when the sweep's deadline for the trial (DEADLINE_ENV) would
leave no time for the instrumented run. A Watch (tokengen/measure/interference.py) spans the
timed runs; its evidence and verdict (`measurement`: ok | noisy | contended, `measurement_reasons`)
go into the record beside `runs_done` and `runtime_ci_rel`.

Returns the result record (tokengen.contract.record) as one flat dict: spec fields, key, status,
figures, environment. Its work is the tokens the generation says it produced (`Generation.produced`, padding
included): batch x steps where each step makes one token per row, more where an advance appends several
(tokengen/decode/advance.py). A request workload (requests > 0, tokengen.engines.request_server) counts its
work in slot-steps (batch_size slots x forwards run) and its useful tokens from its requests, and
adds the requests' latency percentiles and the slots' occupancy, and each request's latencies from its arrival,
the rates, goodput and the SLO's verdict (tokengen/measure/load_figures.py; the SLO from SLO_ENV, the sweep's).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy
import torch

from tokengen import models
from tokengen.contract.arrivals import trace_sha256
from tokengen.contract.fact_rules import draft_for
from tokengen.contract.fidelity import DEFAULT_GATE, GATE_ENV
from tokengen.contract.names import DEADLINE_ENV
from tokengen.contract.rules import check_runnable
from tokengen.contract.slo import SLO_ENV, Slo
from tokengen.contract.spec import AUTO_RUNS, TrialSpec
from tokengen.contract.trained import record_facts
from tokengen.contract.trial_record import make_record
from tokengen.decode.stopping import row_lengths
from tokengen.engines import make_generator
from tokengen.engines.request_server import request_lengths, serving_figures
from tokengen.knobs import on_model
from tokengen.measure import agreement, clocks, compile_counters, memory
from tokengen.measure.checksum import tokens_array, tokens_sha256
from tokengen.measure.energy import EnergyMeter, nvml_device_handle
from tokengen.measure.environment import environment, peak_bandwidth_gbs
from tokengen.measure.interference import CONTENDED, Watch, record_fields, verdict
from tokengen.measure.load_figures import load_figures
from tokengen.measure.memory import live_allocator_tag, set_allocator
from tokengen.measure.profiler.window import profile_run
from tokengen.measure.run_count import AUTO, RunPolicy, run_until_sure, warm_until_settled

AUTO_MAX_WARMUP = 5  # runs=auto: warmup runs at most, the first (compile) included


@dataclass
class TimedRuns:
    """What the timed runs saw: each run's seconds, the last run's result, every run's checksum."""

    runtimes: list[float] = field(default_factory=list)
    served: list = field(default_factory=list)  # request workloads: every run (its request latencies)
    last: object = None  # the last run's Generation
    checksum: str = ""  # the last run's
    checksums: set[str] = field(default_factory=set)
    energy_j: float | None = None
    metered: int = 0  # runs inside the energy meter's interval
    rel_ci: float | None = None  # the 95% interval's half-width over the mean runtime
    target_met: bool | None = None  # runs=auto: the interval reached target_ci; None for a fixed count
    evidence: dict = field(default_factory=dict)  # the Watch's, over the timed runs


def run_trial(spec: TrialSpec, tokens_path: str | None = None, profile_dir: str = ".") -> dict:
    """The flat record result.json holds (TrialRecord.to_dict: made typed, so a figure of the wrong type fails
    here); with `tokens_path`, the last run's tokens are saved there (int64 .npy); with profiling on, one more
    run writes its trace under `profile_dir`."""
    started = time.perf_counter()
    check_runnable(spec)
    set_allocator(spec.allocator, spec.device)
    torch.set_float32_matmul_precision(spec.matmul_precision)
    model = on_model(models.build_model(spec.model, spec.dtype, spec.device, spec.seed), spec)  # quantized here
    generate = make_generator(model, spec)

    memory.release_cached(spec.device)
    compile_counters.start()
    watch = watch_of(spec).start() if watch_first_run(spec) else None
    first, first_run_s = clocks.timed(generate, spec.device)
    warmup_done = warm(generate, spec, first_run_s)
    runs = timed_runs(generate, spec, first, first_run_s, watch)
    compiled = compile_counters.read(spec.compile)
    held = memory.memory_stats(spec.device)
    allocator_live = live_allocator_tag(spec.device)  # read while the model's memory is held

    timer = clocks.StepTimer(spec.device)
    generate(wrap_step=timer.wrap)
    step_latencies = timer.latencies()
    profiled = profile_run(generate, spec, Path(profile_dir)) if spec.profile != "off" else {}
    if tokens_path:
        with open(tokens_path, "wb") as handle:  # numpy.save(path) would add .npy: written where it was checked
            numpy.save(handle, tokens_array(runs.last.tokens))
    gate = float(os.environ.get(GATE_ENV) or DEFAULT_GATE)
    proven = agreement.measure(spec, model, None if spec.requests else runs.last.tokens, gate)  # {} when exact
    return make_record(
        spec,
        key=spec.key(),
        **figures(spec, model, runs, step_latencies),
        first_run_s=first_run_s,
        **compiled,
        warmup_done=warmup_done,
        **record_fields(
            runs.evidence, cv=clocks.runtime_stats(runs.runtimes)["runtime_cv"], target_ci_reached=runs.target_met
        ),
        **held,
        allocator_live=allocator_live,
        tokens_sha256=runs.checksum,  # the last timed run's
        deterministic=len(runs.checksums) == 1,
        **profiled,
        **proven,
        **record_facts(spec.model),  # a trained checkpoint's held-out loss, corpus and steps
        trial_wall_s=time.perf_counter() - started,  # model build, compile, every run
        **environment(spec.device, spec.model, draft_for(spec)),
    ).to_dict()


def warm(generate, spec: TrialSpec, first_run_s: float) -> int:
    """Warmup runs made, the first (already run, compile included) counted: `spec.warmup` of them, or with
    runs=auto at least that many and on until a run is within 10% of the one before (AUTO_MAX_WARMUP at most)."""
    if spec.warmup == 0:
        return 0
    if spec.runs != AUTO_RUNS:
        for _ in range(spec.warmup - 1):
            clocks.timed(generate, spec.device)
        return spec.warmup
    made = []

    def one_run() -> float:
        made.append(first_run_s if not made else clocks.timed(generate, spec.device)[1])
        return made[-1]

    return len(warm_until_settled(one_run, max_warmup=max(spec.warmup, AUTO_MAX_WARMUP), min_warmup=spec.warmup))


def policy_of(spec: TrialSpec) -> RunPolicy:
    return RunPolicy(AUTO if spec.runs == AUTO_RUNS else spec.runs, spec.min_runs, spec.max_runs, spec.target_ci)


def watch_of(spec: TrialSpec) -> Watch:
    handle = nvml_device_handle if spec.device == "cuda" else None  # the GPU the energy meter reads
    return Watch(threads=torch.get_num_threads(), device=spec.device, nvml_handle=handle)


def watch_first_run(spec: TrialSpec) -> bool:
    """With no warmup the first run is a timed one, so the Watch spans it too; unless it compiles: the
    compiler's worker processes would read as others."""
    return spec.warmup == 0 and spec.compile == "off"


def timed_runs(generate, spec: TrialSpec, first, first_run_s: float, watch: Watch | None = None) -> TimedRuns:
    """The timed runs as policy_of(spec) says (with no warmup, the first run is the first timed one), NVML's
    energy counter and the interference Watch around them all (`watch`: one started before the first run),
    memory peaks reset (nothing freed) before each."""
    runs = TimedRuns()
    meter = EnergyMeter(spec.device)  # the board's counter over all timed runs together (null without one)
    watch = watch or watch_of(spec).start()
    meter.start()

    def one_run() -> float:
        if not runs.runtimes and spec.warmup == 0:
            result, seconds = first, first_run_s
        else:
            memory.reset_peaks(spec.device)
            result, seconds = clocks.timed(generate, spec.device)
        runs.runtimes.append(seconds)
        if spec.requests:
            runs.served.append(result)
        runs.last, runs.checksum = result, tokens_sha256(result.tokens)
        runs.checksums.add(runs.checksum)
        return seconds

    done = run_until_sure(one_run, policy_of(spec), give_up=lambda seconds: give_up(seconds, watch))
    runs.energy_j = meter.stop()
    runs.evidence = watch.stop()
    runs.metered = done.runs - (spec.warmup == 0)  # with no warmup the first timed run ran before the meter
    runs.rel_ci, runs.target_met = done.rel_ci, done.target_met
    return runs


def give_up(runtimes: list[float], watch: Watch, deadline: float | None = None) -> bool:
    """runs=auto, past min_runs: stop short of the target when more runs cannot make the mean sure, because
    the Watch already sees interference (the sweep measures the trial again: sweeps/execution/remeasure.py), or when
    two more runs (the next and the instrumented one) would pass the sweep's deadline for the trial."""
    if verdict(watch.stop(), None, None)[0] == CONTENDED:  # stop() only reads: the Watch keeps running
        return True
    if deadline is None:
        deadline = float(os.environ.get(DEADLINE_ENV) or "inf")
    return time.time() + 2 * runtimes[-1] + DEADLINE_MARGIN_S > deadline


DEADLINE_MARGIN_S = 20.0  # the instrumented run's setup, the record, the process's exit


def figures(spec: TrialSpec, model, runs: TimedRuns, step_latencies: list[float]) -> dict:
    """Work, time, throughput, bandwidth and energy figures of the timed runs."""
    result = runs.last
    steps = result.steps
    stats = clocks.runtime_stats(runs.runtimes)
    median = stats["runtime_median_s"]
    ttft = step_latencies[0]  # step 0: the prompt's forward and the first sampled token
    eos = models.eos_ids(model.config)
    ended = None
    if spec.requests:
        lengths = request_lengths(spec, result.tokens, eos).tolist()
        useful = sum(lengths)
        requests = serving_figures(runs.served, useful)
        if result.held_s or result.token_times_s:  # our server's clock, or a peer's own timestamps per token
            requests |= load_figures(runs.served, lengths, Slo.from_env(os.environ.get(SLO_ENV)))
        if spec.request_trace:
            requests["request_trace_sha256"] = trace_sha256(spec.request_trace)
    else:
        columns = result.tokens.shape[1] - result.prompt_len  # generated columns (steps, one token per step)
        lengths = row_lengths(spec.stop, spec.seed, spec.max_seqlen, spec.prompt_len, result.tokens, eos, columns)
        useful, ended, requests = int(lengths.sum()), int((lengths < spec.max_seqlen).sum()), {}
    generated = result.produced  # slot-steps for requests: padding and idle slots included
    per_row = generated // spec.batch_size  # each row's (slot's) tokens: steps, one token per row per step
    weight_bytes = models.weight_bytes(model)
    bandwidth = weight_bytes * steps / median / 1e9
    peak = peak_bandwidth_gbs(torch.cuda.get_device_name() if spec.device == "cuda" else None)
    energy_j, metered = runs.energy_j, runs.metered
    return dict(
        steps=steps,
        tokens_generated=generated,
        useful_tokens=useful,
        rows_ended=ended,
        runtime_s=runs.runtimes,
        **stats,
        tokens_per_s=generated / median,
        useful_tokens_per_s=useful / median,
        **requests,
        ttft_s=ttft,
        tpot_s=(median - ttft) / (per_row - 1) if per_row > 1 else None,
        step_latency_median_s=statistics.median(step_latencies),
        step_latency_p90_s=clocks.percentile(step_latencies, 90),
        energy_j=energy_j,
        energy_j_per_token=energy_j / (useful * metered) if energy_j is not None and useful and metered else None,
        runs_done=len(runs.runtimes),
        runtime_ci_rel=runs.rel_ci,
        weight_bytes=weight_bytes,
        weight_bandwidth_gbs=bandwidth,
        weight_bandwidth_pct_of_peak=100.0 * bandwidth / peak if peak else None,
        **(counts.figures(useful / spec.batch_size, runs.runtimes[-1]) if (counts := result.counts) else {}),
    )
