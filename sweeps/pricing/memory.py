"""How much memory a trial will take at its peak, before it runs: per device, by part. Torch-free.

A trial holds its weights (built in float32 on the host, then cast and moved), its KV cache (2 x
layers x B x (P + max_seqlen) x the key/value width, for a cache variant), the logits of a step,
one forward's activations, and its prompts and token buffer. The article's baseline (cache=none)
recomputes the whole prefix every step and keeps every position's logits, (B, n, V) for n up to
P + max_seqlen - 1: on a CPU the last step's is what is live at the peak; on CUDA the caching
allocator keeps every step's block, each larger than the last, so what it reserves is their sum
(the H200 baseline of docs/results.md: gpt2 float32, batch 32, 100 steps reserves 33.7 GB for
1.7 GB live; allocator=expandable maps segments that grow instead, and reserves what is live).

A CPU trial's process RSS also holds torch and transformers themselves (RUNTIME_RSS, measured) and,
compiled, inductor's graphs (COMPILE_RSS). The guard (sweep.memory_guard) refuses, before Ray
starts, a trial whose estimate passes that fraction of its device's free memory on this machine.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sweeps.planning.config import SweepConfig
from sweeps.pricing.estimate.shapes import ModelShape, shape_of
from tokengen.contract.declarations import weight_bits
from tokengen.contract.spec import DTYPE_BYTES, SpecError, TrialSpec

GB = 1e9
TOKEN_BYTES = 8  # int64 ids
# A trial process's RSS with torch 2.13.0 (CPU) and transformers 5.24.0 imported, before its model:
# ru_maxrss of a fresh python after those imports, 369 MB on this project's CI VM; the forked trial
# process inherits the warm parent's pages (sweeps/execution/trial_process.py), so it starts there too.
RUNTIME_RSS = 370e6
# torch.compile's inductor on a CPU (its imports, traced graphs, compiled kernels): the smoke grid's compiled trials
# peaked 0.52 GB against 0.39 GB for their eager twins
COMPILE_RSS = 130e6
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
        named = {
            "weights": self.weights,
            "KV cache": self.kv_cache,
            "logits": self.logits,
            "activations": self.activations,
            "prompts": self.prompts,
            "runtime": self.runtime,
        }
        return ", ".join(f"{name} {gb(value)}" for name, value in named.items() if value >= 0.005 * GB)


def gb(value: float) -> str:
    return f"{value / GB:,.2f} GB"


def estimate_memory(spec: TrialSpec) -> MemoryEstimate | None:
    """The trial's peak memory by part, or None where its model's shape cannot be read."""
    shape = shape_of(spec.model)
    if shape is None:
        return None
    size = DTYPE_BYTES[spec.dtype]
    rows, total = spec.batch_size, spec.prompt_len + spec.max_seqlen
    bits = weight_bits(spec.knobs)
    weights = shape.params * (bits / 8 if bits else size)  # quantized weights at their declared bits
    build = shape.params * (4 + (size if size != 4 else 0))  # float32 first, then its cast copy beside it
    baseline = spec.cache == "none"
    longest = total - 1 if baseline else max(spec.prompt_len, 1)  # the widest forward (the last token is never fed)
    kv = 0.0 if baseline else 2 * shape.layers * rows * total * shape.kv_dim * size
    live_logits = rows * (longest if baseline else 1) * shape.vocab * size
    activations = _activations(shape, rows, longest, size)
    prompted = max(spec.requests, rows)  # every row, or every request, has its own prompt
    # (N, P) ids with the two draws they are cut from, the (B, P + max_seqlen) token buffer, and the
    # vocabulary's permutation with its inverse (tokengen/decode/prompts.py)
    prompts = (prompted * spec.prompt_len * 3 + rows * total + shape.vocab * 2) * TOKEN_BYTES
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


def _activations(shape: ModelShape, rows: int, length: int, size: int) -> float:
    """One forward over (rows, length) tokens: a layer's hidden states, its MLP's intermediate and the
    attention weights of its heads (64 wide), at once."""
    heads = max(1, shape.hidden // 64)
    return rows * length * (4 * shape.hidden + shape.intermediate + heads * length) * size


@dataclass(frozen=True)
class FreeMemory:
    """What this machine has free now, for a local Ray's trials: host bytes, and each GPU's."""

    host: float | None
    gpus: list[float]


def free_memory() -> FreeMemory:
    return FreeMemory(_host_available(), _gpus_free())


def _host_available() -> float | None:
    """MemAvailable, or a cgroup's room where the process runs under a tighter memory limit."""
    try:
        text = Path("/proc/meminfo").read_text()
        available = next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("MemAvailable"))
    except (OSError, StopIteration, ValueError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return float(available)


def _gpus_free() -> list[float]:
    if not shutil.which("nvidia-smi"):
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    select = ["-i", visible] if visible else []
    try:
        out = subprocess.run(
            ["nvidia-smi", *select, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [float(line) * 2**20 for line in out.stdout.split() if out.returncode == 0 and line.strip().isdigit()]


SWEEP_FIX = "narrow the grid, or set sweep.memory_guard=null to run it anyway"


def memory_refusal(
    trials, free: FreeMemory, guard: float | None, setting: str = "sweep.memory_guard=", fix: str = SWEEP_FIX
) -> str | None:
    """One line for the first trial whose estimate passes `guard` (a fraction) of its device's free memory,
    with the figure and its parts; None where every trial fits, or the guard is off (None). `setting` and
    `fix` name the guard as the caller's user sets it (the sweep's, or `python -m tokengen --memory-guard`)."""
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


def memory_columns(spec: TrialSpec) -> dict:
    """The plan's columns (plan.csv): each trial's estimated peak, GB, per device."""
    found = estimate_memory(spec)
    if found is None:
        return {"memory_rss_gb": math.nan, "memory_cuda_gb": math.nan}
    return {"memory_rss_gb": found.rss / GB, "memory_cuda_gb": math.nan if found.cuda is None else found.cuda / GB}


def check_local_memory(trials, config: SweepConfig) -> None:
    """A local Ray's trials share this machine's memory: one estimated past sweep.memory_guard of what is free
    (sweeps/pricing/memory.py) is refused here, before Ray starts, with its figure."""
    if config.ray.address:
        return
    refusal = memory_refusal(trials, free_memory(), config.sweep.memory_guard)
    if refusal:
        raise SpecError(refusal)
