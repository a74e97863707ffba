"""How long a sweep takes on W workers. Longest-processing-time-first (each trial, longest first, to the worker
free soonest) is within 4/3 of the best schedule (Graham, 1969), and no schedule beats max(total / W, longest)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable


def lpt_order(estimates: Iterable) -> list[int]:
    """Indices of `estimates` (Estimates or seconds), longest first; ties keep their given order."""
    seconds = [float(getattr(e, "seconds", e)) for e in estimates]
    return sorted(range(len(seconds)), key=lambda i: -seconds[i])


@dataclass(frozen=True)
class Schedule:
    seconds: float  # LPT's makespan
    lower_bound: float  # max(total / workers, longest): no schedule finishes sooner
    worker: list  # worker of each estimate, in the estimates' order


def makespan(estimates: Iterable, workers: int) -> Schedule:
    """LPT's schedule of `estimates` (Estimates or seconds) on `workers` identical workers."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    seconds = [float(getattr(e, "seconds", e)) for e in estimates]
    free = [(0.0, w) for w in range(workers)]  # (time the worker is free, worker)
    worker = [0] * len(seconds)
    for i in lpt_order(seconds):
        at, worker[i] = heapq.heappop(free)
        heapq.heappush(free, (at + seconds[i], worker[i]))
    bound = max(sum(seconds) / workers, max(seconds, default=0.0))
    return Schedule(max(at for at, _ in free), bound, worker)
