"""The cost model (sweeps/pricing/estimate/): laws recovered from synthetic histories, the bases, the schedule.

Histories here are generated from known per-step laws with noise, so a fit can be checked against the
truth. Every test injects the CPU's speed: nothing calibrates this host, nothing touches disk.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sweeps.pricing.estimate import (
    FIT,
    HISTORY,
    PRESET_SHAPES,
    PRIOR,
    CpuSpeed,
    calibrate_cpu,
    cpu_speed,
    estimate,
    fit,
    forget_cpu_speed,
    hardware,
)
from sweeps.pricing.estimate.observed import OUTSIDE_CHILD_S
from sweeps.pricing.estimate.priors import prior_run
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS
from sweeps.pricing.priced import makespan

CPU = CpuSpeed(gflops=50.0, gbs=10.0)
CACHED = dict(a=2e-3, b=1e-4, c=5e-5, d=2e-6)  # t_step = a + b*B + c*B*P/S + d*B*(P + (S-1)/2)
RECOMPUTE = dict(a=3e-3, e=4e-6)  # t_step = a + e*B*(P + (S-1)/2)
COMPILE_S, BUILD_S, IN_CHILD_S = 30.0, 0.8, 0.05


def cached_step(batch, prompt, steps):
    return (
        CACHED["a"]
        + CACHED["b"] * batch
        + CACHED["c"] * batch * prompt / steps
        + CACHED["d"] * batch * (prompt + (steps - 1) / 2)
    )


def recompute_step(batch, prompt, steps):
    return RECOMPUTE["a"] + RECOMPUTE["e"] * batch * (prompt + (steps - 1) / 2)


def synthetic(
    step_law,
    cache,
    *,
    noise=0.01,
    seed=0,
    model="gpt2",
    compile="off",
    measurement="ok",
    batches=(1, 4, 16, 64),
    prompts=(1, 32, 128),
    lengths=(32, 128, 512),
    repeats=2,
    slowdown=1.0,
    warmup=1,
):
    """One finished run per point (x repeats): runtime = steps x t_step x lognormal noise (1%: a mean
    of runs whose CV is a few %); first run, trial and child walls from known compile, build, start-up."""
    rng = np.random.default_rng(seed)
    rows = []
    for batch, prompt, steps, _ in itertools.product(batches, prompts, lengths, range(repeats)):
        run = steps * step_law(batch, prompt, steps) * math.exp(rng.normal(0, noise)) * slowdown
        first = run + (COMPILE_S if compile != "off" else 0.2)
        runs = 5
        trial_wall = BUILD_S + first + (warmup + runs + INSTRUMENTED_RUNS - 1) * run
        mean = run if warmup else (first + (runs - 1) * run) / runs  # warmup=0: the first run is timed
        rows.append(
            dict(
                model=model,
                device="cpu",
                dtype="float32",
                variant=f"{cache}-{compile}",
                cache=cache,
                compile=compile,
                batch_size=batch,
                prompt_len=prompt,
                max_seqlen=steps,
                steps=steps,
                warmup=warmup,
                runs=runs,
                profile="off",
                runtime_mean_s=mean,
                runtime_median_s=run,
                first_run_s=first,
                trial_wall_s=trial_wall,
                child_wall_s=trial_wall + IN_CHILD_S,
                status="finished",
                measurement=measurement,
                trial_key=f"{model}-{cache}-{compile}-{batch}-{prompt}-{steps}-{measurement}-{seed}-{_}",
            )
        )
    return pd.DataFrame(rows)


def trial(**fields):
    base = dict(
        model="gpt2",
        device="cpu",
        dtype="float32",
        variant="dynamic-off",
        cache="dynamic",
        compile="off",
        batch_size=8,
        prompt_len=16,
        max_seqlen=64,
        warmup=1,
        runs=5,
        profile="off",
    )
    return {**base, **fields}


def only_law(model):
    laws = [law for law in model.laws.values() if law is not None]
    assert len(laws) == 1
    return laws[0]


def test_preset_sizes_match_the_models():
    assert PRESET_SHAPES["gpt2"].params == 124_439_808
    assert PRESET_SHAPES["llama-1b"].params == 1_235_814_400
    assert PRESET_SHAPES["tiny"].params == 6_960_768
    assert PRESET_SHAPES["gpt2-xl"].params == pytest.approx(1.5e9, rel=0.05)


def test_cached_law_is_recovered_within_5_percent():
    coefficients = only_law(fit(synthetic(cached_step, "dynamic"), cpu=CPU)).coefficients()
    assert set(coefficients) == {"const", "batch", "prefill", "position"}
    truth = dict(const=CACHED["a"], batch=CACHED["b"], prefill=CACHED["c"], position=CACHED["d"])
    for term, value in truth.items():
        assert coefficients[term] == pytest.approx(value, rel=0.05), term


def test_recompute_law_is_recovered_and_runtime_grows_quadratically():
    model = fit(synthetic(recompute_step, "none"), cpu=CPU)
    law = only_law(model)
    assert law.law == "recompute"
    assert law.coefficients()["const"] == pytest.approx(RECOMPUTE["a"], rel=0.05)
    assert law.coefficients()["batch_context"] == pytest.approx(RECOMPUTE["e"], rel=0.05)
    short, long = (law.run(64, 1, steps).mid for steps in (1000, 2000))
    assert long / short > 3.5  # twice the steps, nearly four times the time
    cached = only_law(fit(synthetic(cached_step, "dynamic"), cpu=CPU))
    short, long = (cached.run(1, 1, steps).mid for steps in (100, 200))
    assert long / short < 2.2  # a cache: about linear where its small position term is small


def test_contended_runs_are_left_out_of_the_fit():
    history = pd.concat(
        [
            synthetic(cached_step, "dynamic"),
            synthetic(cached_step, "dynamic", seed=1, measurement="contended", slowdown=3.0),
        ]
    )
    coefficients = only_law(fit(history, cpu=CPU)).coefficients()
    assert coefficients["batch"] == pytest.approx(CACHED["b"], rel=0.05)


def test_a_few_slow_runs_do_not_tilt_the_law():
    history = synthetic(cached_step, "dynamic")
    slow = history.index[::12]  # 6 of 72 runs, each 3x slower yet tagged ok
    history.loc[slow, "runtime_mean_s"] *= 3.0
    coefficients = only_law(fit(history, cpu=CPU)).coefficients()
    assert coefficients["batch"] == pytest.approx(CACHED["b"], rel=0.05)
    assert coefficients["const"] == pytest.approx(CACHED["a"], rel=0.05)


def test_fit_basis_predicts_an_unseen_point_with_every_part():
    history = synthetic(cached_step, "dynamic", compile="default")
    wanted = trial(compile="default", variant="dynamic-default", batch_size=8, prompt_len=16, max_seqlen=64)
    got = estimate(wanted, fit(history, cpu=CPU))
    run = 64 * cached_step(8, 16, 64)
    truth = (1 + 5 + INSTRUMENTED_RUNS) * run + COMPILE_S + BUILD_S + IN_CHILD_S + OUTSIDE_CHILD_S
    assert got.basis == FIT
    assert got.parts["run"] == pytest.approx(run, rel=0.05)
    assert got.parts["runs"] == pytest.approx((1 + 5 + INSTRUMENTED_RUNS) * run, rel=0.05)
    # the walls were built from these exactly: first - steady, trial wall less its runs, child - trial
    assert got.parts["compile"] == pytest.approx(COMPILE_S, rel=1e-6)
    assert got.parts["build"] == pytest.approx(BUILD_S, rel=1e-6)
    assert got.parts["harness"] == pytest.approx(IN_CHILD_S + OUTSIDE_CHILD_S, rel=1e-6)
    assert got.low < got.seconds < got.high
    assert got.seconds == pytest.approx(truth, rel=0.05)


def test_a_load_trials_run_lasts_at_least_its_arrivals_span():
    """Requests arriving at 2 per second: 21 of them take 10 s to arrive, however fast the steps."""
    history = synthetic(cached_step, "dynamic")
    fields = dict(variant="dynamic-off", batch_size=8, prompt_len=16, max_seqlen=64, requests=21)
    offline, loaded = (estimate(trial(**fields, request_rate=rate), fit(history, cpu=CPU)) for rate in (0.0, 2.0))
    assert offline.parts["run"] < 10.0 and loaded.parts["run"] == pytest.approx(10.0)


def test_without_warmup_the_compiled_first_run_is_taken_out_of_the_mean():
    model = fit(synthetic(cached_step, "dynamic", compile="default", warmup=0), cpu=CPU)
    wanted = trial(compile="default", variant="dynamic-default", warmup=0)
    assert model.compile(wanted).mid == pytest.approx(COMPILE_S, rel=1e-6)
    assert only_law(model).coefficients()["batch"] == pytest.approx(CACHED["b"], rel=0.05)


def test_an_identical_past_trial_gives_its_measured_total():
    history = synthetic(cached_step, "dynamic")
    row = history.iloc[5]
    same = trial(batch_size=row.batch_size, prompt_len=row.prompt_len, max_seqlen=row.max_seqlen, key=row.trial_key)
    got = estimate(same, fit(history, cpu=CPU))
    assert got.basis == HISTORY
    assert got.seconds == pytest.approx(row.child_wall_s + OUTSIDE_CHILD_S)
    assert got.low <= got.seconds <= got.high


def test_the_same_spec_with_other_run_counts_is_priced_by_its_family_law():
    history = synthetic(cached_step, "dynamic", repeats=1)
    row = history.iloc[5]
    more = trial(batch_size=row.batch_size, prompt_len=row.prompt_len, max_seqlen=row.max_seqlen, runs=20)
    got = estimate(more, fit(history, cpu=CPU))
    assert got.basis == FIT
    assert got.parts["run"] == pytest.approx(row.runtime_mean_s, rel=0.05)
    assert got.parts["runs"] == pytest.approx((1 + 20 + INSTRUMENTED_RUNS) * row.runtime_mean_s, rel=0.05)


def test_no_history_gives_the_prior_with_a_wide_range():
    got = estimate(trial(), fit(None, cpu=CPU))
    assert got.basis == PRIOR
    assert got.high / got.seconds >= 2 and got.seconds / got.low >= 2
    assert all(part > 0 for part in got.parts.values())
    gpu = estimate(trial(device="cuda", dtype="bfloat16", accelerator_type="H100"), fit(None))
    slow_gpu = estimate(trial(device="cuda", dtype="bfloat16", accelerator_type="L40S"), fit(None))
    assert gpu.basis == PRIOR and gpu.parts["run"] < slow_gpu.parts["run"]


def test_recompute_costs_more_than_a_cache_in_the_prior():
    cached, recompute = (prior_run(trial(cache=c, max_seqlen=512), cpu=CPU).mid for c in ("dynamic", "none"))
    assert recompute > 5 * cached


def test_a_new_model_gets_the_prior_rescaled_by_the_history():
    def slower_than_the_prior(batch, prompt, steps):  # every past run took 2.5x the prior's time
        return 2.5 * prior_run(trial(batch_size=batch, prompt_len=prompt, max_seqlen=steps), cpu=CPU).mid / steps

    history = synthetic(slower_than_the_prior, "dynamic", noise=0.0, lengths=(32, 128))
    medium = trial(model="gpt2-medium")
    got = estimate(medium, fit(history, cpu=CPU))
    assert got.basis == PRIOR
    assert got.parts["run"] == pytest.approx(2.5 * prior_run(medium, cpu=CPU).mid, rel=0.01)
    assert estimate(medium, fit(None, cpu=CPU)).parts["run"] == pytest.approx(prior_run(medium, cpu=CPU).mid)


def test_auto_runs_take_the_counts_auto_runs_made():
    history = synthetic(cached_step, "dynamic").assign(runs="auto", runs_done=12)
    got = fit(history, cpu=CPU).timed_runs(trial(runs="auto", min_runs=3, max_runs=30))
    assert got.mid == 12 and got.low == 3 and got.high == 30
    assert fit(None, cpu=CPU).timed_runs(trial(runs="auto", min_runs=4, max_runs=20)).mid == 12


def test_lpt_makespan_and_its_bounds():
    seconds = [3, 7, 2, 5, 3, 4]
    schedule = makespan(seconds, workers=2)
    assert schedule.worker == [0, 0, 0, 1, 1, 1]  # 7, 5, 4, 3, 3, 2 each to the worker free soonest
    assert schedule.lower_bound == 12 and schedule.seconds == 12
    assert sorted(set(schedule.worker)) == [0, 1]
    one_long = makespan([10, 1, 1, 1], workers=3)
    assert one_long.lower_bound == 10 and one_long.seconds == 10
    estimates = [estimate(trial(batch_size=b), fit(None, cpu=CPU)) for b in (1, 64, 8)]
    assert makespan(estimates, workers=3).worker == [2, 0, 1]  # the longest (64) first
    with pytest.raises(ValueError):
        makespan(seconds, workers=0)


class StepClock:
    """A clock that advances a fixed step per reading: the calibration's rates become exact."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_cpu_calibration_is_deterministic_under_an_injected_clock():
    speeds = [calibrate_cpu(seconds=1.0, clock=StepClock(0.25), matmul_size=64, copy_mib=1) for _ in range(2)]
    assert speeds[0] == speeds[1]
    assert speeds[0].gflops == pytest.approx(2 * 64**3 / 0.5 / 1e9)  # one matmul in half a second
    assert speeds[0].gbs == pytest.approx(2 * 2**20 / 0.5 / 1e9)


def test_cpu_speed_is_measured_once_and_injectable():
    calls = []

    def measure():
        calls.append(1)
        return CpuSpeed(gflops=20.0, gbs=5.0)

    forget_cpu_speed()
    try:
        assert cpu_speed(measure) == cpu_speed(measure) == CpuSpeed(20.0, 5.0)
        assert len(calls) == 1
        slow, fast = (prior_run(trial(), cpu=CpuSpeed(g, g / 5)).mid for g in (20.0, 40.0))
        assert fast < slow
    finally:
        forget_cpu_speed()


def test_a_hosts_cpu_speed_is_kept_for_a_day_under_its_name_and_cores(tmp_path, monkeypatch):
    """A second process on the same host reads the first one's measurement instead of taking a second of every
    core; another thread count, a day's age or a cache folder that cannot be written measures again."""
    monkeypatch.delenv(hardware.CACHE_VARIABLE, raising=False)  # the user's own cache folder: $XDG_CACHE_HOME's
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    measured = []

    def calibrate(seconds=1.0):
        measured.append(1)
        return hardware.Calibration(CpuSpeed(gflops=10.0 * len(measured), gbs=2.0), time.time(), quiet=True)

    monkeypatch.setattr(hardware, "measure_watched", calibrate)

    def in_a_new_process() -> CpuSpeed:
        forget_cpu_speed()
        return cpu_speed()

    try:
        first = in_a_new_process()
        assert hardware.kept_file() == tmp_path / "cache" / "tokengen" / "cpu_speed.json"
        assert in_a_new_process() == first and len(measured) == 1  # read from the cache folder
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert in_a_new_process() == CpuSpeed(20.0, 2.0) and len(measured) == 2  # BLAS threads differ: measured
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert in_a_new_process() == first and len(measured) == 2  # the other entry was kept beside it
        kept = json.loads(hardware.kept_file().read_text())
        kept[hardware.host_name()]["measured_at"] -= hardware.KEPT_S + 1
        hardware.kept_file().write_text(json.dumps(kept))
        assert in_a_new_process() == CpuSpeed(30.0, 2.0) and len(measured) == 3  # a day old: measured again
        kept[hardware.host_name()].update(measured_at=time.time(), gflops=0.0)
        hardware.kept_file().write_text(json.dumps(kept))
        assert in_a_new_process() == CpuSpeed(40.0, 2.0) and len(measured) == 4  # a spoiled entry: measured again
        (tmp_path / "a file").write_text("")
        monkeypatch.setenv(hardware.CACHE_VARIABLE, str(tmp_path / "a file"))  # no folder can be made there
        assert in_a_new_process() == CpuSpeed(50.0, 2.0) and in_a_new_process() == CpuSpeed(60.0, 2.0)
    finally:
        forget_cpu_speed()


def test_only_a_quiet_calibration_is_kept_and_the_days_fastest_stands(tmp_path, monkeypatch):
    """A busy measurement prices its own process and is never kept (the next process measures again); a quiet one
    is kept, and where the day's kept one is faster on a figure, that figure stands."""
    monkeypatch.setenv(hardware.CACHE_VARIABLE, str(tmp_path / "cache"))
    taken = iter(
        [
            hardware.Calibration(CpuSpeed(5.0, 1.0), time.time(), quiet=False, disturbed_by="others used 1.9 of 2"),
            hardware.Calibration(CpuSpeed(20.0, 4.0), time.time(), quiet=True),
            hardware.Calibration(CpuSpeed(30.0, 3.0), time.time(), quiet=True),
        ]
    )
    monkeypatch.setattr(hardware, "measure_watched", lambda seconds=1.0: next(taken))
    try:
        forget_cpu_speed()
        busy = hardware.cpu_calibration()
        assert busy.speed == CpuSpeed(5.0, 1.0) and not busy.quiet and not hardware.kept_file().exists()
        assert "while the machine was busy (others used 1.9 of 2): it prices this run only" in busy.describe()
        forget_cpu_speed()
        quiet = hardware.cpu_calibration()  # the next process: measured again, quietly, and kept
        assert quiet.speed == CpuSpeed(20.0, 4.0) and quiet.kept_in == str(hardware.kept_file())
        assert quiet.describe().startswith("CPU calibration: 20.0 GFLOP/s matmul, 4.0 GB/s copy, measured quietly at ")
        hardware.forget_kept()  # contradicted by its own trials: measured again
        hardware.keep(hardware.host_name(), hardware.Calibration(CpuSpeed(25.0, 4.0), time.time(), quiet=True))
        forget_cpu_speed()
        hardware.keep(hardware.host_name(), next(taken))  # faster matmul, slower copy than the day's
        assert hardware.cpu_calibration().speed == CpuSpeed(30.0, 4.0)  # each figure's best of the day
    finally:
        forget_cpu_speed()


def test_a_calibration_its_own_trials_contradict_is_measured_again(tmp_path, monkeypatch):
    """CPU trials priced from the prior alone that held their workers beyond a history-less dry run's promise drop
    the kept calibration; within it, or priced from a fit, they leave it kept."""
    from sweeps.pricing.price import calibration_contradicted
    from tokengen.contract.spec import TrialSpec
    from tokengen.contract.trial_record import make_record

    monkeypatch.setenv(hardware.CACHE_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.setattr(
        hardware, "measure_watched", lambda seconds=1.0: hardware.Calibration(CpuSpeed(9.0, 3.0), time.time(), True)
    )
    table = pd.DataFrame(
        {
            "key": ["a", "b", "c"],
            "pool": ["cpu", "cpu", "cpu"],
            "basis": ["prior", "prior", "fit"],
            "estimated_s": [1.0, 1.0, 1.0],
        }
    )
    priced = SimpleNamespace(table=table)

    def held(*seconds):
        return [
            make_record(TrialSpec(), key=k, status="finished", node_started_at=100.0, node_finished_at=100.0 + s)
            for k, s in zip("abc", seconds)
        ]

    try:
        forget_cpu_speed()
        hardware.cpu_calibration()
        assert calibration_contradicted(priced, held(2.5, 2.5, 50.0)) is None  # the fit's miss is not the prior's
        assert hardware.kept_file().is_file() and hardware.host_name() in hardware._entries()
        said = calibration_contradicted(priced, held(4.0, 3.0))
        assert said == (
            "cpu calibration: this sweep's 2 CPU trial(s) priced from it held their workers 7.0 s against 2.0 s "
            "priced (3.50x, beyond 3x): it is no longer kept, and the next dry run or sweep measures this host again"
        )
        assert hardware.host_name() not in hardware._entries()
    finally:
        forget_cpu_speed()


def hog(seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"]
    )


def test_a_calibration_beside_cpu_hogs_is_not_quiet():
    """One CPU-bound process per core beside the measurement: the watch sees others on our cores."""
    cores = len(os.sched_getaffinity(0))
    hogs = [hog(5.0) for _ in range(cores)]
    try:
        time.sleep(0.3)  # the hogs running
        busy = hardware.measure_watched(seconds=0.5)
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    assert not busy.quiet and busy.disturbed_by, busy


def test_the_tests_keep_their_calibration_in_a_folder_of_the_run():
    """Each pytest run's drivers and trials share one calibration, in a folder the run made (tests/conftest.py),
    never the user's ~/.cache: a calibration taken on two busy workers must not price the user's next day."""
    folder = os.environ.get(hardware.CACHE_VARIABLE, "")
    assert "tokengen-test-cache-" in folder and hardware.kept_file().parent == Path(folder)
