"""CUDA-only paths, checked so that they can fail: lagged stop checks on a GPU made to fall behind,
host syncs trapped by sync-debug mode, the allocator as torch reports it, CUDA memory, profiling,
the energy counter.

A fast GPU hides a lagged check's bugs: if the GPU has finished step i-1 before the host reads its
flag, reading it early, a missing wait_stream or a missing final wait return the right tokens by
luck. So every lagged run here enqueues `torch.cuda._sleep` before each step: the host runs as far
ahead as the check lets it, and any of those bugs changes the tokens or the step count. Rows have
their own prompts and seeded top-k draws, so a row mix-up shows too. (tests/tokengen/test_stop_checks.py
proves the same bugs are caught on a simulated GPU; these prove the CUDA version is the same.)

Skipped without CUDA; scripts/gpu_check.sh runs them on a GPU box that has only torch and transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tokengen.contract.declarations import LAGGED as LAGGED_FAMILY
from tokengen.contract.declarations import declared, in_family
from tokengen.contract.rules import resolve
from tokengen.decode.loop import Generation, Generator
from tokengen.decode.stop_checks import sync_check
from tokengen.decode.stopping import target_lengths
from tokengen.measure.energy import EnergyMeter
from tokengen.models import build_model

pytestmark = pytest.mark.gpu

WORKLOAD = dict(model="tiny", device="cuda", batch_size=4, max_seqlen=24, prompt_len=8, sampling="topk:20,0.8", seed=3)
LAG_CYCLES = 10_000_000  # ~5 ms of GPU spin per step (1-2 GHz clocks): longer than any step takes to enqueue
ALLOCATOR_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

# (cache preset, lagged stop check): every way this project hides the stop check, every declared lagged check
LAGGED = [
    (base, check)
    for base in ("kv_cache", "static_cache", "static_compiled", "static_cudagraph")
    for check in in_family("stop_check", LAGGED_FAMILY)
]
UNWAITING = [(base, check) for base, check in LAGGED if declared("stop_check", check).cuda_only]
"""The checks that never wait with `.item()` (pinned flags behind events); every_k waits every K steps by design."""
PER_ROW_ENDS = [
    "uniform:3-20",
    "fixed:1",
    "never",
]  # rows ending apart; all at their first token; none before max_seqlen
CASES = [
    (base, check, stop)
    for base, check in LAGGED
    for stop in PER_ROW_ENDS
    if not (stop == "fixed:1" and base in ("static_compiled", "static_cudagraph"))
]
"""Eager cases first; no compiled case that ends at its first token, which is the eager prefill's: it shows nothing."""


@pytest.fixture(scope="module")
def model():
    return build_model("tiny", "float32", "cuda", seed=0)


@pytest.fixture
def no_allocator_env(monkeypatch):
    """An exported allocator variable must not make an in-process trial refuse to run (CUDA has
    started, so the trial cannot honour it) nor leak into a child trial; monkeypatch restores it."""
    for name in ALLOCATOR_VARS:
        monkeypatch.delenv(name, raising=False)


def generator(model, base: str, stop_check: str, stop: str) -> Generator:
    """A fresh Generator; compiled ones after a dynamo reset, so earlier tests' guards and CUDA-graph
    trees cannot push this one past the recompile limit into eager mode."""
    spec = resolve(base, stop_check=stop_check, stop=stop, **WORKLOAD)
    if spec.compile != "off":
        torch._dynamo.reset()
    return Generator(model, spec)


def with_sync_check(generate: Generator) -> Generation:
    """The same generator (compiled code, cache, prompts, stop policy) with the article's sync check:
    the reference its lagged check must reproduce, with nothing else different (and no second compile)."""
    lagged = generate.stop_check
    generate.stop_check = sync_check
    try:
        return generate()
    finally:
        generate.stop_check = lagged


class LaggingSteps:
    """wrap_step: the GPU spins before every step, so it is always behind the host; counts steps.
    `lag_origin()` makes the stream the generation starts on (prompts, cache reset) lag too, so a
    lagged check that forgets to wait for it reads unwritten prompts."""

    def lag_origin(self) -> None:
        torch.cuda._sleep(4 * LAG_CYCLES)

    def __init__(self):
        self.enqueued = 0

    def __call__(self, step):
        def late_step(i: int) -> None:
            self.enqueued += 1
            torch.cuda._sleep(LAG_CYCLES)
            step(i)

        return late_step


@pytest.mark.parametrize("base, stop_check, stop", CASES, ids=[f"{b}-{c}-{s}" for b, c, s in CASES])
def test_a_lagged_check_on_a_lagging_gpu_returns_the_sync_tokens(model, base, stop_check, stop):
    generate = generator(model, base, stop_check, stop)
    want = with_sync_check(generate)
    want_tokens = want.tokens.cpu()
    targets = target_lengths(stop, WORKLOAD["batch_size"], WORKLOAD["max_seqlen"], WORKLOAD["seed"])
    longest = WORKLOAD["max_seqlen"] if targets is None else int(targets.max())
    assert want.steps == longest, "the sync reference must end with its longest row"
    assert len({tuple(row) for row in want_tokens.tolist()}) == WORKLOAD["batch_size"], "rows must differ"

    lag = LaggingSteps()
    lag.lag_origin()
    got = generate(wrap_step=lag)
    got_tokens = got.tokens.cpu()  # read on the origin stream: a missing final wait reads unfinished steps
    assert got.steps == want.steps, "a lagged check must report the sync check's step count"
    assert got_tokens.shape == want_tokens.shape, "a lagged check must drop its extra step's token"
    assert torch.equal(got_tokens, want_tokens), "a lagged check must return the sync check's tokens"
    overrun = declared("stop_check", stop_check).overrun
    assert want.steps <= lag.enqueued <= min(want.steps + overrun, WORKLOAD["max_seqlen"]), (
        "a lagged check runs past the end by its declared overrun, no more"
    )


class SyncTrap:
    """Sync-debug mode 'error' for as long as it is entered: any host wait on the device raises
    (cudaStreamSynchronize, .item(), a pageable copy), except the flag's cudaEventSynchronize,
    which that mode does not watch: the one wait a lagged check is meant to have."""

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("base, stop_check", UNWAITING, ids=[f"{b}-{c}" for b, c in UNWAITING])
def test_a_lagged_generation_never_waits_for_the_gpu(model, base, stop_check):
    generate = generator(model, base, stop_check, "uniform:3-20")
    generate()  # compiles, records CUDA graphs, fills the allocators' caches: outside the trap
    generate()
    with SyncTrap():
        got = generate()
    targets = target_lengths("uniform:3-20", WORKLOAD["batch_size"], WORKLOAD["max_seqlen"], WORKLOAD["seed"])
    assert got.steps == int(targets.max())


def test_the_sync_trap_catches_a_host_sync():
    """The trap itself can fail: the sync check's .item() is exactly what it must catch."""
    flag = torch.zeros((), dtype=torch.bool, device="cuda")
    with pytest.raises(RuntimeError, match="synchroniz"):
        with SyncTrap():
            flag.item()


def cli_record(tmp_path, variant: str) -> dict:
    """One trial in its own process, the way a sweep runs it, with no allocator variable inherited."""
    out = tmp_path / f"{variant}.json"
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_VARS}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokengen",
            "--variant",
            variant,
            "--model",
            "tiny",
            "--device",
            "cuda",
            "--batch-size",
            "4",
            "--max-seqlen",
            "16",
            "--runs",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def expandable(record: dict):
    """The record's allocator_live, read for its expandable-segments verdict."""
    live = record.get("allocator_live")
    assert live is not None, "record has no allocator_live: run_trial sets it from tokengen.measure.memory"
    if isinstance(live, dict):
        return live["expandable_segments"]
    return {"expandable_segments=True": True, "expandable_segments=False": False}.get(
        next((part for part in live.split() if part.startswith("expandable_segments=")), ""), None
    )


@pytest.fixture(scope="module")
def kv_cache_record(tmp_path_factory):
    return cli_record(tmp_path_factory.mktemp("kv_cache"), "kv_cache")


def test_cuda_record_has_memory_stats_and_gpu_name(kv_cache_record):
    record = kv_cache_record
    assert record["mem_reserved_peak_bytes"] >= record["mem_allocated_peak_bytes"] >= record["weight_bytes"]
    assert record["env_gpu_name"] and record["env_cuda"]


def test_expandable_allocator_is_live_in_the_trial_process(tmp_path, kv_cache_record):
    assert expandable(cli_record(tmp_path, "kv_cache_expandable")) is True
    assert expandable(kv_cache_record) is False, "the default allocator must not report expandable segments"


def test_torch_profile_on_cuda_sees_the_gpu_idle_between_synced_steps(tmp_path, no_allocator_env):
    from tokengen.measure.trial import run_trial

    spec = resolve("static_cache", model="tiny", device="cuda", batch_size=4, max_seqlen=40, profile="torch")
    record = run_trial(spec, profile_dir=str(tmp_path))
    assert record["profiled_steps"] == 20  # the article's window 30-50, clipped to the run's last 20 steps
    assert record["gpu_idle_us_per_step"] > 0, "the sync check leaves the GPU idle while the host reads .item()"
    assert 0 < record["gpu_busy_pct"] < 100
    assert record["host_sync_us_per_step"] > 0


def test_energy_meter_counts_joules_while_the_gpu_works():
    pytest.importorskip("pynvml", reason="the optional extra 'energy' (nvidia-ml-py) is not installed")
    meter = EnergyMeter("cuda")
    if not meter.available:
        pytest.skip("this GPU has no total-energy counter")
    torch.cuda.synchronize()
    meter.start()
    torch.cuda._sleep(1_000_000_000)  # 0.5-1 s of spinning
    torch.cuda.synchronize()
    joules = meter.stop()
    assert 1 < joules < 2000, f"{joules} J in about a second: millijoules read as joules, or the wrong GPU"


def test_on_a_gpu_every_quantized_value_runs_and_is_measured_against_the_plain_model():
    """int8 and int4 (tinygemm's tile-packed layout, bfloat16, sm80+) on CUDA: the trial's tokens come from the
    quantized model, and its fidelity against the unquantized one is measured on the same rows."""
    pytest.importorskip("torchao")
    from tokengen.contract.declarations import EXACT, names
    from tokengen.contract.rules import capability_problem
    from tokengen.engines import make_generator
    from tokengen.knobs import on_model
    from tokengen.measure import agreement

    for name in names("quant"):
        value = declared("quant", name)
        if value.fidelity == EXACT:
            continue
        spec = resolve(
            "static_cache",
            model="tiny",
            device="cuda",
            dtype=(value.dtypes or ("bfloat16",))[0],
            batch_size=4,
            max_seqlen=16,
            quant=name,
        )
        if capability_problem(spec, torch.cuda.get_device_capability()):
            continue
        net = on_model(build_model(spec.model, spec.dtype, spec.device, spec.seed), spec)
        tokens = make_generator(net, spec)().tokens
        found = agreement.measure(spec, net, tokens, 0.99)
        assert found["fidelity"] == value.fidelity and 0.5 <= found["top1_agreement"] <= 1.0, (name, found)
        assert found["rows_exact"] is not None, name
