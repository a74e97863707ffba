"""From a profile to three numbers: the GPU's idle gap between steps, its busy share, the host's wait.

Both front-ends (a torch.profiler Chrome trace, an Nsight Systems SQLite export) reduce to one
Timeline in microseconds: the host's "step N" and "stop check" ranges, each launch's host time
by correlation id, and each GPU operation with its correlation id. A GPU operation belongs to
the step whose host range contains its launch, which is exact even when the host runs ahead.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from tokengen.contract.names import CHECK_RANGE, STEP_RANGE

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class Timeline:
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (step, host start, host end)
    checks: list[tuple[float, float]] = field(default_factory=list)  # host stop-check ranges
    launches: dict[int, float] = field(default_factory=dict)  # correlation id -> host launch time
    gpu_ops: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, correlation id)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def derive(timeline: Timeline) -> dict:
    """gpu_idle_us_per_step, gpu_busy_pct, host_sync_us_per_step (None where the trace has no data)."""
    host_sync = _median([end - start for start, end in timeline.checks])
    steps = sorted(timeline.steps, key=lambda s: s[1])
    starts = [s[1] for s in steps]
    per_step: dict[int, list[float]] = {}
    for start, end, corr in timeline.gpu_ops:
        launched = timeline.launches.get(corr)
        if launched is None:
            continue
        index = bisect_right(starts, launched) - 1
        if index >= 0 and launched <= steps[index][2]:
            first_last = per_step.setdefault(steps[index][0], [start, end])
            first_last[0], first_last[1] = min(first_last[0], start), max(first_last[1], end)
    ordered = [per_step[i] for i in sorted(per_step)]
    gaps = [max(0.0, nxt[0] - cur[1]) for cur, nxt in zip(ordered, ordered[1:])]
    return {
        "gpu_idle_us_per_step": _median(gaps),
        "gpu_busy_pct": _busy_pct(timeline.gpu_ops),
        "host_sync_us_per_step": host_sync,
        "profiled_steps": len(steps),
    }


def _busy_pct(ops: list[tuple[float, float, int]]) -> float | None:
    if not ops:
        return None
    intervals = sorted((start, end) for start, end, _ in ops)
    span = max(end for _, end in intervals) - intervals[0][0]
    busy, cur_start, cur_end = 0.0, *intervals[0]
    for start, end in intervals[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return 100.0 * busy / span if span > 0 else 100.0


def _step_number(name: str) -> int | None:
    prefix = STEP_RANGE.format("")
    if name.startswith(prefix):
        tail = name[len(prefix) :]
        return int(tail) if tail.isdigit() else None
    return None


def from_torch_trace(path: str | Path) -> Timeline:
    """A torch.profiler Chrome trace (microseconds)."""
    events = json.loads(Path(path).read_text()).get("traceEvents", [])
    timeline = Timeline()
    for event in events:
        if event.get("ph") != "X":
            continue
        category, name = event.get("cat", ""), event.get("name", "")
        start = float(event["ts"])
        end = start + float(event.get("dur", 0))
        corr = (event.get("args") or {}).get("correlation")
        if category == "user_annotation":
            number = _step_number(name)
            if number is not None:
                timeline.steps.append((number, start, end))
            elif name == CHECK_RANGE:
                timeline.checks.append((start, end))
        elif category in ("cuda_runtime", "cuda_driver") and corr is not None:  # Triton launches via the driver
            timeline.launches[int(corr)] = start
        elif category in GPU_CATEGORIES and corr is not None:
            timeline.gpu_ops.append((start, end, int(corr)))
    return timeline


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def from_nsys_sqlite(path: str | Path) -> Timeline:
    """An `nsys export --type=sqlite` file (nanoseconds): NVTX_EVENTS, CUPTI_ACTIVITY_KIND_* tables."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    timeline = Timeline()
    try:
        if _has_table(db, "NVTX_EVENTS"):
            text = "COALESCE(e.text, s.value)" if _has_table(db, "StringIds") else "e.text"
            join = "LEFT JOIN StringIds s ON e.textId = s.id" if _has_table(db, "StringIds") else ""
            for name, start, end in db.execute(
                f"SELECT {text}, e.start, e.end FROM NVTX_EVENTS e {join} WHERE e.end IS NOT NULL"
            ):
                name = name or ""
                number = _step_number(name)
                if number is not None:
                    timeline.steps.append((number, start / 1e3, end / 1e3))
                elif name == CHECK_RANGE:
                    timeline.checks.append((start / 1e3, end / 1e3))
        if _has_table(db, "CUPTI_ACTIVITY_KIND_RUNTIME"):
            for start, corr in db.execute("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
                timeline.launches[int(corr)] = start / 1e3
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if _has_table(db, table):
                for start, end, corr in db.execute(f"SELECT start, end, correlationId FROM {table}"):
                    timeline.gpu_ops.append((start / 1e3, end / 1e3, int(corr)))
    finally:
        db.close()
    return timeline
