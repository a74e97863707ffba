"""The frames a report writes beside its Markdown: the machines, every trial (results.csv), every timed run
(runs.csv), and its first line, how sure its numbers are."""

from __future__ import annotations

import json

import pandas as pd

from tokengen.contract.names import FINISHED, TRIAL_KEY
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trained import model_label
from tracking.measurement import OK, judged, summary_line
from tracking.report import comparison
from tracking.report.figures.baselines import key_part

SYSTEM = [
    "env_gpu_name",
    "env_driver",
    "env_cuda",
    "env_torch",
    "env_transformers",
    "env_python",
    "env_host",
    "env_cpu",
    "env_cpu_count",
    "env_torch_threads",
    "env_fingerprint",
]
INTERNAL = ["in_sweep", "baseline_in_sweep", "variant_rank", "noisy", "own_marked"]  # own_marked: `measurement`
REPEATS = ["key", "run_status", "interval"]
"""Columns that say again what another says: key (trial_key), run_status (MLflow's word for status), interval
(speedup_low and speedup_high as text)."""


def system_facts(rows: pd.DataFrame) -> pd.DataFrame:
    """The machines the trials ran on, from the env_* tags every trial carries."""
    facts = []
    for name in SYSTEM:
        values = sorted({key_part(v) for v in rows[name]} - {""}) if name in rows else []
        facts.append({"fact": name.removeprefix("env_"), "value": ", ".join(values) or None})
    losses = rows["model_heldout_loss"] if "model_heldout_loss" in rows else [None] * len(rows)
    models = sorted({model_label(m, loss) for m, loss in zip(rows.get("model", []), losses) if isinstance(m, str)})
    facts.append({"fact": "models", "value": ", ".join(models) or None})  # trained ones with their held-out loss
    return pd.DataFrame(facts)


def results_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every trial of the sweep, one row each (its best attempt), one column per fact: MLflow's flat names
    first, then the report's verdicts; runtime_s holds every timed run as a JSON list."""
    rows = frame[frame["in_sweep"].astype(bool)].drop(columns=INTERNAL + [c for c in REPEATS if c in frame])
    rows = (
        rows.assign(runtime_s=[json.dumps(v) if isinstance(v, list) else None for v in rows["runtime_s"]])
        if "runtime_s" in rows
        else rows
    )
    first = [
        "run_id",
        "run_name",
        "status",
        TRIAL_KEY,
        "attempt",
        "attempts",
        "measurement",
        "measurement_reasons",
        *TrialSpec.__dataclass_fields__,
        "accelerator_type",
        "gpu_type",
        "speedup",
        "speedup_low",
        "speedup_high",
        "speedup_marked",
        "baseline_measurement",
        "significant",
        "compared",
        "vs_generate",
        "vs_generate_marked",
        "tokens",
        "tokens_reference",
        "agreed_steps",
    ]
    first = [c for c in first if c in rows]
    return rows[first + sorted(c for c in rows.columns if c not in first)]


def runs_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per timed run of every finished trial (its best attempt): trial_key, attempt, the point, run
    (0-based), runtime_s."""
    rows = frame[frame["in_sweep"].astype(bool) & (frame["status"] == FINISHED)]
    ids = [TRIAL_KEY, "attempt", "variant", *comparison.POINT, "measurement"]
    present = [c for c in ids + ["runtime_s"] if c in rows]
    out = [
        {**{c: row.get(c) for c in ids}, "run": i, "runtime_s": seconds}
        for row in rows[present].to_dict("records")
        if isinstance(row.get("runtime_s"), list)
        for i, seconds in enumerate(row["runtime_s"])
    ]
    return pd.DataFrame(out, columns=ids + ["run", "runtime_s"])


def measurement_summary(mine: pd.DataFrame) -> str:
    """The report's first line: how many finished trials are ok, noisy, contended, why, and what remeasuring did."""
    done = mine[mine["status"] == FINISHED]
    attempts = pd.to_numeric(done.get("attempts"), errors="coerce").fillna(1)
    again = done[attempts > 1]
    remeasured = ""
    if len(again):
        ok = int(again["measurement"].map(judged).eq(OK).sum())
        remeasured = (
            f"{len(again)} remeasured, {ok} of them ok on a later attempt (each key speaks through its best "
            "attempt: ok first, then the lowest runtime_cv; column `attempt`)"
        )
    return summary_line(done["measurement"], done["measurement_reasons"], remeasured)
