"""How long a sweep takes on W workers, given each trial's estimate.

Longest-processing-time-first (each trial, longest first, to the worker free soonest) is within
4/3 of the best schedule (Graham, 1969), and no schedule beats max(total / W, longest trial): the
sweep's makespan lies between that lower bound and LPT's, and LPT is a good order to submit in.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable


def _seconds(item) -> float:
    return float(getattr(item, "seconds", item))


def lpt_order(estimates: Iterable) -> list[int]:
    """Indices of `estimates` (Estimates or seconds), longest first; ties keep their given order."""
    seconds = [_seconds(e) for e in estimates]
    return sorted(range(len(seconds)), key=lambda i: -seconds[i])


@dataclass(frozen=True)
class Schedule:
    seconds: float  # LPT's makespan
    lower_bound: float  # max(total / workers, longest): no schedule finishes sooner
    order: list  # submission order: indices into the estimates, longest first
    worker: list  # worker of each estimate, in the estimates' order


def makespan(estimates: Iterable, workers: int) -> Schedule:
    """LPT's schedule of `estimates` (Estimates or seconds) on `workers` identical workers."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    seconds = [_seconds(e) for e in estimates]
    order = lpt_order(seconds)
    free = [(0.0, w) for w in range(workers)]  # (time the worker is free, worker)
    worker = [0] * len(seconds)
    for i in order:
        at, w = heapq.heappop(free)
        worker[i] = w
        heapq.heappush(free, (at + seconds[i], w))
    finish = max((at for at, _ in free), default=0.0)
    bound = max(sum(seconds) / workers, max(seconds, default=0.0))
    return Schedule(finish, bound, order, worker)
