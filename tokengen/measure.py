"""Instruments that stay outside the generator: clocks, step timers, memory, the token checksum."""

from __future__ import annotations

import hashlib
import os
import resource
import statistics
import time
from typing import Callable

import torch

from tokengen.process_env import ALLOC_VARS, trial_environment

def set_allocator(allocator: str, device: str) -> None:
    """Give this process the allocator setting of process_env's rule; only possible before CUDA starts."""
    wanted = trial_environment(os.environ, allocator).get("PYTORCH_ALLOC_CONF")
    if wanted == os.environ.get("PYTORCH_ALLOC_CONF") and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ:
        return
    if device == "cuda" and torch.cuda.is_initialized():
        raise RuntimeError(
            f"allocator={allocator} must be set before CUDA starts: run the trial in a fresh process (python -m tokengen)"
        )
    for name in ALLOC_VARS:
        os.environ.pop(name, None)
    if wanted:
        os.environ["PYTORCH_ALLOC_CONF"] = wanted


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable, device: str):
    """(result, seconds) with the device drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


class StepTimer:
    """Marks the start of every step; on CUDA with events on the step's own stream, so no sync.

    Used on a separate instrumented run, so the timed runs carry no marker at all.
    """

    def __init__(self, device: str):
        self.device = device
        self.marks: list = []

    def wrap(self, step: Callable[[int], None]) -> Callable[[int], None]:
        def marked(i: int) -> None:
            self.marks.append(self._mark())
            step(i)

        return marked

    def _mark(self):
        if self.device == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def latencies(self) -> list[float]:
        """Seconds from each step's start to the next's, the last one to the device's drain."""
        end = self._mark()
        synchronize(self.device)
        marks = self.marks + [end]
        if self.device == "cuda":
            return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        return [b - a for a, b in zip(marks, marks[1:])]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def runtime_stats(runtimes: list[float]) -> dict:
    return {
        "runtime_mean_s": statistics.mean(runtimes),
        "runtime_std_s": statistics.stdev(runtimes) if len(runtimes) > 1 else 0.0,
        "runtime_min_s": min(runtimes),
        "runtime_max_s": max(runtimes),
        "runtime_median_s": statistics.median(runtimes),
        "runtime_cv": statistics.stdev(runtimes) / statistics.mean(runtimes) if len(runtimes) > 1 else 0.0,
    }


def reset_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def memory_stats(device: str) -> dict:
    """The article's figures: peaks since the last reset_memory, fragmentation = reserved - allocated."""
    stats = {
        "mem_allocated_peak_bytes": None,
        "mem_reserved_peak_bytes": None,
        "mem_fragmentation_bytes": None,
        "mem_fragmentation_pct": None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if device == "cuda":
        raw = torch.cuda.memory_stats()
        allocated = raw.get("allocated_bytes.all.peak", 0)
        reserved = raw.get("reserved_bytes.all.peak", 0)
        stats.update(
            mem_allocated_peak_bytes=allocated,
            mem_reserved_peak_bytes=reserved,
            mem_fragmentation_bytes=reserved - allocated,
            mem_fragmentation_pct=100.0 * (reserved - allocated) / reserved if reserved else 0.0,
        )
    return stats


def tokens_array(tokens: torch.Tensor):
    """The tokens as DESIGN.md fixes them: a C-ordered int64 (B, L) host array, BOS column included."""
    return tokens.to(torch.int64).cpu().contiguous().numpy()


def tokens_sha256(tokens: torch.Tensor) -> str:
    """DESIGN.md's checksum: sha256 of tokens_array's bytes."""
    return hashlib.sha256(tokens_array(tokens).tobytes()).hexdigest()
