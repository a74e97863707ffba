"""The prior: a trial's cost from first principles, for when no history covers it.

A decode step costs the larger of reading the weights (bytes / bandwidth) and computing its tokens (FLOPs / peak),
plus the host's per-step overhead. cache=none recomputes the whole prefix each step; with a cache a step does one
token per row plus reading the cache, and step 0 is the prompt's prefill. Efficiencies, overheads and compile times
are round guesses, hence the range x/3..x3; a history replaces or rescales them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from sweeps.pricing.estimate.hardware import DEFAULT_GPU, GPUS, CpuSpeed, cpu_speed, gpu_spec
from sweeps.pricing.estimate.span import Span
from sweeps.pricing.estimate.trials import batches, compile_mode, compiles, law, number, text
from tokengen.contract.declarations import KNOBS, trial_values, weight_bits
from tokengen.contract.model_shapes import PRESET_SHAPES, ModelShape, shape_of
from tokengen.contract.spec import DTYPE_BYTES

GPU_BANDWIDTH_EFFICIENCY = 0.8  # large sequential reads reach ~80% of a datasheet bandwidth
GPU_COMPUTE_EFFICIENCY = 0.5  # skinny decode GEMMs rarely reach more than half the tensor peak
CPU_BANDWIDTH_EFFICIENCY = 0.8
CPU_COMPUTE_EFFICIENCY = 0.6  # torch's decode GEMMs against numpy's square 1024x1024 calibration matmul
CPU_DTYPE_SLOWDOWN = {"float32": 1.0, "bfloat16": 2.0, "float16": 4.0}  # CPUs without native bf16/fp16 GEMMs
# Host overhead per decode step, (fixed, per layer) seconds: eager transformers launches ~15 kernels a layer from
# Python; inductor fuses them; CUDA graphs replay a step as one launch. A CPU step replays no graph.
STEP_OVERHEAD_S = {
    ("cuda", "eager"): (1.0e-3, 0.25e-3),
    ("cuda", "fused"): (0.3e-3, 0.03e-3),
    ("cuda", "graphed"): (0.05e-3, 0.003e-3),
    ("cpu", "eager"): (1.5e-3, 0.4e-3),
    ("cpu", "fused"): (0.5e-3, 0.05e-3),
    ("cpu", "graphed"): (0.5e-3, 0.05e-3),
}
# A cold compile=default by size family, times the mode's declared compile_cost: on a CPU with inductor's C++
# codegen; on CUDA the host's work: gpt2 (base) takes 15.9 s on an H200 node (docs/results.md, "On a GPU").
CPU_COMPILE_PRIOR_S = {"small": 30.0, "base": 60.0, "large": 105.0, "huge": 180.0}
CUDA_COMPILE_PRIOR_S = {"small": 8.0, "base": 16.0, "large": 40.0, "huge": 80.0}
WARM_COMPILE_SHARE = 0.2  # a twin loading its graphs from the sweep's shared cache against their cold compile:
# 0.12-0.18x on tiny, median 0.21x on gpt2 on this project's CPU (benchmarks/compile_sharing.py); a history's
# warm trials replace it
FIRST_RUN_EXTRA_S = {"cuda": 0.5, "cpu": 0.05}  # compile=off: cuBLAS and the allocator's start-up
BUILD_FIXED_S, BUILD_PARAMS_PER_S = 0.3, 2e8  # transformers' class set-up; random initialisation on the host
HOST_TO_DEVICE_GBS = 10.0  # pageable host-to-GPU copies
COLD_START_PRIOR_S = {"cpu": 6.0, "cuda": 10.0}  # a worker's warm parent importing torch and transformers (and
# CUDA's first context): a 2-core VM's first smoke trial waited about 7 s
HARNESS_PRIOR_S = 0.3  # the trial process's fork, start-up and exit (0.26-0.7 s on a loaded 2-core VM)
PRIOR_FACTOR, UNSURE_FACTOR = 3.0, 6.0  # x/3..x3; an unknown GPU or a model whose shape cannot be read x/6..x6
FALLBACK_SHAPE = PRESET_SHAPES["gpt2"]


@dataclass(frozen=True)
class Rates:
    flops_per_s: float
    bytes_per_s: float
    known: bool  # False: an unknown GPU, priced as DEFAULT_GPU


def device_of(trial: Mapping) -> str:
    return "cuda" if text(trial, "device") == "cuda" else "cpu"


def rates(trial: Mapping, gpu: str | None, cpu: CpuSpeed | None = None) -> Rates:
    """Achievable peak and bandwidth for the trial's device and dtype (cpu: this host, calibrated)."""
    dtype = text(trial, "dtype")
    if text(trial, "device") != "cuda":
        speed = cpu or cpu_speed()
        flops = speed.gflops * 1e9 * CPU_COMPUTE_EFFICIENCY / CPU_DTYPE_SLOWDOWN.get(dtype, 1.0)
        return Rates(flops, speed.gbs * 1e9 * CPU_BANDWIDTH_EFFICIENCY, True)
    spec = gpu_spec(gpu)
    known, spec = spec is not None, spec or GPUS[DEFAULT_GPU]
    if dtype != "float32":
        tflops = spec.bf16_tflops
    else:
        tflops = spec.tf32_tflops if text(trial, "matmul_precision") == "high" else spec.fp32_tflops
    return Rates(tflops * 1e12 * GPU_COMPUTE_EFFICIENCY, spec.bandwidth_gbs * 1e9 * GPU_BANDWIDTH_EFFICIENCY, known)


def step_seconds(trial: Mapping, shape: ModelShape, speed: Rates) -> np.ndarray:
    """Each decode step's time in one batch of max_seqlen steps (step 0 is the prompt's prefill)."""
    rows, prompt, steps = number(trial, "batch_size"), max(number(trial, "prompt_len"), 1), number(trial, "max_seqlen")
    step = np.arange(max(steps, 1), dtype=float)
    context = prompt + step  # tokens in the prefix once this step's are in
    recompute = law(trial) == "recompute"
    new = context if recompute else np.where(step == 0, float(prompt), 1.0)  # tokens forwarded per row
    attention = 4.0 * shape.layers * shape.hidden * (context - new / 2)  # QK^T and AV, per new token (causal)
    flops = rows * new * (2.0 * shape.streamed_params + attention)
    size = DTYPE_BYTES.get(text(trial, "dtype"), 4)
    values = trial_values({k: text(trial, k) for k in KNOBS})
    bits = weight_bits({v.knob: v.name for v in values})  # quantized weights at their declared bits
    cache_reads = 0.0 if recompute else rows * 2.0 * shape.layers * shape.kv_dim * context * size
    memory = shape.streamed_params * (bits / 8 if bits else size) + cache_reads
    mode = compile_mode(trial)
    kind = "eager" if mode is None or not compiles(trial) else "graphed" if mode.cuda_graphs else "fused"
    fixed, per_layer = STEP_OVERHEAD_S[(device_of(trial), kind)]
    overhead = fixed + per_layer * shape.layers + sum(v.overhead_s for v in values)  # a library's own loop, declared
    return np.maximum(memory / speed.bytes_per_s, flops / speed.flops_per_s) + overhead


def prior_run(trial: Mapping, gpu: str | None = None, cpu: CpuSpeed | None = None) -> Span:
    """One timed run's seconds (every batch's steps)."""
    shape = shape_of(text(trial, "model"))
    speed = rates(trial, gpu, cpu)
    seconds = batches(trial) * float(step_seconds(trial, shape or FALLBACK_SHAPE, speed).sum())
    return Span.factor(seconds, PRIOR_FACTOR if shape and speed.known else UNSURE_FACTOR)


def prior_compile(trial: Mapping) -> Span:
    """The first run's extra time: compilation, or with compile=off the device's start-up."""
    device = device_of(trial)
    if not compiles(trial):
        return Span.factor(FIRST_RUN_EXTRA_S[device], PRIOR_FACTOR)
    mode = compile_mode(trial)
    family = (shape_of(text(trial, "model")) or FALLBACK_SHAPE).size_family
    base = (CPU_COMPILE_PRIOR_S if device == "cpu" else CUDA_COMPILE_PRIOR_S)[family]
    return Span.factor(base * (mode.compile_cost if mode else 1.0), PRIOR_FACTOR)


def prior_build(trial: Mapping) -> Span:
    """Building the model inside the trial process: random init, then the copy to the GPU."""
    shape = shape_of(text(trial, "model")) or FALLBACK_SHAPE
    seconds = BUILD_FIXED_S + shape.params / BUILD_PARAMS_PER_S
    if text(trial, "device") == "cuda":
        seconds += shape.params * DTYPE_BYTES.get(text(trial, "dtype"), 4) / (HOST_TO_DEVICE_GBS * 1e9)
    return Span.factor(seconds, PRIOR_FACTOR)


def prior_cold_start(trial: Mapping) -> Span:
    """A worker's start-up before its first trial can begin, x/2..x2."""
    return Span.factor(COLD_START_PRIOR_S[device_of(trial)], 2.0)
