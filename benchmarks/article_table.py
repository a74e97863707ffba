"""The article's summary table from tokengen alone, written row by row as each finishes.

Rows run in this one process, one after another, the most telling first (the compiled rows and
their stop-check twins, then the eager ones, the baseline last), so a run cut short by a time limit
keeps those. Rows that differ only in their stop check share one compiled generator (one compile
for static_compiled and its pipelined, deferred and no-check twins, one for the CUDA-graph rows):
dynamo is reset only when a row needs a new compiled graph. Two kinds of
row need a fresh process and get one (`python -m tokengen`): allocator=expandable, which must be
set before CUDA starts, and an nsys profile, which wraps the whole process. `--isolation process`
runs every row fresh, as a sweep does (first-run times then include a cold start). After every
row the JSON and Markdown files are rewritten, so a run cut short by a time limit keeps every row
it finished. Needs only torch and transformers: scripts/gpu_check.sh runs it on a GPU box. Rows
this device cannot run (CUDA-only knobs on a CPU) are skipped with their reason. Speedup is the
baseline's mean runtime over the row's, as in the article.

    python benchmarks/article_table.py --device cuda --json t.json --markdown t.md   # gpt2, batch 32, 100 steps
    python benchmarks/article_table.py --device cpu --model tiny --max-seqlen 16 --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tokengen.contract.declarations import EAGER, OURS, declared, load
from tokengen.contract.names import FAILED, FINISHED
from tokengen.contract.record import first_line
from tokengen.contract.rules import problem, resolve
from tokengen.contract.spec import TrialSpec
from tokengen.measure.interference import GPU_LAUNCHER_ENV
from tokengen.measure.profiler.window import resolve_mode

ROWS = [
    "static_compiled",
    "static_compiled_pipelined",
    "static_compiled_deferred",
    "static_compiled_nocheck",
    "static_cudagraph",
    "static_cudagraph_pipelined",
    "static_cudagraph_deferred",
    "static_cudagraph_nocheck",
    "static_cache",
    "kv_cache",
    "kv_cache_expandable",
    "baseline",
]
WORKLOAD_FLAGS = (
    "model",
    "device",
    "dtype",
    "batch_size",
    "max_seqlen",
    "prompt_len",
    "stop",
    "sampling",
    "seed",
    "matmul_precision",
)
MEASUREMENT_FLAGS = ("runs", "warmup", "profile", "profile_steps")


class RowTimeout(Exception):
    """Raised by the row's alarm; a compiler may wrap it in its own error, so `alarm_rang` says it rang."""


alarm_rang = False


def row_spec(variant: str, args) -> TrialSpec:
    """The row's trial, with profile=auto resolved here (as the CLI does), for this machine."""
    fields = {name: getattr(args, name) for name in WORKLOAD_FLAGS + MEASUREMENT_FLAGS}
    spec = resolve(variant, **fields)
    return dataclasses.replace(spec, profile=resolve_mode(spec.profile, spec.device))


def needs_fresh_process(spec: TrialSpec, isolation: str) -> bool:
    """The allocator is fixed when CUDA starts, and nsys profiles a whole process."""
    return isolation == "process" or spec.allocator != "default" or spec.profile == "nsys"


def failed(spec: TrialSpec, error_type: str, message: str) -> dict:
    return {**spec.to_dict(), "status": FAILED, "error_type": error_type, "error_message": message}


children: list[subprocess.Popen] = []
"""Child rows running now: their own process groups do not hear a signal sent to ours."""


def run_in_child(spec: TrialSpec, workdir: Path, profile_dir: Path, timeout: int) -> dict:
    """`python -m tokengen` with every field of the spec, so the child runs exactly this row."""
    out = workdir / f"{spec.variant}-{spec.key()}.json"
    fields = [
        arg
        for name, value in spec.to_dict().items()
        if name != "variant"
        for arg in (f"--{name.replace('_', '-')}", str(value))
    ]
    cmd = [
        sys.executable,
        "-m",
        "tokengen",
        *fields,
        "--json",
        str(out),
        "--profile-dir",
        str(profile_dir / spec.variant),
    ]
    # its own process group, so a row limit ends nsys and the trial under it, not only their parent
    env = {**os.environ, GPU_LAUNCHER_ENV: str(os.getpid())}  # this process holds the GPU, idle, while the row runs
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    children.append(proc)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return failed(spec, "TimeoutError", f"over the row limit of {timeout} s")
    finally:
        children.remove(proc)
    if proc.returncode != 0:
        return failed(spec, "ChildFailed", (stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(out.read_text())


def _end_children_and_exit(signum, frame):
    """A time limit on this script (scripts/gpu_check.sh's `timeout`) ends the child row too."""
    for proc in children:
        os.killpg(proc.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def _raise_row_timeout(signum, frame):
    global alarm_rang
    alarm_rang = True
    raise RowTimeout()


def run_in_process(spec: TrialSpec, profile_dir: Path, timeout: int) -> dict:
    """run_trial here, after clearing what the last row left: dynamo's guards and CUDA-graph trees
    (else a row may hit the recompile limit and run eagerly) and the cached CUDA blocks (else they
    count in this row's reserved memory). The alarm bounds a row stuck in Python (compiling)."""
    import torch

    from tokengen.measure.trial import run_trial

    global alarm_rang
    alarm_rang = False
    if not shares_a_generator(spec):
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    previous = signal.signal(signal.SIGALRM, _raise_row_timeout)
    signal.alarm(timeout)
    try:
        return run_trial(spec, profile_dir=str(profile_dir / spec.variant))
    except Exception as exc:  # one failing row must not cost the others
        if alarm_rang:
            return failed(spec, "TimeoutError", f"over the row limit of {timeout} s")
        return failed(spec, type(exc).__name__, first_line(exc, 2000))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


_generators: dict = {}
"""One generator per compiled graph: (model id, the spec's fields but its stop check) -> Generator."""


def compiles(spec: TrialSpec) -> bool:
    return declared("compile", spec.compile).family != EAGER


def _graph_key(model, spec: TrialSpec) -> tuple:
    return (id(model), *(v for k, v in sorted(spec.to_dict().items()) if k not in ("variant", "stop_check")))


def shares_a_generator(spec: TrialSpec) -> bool:
    """Whether the row's compiled graph is already built (its dynamo state must then be kept)."""
    return compiles(spec) and any(key[1:] == _graph_key(None, spec)[1:] for key in _generators)


@contextmanager
def one_generator_per_graph():
    """Rows that differ only in their stop check run the same compiled generator with that check
    swapped in (Generator.stop_check), so the graph is compiled once for all of them."""
    from tokengen.decode.loop import Generator
    from tokengen.measure import trial

    make = trial.make_generator

    def make_once(model, spec):
        if not compiles(spec) or declared("engine", spec.engine).family != OURS or spec.requests:
            return make(model, spec)
        key = _graph_key(model, spec)
        if key not in _generators:
            _generators.clear()  # a new graph: dynamo was reset, the last one is gone
            _generators[key] = make(model, spec)
        generator: Generator = _generators[key]
        generator.spec, generator.stop_check = spec, load("stop_check", spec.stop_check)
        return generator

    trial.make_generator = make_once
    try:
        yield
    finally:
        trial.make_generator = make
        _generators.clear()


@contextmanager
def one_model_per_table():
    """In-process rows share the model: the same name, dtype, device and seed build the same seeded
    weights, and nothing a row does changes them (torch.compile wraps, it does not modify). Built
    once, not per row: about 2 s of CPU per gpt2 row that the GPU check's time limit would pay for."""
    from tokengen import models

    build, built = models.build_model, {}

    def build_once(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in built:
            built[key] = build(*args, **kwargs)
        return built[key]

    models.build_model = build_once
    try:
        yield
    finally:
        models.build_model = build


def _gb(value) -> str:
    return "n/a" if value is None else f"{value / 1e9:.3f}"


def _allocator(record: dict) -> str:
    live = str(record.get("allocator_live") or "")
    return (
        "expandable"
        if "expandable_segments=True" in live
        else "default"
        if "expandable_segments=False" in live
        else "n/a"
    )


def _same_tokens(record: dict, base: dict | None) -> str:
    """docs/design.md's promise: every row with a stop check returns the baseline's tokens."""
    if (
        base is None or declared("stop_check", record["stop_check"]).overrun is None
    ):  # the baseline's tokens, then padding
        return "n/a"
    return "yes" if record["tokens_sha256"] == base["tokens_sha256"] else "NO"


def _label(record: dict) -> str:
    """A CUDA-graph row whose graphs were skipped timed compiled code without CUDA graphs, and says so."""
    return record["variant"] + (" (CUDA graphs skipped)" if record.get("cuda_graphs") == "skipped" else "")


def _measured(record: dict) -> str:
    """The trial's own verdict (ok, noisy, contended), with its reasons, beside the number it qualifies."""
    verdict = record.get("measurement") or "n/a"
    reasons = record.get("measurement_reasons")
    return f"{verdict}: {reasons}" if reasons and verdict != "ok" else verdict


def _optional(value, fmt: str, unit: str = "") -> str:
    return "n/a" if value is None else format(value, fmt) + unit


def markdown(records: list[dict], title: str) -> str:
    """The article's columns, then what this project adds; profile and energy columns when measured."""
    base = next((r for r in records if r["variant"] == "baseline" and r.get("status") == FINISHED), None)
    profiled = any(r.get("profile_window") for r in records)
    energy = any(r.get("energy_j_per_token") is not None for r in records)
    header = (
        "| variant | mean (s) | std | min | max | tokens/s | speedup | alloc peak (GB) | reserved peak (GB) "
        "| fragmentation | allocator (live) | first run (s) | steps | same tokens | measured |"
    )
    header += " GPU idle (us/step) | GPU busy | host sync (us/step) |" if profiled else ""
    header += " J/token |" if energy else ""
    lines = [title, "", header, "|" + "---|" * (header.count("|") - 1)]
    for r in records:
        if r.get("status") != FINISHED:
            lines.append(f"| {r['variant']} | {r.get('status')}: {r.get('error_type')}: {r.get('error_message')} |")
            continue
        frag = (
            "n/a"
            if r["mem_fragmentation_pct"] is None
            else f"{_gb(r['mem_fragmentation_bytes'])} ({r['mem_fragmentation_pct']:.1f}%)"
        )
        speedup = f"{base['runtime_mean_s'] / r['runtime_mean_s']:.2f}x" if base else "n/a"
        same = _same_tokens(r, base)
        line = (
            f"| {_label(r)} | {r['runtime_mean_s']:.4f} | {r['runtime_std_s']:.4f} | {r['runtime_min_s']:.4f} "
            f"| {r['runtime_max_s']:.4f} | {r['tokens_per_s']:.0f} | {speedup} | {_gb(r['mem_allocated_peak_bytes'])} "
            f"| {_gb(r['mem_reserved_peak_bytes'])} | {frag} | {_allocator(r)} | {r['first_run_s']:.2f} | {r['steps']} | {same} "
            f"| {_measured(r)} |"
        )
        if profiled:
            line += (
                f" {_optional(r.get('gpu_idle_us_per_step'), '.1f')} | {_optional(r.get('gpu_busy_pct'), '.1f', '%')} "
                f"| {_optional(r.get('host_sync_us_per_step'), '.1f')} |"
            )
        if energy:
            line += f" {_optional(r.get('energy_j_per_token'), '.4f')} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def title(records: list[dict], args) -> str:
    first = next((r for r in records if r.get("status") == FINISHED), {})
    return (
        f"{args.model} {args.dtype}, batch {args.batch_size}, max_seqlen {args.max_seqlen}, stop={args.stop}, "
        f"on {first.get('env_gpu_name') or args.device} (torch {first.get('env_torch')}, "
        f"transformers {first.get('env_transformers')})"
    )


def write_atomically(path: str | None, text: str) -> None:
    """A reader (or a time limit) never sees half a file."""
    if not path:
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_rows(records: list[dict], args) -> None:
    write_atomically(args.json, json.dumps(records, indent=2))
    write_atomically(args.markdown, markdown(records, title(records, args)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seqlen", type=int, default=100)
    parser.add_argument(
        "--prompt-len", type=int, default=None, help="default: the trial's (1, BOS only, as the article)"
    )
    parser.add_argument("--stop", default="never")
    parser.add_argument("--sampling", default=None, help="default: the trial's (greedy)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--matmul-precision",
        choices=("highest", "high"),
        default=None,
        help="high = TF32, as the article runs float32 (default: the trial's, highest)",
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--profile",
        choices=("off", "torch", "nsys", "auto"),
        default="off",
        help="auto: nsys where it is on the PATH, else torch.profiler",
    )
    parser.add_argument("--profile-steps", default=None)
    parser.add_argument("--profile-dir", help="where profiled rows leave their traces (default: a temporary directory)")
    parser.add_argument(
        "--isolation",
        choices=("shared", "process"),
        default="shared",
        help="shared: rows in this process where they can; process: every row in its own",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per row")
    parser.add_argument("--variants", nargs="*", default=ROWS)
    parser.add_argument("--json", help="the records so far, rewritten after every row")
    parser.add_argument("--markdown", help="the table so far, rewritten after every row")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _end_children_and_exit)
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, one_model_per_table(), one_generator_per_graph():
        profile_dir = Path(args.profile_dir or tmp)
        for variant in args.variants:
            spec = row_spec(variant, args)
            reason = problem(spec)
            if reason:
                print(f"skip {variant}: {reason}", file=sys.stderr)
                continue
            started = time.perf_counter()
            if needs_fresh_process(spec, args.isolation):
                record = run_in_child(spec, Path(tmp), profile_dir, args.timeout)
            else:
                record = run_in_process(spec, profile_dir, args.timeout)
            records.append(record)
            write_rows(records, args)
            print(
                f"done {variant}: {record['status']} in {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    print(markdown(records, title(records, args)))
    return exit_status(records)


def exit_status(records: list[dict]) -> int:
    """Nonzero when a row failed or returned other tokens than the baseline, so a script sees it."""
    bad = [r["variant"] for r in records if r.get("status") != FINISHED]
    base = next((r for r in records if r["variant"] == "baseline" and r.get("status") == FINISHED), None)
    differ = [r["variant"] for r in records if r.get("status") == FINISHED and _same_tokens(r, base) == "NO"]
    if bad:
        print(f"failed rows: {', '.join(bad)}", file=sys.stderr)
    if differ:
        print(f"rows whose tokens differ from the baseline's: {', '.join(differ)}", file=sys.stderr)
    return 1 if bad or differ else 0


if __name__ == "__main__":
    sys.exit(main())
