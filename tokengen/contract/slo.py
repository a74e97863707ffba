"""A service level objective for request workloads, and goodput under it.

An SLO is a limit on the time to first token and one on the time per output token, each held at a percentile of
the requests (MLPerf's Server scenario holds llama3.1-8b's p99 TTFT to 2000 ms and p99 TPOT to 100 ms: the defaults
here). A trial meets it where its chosen percentile of both is within its limit and it keeps pace with its arrivals
(tokengen/measure/load_figures.py: a server falling behind meets no SLO at that rate); its goodput is the requests per
second that met both limits themselves (vLLM's `--goodput`): the achieved rate times their share. The sweep's
settings (`sweep.slo_ttft_ms`, `sweep.slo_tpot_ms`, `sweep.slo_percentile`, sweeps/planning/config.py) reach the
trial process as SLO_ENV, and its record carries the SLO it was judged by. Torch-free: the planner checks the
settings, the report reads the verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SLO_ENV = "TOKENGEN_SLO"
"""A trial process's environment: the sweep's SLO as `TTFT_MS,TPOT_MS,PERCENTILE`."""


@dataclass(frozen=True)
class Slo:
    ttft_ms: float = 2000.0  # MLPerf llama3.1-8b Server
    tpot_ms: float = 100.0
    percentile: float = 99.0

    def to_env(self) -> str:
        return f"{self.ttft_ms!r},{self.tpot_ms!r},{self.percentile!r}"

    @classmethod
    def from_env(cls, text: str | None) -> Slo:
        """The SLO a trial process was handed, or the defaults where it was handed none (`python -m tokengen`)."""
        if not text:
            return cls()
        ttft, tpot, percentile = (float(part) for part in text.split(","))
        return cls(ttft, tpot, percentile)

    def good(self, ttft_s: float, tpot_s: float | None) -> bool:
        """One request within both limits (a one-token request has no TPOT: its TTFT decides)."""
        return ttft_s * 1e3 <= self.ttft_ms and (tpot_s is None or tpot_s * 1e3 <= self.tpot_ms)


def slo_problem(ttft_ms, tpot_ms, percentile) -> str | None:
    """The first bad SLO setting, in one line naming the fix, or None."""
    for name, value in (("slo_ttft_ms", ttft_ms), ("slo_tpot_ms", tpot_ms)):
        if not _number(value) or not value > 0:
            return f"sweep.{name}={value!r}: give a limit in milliseconds above 0, e.g. sweep.{name}=2000"
    if not _number(percentile) or not 0 < percentile <= 100:
        return (
            f"sweep.slo_percentile={percentile!r}: give the percentile of requests held to the limits, in (0, 100], "
            "e.g. sweep.slo_percentile=99"
        )
    return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
