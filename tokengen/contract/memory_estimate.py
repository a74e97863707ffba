"""How much memory a trial takes at its peak, before it runs, and the guard that refuses one that would not fit:
torch-free and asked from both sides, so `python -m tokengen` (tokengen/cli.py) and a sweep (sweeps/pricing/memory_guard.py,
sweeps/dry_run.py) refuse the same trial with the same figure, and one trial needs nothing above tokengen/.

A trial holds its weights (built in float32 on the host, then cast and moved), its KV cache, the logits of a step,
one forward's activations, its prompts and token buffer, and (RSS) torch and transformers themselves. The baseline
(cache=none) keeps every position's logits, (B, n, V) for n up to P + max_seqlen - 1: on a CPU the last step's is
live at the peak; on CUDA the caching allocator keeps every step's larger block, so it reserves their sum (the H200
baseline of docs/results.md reserves 33.7 GB for 1.7 GB live; allocator=expandable reserves what is live).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tokengen.contract.declarations import weight_bits
from tokengen.contract.model_shapes import shape_of
from tokengen.contract.spec import DTYPE_BYTES, TrialSpec

GB = 1e9
TOKEN_BYTES = 8  # int64 ids
RUNTIME_RSS = 370e6  # ru_maxrss of a fresh python with torch 2.13 (CPU) and transformers 5.24 imported, on CI's VM;
# a trial process forks from a warm parent (sweeps/execution/trial_process.py), so it starts there too
COMPILE_RSS = 130e6  # inductor on a CPU: the smoke grid's compiled trials peaked 0.52 GB, their eager twins 0.39 GB
CUDA_CONTEXT_RSS = 1.0e9  # host RSS that CUDA's runtime and libraries add to a CUDA trial's process


@dataclass(frozen=True)
class MemoryEstimate:
    """A trial's estimated peak, by part (bytes) and per device: `rss` on the host, `cuda` on its GPU."""

    weights: float
    kv_cache: float
    logits: float  # what the peak holds of them: live on a CPU, the allocator's sum on CUDA (cache=none)
    activations: float
    prompts: float  # prompts, the token buffer and the per-row stop state
    runtime: float  # torch and transformers (and a compile) in the process, a CUDA context's host share
    rss: float
    cuda: float | None  # None for a CPU trial

    def parts(self) -> str:
        """`weights 0.50 GB, KV cache 0.24 GB, logits 32.49 GB, ...`: where the figure comes from."""
        named = zip(("weights", "KV cache", "logits", "activations", "prompts", "runtime"), vars(self).values())
        return ", ".join(f"{name} {gb(value)}" for name, value in named if value >= 0.005 * GB)


def gb(value: float) -> str:
    return f"{value / GB:,.2f} GB"


def estimate_memory(spec: TrialSpec) -> MemoryEstimate | None:
    """The trial's peak memory by part, or None where its model's shape cannot be read."""
    shape = shape_of(spec.model)
    if shape is None:
        return None
    size, rows, total = DTYPE_BYTES[spec.dtype], spec.batch_size, spec.prompt_len + spec.max_seqlen
    bits = weight_bits(spec.knobs)
    weights = shape.params * (bits / 8 if bits else size)  # quantized weights at their declared bits
    build = shape.params * (4 + (size if size != 4 else 0))  # float32 first, then its cast copy beside it
    baseline = spec.cache == "none"
    longest = total - 1 if baseline else max(spec.prompt_len, 1)  # the widest forward (the last token is never fed)
    kv = 0.0 if baseline else 2 * shape.layers * rows * total * shape.kv_dim * size
    live_logits = rows * (longest if baseline else 1) * shape.vocab * size
    heads = max(1, shape.hidden // 64)  # one forward: hidden states, the MLP's intermediate, attention weights
    activations = rows * longest * (4 * shape.hidden + shape.intermediate + heads * longest) * size
    # (N, P) ids with the two draws they are cut from, the (B, P + max_seqlen) token buffer, and the vocabulary's
    # permutation with its inverse (tokengen/decode/prompts.py); every row, or every request, has its own prompt
    prompts = (max(spec.requests, rows) * spec.prompt_len * 3 + rows * total + shape.vocab * 2) * TOKEN_BYTES
    on_cuda = spec.device == "cuda"
    runtime = RUNTIME_RSS + (COMPILE_RSS if spec.compile != "off" and not on_cuda else 0.0)
    working = weights + kv + activations + prompts
    if not on_cuda:
        rss = runtime + max(build, working + live_logits)
        return MemoryEstimate(weights, kv, live_logits, activations, prompts, runtime, rss, None)
    logits = live_logits
    if baseline and spec.allocator == "default":  # each step's (B, n, V) block is new and larger: all stay reserved
        logits = sum(rows * n * shape.vocab * size for n in range(spec.prompt_len, total))
    runtime += CUDA_CONTEXT_RSS
    return MemoryEstimate(weights, kv, logits, activations, prompts, runtime, runtime + build, working + logits)


@dataclass(frozen=True)
class FreeMemory:
    """What this machine has free now, for a local Ray's trials: host bytes, and each GPU's."""

    host: float | None
    gpus: list[float]


def free_memory() -> FreeMemory:
    """MemAvailable (or a tighter cgroup's room), and each visible GPU's free memory from nvidia-smi."""
    try:
        text = Path("/proc/meminfo").read_text()
        host = float(next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("MemAvailable")))
    except (OSError, StopIteration, ValueError):
        host = None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if host is not None and limit != "max":
            host = float(min(host, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())))
    except (OSError, ValueError):
        pass
    select = ["-i", visible] if (visible := os.environ.get("CUDA_VISIBLE_DEVICES")) else []
    query = ["nvidia-smi", *select, "--query-gpu=memory.free", "--format=csv,noheader,nounits"]
    try:
        run = subprocess.run(query, capture_output=True, text=True, timeout=10) if shutil.which("nvidia-smi") else None
        out = run.stdout if run is not None and run.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        out = ""
    return FreeMemory(host, [float(line) * 2**20 for line in out.split() if line.strip().isdigit()])


def memory_refusal(trials, free: FreeMemory, guard: float | None, *, setting: str, fix: str) -> str | None:
    """One line for the first trial estimated past `guard` (a fraction) of its device's free memory, with the figure,
    its parts, and the guard (`setting`) and `fix` as the caller's user knows them; None where every trial fits."""
    if not guard:
        return None
    for trial in trials:
        found = estimate_memory(trial.spec)
        if found is None:
            continue
        checks = [("host", found.rss, free.host)]
        if found.cuda is not None and free.gpus:
            checks.append(("GPU", found.cuda, max(free.gpus)))
        for device, needed, room in checks:
            if room is not None and needed > guard * room:
                spec = trial.spec
                return (
                    f"trial {trial.key} ({spec.variant}, {spec.model}, batch_size={spec.batch_size}, "
                    f"prompt_len={spec.prompt_len}, max_seqlen={spec.max_seqlen}) would take about "
                    f"{gb(needed)} of {device} memory ({found.parts()}), over {setting}{guard:g} of "
                    f"the {gb(room)} free: {fix}"
                )
    return None
