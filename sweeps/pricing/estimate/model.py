"""The cost model fitted to a history: each part of a trial's cost, from the most specific evidence.

Each part looks for evidence from the narrowest group of past runs to the widest, then falls back to
the prior. The prior is never used raw when the history has anything to say: every run records how
far off the prior was for it (measured / prior per step), and a trial no fit covers (a new model, a
new GPU) gets the prior times the ratio of the nearest runs that have one.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

import sweeps.pricing.estimate.priors as priors
from sweeps.pricing.estimate.hardware import CpuSpeed, gpu_kind
from sweeps.pricing.estimate.history import OUTSIDE_CHILD_S, IdentityIndex, prepare
from sweeps.pricing.estimate.laws import Span, fit_families
from sweeps.pricing.estimate.trials import AUTO, batches, expected_steps, family, fixed_runs, law, number, text
from tokengen.contract.declarations import KNOBS, knobs_where

SINGLE_SAMPLE_FACTOR = 1.3  # one past measurement of a part: x/1.3 .. x1.3
FEW_RATIOS_FACTOR = 2.0  # a prior rescaled by fewer than 3 runs' ratios
MIN_RATIO_FACTOR = 1.5  # a rescaled prior is never trusted to better than this
RATIO_SAMPLES = 3
PRIOR_RUN_FIELDS = (
    "model",
    "device",
    "dtype",
    "matmul_precision",
    "batch_size",
    "prompt_len",
    "max_seqlen",
    "requests",
    *KNOBS,
)
"""What priors.prior_run reads of a trial: two trials that agree on these get the same prior run."""
GRAPH_KNOBS = knobs_where(graph=True)
"""The knobs whose values change a compiled graph, so a compile measured for one value says little of another."""


def spread(values: pd.Series) -> Span:
    """Median, with the 10th..90th percentile as the range (one value: x/1.3..x1.3)."""
    values = values.dropna()
    if len(values) == 1:
        return Span.factor(float(values.iloc[0]), SINGLE_SAMPLE_FACTOR)
    return Span(float(values.median()), float(values.quantile(0.1)), float(values.quantile(0.9)))


def _ratio_span(value: float, ratios: pd.Series) -> Span:
    """A prior's value rescaled by the median of past runs' ratios, ranged by their log-spread."""
    logs = np.log(ratios.to_numpy(float))
    scaled = value * math.exp(float(np.median(logs)))
    if len(logs) < RATIO_SAMPLES:
        return Span.factor(scaled, FEW_RATIOS_FACTOR)
    mad = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    return Span.factor(scaled, max(math.exp(2 * mad), MIN_RATIO_FACTOR))


@dataclass
class CostModel:
    frame: pd.DataFrame  # history.prepare()'s rows, with prior ratios
    laws: dict  # family -> StepLaw | None
    cpu: CpuSpeed | None = None  # None: calibrate this host when a CPU trial needs the prior
    # look-ups of the frame, kept for the next trial: a sweep prices thousands against one fit
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def fit(cls, history: pd.DataFrame | None, cpu: CpuSpeed | None = None) -> "CostModel":
        frame = prepare(history)
        if frame.empty:
            return cls(frame, {}, cpu)
        records = frame.to_dict("records")
        frame["batches"] = [batches(r) for r in records]
        frame["expected_steps"] = [expected_steps(r) for r in records]
        gpus = [k if k not in ("cpu", "cuda") else None for k in frame["device_kind"]]
        per_step_prior = [
            priors.prior_run(r, g, cpu).mid / e for r, g, e in zip(records, gpus, frame["expected_steps"])
        ]
        frame["run_ratio"] = frame["steady_run_s"] / frame["steps"] / per_step_prior
        frame["compile_ratio"] = frame["compile_s"] / [priors.prior_compile(r).mid for r in records]
        frame["build_ratio"] = frame["build_s"] / [priors.prior_build(r).mid for r in records]
        return cls(frame, fit_families(frame, frame["batches"]), cpu)

    # -- where the trial runs ---------------------------------------------------------------
    def device_kind(self, trial: Mapping) -> str:
        """'cpu', the pinned GPU, or for an unpinned CUDA trial the GPU the history ran this model
        on most (else any model), else 'cuda' (the prior then assumes its default GPU)."""
        if text(trial, "device") != "cuda":
            return "cpu"
        pinned = gpu_kind(trial.get("accelerator_type"))
        if pinned or self.frame.empty:
            return pinned or "cuda"
        gpus = self.frame[self.frame["device_kind"] != "cpu"]
        for rows in (gpus[gpus["model"] == text(trial, "model")], gpus):
            if len(rows):
                return Counter(rows["device_kind"]).most_common(1)[0][0]
        return "cuda"

    def identical(self, trial: Mapping) -> tuple[pd.DataFrame, pd.DataFrame]:
        """history.identical against this model's frame, through an index built once."""
        index = self._memo.get("identical")
        if index is None:
            index = self._memo["identical"] = IdentityIndex(self.frame)
        return index(trial)

    def _rows(self, column: str, **match) -> pd.Series:
        """`column` of the rows matching every field given, nulls dropped (the same Series for the same
        question: callers read it, never change it)."""
        memo = ("rows", column, tuple(sorted((k, str(v)) for k, v in match.items())))
        if memo in self._memo:
            return self._memo[memo]
        if self.frame.empty or column not in self.frame or any(name not in self.frame for name in match):
            found = pd.Series(dtype=float)
        else:
            keep = pd.Series(True, index=self.frame.index)
            for name, value in match.items():
                keep &= self.frame[name].astype(str) == str(value)
            found = self.frame.loc[keep, column].dropna()
        self._memo[memo] = found
        return found

    def _first(self, column: str, chain: list[dict]) -> pd.Series:
        memo = ("first", column, tuple(tuple((k, str(v)) for k, v in match.items()) for match in chain))
        if memo not in self._memo:
            found = self._memo.setdefault("empty", pd.Series(dtype=float))
            for match in chain:
                values = self._rows(column, **match)
                if len(values):
                    found = values
                    break
            self._memo[memo] = found
        return self._memo[memo]

    # -- the parts ----------------------------------------------------------------------------
    def steps(self, trial: Mapping) -> float:
        """Steps of one run: max_seqlen per batch, times how early this family's rows ended before."""
        memo = ("steps", family(trial, self.device_kind(trial)), text(trial, "stop"))
        if memo not in self._memo:
            self._memo[memo] = None
            if not self.frame.empty:
                ratio = self.frame["steps"] / self.frame["expected_steps"]
                keep = (self.frame["family"] == memo[1]) & (self.frame["stop"].astype(str) == memo[2])
                if keep.any():
                    self._memo[memo] = float(ratio[keep].median())
        ratio = self._memo[memo]
        return float(expected_steps(trial)) if ratio is None else expected_steps(trial) * ratio

    def run(self, trial: Mapping) -> tuple[Span, str]:
        """One plain run's seconds and the basis: the family's law, its prior ratio, or the prior."""
        kind = self.device_kind(trial)
        fam, steps = family(trial, kind), self.steps(trial)
        law_fit = self.laws.get(fam)
        if law_fit is not None:
            return law_fit.run(
                number(trial, "batch_size"), max(number(trial, "prompt_len"), 1), steps, batches(trial)
            ), "fit"
        gpu = None if kind in ("cpu", "cuda") else kind
        memo = ("prior_run", gpu, *(text(trial, f) for f in PRIOR_RUN_FIELDS))
        if memo not in self._memo:
            self._memo[memo] = priors.prior_run(trial, gpu, self.cpu)
        raw = self._memo[memo]
        per_step = raw.mid / expected_steps(trial) * steps
        family_ratios = self._rows("run_ratio", family=fam)
        if len(family_ratios):
            return _ratio_span(per_step, family_ratios), "fit"
        ratios = self._first(
            "run_ratio",
            [
                dict(device_kind=kind, law=law(trial), compile=text(trial, "compile")),
                dict(model=text(trial, "model"), law=law(trial), compile=text(trial, "compile")),
                dict(device_kind=kind),
                dict(device=text(trial, "device")),
            ],
        )
        if len(ratios):
            return _ratio_span(per_step, ratios), "prior"
        return Span(per_step, raw.low * per_step / raw.mid, raw.high * per_step / raw.mid), "prior"

    def _memoized(self, part: str, trial: Mapping, fields: tuple, compute) -> Span:
        """A part that depends on a few of the trial's fields only: computed once per their values."""
        memo = (part, self.device_kind(trial), *(text(trial, f) for f in fields))
        if memo not in self._memo:
            self._memo[memo] = compute(trial)
        return self._memo[memo]

    def compile(self, trial: Mapping) -> Span:
        """The first run's extra seconds (compilation, or start-up with compile=off)."""
        return self._memoized("compile", trial, ("device", "model", *GRAPH_KNOBS), self._compile)

    def _compile(self, trial: Mapping) -> Span:
        kind, mode, model = self.device_kind(trial), text(trial, "compile"), text(trial, "model")
        measured = self._first(
            "compile_s",
            [
                dict(model=model, device_kind=kind, compile_warm="no", **{k: text(trial, k) for k in GRAPH_KNOBS}),
                dict(model=model, device_kind=kind, compile=mode, compile_warm="no"),
            ],
        )
        if len(measured):
            return spread(measured)
        ratios = self._first("compile_ratio", [dict(device_kind=kind, compile=mode), dict(compile=mode)])
        ratios = ratios[ratios > 0]
        base = priors.prior_compile(trial)
        return _ratio_span(base.mid, ratios) if len(ratios) else base

    def warm_compile(self, trial: Mapping) -> tuple[Span, str]:
        """A twin's first-run extra once its graphs were compiled by another trial of the sweep (loaded from the
        shared cache, traced again): the history's warm compiles of this model and mode on this device kind,
        else of this mode on this device kind, else its cold compile times the measured prior share."""
        return self._memoized("warm_compile", trial, ("device", "model", *GRAPH_KNOBS), self._warm_compile)

    def _warm_compile(self, trial: Mapping) -> tuple[Span, str]:
        kind, mode, model = self.device_kind(trial), text(trial, "compile"), text(trial, "model")
        measured = self._first(
            "compile_s",
            [
                dict(model=model, device_kind=kind, compile=mode, compile_warm="yes"),
                dict(device_kind=kind, compile=mode, compile_warm="yes"),
            ],
        )
        if len(measured):
            return spread(measured), "history"
        cold = self.compile(trial)
        return Span(cold.mid * priors.WARM_COMPILE_SHARE, cold.low * priors.WARM_COMPILE_SHARE, cold.mid), "prior"

    def build(self, trial: Mapping) -> Span:
        """Building the model inside the trial process."""
        return self._memoized("build", trial, ("device", "model", "dtype"), self._build)

    def _build(self, trial: Mapping) -> Span:
        kind, model = self.device_kind(trial), text(trial, "model")
        measured = self._first(
            "build_s",
            [dict(model=model, device_kind=kind, dtype=text(trial, "dtype")), dict(model=model, device_kind=kind)],
        )
        if len(measured):
            return spread(measured)
        ratios = self._first("build_ratio", [dict(device_kind=kind), dict(device=text(trial, "device"))])
        ratios = ratios[ratios > 0]
        base = priors.prior_build(trial)
        return _ratio_span(base.mid, ratios) if len(ratios) else base

    def harness(self, trial: Mapping) -> Span:
        """A worker's per-trial cost around the trial: the process's start-up and exit on a warm worker
        (in_child_s), plus the Ray task around the process (in_task_s, else OUTSIDE_CHILD_S)."""
        return self._memoized("harness", trial, (), self._harness)

    def _harness(self, trial: Mapping) -> Span:
        measured = self._first("in_child_s", [dict(device_kind=self.device_kind(trial)), {}])
        if len(measured):
            task = self._first("in_task_s", [dict(device_kind=self.device_kind(trial)), {}])
            return spread(measured) + (spread(task) if len(task) else Span.factor(OUTSIDE_CHILD_S, 1.5))
        return priors.prior_harness()

    def cold_start(self, trial: Mapping) -> Span:
        """A worker's start-up, paid by the first trial it runs (history.cold_starts): as measured on this
        device kind, else anywhere, else the prior."""
        return self._memoized("cold_start", trial, (), self._cold_start)

    def _cold_start(self, trial: Mapping) -> Span:
        chain = [dict(device_kind=self.device_kind(trial)), {}]
        measured = self._first("cold_start_s", chain)
        measured = measured[measured > 0]
        return spread(measured) if len(measured) else priors.prior_cold_start(trial)

    def timed_runs(self, trial: Mapping) -> Span:
        """Timed runs: as given, or for runs=auto what this family's auto runs made (else min..max)."""
        runs = fixed_runs(trial)
        if runs is not None:
            return Span.exact(float(runs))
        low, high = float(number(trial, "min_runs")), float(number(trial, "max_runs"))
        made = self._rows("timed_runs_done", family=family(trial, self.device_kind(trial)), runs=AUTO)
        if len(made):
            return Span(float(made.median()), min(low, float(made.min())), max(high, float(made.max())))
        return Span((low + high) / 2, low, high)
