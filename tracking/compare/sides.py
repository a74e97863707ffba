"""The two sweeps of a comparison and what differs between them, said before any number: a ratio of their runtimes
is the change of everything that did (GPU, driver, torch, threads, code, how each was measured)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pandas as pd

from sweeps.planning.config import SweepSettings
from tokengen.contract.machine.fingerprint import FACTS, from_text
from tokengen.contract.names import FINISHED, SWEEP_PARENT
from tokengen.contract.record import first_line as one_line
from tokengen.contract.spec import AUTO_RUNS, MEASUREMENT, TrialSpec
from tracking.measurement import summary_line
from tracking.report.figures.baselines import key_part
from tracking.store.reading import ReportError, SweepRuns, load_sweep, open_experiment, parent_run
from tracking.store.search import search

DEFAULT_EXPERIMENT = "tokengen"
FACT_NAMES = {"project": "code (tokengen-sweeps version)", "model_files": "model files"}  # its own says little
SYSTEM = dict(gpu_type="GPU type", env_cuda="CUDA", env_python="python", env_cpu_count="CPUs", env_host="host")
ENVIRONMENT = {*(FACT_NAMES.get(name, name) for name in FACTS), *SYSTEM.values()}
MEASUREMENT_FIELDS = tuple(f.name for f in fields(TrialSpec) if f.metadata["role"] == MEASUREMENT)
KNOWN_SHOWN = 10  # sweep names listed when the one asked for is not in the store


@dataclass
class Side:
    label: str  # "A" or "B"
    name: str  # as the user gave it: SWEEP or EXPERIMENT/SWEEP
    runs: SweepRuns

    def measurement_line(self) -> str:
        """The report's first line for this side: how many finished trials are ok, noisy, contended, and why."""
        done = self.runs.trials[self.runs.trials["status"] == FINISHED]
        none = pd.Series(None, index=done.index, dtype=object)
        return summary_line(done.get("measurement", none), done.get("measurement_reasons", none))


def load_side(label: str, text: str, uri: str, experiment: str = DEFAULT_EXPERIMENT) -> Side:
    """One side from `SWEEP` or `EXPERIMENT/SWEEP`; a ReportError that names the side and the fix."""
    try:
        experiment, _, sweep = text.rpartition("/") if "/" in text else (experiment, "", text)
        if not sweep or not experiment:
            raise ReportError(f"{sweep!r} names no sweep: pass SWEEP or EXPERIMENT/SWEEP")
        if "'" in sweep:
            raise ReportError(f"sweep name {sweep!r} has a quote: pass the name without it")
        try:
            client, experiment_id = open_experiment(uri, experiment)
        except ReportError:
            raise
        except Exception as exc:  # noqa: BLE001 - a store MLflow cannot open at all (a file that is no database)
            raise ReportError(f"cannot read tracking store {uri} ({one_line(exc)}): fix --uri") from None
        parent = parent_run(client, experiment_id, sweep)
        if parent is None:
            found = search(client, experiment_id, f"tags.{SWEEP_PARENT} LIKE '%'")
            names = sorted({r.data.tags[SWEEP_PARENT] for r in found})
            known = ", ".join(names[:KNOWN_SHOWN]) + (", ..." if len(names) > KNOWN_SHOWN else "")
            raise ReportError(
                f"no sweep named '{sweep}' in {uri} experiment '{experiment}' "
                f"({'its sweeps: ' + known if names else 'it has none'}): name one of them, or run "
                f"python -m sweeps.run +grid=smoke sweep.name={sweep} first"
            )
        runs = load_sweep(uri, experiment, sweep, parent)
        if runs.trials.empty:
            raise ReportError(f"sweep '{sweep}' in {uri} has no trials yet: run it with python -m sweeps.run first")
    except ReportError as exc:
        raise ReportError(f"{label} ({text}): {exc}") from None
    return Side(label, text, runs)


def _joined(values) -> str:
    """A fact's values over a side's trials as one text: '2', or '1, 2' where its trials differ."""
    return ", ".join(sorted({key_part(v) for v in values} - {"", "None"})) or "unknown"


def _setting(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return "unknown" if value is None else str(value)


def compared_settings(sweep: SweepSettings) -> dict[str, object]:
    """The sweep's settings that change what a trial measures or what it costs, by the name each is set with."""
    return {
        "sweep.prices": sweep.prices,  # USD per device-hour by type: the cost columns
        "sweep.cpus_per_trial": sweep.cpus_per_trial,
        "sweep.inductor_cache": sweep.inductor_cache,
        "sweep.remeasure": sweep.remeasure,
        "sweep.accelerator_types": sweep.accelerator_types,
    }


def facts_of(side: Side) -> dict[str, str]:
    """What the side's finished trials were measured with and its sweep's settings, one text per fact."""
    done = side.runs.trials[side.runs.trials["status"] == FINISHED]
    parsed = [from_text(text) for text in done.get("env_facts", [])]
    out = {FACT_NAMES.get(name, name): _joined(p.get(name) for p in parsed if p) for name in FACTS}
    out.update({shown: _joined(done.get(name, [])) for name, shown in SYSTEM.items()})
    out.update({f"trial.{name}": _joined(done.get(name, [])) for name in MEASUREMENT_FIELDS})
    out["trial.runs"] = ", ".join("auto" if v == str(AUTO_RUNS) else v for v in out["trial.runs"].split(", "))
    made = pd.to_numeric(pd.Series(done.get("runs_done", []), dtype=object), errors="coerce").dropna().astype(int)
    out["timed runs made"] = "-".join(str(v) for v in sorted({made.min(), made.max()})) if len(made) else "unknown"
    return {**out, **{name: _setting(value) for name, value in compared_settings(side.runs.settings).items()}}


def differences(a: Side, b: Side) -> tuple[pd.DataFrame, str]:
    """(each fact whose value differs: kind (environment, measurement, sweep), fact, A, B, the environment first;
    the environment facts both sides share, as one line: 'torch 2.13.0, transformers 5.24.0, ...')."""
    facts_a, facts_b = facts_of(a), facts_of(b)
    facts = pd.DataFrame({"fact": list(facts_a), "A": list(facts_a.values()), "B": [facts_b[f] for f in facts_a]})
    environment = facts["fact"].isin(ENVIRONMENT)
    facts.insert(0, "kind", "measurement")
    facts.loc[facts["fact"].str.startswith("sweep."), "kind"] = "sweep"
    facts.loc[environment, "kind"] = "environment"
    shared = facts[environment & (facts["A"] == facts["B"]) & (facts["A"] != "unknown")]
    return facts[facts["A"] != facts["B"]].reset_index(drop=True), ", ".join(shared["fact"] + " " + shared["A"])
