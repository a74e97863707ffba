"""Clocks that stay outside the generator: a run timed with the device drained, per-step marks, run statistics."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


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
