"""The two sweeps of a comparison: how each is named and loaded (through tracking/store/reading.py alone),
and what differs between them, said before any number.

A ratio of two sweeps' runtimes is the change of everything that differed between them: the GPU,
the driver, torch, the thread count, the code, and how each was measured. The fingerprint every
record carries (tokengen/contract/machine/fingerprint.py) names the environment; the spec's measurement
fields and the sweep's own settings name the rest, so the comparison can say what moved before it
says by how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import pandas as pd

from tokengen.contract.machine.fingerprint import FACTS, from_text
from tokengen.contract.names import FINISHED
from tokengen.contract.record import first_line as one_line
from tokengen.contract.spec import AUTO_RUNS, MEASUREMENT, TrialSpec
from tracking.measurement import summary_line
from tracking.report.figures.baselines import key_part
from tracking.store.reading import ReportError, SavedSettings, SweepRuns, load_sweep, open_experiment, parent_run
from tracking.store.search import search

DEFAULT_EXPERIMENT = "tokengen"
FACT_NAMES = {"project": "code (tokengen-sweeps version)", "model_files": "model files"}
"""How a fingerprint fact is named in the comparison, where its own name says too little."""
SYSTEM = {
    "gpu_type": "GPU type",
    "env_cuda": "CUDA",
    "env_python": "python",
    "env_cpu_count": "CPUs",
    "env_host": "host",
}
"""Facts every record carries beside its fingerprint, worth naming when they differ."""
MEASUREMENT_FIELDS = tuple(f.name for f in fields(TrialSpec) if f.metadata["role"] == MEASUREMENT)
KNOWN_SHOWN = 10  # sweep names listed when the one asked for is not in the store


@dataclass
class Side:
    label: str  # "A" or "B"
    name: str  # as the user gave it: SWEEP or EXPERIMENT/SWEEP
    runs: SweepRuns

    @property
    def prices(self) -> dict:
        return self.runs.settings.prices

    @property
    def finished(self) -> pd.DataFrame:
        trials = self.runs.trials
        return trials[trials["status"] == FINISHED]

    def measurement_line(self) -> str:
        """The report's first line for this side: how many finished trials are ok, noisy, contended, and why."""
        done = self.finished
        none = pd.Series(None, index=done.index, dtype=object)
        return summary_line(done.get("measurement", none), done.get("measurement_reasons", none))


def parse_name(text: str, experiment: str) -> tuple[str, str]:
    """(experiment, sweep) from `SWEEP` or `EXPERIMENT/SWEEP` (a sweep name has no `/`; an experiment's may)."""
    if "/" in text:
        experiment, text = text.rsplit("/", 1)
    if not text or not experiment:
        raise ReportError(f"{text!r} names no sweep: pass SWEEP or EXPERIMENT/SWEEP")
    return experiment, text


def load_side(label: str, text: str, uri: str, experiment: str = DEFAULT_EXPERIMENT) -> Side:
    """One side's trials, one row per trial key; a ReportError that says which side and how to fix it."""
    try:
        experiment, sweep = parse_name(text, experiment)
        if "'" in sweep:
            raise ReportError(f"sweep name {sweep!r} has a quote: pass the name without it")
        client, experiment_id = _opened(uri, experiment)
        if parent_run(client, experiment_id, sweep) is None:
            names = sorted(
                {r.data.tags["sweep_parent"] for r in search(client, experiment_id, "tags.sweep_parent LIKE '%'")}
            )
            known = ", ".join(names[:KNOWN_SHOWN]) + (", ..." if len(names) > KNOWN_SHOWN else "")
            raise ReportError(
                f"no sweep named '{sweep}' in {uri} experiment '{experiment}' "
                f"({'its sweeps: ' + known if names else 'it has none'}): name one of them, or run "
                f"python -m sweeps.run +grid=smoke sweep.name={sweep} first"
            )
        runs = load_sweep(uri, experiment, sweep)
        if runs.trials.empty:
            raise ReportError(f"sweep '{sweep}' in {uri} has no trials yet: run it with python -m sweeps.run first")
    except ReportError as exc:
        raise ReportError(f"{label} ({text}): {exc}") from None
    return Side(label, text, runs)


def _opened(uri: str, experiment: str):
    """The reader's open_experiment, and a store MLflow cannot open at all (a file that is no database)
    as the same one line."""
    try:
        return open_experiment(uri, experiment)
    except ReportError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to open the store means: fix the URI
        raise ReportError(f"cannot read tracking store {uri} ({one_line(exc)}): fix --uri") from None


def _joined(values) -> str:
    """A fact's values over a side's trials as one text: '2', or '1, 2' where its trials differ."""
    found = sorted({key_part(v) for v in values} - {"", "None"})
    return ", ".join(found) if found else "unknown"


def facts_of(side: Side) -> dict[str, str]:
    """What the side's finished trials were measured with: the fingerprint's facts, the system's,
    the measurement fields, the timed runs made and the sweep settings, each as one text."""
    done = side.finished

    def column(name: str):
        return done[name] if name in done else []

    parsed = [from_text(text) for text in column("env_facts")]
    out = {FACT_NAMES.get(name, name): _joined(p.get(name) for p in parsed if p) for name in FACTS}
    out.update({shown: _joined(column(name)) for name, shown in SYSTEM.items()})
    out.update({f"trial.{name}": _joined(column(name)) for name in MEASUREMENT_FIELDS})
    out["trial.runs"] = ", ".join("auto" if v == str(AUTO_RUNS) else v for v in out["trial.runs"].split(", "))
    made = pd.to_numeric(pd.Series(column("runs_done"), dtype=object), errors="coerce").dropna()
    low, high = (int(made.min()), int(made.max())) if len(made) else (None, None)
    out["timed runs made"] = "unknown" if low is None else str(low) if low == high else f"{low}-{high}"
    saved = side.runs.settings
    out.update({f"sweep.{f.name}": _setting(getattr(saved, f.name)) for f in fields(SavedSettings)})
    return out


def _setting(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown" if value is None else "nan"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


ENVIRONMENT = {*(FACT_NAMES.get(name, name) for name in FACTS), *SYSTEM.values()}


def differences(a: Side, b: Side) -> pd.DataFrame:
    """Each fact whose value differs between the sides: kind (environment, measurement, sweep), fact, A, B;
    the environment first (the fingerprint's facts in their order), then how each side was measured."""
    facts_a, facts_b = facts_of(a), facts_of(b)
    rows = [
        {"kind": _kind(name), "fact": name, "A": facts_a[name], "B": facts_b[name]}
        for name in facts_a
        if facts_a[name] != facts_b[name]
    ]
    return pd.DataFrame(rows, columns=["kind", "fact", "A", "B"])


def same_environment(a: Side, b: Side) -> str:
    """The environment facts both sides share, as one line: 'torch 2.13.0, transformers 5.24.0, ...'."""
    facts_a, facts_b = facts_of(a), facts_of(b)
    return ", ".join(
        f"{name} {facts_a[name]}"
        for name in facts_a
        if name in ENVIRONMENT and facts_a[name] == facts_b[name] and facts_a[name] != "unknown"
    )


def _kind(name: str) -> str:
    if name in ENVIRONMENT:
        return "environment"
    return "sweep" if name.startswith("sweep.") else "measurement"


def first_line(found: pd.DataFrame) -> str:
    """The comparison's first line: 'What differs: threads 1 vs 2; sweep.cpus_per_trial 1 vs 2.'"""
    if found.empty:
        return "What differs: nothing the two sides recorded (same environment, same measurement settings)."
    return "What differs: " + "; ".join(f"{r.fact} {r.A} vs {r.B}" for r in found.itertuples()) + "."
