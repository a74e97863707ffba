"""The fit: per family, a decode step's mean time as a law of batch, prompt and run length.

A run of S steps (L per batch) with B rows and a P-token prompt has mean context P + (L-1)/2, so
  cached     t_step = a + b*B + c*B*P/L + d*B*(P + (L-1)/2)   (c: prefill spread over the run; d: a growing cache)
  recompute  t_step = a + e*B*(P + (L-1)/2)                   (the whole prefix, every step)
The fit minimises relative residuals (runs span orders of magnitude), robustly (soft-L1: one slow run does not
tilt the law), with non-negative coefficients. A term the history cannot tell apart from the others is left out
rather than guessed; a family whose required terms cannot be fitted gets no law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sweeps.pricing.estimate.span import Span

TERMS = {"cached": ("const", "batch", "prefill", "position"), "recompute": ("const", "batch_context")}
REQUIRED_TERMS = 2  # the leading terms a law cannot do without
MAX_CONDITION = 1e3  # of the column-normalised design: above it, a term is not identifiable
MIN_SIGMA, FEW_ROWS_SIGMA = 0.02, 0.25  # no fit is trusted to better than ~2%; one with no spare rows to ~25%
SEEN = ("batch_size", "prompt_len", "steps")


def features(batch, prompt, per_batch, terms) -> np.ndarray:
    """The design matrix: one column per term, one row per (batch, prompt, steps per batch)."""
    batch, prompt, per_batch = (np.asarray(v, dtype=float) for v in (batch, prompt, per_batch))
    context = batch * (prompt + (per_batch - 1) / 2)
    columns = {"const": np.ones_like(batch), "batch": batch, "prefill": batch * prompt / per_batch}
    return np.column_stack([columns.get(t, context) for t in terms])  # position, batch_context


def _condition(x: np.ndarray) -> float:
    norms = np.linalg.norm(x, axis=0)
    return math.inf if np.any(norms == 0) else float(np.linalg.cond(x / norms))


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
    seen: dict  # batch_size, prompt_len, steps: (lowest, highest) the fit saw

    def run(self, batch: float, prompt: float, steps: float, batches: int = 1) -> Span:
        """One run's seconds, about a 95% range widened the further the trial lies outside what was seen."""
        step_s = float(features([batch], [prompt], [steps / max(batches, 1)], self.terms)[0] @ np.asarray(self.coef))
        outside = sum(
            max(0.0, math.log(v / hi), math.log(lo / v))
            for v, (lo, hi) in zip((batch, prompt, steps), (self.seen[k] for k in SEEN))
            if v > 0 and lo > 0
        )
        return Span.factor(steps * step_s, math.exp(2.0 * (self.sigma * (1.0 + outside))))

    def coefficients(self) -> dict:
        return dict(zip(self.terms, self.coef))


def fit_law(rows: pd.DataFrame, law: str, batches: pd.Series) -> StepLaw | None:
    """The law for one family's rows (batch_size, prompt_len, steps, steady_run_s), or None."""
    from scipy.optimize import least_squares, nnls  # here: a driver that fits no law never imports it (1 s)

    rows = rows[(rows["steps"] > 0) & (rows["steady_run_s"] > 0)]
    if len(rows) < REQUIRED_TERMS:
        return None
    per_batch = rows["steps"] / batches.loc[rows.index]
    batch, prompt = rows["batch_size"].astype(float), rows["prompt_len"].astype(float).clip(lower=1)
    y = (rows["steady_run_s"] / rows["steps"]).to_numpy(float)
    terms = list(TERMS[law])
    while True:
        x = features(batch, prompt, per_batch, terms)
        if len(rows) >= len(terms) and _condition(x) <= MAX_CONDITION:
            break
        if len(terms) == REQUIRED_TERMS:
            return None
        terms.pop()
    scaled = x / y[:, None]  # relative residuals: scaled @ coef - 1
    start, _ = nnls(scaled, np.ones(len(y)))
    spread = max(1.4826 * float(np.median(np.abs(scaled @ start - 1))), 0.005)
    coef = least_squares(
        lambda c: scaled @ c - 1, start, bounds=(0, np.inf), loss="soft_l1", f_scale=spread, x_scale="jac"
    ).x
    fitted = x @ coef
    log_residuals = np.log(y / np.where(fitted > 0, fitted, np.nan))
    sigma = _robust_sigma(log_residuals[np.isfinite(log_residuals)], len(terms))
    seen = {k: (float(v.min()), float(v.max())) for k, v in zip(SEEN, (batch, prompt, rows["steps"]))}
    return StepLaw(law, tuple(terms), tuple(float(c) for c in coef), sigma, seen)


def fit_families(frame: pd.DataFrame) -> dict:
    """family -> StepLaw (or None where the history cannot fit one); `frame` has CostModel's batches column."""
    usable = frame[frame["steady_run_s"].notna() & frame["steps"].notna()]
    return {
        key: fit_law(rows, rows["law"].iloc[0], frame["batches"]) for key, rows in usable.groupby("family", sort=False)
    }
