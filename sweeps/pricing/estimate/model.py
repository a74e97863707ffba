"""The cost model fitted to a history: each part of a trial's cost from the narrowest group of past runs with
evidence, else the prior times the measured/prior ratio of the nearest runs (a new model, a new GPU)."""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

import sweeps.pricing.estimate.priors as priors
from sweeps.pricing.estimate.hardware import CpuSpeed, gpu_kind
from sweeps.pricing.estimate.laws import fit_families
from sweeps.pricing.estimate.observed import OUTSIDE_CHILD_S, prepare
from sweeps.pricing.estimate.span import Span
from sweeps.pricing.estimate.trials import AUTO, batches, expected_steps, family, get, is_auto, law, number, text
from tokengen.contract.declarations import KNOBS, knobs_where
from tokengen.contract.names import TRIAL_KEY

SINGLE_SAMPLE_FACTOR = 1.3  # one past measurement of a part: x/1.3 .. x1.3
FEW_RATIOS_FACTOR, RATIO_SAMPLES = 2.0, 3  # a prior rescaled by fewer than 3 runs' ratios: x/2 .. x2
MIN_RATIO_FACTOR = 1.5  # a rescaled prior is never trusted to better than this
PRIOR_RUN_FIELDS = (*"model device dtype matmul_precision batch_size prompt_len max_seqlen requests".split(), *KNOBS)
"""What priors.prior_run reads of a trial: two trials that agree on these get the same prior run."""
GRAPH_KNOBS = knobs_where(graph=True)  # a compile measured for one of their values says little of another
EMPTY = pd.Series(dtype=float)


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


def kept_by(*fields: str):
    """A part that depends on the device kind and these fields only, computed once per their values."""

    def wrap(part):
        @functools.wraps(part)
        def kept(self: "CostModel", trial: Mapping):
            memo = (part.__name__, self.device_kind(trial), *(text(trial, f) for f in fields))
            return self._kept(memo, lambda: part(self, trial))

        return kept

    return wrap


@dataclass
class CostModel:
    frame: pd.DataFrame  # history.prepare()'s rows, with prior ratios
    laws: dict  # family -> StepLaw | None
    cpu: CpuSpeed | None = None  # None: calibrate this host when a CPU trial needs the prior
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # answers kept between trials

    @classmethod
    def fit(cls, history: pd.DataFrame | None, cpu: CpuSpeed | None = None) -> "CostModel":
        frame = prepare(history)
        if frame.empty:
            return cls(frame, {}, cpu)
        records = frame.to_dict("records")
        frame["batches"] = [batches(r) for r in records]
        frame["expected_steps"] = [expected_steps(r) for r in records]
        gpus = [k if k not in ("cpu", "cuda") else None for k in frame["device_kind"]]
        prior_step = [priors.prior_run(r, g, cpu).mid / e for r, g, e in zip(records, gpus, frame["expected_steps"])]
        frame["run_ratio"] = frame["steady_run_s"] / frame["steps"] / prior_step
        frame["compile_ratio"] = frame["compile_s"] / [priors.prior_compile(r).mid for r in records]
        frame["build_ratio"] = frame["build_s"] / [priors.prior_build(r).mid for r in records]
        frame["step_ratio"] = frame["steps"] / frame["expected_steps"]
        return cls(frame, fit_families(frame), cpu)

    def _kept(self, memo: tuple, compute):
        if memo not in self._memo:
            self._memo[memo] = compute()
        return self._memo[memo]

    def device_kind(self, trial: Mapping) -> str:
        """'cpu', the pinned GPU, or for an unpinned CUDA trial the GPU the history ran this model on most (else any
        model), else 'cuda' (the prior then assumes its default GPU)."""
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

    def measured(self, trial: Mapping) -> pd.DataFrame:
        """The history's runs of this very trial (its key)."""
        keys = self._kept(("keys",), lambda: self.frame.groupby(TRIAL_KEY).indices if TRIAL_KEY in self.frame else {})
        found = keys.get(trial.get("key"))
        if found is None or not len(found):  # most trials of a grid: kept, as an empty frame is not cheap to make
            return self._kept(("no rows",), lambda: self.frame.iloc[[]])
        return self.frame.iloc[found]

    def _rows(self, column: str, **match) -> pd.Series:
        """`column` of the rows matching every field given, nulls dropped (kept: callers never change it)."""

        def find() -> pd.Series:
            if self.frame.empty or column not in self.frame or any(name not in self.frame for name in match):
                return EMPTY
            keep = pd.Series(True, index=self.frame.index)
            for name, value in match.items():
                keep &= self.frame[name].astype(str) == str(value)
            return self.frame.loc[keep, column].dropna()

        return self._kept(("rows", column, *sorted((k, str(v)) for k, v in match.items())), find)

    def _first(self, column: str, *chain: dict) -> pd.Series:
        """`column` of the first group in `chain` (narrowest first) that has any."""
        return next((found for found in (self._rows(column, **match) for match in chain) if len(found)), EMPTY)

    def _part(self, column: str, chain: tuple, prior: Span, ratio: str, ratio_chain: tuple) -> Span:
        """`column` as measured in the nearest group of `chain`, else the prior rescaled by `ratio_chain`'s."""
        measured = self._first(column, *chain)
        if len(measured):
            return spread(measured)
        ratios = self._first(ratio, *ratio_chain)
        ratios = ratios[ratios > 0]
        return _ratio_span(prior.mid, ratios) if len(ratios) else prior

    def steps(self, trial: Mapping) -> float:
        """Steps of one run: max_seqlen per batch, times how early this family's rows ended before."""
        ratios = self._rows("step_ratio", family=family(trial, self.device_kind(trial)), stop=text(trial, "stop"))
        return expected_steps(trial) * float(ratios.median()) if len(ratios) else float(expected_steps(trial))

    def run(self, trial: Mapping) -> tuple[Span, str]:
        """One timed run's seconds and the basis: the family's law, its prior ratio, or the prior."""
        kind = self.device_kind(trial)
        fam, steps = family(trial, kind), self.steps(trial)
        law_fit = self.laws.get(fam)
        if law_fit is not None:
            rows, prompt = number(trial, "batch_size"), max(number(trial, "prompt_len"), 1)
            return law_fit.run(rows, prompt, steps, batches(trial)), "fit"
        gpu = None if kind in ("cpu", "cuda") else kind
        memo = ("prior_run", gpu, *(text(trial, f) for f in PRIOR_RUN_FIELDS))
        raw = self._kept(memo, lambda: priors.prior_run(trial, gpu, self.cpu))
        per_step = raw.mid / expected_steps(trial) * steps
        family_ratios = self._rows("run_ratio", family=fam)
        if len(family_ratios):
            return _ratio_span(per_step, family_ratios), "fit"
        model, compile_mode = text(trial, "model"), text(trial, "compile")
        ratios = self._first(
            "run_ratio",
            dict(device_kind=kind, law=law(trial), compile=compile_mode),
            dict(model=model, law=law(trial), compile=compile_mode),
            dict(device_kind=kind),
            dict(device=text(trial, "device")),
        )
        if len(ratios):
            return _ratio_span(per_step, ratios), "prior"
        return Span(per_step, raw.low * per_step / raw.mid, raw.high * per_step / raw.mid), "prior"

    @kept_by("device", "model", *GRAPH_KNOBS)
    def compile(self, trial: Mapping) -> Span:
        """The first run's extra seconds (compilation, or start-up with compile=off), measured cold."""
        kind, mode, model = self.device_kind(trial), text(trial, "compile"), text(trial, "model")
        graph = {k: text(trial, k) for k in GRAPH_KNOBS}
        cold = (dict(model=model, device_kind=kind, compile_warm="no", **graph),)
        cold += (dict(model=model, device_kind=kind, compile=mode, compile_warm="no"),)
        nearest = (dict(device_kind=kind, compile=mode), dict(compile=mode))
        return self._part("compile_s", cold, priors.prior_compile(trial), "compile_ratio", nearest)

    @kept_by("device", "model", *GRAPH_KNOBS)
    def warm_compile(self, trial: Mapping) -> tuple[Span, str]:
        """A twin's first-run extra, its graphs loaded from the sweep's shared cache: the history's warm compiles
        (this model, else any, in this mode on this device kind), else the cold compile times the prior's share."""
        kind, mode, model = self.device_kind(trial), text(trial, "compile"), text(trial, "model")
        measured = self._first(
            "compile_s",
            dict(model=model, device_kind=kind, compile=mode, compile_warm="yes"),
            dict(device_kind=kind, compile=mode, compile_warm="yes"),
        )
        if len(measured):
            return spread(measured), "history"
        cold = self.compile(trial)
        return Span(cold.mid * priors.WARM_COMPILE_SHARE, cold.low * priors.WARM_COMPILE_SHARE, cold.mid), "prior"

    @kept_by("device", "model", "dtype")
    def build(self, trial: Mapping) -> Span:
        """Building the model inside the trial process."""
        kind, model = self.device_kind(trial), text(trial, "model")
        same = (dict(model=model, device_kind=kind, dtype=text(trial, "dtype")), dict(model=model, device_kind=kind))
        nearest = (dict(device_kind=kind), dict(device=text(trial, "device")))
        return self._part("build_s", same, priors.prior_build(trial), "build_ratio", nearest)

    @kept_by()
    def harness(self, trial: Mapping) -> Span:
        """Around each trial: its process's start-up and exit on a warm worker, and the Ray task around that."""
        measured = self._first("in_child_s", dict(device_kind=self.device_kind(trial)), {})
        if not len(measured):
            return Span.factor(priors.HARNESS_PRIOR_S, 2.0)
        task = self._first("in_task_s", dict(device_kind=self.device_kind(trial)), {})
        return spread(measured) + (spread(task) if len(task) else Span.factor(OUTSIDE_CHILD_S, 1.5))

    @kept_by()
    def cold_start(self, trial: Mapping) -> Span:
        """A worker's start-up (history.cold_starts), paid by its first trial: measured here, anywhere, or the prior."""
        measured = self._first("cold_start_s", dict(device_kind=self.device_kind(trial)), {})
        measured = measured[measured > 0]
        return spread(measured) if len(measured) else priors.prior_cold_start(trial)

    def timed_runs(self, trial: Mapping) -> Span:
        """Timed runs: as given, or for runs=auto what this family's auto runs made (else min..max)."""
        if not is_auto(get(trial, "runs")):
            return Span.exact(float(get(trial, "runs")))
        low, high = float(number(trial, "min_runs")), float(number(trial, "max_runs"))
        made = self._rows("timed_runs_done", family=family(trial, self.device_kind(trial)), runs=AUTO)
        if len(made):
            return Span(float(made.median()), min(low, float(made.min())), max(high, float(made.max())))
        return Span((low + high) / 2, low, high)
