"""The peak-rate search: per variant and point, the highest arrival rate whose SLO percentile is met, by bisection.

A search is a point of the grid with its `request_rate` left to the search (sweep.peak_low_rps, peak_high_rps,
peak_precision: sweeps/planning/config.py). Its first round probes the low and the high rate; each later round
probes the geometric middle of the highest rate that met the SLO and the lowest that failed, until the failing one
is at most 1 + p times the met one: the peak lies between them, and the met one is the search's figure. A low rate
that fails (the peak is below the range) or a high one that meets (at or above it) ends the search at once, and
says so. The number of middles is bounded in advance, `middles(low, high, p)`, so a dry run prices the search at its
maximum: the path on which every middle fails, the slowest, since a trial at a lower rate spans a longer schedule.

A probe is a trial like any other: its key is its spec's (the rate in it), so a resumed search finds its finished
probes in the store and goes on from them; the driver's rounds are sweeps/execution/peak_rounds.py. Pure: no Ray,
no MLflow.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

from tokengen.contract.spec import SpecError

RATE_DIGITS = 4  # a probe's rate, in significant digits: a key that reads as the rate it is


def rounded(rate: float) -> float:
    return float(f"{rate:.{RATE_DIGITS}g}")


def middles(low: float, high: float, precision: float) -> int:
    """Bisections that bring high/low to 1 + precision at most: the bound on a search's probes, less its two ends."""
    return max(0, math.ceil(math.log2(math.log(high / low) / math.log1p(precision))))


def search_problem(low, high, precision) -> str | None:
    """The first bad peak-search setting, in one line naming the fix, or None (both rates unset: no search)."""
    if low is None and high is None:
        return None
    if low is None or high is None:
        return "sweep.peak_low_rps and sweep.peak_high_rps go together: set both (e.g. 5 and 60) or neither"
    for name, value in (("peak_low_rps", low), ("peak_high_rps", high), ("peak_precision", precision)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            return f"sweep.{name}={value!r}: give a number above 0"
    if not low < high:
        return f"sweep.peak_low_rps={low!r} is not below sweep.peak_high_rps={high!r}: the search needs a range"
    if precision >= 1:
        return f"sweep.peak_precision={precision!r}: give a fraction below 1, e.g. 0.1 (the peak within 10%)"
    return None


def search_id(key: str) -> str:
    """The search's id from its first probe's key: every probe of it carries it (the tag peak_search)."""
    return hashlib.sha256(f"peak:{key}".encode()).hexdigest()[:16]


@dataclass
class Search:
    """One search: its probes' rates and verdicts so far, and where the bisection stands."""

    id: str
    low: float
    high: float
    precision: float
    verdicts: dict[float, bool] = field(default_factory=dict)  # rate -> met the SLO
    stopped: str = ""  # why it ended early: a probe that failed to run

    @property
    def bound(self) -> int:
        return 2 + middles(self.low, self.high, self.precision)

    @property
    def met(self) -> float | None:
        """The highest rate probed that met the SLO, below every rate that failed."""
        failing = self.failing or math.inf
        good = [rate for rate, ok in self.verdicts.items() if ok and rate < failing]
        return max(good, default=None)

    @property
    def failing(self) -> float | None:
        """The lowest rate probed that failed the SLO."""
        return min((rate for rate, ok in self.verdicts.items() if not ok), default=None)

    def next_rates(self) -> list[float]:
        """The rates this search probes next: both ends first, then one middle a round; [] once it has ended."""
        if self.stopped:
            return []
        ends = [rate for rate in (self.low, self.high) if rate not in self.verdicts]
        if ends:
            return ends
        met, failing = self.met, self.failing
        if met is None or failing is None or len(self.verdicts) >= self.bound or failing <= met * (1 + self.precision):
            return []
        middle = rounded(math.sqrt(met * failing))
        return [] if middle in self.verdicts or not met < middle < failing else [middle]

    def outcome(self) -> str:
        """The search's figure in words: the peak's range, or why it has none."""
        met, failing = self.met, self.failing
        if self.stopped:
            return f"stopped: {self.stopped}"
        if met is None and failing is not None:
            return f"below the range: {failing:g} rps failed the SLO"
        if failing is None and met is not None:
            return f"at or above the range: {met:g} rps met the SLO"
        if met is None or failing is None:
            return "not run"
        reached = failing / met - 1
        return f"{met:g} rps (the SLO fails by {failing:g} rps: within {reached:.1%})"


@dataclass(frozen=True)
class SearchSettings:
    low: float
    high: float
    precision: float

    @classmethod
    def of(cls, sweep) -> SearchSettings | None:
        """The sweep's search settings, or None where it runs no search."""
        if sweep.peak_low_rps is None:
            return None
        return cls(float(sweep.peak_low_rps), float(sweep.peak_high_rps), float(sweep.peak_precision))


def probe(trial, rate: float, search: str, number: int):
    """The planned trial at `rate`, marked as the search's probe `number` (1 for the first)."""
    return replace(trial, spec=replace(trial.spec, request_rate=rounded(rate)), search=search, probe=number)


def search_points(trials: list, given_rates: list, settings: SearchSettings) -> list:
    """The grid's trials as the search's first round (each point at its low and high rate). SpecError in one line
    where a point is not one a rate can be searched for."""
    if given_rates:
        raise SpecError(
            "the peak search sets request_rate itself: drop grid.request_rate (and trial.request_rate), and give "
            "the range as sweep.peak_low_rps and sweep.peak_high_rps"
        )
    first = []
    for trial in trials:
        spec = trial.spec
        if not spec.requests or spec.request_trace:
            raise SpecError(
                f"a peak search needs request workloads with drawn arrivals: trial {spec.variant} has "
                f"requests={spec.requests}{' and a request_trace' if spec.request_trace else ''}: set trial.requests "
                "(e.g. 116) and no request_trace"
            )
        seed = probe(trial, settings.low, "", 1)
        ident = search_id(seed.key)
        first += [replace(seed, search=ident), probe(trial, settings.high, ident, 2)]
    return first


def slowest_path(first: list, settings: SearchSettings) -> list:
    """The probes a search may run after its first round, on its most expensive path (every middle fails, so each
    is lower than the last): what a dry run prices, beside the first round, as the search's maximum."""
    later = []
    for seed in (t for t in first if t.probe == 1):
        search = Search(seed.search, settings.low, settings.high, settings.precision, {settings.low: True})
        search.verdicts[settings.high] = False
        rates = search.next_rates()
        while rates:
            later.append(probe(seed, rates[0], seed.search, len(search.verdicts) + 1))
            search.verdicts[rates[0]] = False
            rates = search.next_rates()
    return later
