"""A trial knows how sure it is: real tiny-model trials on the CPU record their run count, the interval they
reached and the interference Watch's verdict; on known inputs (scripted run times, a Watch made to see a busy
machine) the count, the warmup and the verdict are exact.

These cannot assume a quiet machine: the real trials check what holds either way (the verdict matches the
evidence it recorded), the scripted ones replace the clock and the Watch."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from tokengen.contract.names import FINISHED
from tokengen.contract.record import METRIC, RESULT_FIELDS, TAG, with_role
from tokengen.contract.rules import resolve
from tokengen.measure import interference, run_count, trial

EVIDENCE = [name for name in RESULT_FIELDS if name.startswith("interference_")]


def tiny(**fields):
    return resolve("kv_cache", model="tiny", device="cpu", batch_size=1, max_seqlen=3, **fields)


def test_the_record_declares_the_verdict_as_a_tag_and_the_numbers_as_metrics():
    assert set(EVIDENCE) == set(interference.Watch(threads=1).start().stop())
    tags, metrics = set(with_role(TAG)), set(with_role(METRIC))
    assert {"measurement", "measurement_reasons", "interference_device", "interference_throttle", "attempt"} <= tags
    assert {
        "runs_done",
        "runtime_ci_rel",
        "warmup_done",
        "interference_cpu_util",
        "interference_others_cores",
        "interference_wall_s",
        "interference_window_s",
        "interference_cpu_waited",
        "interference_gpu_procs",
        "interference_sm_clock_mhz",
    } <= metrics


def test_a_real_auto_trial_records_its_runs_its_interval_and_a_verdict_that_matches_its_evidence():
    spec = tiny(runs=0, min_runs=3, max_runs=4, target_ci=0.5)
    record = trial.run_trial(spec)
    assert record["status"] == FINISHED and record["runs"] == 0
    assert 3 <= record["runs_done"] <= 4 and len(record["runtime_s"]) == record["runs_done"]
    assert record["runtime_ci_rel"] == pytest.approx(run_count.relative_ci(record["runtime_s"]))
    assert record["interference_threads"] == torch.get_num_threads()
    assert record["interference_device"] == "cpu" and record["interference_gpu_procs"] is None
    assert record["warmup_done"] >= 2  # runs=auto warms until two runs agree
    reached = record["runtime_ci_rel"] <= 0.5
    # it stops before max_runs only once the interval is within target, or when the machine interferes
    assert record["runs_done"] == 4 or reached or record["measurement"] == "contended"
    evidence = {k: record[k] for k in EVIDENCE}
    again = interference.verdict(evidence, record["runtime_cv"], reached)
    assert (record["measurement"], record["measurement_reasons"]) == (again[0], "; ".join(again[1]))


def test_a_fixed_count_runs_exactly_that_many_and_pursues_no_target():
    record = trial.run_trial(tiny(runs=2, warmup=2))
    assert (record["runs_done"], len(record["runtime_s"]), record["warmup_done"]) == (2, 2, 2)
    evidence = {k: record[k] for k in EVIDENCE}
    assert record["measurement"] == interference.verdict(evidence, record["runtime_cv"], None)[0]


def test_with_no_warmup_the_watch_spans_the_first_run_which_is_timed():
    """The harness grid's trials (runs=1, warmup=0) time only their first run: a Watch started after it
    watched nothing. A compiling trial's first run is left out: the compiler's workers would read as others."""
    record = trial.run_trial(tiny(runs=1, warmup=0))
    assert record["runtime_s"] == [record["first_run_s"]]
    assert record["interference_wall_s"] >= record["first_run_s"]
    assert trial.watch_first_run(tiny(warmup=0)) and not trial.watch_first_run(tiny(warmup=1))
    assert not trial.watch_first_run(resolve("static_compiled", model="tiny", device="cpu", warmup=0))


class QuietWatch:
    """A Watch that saw a quiet machine, or the evidence it is given."""

    made: list = []

    def __init__(self, threads, device="cpu", nvml_handle=None, seen=None):
        self.kwargs = dict(threads=threads, device=device, nvml_handle=nvml_handle)
        self.seen = seen or {}
        QuietWatch.made.append(self)

    def start(self):
        return self

    def stop(self):
        quiet = {
            "interference_device": self.kwargs["device"],
            "interference_wall_s": 1.0,
            "interference_window_s": 1.0,
            "interference_threads": self.kwargs["threads"],
            "interference_cores": 2,
            "interference_cpu_util": 0.98,
            "interference_cpu_waited": 0.01,
            "interference_others_cores": 0.02,
            "interference_load": 0.5,
            "interference_gpu_procs": None,
            "interference_sm_clock_mhz": None,
            "interference_throttle": None,
        }
        return {**quiet, **self.seen}


@pytest.fixture
def scripted(monkeypatch):
    """Replace the trial's clock: each run's seconds come from the list given, the generator still runs."""

    def script(seconds):
        times = iter(seconds)

        def timed(fn, device):
            return fn(), next(times)

        monkeypatch.setattr(trial.clocks, "timed", timed)

    QuietWatch.made = []
    monkeypatch.setattr(trial, "Watch", QuietWatch)
    return script


def test_a_series_that_never_settles_stops_at_max_runs_and_is_noisy(scripted):
    scripted(itertools.chain([1.0, 1.0], itertools.cycle([1.0, 2.0])))  # warmup settles, the runs never do
    record = trial.run_trial(tiny(runs=0, min_runs=3, max_runs=6, target_ci=0.02))
    assert record["runs_done"] == 6 and record["runtime_s"] == [1.0, 2.0] * 3
    assert record["runtime_ci_rel"] > 0.02
    cv = statistics.stdev([1.0, 2.0] * 3) / 1.5
    assert record["measurement"] == "noisy"
    assert record["measurement_reasons"] == f"CI target not met (cv {cv:.1%})"


def test_a_settled_series_stops_early_and_is_ok(scripted):
    scripted(itertools.chain([1.0, 1.0], itertools.repeat(1.0)))
    record = trial.run_trial(tiny(runs=0, min_runs=3, max_runs=6))
    assert (record["runs_done"], record["runtime_ci_rel"], record["measurement"]) == (3, 0.0, "ok")
    assert record["measurement_reasons"] == ""


def test_auto_warmup_goes_on_until_a_run_settles(scripted):
    scripted(itertools.chain([5.0, 2.0, 1.0, 1.02], itertools.repeat(1.0)))  # first run, then 3 more warmups
    assert trial.run_trial(tiny(runs=0))["warmup_done"] == 4
    scripted(itertools.chain([5.0, 2.0, 1.5, 1.0, 2.0], itertools.repeat(1.0)))  # never settles: at most 5
    assert trial.run_trial(tiny(runs=0))["warmup_done"] == trial.AUTO_MAX_WARMUP
    scripted(itertools.repeat(1.0))
    assert trial.run_trial(tiny(runs=3, warmup=1))["warmup_done"] == 1  # a fixed count keeps its warmup
    assert trial.run_trial(tiny(runs=0, warmup=0))["warmup_done"] == 0  # no warmup: the first run is timed


def test_a_trial_made_to_look_contended_is_judged_contended(monkeypatch, scripted):
    scripted(itertools.repeat(1.0))
    busy = {"interference_others_cores": 1.7, "interference_cpu_util": 0.4, "interference_cpu_waited": 0.55}
    monkeypatch.setattr(trial, "Watch", lambda **kw: QuietWatch(**kw, seen=busy))
    record = trial.run_trial(tiny(runs=0))
    assert record["measurement"] == "contended"
    assert record["measurement_reasons"] == (
        "others used 1.7 of 2 cores; threads waited for a core 55% of the time they wanted one"
    )
    assert record["interference_others_cores"] == 1.7


def test_a_cuda_trial_hands_the_watch_the_gpu_the_energy_meter_reads(monkeypatch, scripted):
    """Without a GPU: the CUDA-only calls are stubbed, the wiring is what is checked."""
    from types import SimpleNamespace

    from tokengen.measure.energy import nvml_device_handle

    scripted(itertools.repeat(1.0))
    monkeypatch.setattr(trial.memory, "reset_peaks", lambda device: None)
    monkeypatch.setattr(trial, "EnergyMeter", lambda device: SimpleNamespace(start=lambda: None, stop=lambda: None))
    spec = resolve("kv_cache", model="tiny", device="cuda", runs=2)
    done = trial.timed_runs(lambda: SimpleNamespace(tokens=torch.zeros(1, 2, dtype=torch.long)), spec, None, 1.0)
    (watch,) = QuietWatch.made
    assert watch.kwargs == dict(threads=torch.get_num_threads(), device="cuda", nvml_handle=nvml_device_handle)
    assert done.evidence["interference_device"] == "cuda" and done.runtimes == [1.0, 1.0]


@pytest.mark.gpu
def test_a_quiet_cuda_trial_is_ok_and_reads_its_gpu_through_nvml():
    pytest.importorskip("pynvml")
    record = trial.run_trial(resolve("kv_cache", model="tiny", device="cuda", batch_size=4, max_seqlen=16, runs=0))
    assert record["interference_device"] == "cuda"
    assert record["interference_sm_clock_mhz"] and record["interference_gpu_procs"] is not None
    assert record["measurement"] in ("ok", "noisy") or "other process" in record["measurement_reasons"]


def test_auto_runs_give_up_early_on_a_busy_machine(monkeypatch, scripted):
    """More runs cannot make a contended mean sure: the runs end at min_runs, judged contended, to be remeasured."""
    scripted(itertools.chain([1.0, 1.0], itertools.cycle([1.0, 2.0])))
    monkeypatch.setattr(trial, "Watch", lambda **kw: QuietWatch(**kw, seen={"interference_others_cores": 1.5}))
    record = trial.run_trial(tiny(runs=0, min_runs=3, max_runs=20))
    assert (record["runs_done"], record["measurement"]) == (3, "contended")
    assert record["measurement_reasons"].startswith("others used 1.5 of 2 cores; CI target not met")


def test_auto_runs_stop_in_time_for_the_sweeps_deadline(monkeypatch):
    import time

    from tokengen.contract.names import DEADLINE_ENV

    quiet = QuietWatch(threads=2)
    assert not trial.give_up([1.0], quiet, deadline=time.time() + 60)
    assert trial.give_up([25.0], quiet, deadline=time.time() + 60)  # 2 x 25 s + the margin would overshoot
    monkeypatch.setenv(DEADLINE_ENV, f"{time.time() + 30:.3f}")
    assert trial.give_up([6.0], quiet) and not trial.give_up([1.0], quiet)  # 30 s left: 2 x 6 s + 20 s do not fit
    monkeypatch.delenv(DEADLINE_ENV)
    assert not trial.give_up([1e6], quiet)  # no deadline: only interference ends the runs early
    busy = QuietWatch(threads=2, seen={"interference_cpu_waited": 0.7})
    assert trial.give_up([0.01], busy, deadline=time.time() + 3600)


def test_the_trial_process_tells_the_trial_its_deadline(tmp_path, monkeypatch):
    import time

    from sweeps.execution import trial_process
    from tokengen.contract.names import DEADLINE_ENV

    seen = {}

    class Process:
        def __init__(self, target, args, daemon):
            seen.update(args[1])
            self.exitcode = 0

        def start(self):
            pass

        def join(self, timeout=None):
            pass

    monkeypatch.setattr(trial_process, "warm_context", lambda *_: type("Context", (), {"Process": Process})())
    request = trial_process.TrialRequest(spec=tiny().to_dict(), key="k", folder=str(tmp_path), timeout_s=300)
    before = time.time()
    trial_process.run_trial_process(request)
    assert before + 299 <= float(seen[DEADLINE_ENV]) <= time.time() + 301
