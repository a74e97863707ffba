"""How long does `python -m tracking.report` take on a big sweep?

Builds a synthetic store (a temporary SQLite file, or `--uri`) shaped like a real `+grid=full` sweep
on two GPU types: one parent run and 1,000 child runs by default (every preset x batch {1, 4, 16, 32,
64} x max_seqlen {100, 200, 400} x {float32, bfloat16} x {L40S, H100} x prompt {1, 128}, then failed
trials; 5,520 is the full grid's size), each written through the sweep driver's
own Recorder (params, metrics, tags, result.json and the `tokens.npy` artifact). Runtimes follow the article's shapes (the baseline
grows as N^2, cached variants as N, a lagged stop check hides the host sync); the no-check variants
run every step and bfloat16 runs drift from their baseline, so the report has token prefixes to
download and compare, as it would for real. Then it times building the whole report (loading the
runs, tables, token checks, plots, writing, the figures written back on every run: by SQL where the store's
schema is one the tests wrote into, tracking/store/tables.py; not attaching it) from that store, store creation
excluded. Target: under 10 s on 2 cores. The last line is JSON, with `report_s`. A store that already
holds the sweep (`--keep DIR` used before, or a `--uri` database written once) is timed again as it is.

    python benchmarks/report_speed.py [--runs 1000] [--keep DIR] [--uri postgresql://USER@HOST/DB]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tokengen.contract.declarations import BOUND, EAGER, LAGGED, RECOMPUTE, REFERENCE, declared
from tokengen.contract.names import FAILED, TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tokengen.contract.variants import VARIANTS
from tracking.store.connect import open_client
from tracking.store.recorder import Recorder

BATCHES = (1, 4, 16, 32, 64)
LENGTHS = (100, 200, 400)
DTYPES = ("float32", "bfloat16")
PROMPTS = (1, 128)
GPUS = {"L40S": ("NVIDIA L40S", 864.0), "H100": ("NVIDIA H100 80GB HBM3", 3350.0)}
EOS = 50256
SWEEP = "full"


def tokens_for(batch: int, length: int, seed: int, prompt: int = 1) -> np.ndarray:
    """A baseline's tokens: (B, P + steps) int64, the prompt (BOS first) then the decode steps, EOS padding
    after each row's end."""
    rng = np.random.default_rng(seed)
    ends = rng.integers(length // 2, length + 1, size=batch)
    steps = int(ends.max())
    tokens = rng.integers(0, EOS, size=(batch, prompt + steps), dtype=np.int64)
    tokens[:, 0] = EOS
    for row, end in enumerate(ends):
        tokens[row, prompt + end :] = EOS
    return tokens


def variant_tokens(base: np.ndarray, knobs: dict, dtype: str, max_seqlen: int, rng, prompt: int = 1) -> np.ndarray:
    out = base.copy()
    if dtype != "float32" and declared("cache", knobs["cache"]).family != RECOMPUTE and rng.random() < 0.4:
        out[rng.integers(0, len(out)), rng.integers(prompt, out.shape[1]) :] = rng.integers(0, EOS)
    if declared("stop_check", knobs["stop_check"]).overrun is None:  # no check: every step, padded
        out = np.concatenate([out, np.full((len(out), prompt + max_seqlen - out.shape[1]), EOS)], axis=1)
    return out


def runtime_for(knobs: dict, batch: int, steps: int, gpu: str, dtype: str) -> float:
    step = 0.004 * (1 + batch / 64) * (0.5 if gpu == "H100" else 1.0) * (0.7 if dtype == "bfloat16" else 1.0)
    cache, mode = declared("cache", knobs["cache"]), declared("compile", knobs["compile"])
    check = declared("stop_check", knobs["stop_check"])
    if cache.family == RECOMPUTE:
        return step * steps * steps / 40
    factor = 0.9 if cache.fixed_shapes else 1.0
    factor *= 0.3 if mode.cuda_graphs else 1.0 if mode.family == EAGER else 0.45
    factor *= {REFERENCE: 1.0, LAGGED: 0.85, BOUND: 0.8}[check.family]
    return step * factor * steps


def trial(
    variant: str, batch: int, length: int, dtype: str, gpu: str, rng, prompt: int = 1
) -> tuple[TrialRecord, np.ndarray]:
    """A finished trial's record, as the sweep driver would receive it, and its tokens."""
    knobs = VARIANTS[variant]
    spec = TrialSpec(
        variant=variant,
        model="gpt2",
        dtype=dtype,
        device="cuda",
        batch_size=batch,
        max_seqlen=length,
        **knobs,
        stop="uniform:50-400",
        warmup=1,
        runs=10,
        prompt_len=prompt,
    )
    base = tokens_for(batch, length, hash((batch, length, prompt)) % 2**32, prompt)
    tokens = variant_tokens(base, knobs, dtype, length, rng, prompt)
    steps = tokens.shape[1] - prompt
    mean = runtime_for(knobs, batch, steps, gpu, dtype) * rng.uniform(0.97, 1.03)
    weight_bytes = 497_759_232 // (2 if dtype == "bfloat16" else 1)
    allocated = weight_bytes + batch * length * 36_864 * (2 if declared("cache", knobs["cache"]).fixed_shapes else 1)
    reserved = int(allocated * (1.05 if knobs["allocator"] != TrialSpec().allocator else rng.uniform(1.1, 1.6)))
    gpu_name, peak = GPUS[gpu]
    record = make_record(
        spec,
        key="",
        accelerator_type=gpu,
        steps=steps,
        tokens_generated=batch * steps,
        runtime_s=[mean * f for f in rng.uniform(0.98, 1.03, 10)],
        runtime_mean_s=mean,
        runtime_std_s=mean * 0.01,
        runtime_min_s=mean * 0.98,
        runtime_max_s=mean * 1.03,
        runtime_median_s=mean,
        runtime_cv=0.01,
        tokens_per_s=batch * steps / mean,
        step_latency_median_s=mean / steps,
        step_latency_p90_s=1.2 * mean / steps,
        first_run_s=mean * (40 if declared("compile", knobs["compile"]).family != EAGER else 1.2),
        mem_allocated_peak_bytes=allocated,
        mem_reserved_peak_bytes=reserved,
        mem_fragmentation_bytes=reserved - allocated,
        mem_fragmentation_pct=100 * (reserved - allocated) / reserved,
        peak_rss_bytes=2_100_000_000,
        weight_bytes=weight_bytes,
        weight_bandwidth_gbs=weight_bytes * steps / mean / 1e9,
        weight_bandwidth_pct_of_peak=100 * weight_bytes * steps / mean / 1e9 / peak,
        deterministic=True,
        trial_wall_s=10 * mean + 8,
        child_wall_s=10 * mean + 12,
        tokens_sha256=hashlib.sha256(tokens.tobytes()).hexdigest(),
        env_host=f"node-{gpu.lower()}",
        env_python="3.11.7",
        env_torch="2.13.0+cu130",
        env_transformers="5.24.0",
        env_cuda="13.0",
        env_driver="580.65",
        env_gpu_name=gpu_name,
        env_cpu="x86_64",
        env_cpu_count=32,
        env_torch_threads=32,
    )
    return record, tokens


def build_store(uri: str, n_runs: int, root: Path, sweep: str = SWEEP, seed: int = 0) -> None:
    """One parent and n_runs children, written through the sweep driver's own Recorder (another `sweep` and `seed`:
    a second sweep of the same grid in the same store, its runtimes and drifting tokens drawn anew)."""
    client = open_client(uri)
    if client.get_experiment_by_name("tokengen") is None:
        client.create_experiment("tokengen", artifact_location=str(root / "artifacts"))
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep(sweep, {"sweep": {"name": sweep}}, resume=False)
    rng = np.random.default_rng(seed)
    points = [
        (v, b, n, d, g, p)
        for p in PROMPTS
        for g in GPUS
        for d in DTYPES
        for n in LENGTHS
        for b in BATCHES
        for v in VARIANTS
    ]
    for i in range(n_runs):
        variant, batch, length, dtype, gpu, prompt = points[i % len(points)]
        failed = i >= len(points) or (variant == "static_cudagraph_pipelined" and batch == 64 and length == 400)
        record, tokens = trial(variant, batch, length, dtype, gpu, rng, prompt)
        spec = dataclasses.replace(record.spec, model="gpt2-xl") if i >= len(points) else record.spec
        key = hashlib.sha256(f"{i}".encode()).hexdigest()[:16]
        if failed:
            record = make_record(
                spec,
                key=key,
                accelerator_type=record.result.accelerator_type,
                env_host=record.result.env_host,
                status=FAILED,
                error_type="OutOfMemory",
                trial_wall_s=3.0,
                child_wall_s=5.0,
                error_message="CUDA out of memory. Tried to allocate 2.00 GiB",
            )
        else:
            buffer = io.BytesIO()
            np.save(buffer, tokens)
            record = dataclasses.replace(record.with_result(key=key), spec=spec, files={TOKENS_FILE: buffer.getvalue()})
        recorder.record_trial(record)
    recorder.end_sweep(0)


def has_sweep(uri: str, sweep: str = SWEEP) -> bool:
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return False
    client = open_client(uri, "read")
    found = client.get_experiment_by_name("tokengen")
    return found is not None and bool(client.search_runs([found.experiment_id], f"tags.sweep_parent = '{sweep}'"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument(
        "--keep", help="build the store (its SQLite file, artifacts and reports) in this directory and keep it"
    )
    parser.add_argument(
        "--uri",
        help="the store to build and read (default: a SQLite file in the directory); "
        "a PostgreSQL database must start empty",
    )
    args = parser.parse_args()
    from tracking.report.build import build_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        uri = args.uri or f"sqlite:///{root}/mlflow.db"
        started = time.perf_counter()
        if has_sweep(uri):
            print(f"store: {uri} holds sweep {SWEEP!r} already: timing its report as it is", file=sys.stderr)
        else:
            build_store(uri, args.runs, root)
            print(
                f"store: {args.runs} child runs written in {time.perf_counter() - started:.1f} s ({uri})",
                file=sys.stderr,
            )
        store_s = time.perf_counter() - started
        started = time.perf_counter()
        report = build_report(uri, "tokengen", None, root / "reports")
        report_s = time.perf_counter() - started
    print(
        f"report for {report.trials} trials ({report.failed} failed, {report.downloads} token files compared) "
        f"built in {report_s:.2f} s (target: under 10 s on 2 cores)"
    )
    print(
        json.dumps(
            {
                "runs": args.runs,
                "store": uri.split(":", 1)[0],
                "store_s": round(store_s, 2),
                "report_s": round(report_s, 2),
                "downloads": report.downloads,
                "target_s": 10,
            }
        )
    )


if __name__ == "__main__":
    main()
