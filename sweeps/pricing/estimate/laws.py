"""The fit: per family, a decode step's mean time as a law of batch, prompt and run length; and `Span`, a
value with a low and a high that each part of an estimate carries (lows add to lows, highs to highs: the
parts' errors moving together, a wide range that keeps a scheduler from under-booking a worker).

A run of S steps (L per batch) with B rows and a P-token prompt has mean context P + (L-1)/2, so
  cached     t_step = a + b*B + c*B*P/L + d*B*(P + (L-1)/2)   (c: prefill, spread over the run;
                                                             d: reading a cache that grows)
  recompute  t_step = a + e*B*(P + (L-1)/2)                   (the whole prefix, every step)
and runtime = S * t_step: linear in S with a cache, quadratic in S without one. The fit minimises
relative residuals of runtime/steps (runs span orders of magnitude), robustly (soft-L1: one slow
run does not tilt the law), with non-negative coefficients (none of these terms can save time).
A term the history cannot tell apart from the others (one batch size, one prompt length) is left
out rather than guessed; a family whose required terms cannot be fitted gets no law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls


class Span(NamedTuple):
    mid: float
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> "Span":
        return cls(value, value, value)

    @classmethod
    def factor(cls, value: float, factor: float) -> "Span":
        """value / factor .. value x factor: a multiplicative range, for quantities known to a ratio."""
        return cls(value, value / factor, value * factor)

    @classmethod
    def log_sigma(cls, value: float, sigma: float, z: float = 2.0) -> "Span":
        """About a 95% range for a value whose log-error has robust spread `sigma`."""
        return cls.factor(value, math.exp(z * sigma))

    def __add__(self, other: "Span") -> "Span":  # type: ignore[override]
        return Span(self.mid + other.mid, self.low + other.low, self.high + other.high)

    def times(self, k: float) -> "Span":
        return Span(self.mid * k, self.low * k, self.high * k)

    def times_span(self, other: "Span") -> "Span":
        """Product of two non-negative spans (e.g. a run's time x a number of runs)."""
        return Span(self.mid * other.mid, self.low * other.low, self.high * other.high)


ZERO = Span(0.0, 0.0, 0.0)


TERMS = {"cached": ("const", "batch", "prefill", "position"), "recompute": ("const", "batch_context")}
REQUIRED = {"cached": 2, "recompute": 2}  # the leading terms a law cannot do without
MAX_CONDITION = 1e3  # of the column-normalised design: above it, a term is not identifiable
MIN_SIGMA = 0.02  # no fit is trusted to better than ~2% (log-spread)
FEW_ROWS_SIGMA = 0.25  # a law fitted with no spare rows
SEEN = ("batch_size", "prompt_len", "steps")


def features(batch, prompt, per_batch, terms) -> np.ndarray:
    """The design matrix: one column per term, one row per (batch, prompt, steps per batch)."""
    batch, prompt, per_batch = (np.asarray(v, dtype=float) for v in (batch, prompt, per_batch))
    context = batch * (prompt + (per_batch - 1) / 2)
    columns = {
        "const": np.ones_like(batch),
        "batch": batch,
        "prefill": batch * prompt / per_batch,
        "position": context,
        "batch_context": context,
    }
    return np.column_stack([columns[t] for t in terms])


def _condition(x: np.ndarray) -> float:
    norms = np.linalg.norm(x, axis=0)
    if np.any(norms == 0):
        return math.inf
    return float(np.linalg.cond(x / norms))


def _robust_sigma(log_residuals: np.ndarray, terms: int) -> float:
    n = len(log_residuals)
    if n <= terms:
        return FEW_ROWS_SIGMA
    mad = 1.4826 * float(np.median(np.abs(log_residuals - np.median(log_residuals))))
    return max(mad * math.sqrt(n / (n - terms)), MIN_SIGMA)


@dataclass(frozen=True)
class StepLaw:
    law: str  # cached | recompute
    terms: tuple
    coef: tuple
    sigma: float  # robust spread of log(measured / fitted) per run
    rows: int
    seen: dict  # batch_size, prompt_len, steps: (lowest, highest) the fit saw

    def step_s(self, batch: float, prompt: float, per_batch: float) -> float:
        """Mean seconds per decode step."""
        return float(features([batch], [prompt], [per_batch], self.terms)[0] @ np.asarray(self.coef))

    def run(self, batch: float, prompt: float, steps: float, batches: int = 1) -> Span:
        """One run's seconds, its range widened the further the trial lies outside what was seen."""
        seconds = steps * self.step_s(batch, prompt, steps / max(batches, 1))
        outside = sum(
            max(0.0, math.log(v / hi), math.log(lo / v))
            for v, (lo, hi) in zip((batch, prompt, steps), (self.seen[k] for k in SEEN))
            if v > 0 and lo > 0
        )
        return Span.log_sigma(seconds, self.sigma * (1.0 + outside))

    def coefficients(self) -> dict:
        return dict(zip(self.terms, self.coef))


def fit_law(rows: pd.DataFrame, law: str, batches: pd.Series | None = None) -> StepLaw | None:
    """The law for one family's rows (batch_size, prompt_len, steps, steady_run_s), or None."""
    rows = rows[(rows["steps"] > 0) & (rows["steady_run_s"] > 0)]
    if len(rows) < REQUIRED[law]:
        return None
    per_batch = rows["steps"] / (batches.loc[rows.index] if batches is not None else 1)
    batch, prompt = rows["batch_size"].astype(float), rows["prompt_len"].astype(float).clip(lower=1)
    y = (rows["steady_run_s"] / rows["steps"]).to_numpy(float)
    terms = list(TERMS[law])
    while True:
        x = features(batch, prompt, per_batch, terms)
        if len(rows) >= len(terms) and _condition(x) <= MAX_CONDITION:
            break
        if len(terms) == REQUIRED[law]:
            return None
        terms.pop()
    scaled = x / y[:, None]  # relative residuals: scaled @ coef - 1
    start, _ = nnls(scaled, np.ones(len(y)))
    first = scaled @ start - 1
    spread = max(1.4826 * float(np.median(np.abs(first))), 0.005)
    result = least_squares(
        lambda c: scaled @ c - 1, start, bounds=(0, np.inf), loss="soft_l1", f_scale=spread, x_scale="jac"
    )
    coef = result.x
    fitted = x @ coef
    log_residuals = np.log(y / np.where(fitted > 0, fitted, np.nan))
    sigma = _robust_sigma(log_residuals[np.isfinite(log_residuals)], len(terms))
    seen = {k: (float(rows[k].min()), float(rows[k].max())) for k in SEEN}
    seen["prompt_len"] = (max(seen["prompt_len"][0], 1.0), max(seen["prompt_len"][1], 1.0))
    return StepLaw(law, tuple(terms), tuple(float(c) for c in coef), sigma, len(rows), seen)


def fit_families(frame: pd.DataFrame, batches: pd.Series | None = None) -> dict:
    """family -> StepLaw (or None where the history cannot fit one)."""
    if frame.empty:
        return {}
    usable = frame[frame["steady_run_s"].notna() & frame["steps"].notna()]
    return {key: fit_law(rows, rows["law"].iloc[0], batches) for key, rows in usable.groupby("family", sort=False)}
