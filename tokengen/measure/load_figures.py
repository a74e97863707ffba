"""A request workload's latency figures, each request's from its own arrival, and goodput under the SLO.

From a run of the request server (tokengen/engines/request_server.py: each request's arrival, the forward that
admitted it, and when the host held each forward's tokens, tokengen/engines/host_times.py) and each request's length:

- queueing delay: arrival to the host beginning its admission forward (its prefill);
- TTFT: arrival to the host holding its first token (made by that admission forward);
- TPOT: the host's time from its first token to its last, over the tokens after the first (vLLM's);
- ITL: the gaps between the host holding one of its tokens and the next, at the stop check's cadence (under every_k,
  K tokens held at once: gaps of 0, then one of K steps);
- E2E: arrival to the host holding its last token.

The figures leave out warm-up and drain: the first and the last `slots` requests by arrival (where more than twice
that many were served), while the slots first fill and while the load falls away. Each percentile is linear between
the two nearest samples (numpy's and vLLM's rule) where the samples resolve it, and the maximum where they cannot: a
p99 of fewer than 100 requests is their maximum (a p90 of fewer than 10), and the record's `serving_note` says so.
A trial's figure is the median over its timed runs (each run replays the same schedule).

Offered rate: the measured requests' own arrival rate, (n - 1) over their arrival span (the drawn schedule's, not the
nominal one); achieved rate: their completion rate, the offered rate over the least-squares slope of their completion
times on their arrival times (1 where completions keep pace with arrivals, whatever each request's own latency; the
ratio of the two rates where the server serves at a rate of its own, its queue growing), so a first or last request
that happens to wait longer moves it by its share, not by its whole wait (offline: (n - 1) over the completion span).
Achieved below offered by more than BEHIND is the server falling behind, said in `serving_note`. Output tokens/s: every request's tokens over the run's
span from the first arrival to the last token. Goodput: the achieved rate times the share of measured requests within
both SLO limits (tokengen/contract/slo.py); the SLO is met where its percentile of TTFT and of TPOT is within its limits
and the server keeps up: one that falls behind its arrivals has latencies that grow with the run's length (a longer
run would break them), so at that rate it meets no SLO, whatever this run's percentiles.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from tokengen.contract.slo import Slo

FIGURES = ("queue", "ttft", "tpot", "itl", "e2e")
"""Each request's latencies, named as the record's `request_<name>_<stat>_s` fields."""
STATS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
RESOLVED = 100
"""Requests a p99 needs to be more than their maximum."""
BEHIND = 0.05
"""Achieved below offered by more than this share: the server falls behind its arrivals."""


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile, linear between the nearest ranks; the maximum where fewer than 100 / (100 - q) samples
    cannot resolve it (a p99 of fewer than 100); None of no samples."""
    if not values:
        return None
    ordered = sorted(values)
    if q >= 100 or len(ordered) < 100 / (100 - q):
        return ordered[-1]
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class RequestTimes:
    """One run's measured requests, each figure a list in arrival order (TPOT: requests of two tokens or more)."""

    queue: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    good: int = 0  # measured requests within both SLO limits
    measured: int = 0
    offered_rate: float | None = None
    achieved_rate: float | None = None
    output_tokens_per_s: float | None = None


def measured_window(count: int, slots: int) -> range:
    """The requests the figures count: all but the first and the last `slots` (warm-up, drain), where more remain."""
    return range(slots, count - slots) if count > 2 * slots else range(count)


def token_times(run, lengths: list[int]) -> list[list[float]]:
    """Each request's tokens as the host held them: our server's forwards from the one that admitted it, or a peer's
    own timestamps (transformers' continuous batching: tokengen/engines/hf_generate_batch.py)."""
    if run.token_times_s:
        return [times[:length] for times, length in zip(run.token_times_s, lengths)]
    return [run.held_s[first : first + length] for first, length in zip(run.admitted_at, lengths)]


def request_times(run, lengths: list[int], slo: Slo) -> RequestTimes:
    """A Served run's per-request figures (tokengen/engines/request_server.py), `lengths` each request's tokens.
    The queueing delay is our server's alone (a peer's wait before its prefill is its own)."""
    out, done = RequestTimes(), []
    arrivals, held = run.arrivals_s, token_times(run, lengths)
    finished = [times[-1] for times in held]
    window = measured_window(len(lengths), run.slots)
    for r in window:
        length, arrival, tokens = len(held[r]), arrivals[r], held[r]
        ttft, e2e = tokens[0] - arrival, tokens[-1] - arrival
        tpot = (tokens[-1] - tokens[0]) / (length - 1) if length > 1 else None
        if not run.token_times_s:
            out.queue.append(run.entered_s[run.admitted_at[r]] - arrival)
        out.ttft.append(ttft)
        out.e2e.append(e2e)
        if tpot is not None:
            out.tpot.append(tpot)
        out.itl.extend(b - a for a, b in zip(tokens, tokens[1:]))
        out.good += slo.good(ttft, tpot)
        done.append(finished[r])
    out.measured = len(window)
    if out.measured > 1:
        arrived = [arrivals[r] for r in window]
        span, served = arrived[-1] - arrived[0], max(done) - min(done)
        out.offered_rate = (out.measured - 1) / span if span > 0 else None
        if out.offered_rate is not None:
            slope = statistics.covariance(arrived, done) / statistics.variance(arrived)
            out.achieved_rate = out.offered_rate / slope if slope > 0 else None
        elif served > 0:
            out.achieved_rate = (out.measured - 1) / served
    whole = max(finished) - arrivals[0] if finished else 0.0
    out.output_tokens_per_s = sum(lengths) / whole if whole > 0 else None
    return out


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def load_figures(runs: list, lengths: list[int], slo: Slo) -> dict:
    """The record's request-latency figures over the timed runs (each the median of the runs' own), the rates,
    goodput and the SLO verdict, the arrival clock's error, and a note of what the figures cannot say."""
    timed = [request_times(run, lengths, slo) for run in runs]
    fields: dict = {}
    for name in FIGURES:
        for stat, q in STATS.items():
            fields[f"request_{name}_{stat}_s"] = _median([percentile(getattr(t, name), q) for t in timed])
        fields[f"request_{name}_mean_s"] = _median(
            [statistics.fmean(v) if (v := getattr(t, name)) else None for t in timed]
        )
    measured = timed[-1].measured
    achieved = _median([t.achieved_rate for t in timed])
    offered = _median([t.offered_rate for t in timed])
    good_share = _median([t.good / t.measured for t in timed if t.measured])
    at_slo = [_median([percentile(getattr(t, name), slo.percentile) for t in timed]) for name in ("ttft", "tpot")]
    errors = [r - a for run in runs for r, a in zip(run.registered_s, run.arrivals_s)] if offered else []
    notes = []
    behind = bool(offered and achieved and achieved < (1 - BEHIND) * offered)
    if behind:
        notes.append(f"falling behind: achieved {achieved:.3g} req/s of {offered:.3g} offered")
    if measured < RESOLVED:
        notes.append(f"p99 of {measured} requests (< {RESOLVED}) is their maximum")
    return {
        **fields,
        "requests_measured": measured,
        "offered_rate_rps": offered,
        "achieved_rate_rps": achieved,
        "output_tokens_per_s": _median([t.output_tokens_per_s for t in timed]),
        "arrival_error_median_s": statistics.median(errors) if errors else None,
        "arrival_error_p99_s": percentile(errors, 99) if errors else None,
        "goodput_rps": achieved * good_share if achieved is not None and good_share is not None else None,
        "slo_met": at_slo[0] is not None and slo.good(at_slo[0], at_slo[1]) and not behind,
        "slo_ttft_s": slo.ttft_ms / 1e3,
        "slo_tpot_s": slo.tpot_ms / 1e3,
        "slo_percentile": float(slo.percentile),
        "serving_note": "; ".join(notes),
    }
