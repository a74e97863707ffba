"""When each request of a request workload arrives: offline, a seeded Poisson or gamma process, or a trace.

A request workload (`requests = N > 0`) is offline by default: every request is queued when the run starts, the
first release's behaviour and key. With `request_rate = R > 0` (requests per second) the requests arrive over time,
open loop: the gaps between arrivals are drawn from a gamma distribution of shape `burstiness` and mean 1 / R, as
vLLM's `vllm bench serve --burstiness` draws them (1 is a Poisson process, below 1 burstier, above 1 steadier).
The first request arrives as the run starts. The draw comes from the trial's seed and the arrival fields alone
(its own stream, Python's `random`), so every variant at a point is loaded by the same schedule, on any machine.

With `request_trace = PATH` the schedule is a CSV file of `arrival time (s), prompt length, output length` rows (an
optional header line of names first): the first N rows, their times shifted so the first arrival is at 0; each
request reads the first `prompt length` ids of its seeded prompt (at most `prompt_len`) and ends after `output
length` tokens (EOS forced there, as a drawn `stop` length is; at most `max_seqlen`). A trial reads the file where
it runs, so the path is absolute; the key hashes the path, not the content (the record's `request_trace_sha256`
says which content was served).

Torch-free: the planner refuses a bad rate, burstiness or trace with `arrival_problem`'s one line before any work.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

TRACE_COLUMNS = ("arrival time (s)", "prompt length", "output length")


class TraceError(ValueError):
    """A trace file that is not a CSV of arrival times and lengths: one line naming the row and the fix."""


@dataclass(frozen=True)
class Schedule:
    """A run's arrivals: each request's time after the run's start (sorted, the first 0), and under a trace its
    prompt and output lengths."""

    times_s: tuple[float, ...]
    prompt_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None

    @property
    def offered_rate(self) -> float | None:
        """The drawn schedule's own rate, (N - 1) / its span (not the nominal rate: a Poisson draw of N requests
        varies by about 1 / sqrt(N)); None where every request arrives at once."""
        span = self.times_s[-1] - self.times_s[0] if self.times_s else 0.0
        return (len(self.times_s) - 1) / span if span > 0 else None


def stream_seed(seed: int, label: str) -> int:
    """The seed of one named random stream of a trial (tokengen/decode/prompts.py draws its prompts so too)."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def draw_times(count: int, rate: float, burstiness: float, seed: int) -> tuple[float, ...]:
    """`count` arrival times in seconds from 0: gaps of mean 1 / rate, gamma-distributed with shape `burstiness`.
    The draws depend on the seed and the burstiness alone, and the rate scales them: the schedules of one point at two
    rates are one schedule at two speeds, so a server's verdicts across rates (a peak search's probes) differ by the
    rate, not by a luckier draw."""
    draws = random.Random(stream_seed(seed, f"arrivals:{burstiness!r}"))
    times, now = [0.0], 0.0
    for _ in range(count - 1):
        now += draws.gammavariate(burstiness, 1.0 / burstiness)
        times.append(now / rate)
    return tuple(times)


def schedule_for(spec) -> Schedule | None:
    """The spec's arrivals, or None for an offline workload (or a batch). A bad trace raises TraceError."""
    if spec.requests <= 0:
        return None
    if spec.request_trace:
        rows = read_trace(spec.request_trace)[: spec.requests]
        start = rows[0][0]
        return Schedule(
            tuple(t - start for t, _, _ in rows), tuple(p for _, p, _ in rows), tuple(o for _, _, o in rows)
        )
    if spec.request_rate > 0:
        return Schedule(draw_times(spec.requests, spec.request_rate, spec.burstiness, spec.seed))
    return None


def read_trace(path: str) -> tuple[tuple[float, int, int], ...]:
    """The trace's rows (arrival time, prompt length, output length); TraceError names the first bad row."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise TraceError(f"request_trace={path}: cannot be read ({exc.strerror}): give a CSV file's path") from None
    return _read(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read(path: str, size: int, mtime_ns: int) -> tuple[tuple[float, int, int], ...]:
    want = f"give a CSV of numbers, one request a row: {', '.join(TRACE_COLUMNS)}"
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            lines = [row for row in csv.reader(handle) if any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"request_trace={path} is not a CSV file ({exc}): {want}") from None
    if lines and not any(_is_number(cell) for cell in lines[0]):
        lines = lines[1:]  # a header line of names
    if not lines:
        raise TraceError(f"request_trace={path} has no rows: {want}")
    rows, previous = [], -math.inf
    for number, cells in enumerate(lines, start=1):
        if len(cells) != 3 or not all(_is_number(c) for c in cells):
            raise TraceError(f"request_trace={path} row {number} is {','.join(cells)[:60]!r}: {want}")
        time_s, prompt, output = (float(c) for c in cells)
        if not time_s >= previous:
            raise TraceError(f"request_trace={path} row {number}: arrival times must not decrease (sort the file)")
        if not (prompt >= 1 and output >= 1 and prompt.is_integer() and output.is_integer()):
            raise TraceError(f"request_trace={path} row {number}: prompt and output lengths are whole numbers >= 1")
        rows.append((time_s, int(prompt), int(output)))
        previous = time_s
    return tuple(rows)


def _is_number(cell: str) -> bool:
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def trace_sha256(path: str) -> str:
    """The content hash of a trace file: which rows a trial served (its key hashes the path alone)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def arrival_problem(spec) -> str | None:
    """What is wrong with the spec's arrival fields, in one line that names the fix, or None."""
    rate, burst, trace = spec.request_rate, spec.burstiness, spec.request_trace
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not (rate >= 0 and math.isfinite(rate)):
        return f"request_rate={rate!r}: give requests per second above 0, or 0 for offline (every request at the start)"
    if not isinstance(burst, (int, float)) or isinstance(burst, bool) or not (burst > 0 and math.isfinite(burst)):
        return f"burstiness={burst!r}: give a gamma shape above 0 (1: Poisson arrivals, below 1 burstier)"
    if (rate > 0 or trace) and spec.requests <= 0:
        what = "request_rate" if rate > 0 else "request_trace"
        return f"{what} sets when requests arrive: set requests=N (N > 0)"
    if not trace:
        return None
    if rate > 0:
        return "request_trace carries its own arrival times: leave request_rate at 0"
    if not os.path.isabs(trace):
        return f"request_trace={trace}: give an absolute path (a trial reads the file on its own node)"
    try:
        rows = read_trace(trace)
    except TraceError as exc:
        return str(exc)
    if len(rows) < spec.requests:
        return f"request_trace={trace} has {len(rows)} rows for requests={spec.requests}: use requests <= {len(rows)}"
    rows = rows[: spec.requests]
    longest_prompt, longest_output = max(p for _, p, _ in rows), max(o for _, _, o in rows)
    if longest_prompt > spec.prompt_len:
        return f"request_trace={trace} has prompts of {longest_prompt} ids: use prompt_len >= {longest_prompt}"
    if longest_output > spec.max_seqlen:
        return f"request_trace={trace} has outputs of {longest_output} tokens: use max_seqlen >= {longest_output}"
    if spec.stop != "never":
        return "request_trace ends each request at its output length: use stop=never"
    return None
