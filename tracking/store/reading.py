"""A sweep's runs, read back from MLflow into one flat pandas DataFrame: the reports' only input.

Nothing is re-run: every figure comes from `MlflowClient.search_runs`. Params, metrics and tags
lose their `params.`/`metrics.`/`tags.` prefixes so the columns carry the names the sweep logged
(`batch_size`, `runtime_mean_s`, `env_gpu_name`), and params get their TrialSpec types back.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
from mlflow import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path
from mlflow.utils.uri import is_local_uri

from sweeps.planning.config import SweepSettings, load_saved
from tokengen.contract.names import (
    ATTEMPT,
    FINISHED,
    PLAN_ESTIMATE_FILE,
    PLAN_FILE,
    RESULT_FILE,
    STATUS,
    SWEEP_CONFIG_FILE,
    SWEEP_PARENT,
    SWEEP_TAG,
    TRIAL_KEY,
    VARIANT,
)
from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord
from tracking.measurement import attempt_of, best, latest_series
from tracking.store.connect import TrackingError, check_credentials, check_reachable, open_client
from tracking.store.presence import missing_store
from tracking.store.runs import PARENT_TAG, frame_of
from tracking.store.search import search
from tracking.store.tables import Tables, in_bulk


class ReportError(RuntimeError):
    """Nothing to report on, or the store cannot be read: one line that names the fix."""


@dataclass
class SweepRuns:
    uri: str
    experiment: str
    experiment_id: str
    sweep: str
    parent_id: str
    trials: pd.DataFrame  # one row per trial key: its best attempt (tracking.measurement.best), `attempts` made
    client: MlflowClient
    outside_baselines: pd.DataFrame = field(default_factory=pd.DataFrame)  # finished baselines of other sweeps
    # the sweep's settings as its parent run saved them (sweep_config.json), typed by the sweep's own schema
    settings: SweepSettings = field(default_factory=SweepSettings)


def best_per_trial(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per trial key: its best attempt (tracking.measurement.best: among the attempts since its
    latest first one, a finished ok one, else the finished one with the lowest runtime_cv, else the
    latest run), with `attempts`: how many that series holds."""
    if frame.empty:
        return frame
    named = frame[TRIAL_KEY] if TRIAL_KEY in frame else frame["run_id"]
    keys = [key if isinstance(key, str) else run for key, run in zip(named, frame["run_id"])]
    judged_by = [c for c in ("start_time", "attempt", "status", "measurement", "runtime_cv") if c in frame]
    rows = frame[judged_by].to_dict("records")  # what best() reads, not a run's hundred fields
    groups: dict[str, list[int]] = {}
    for position, key in enumerate(keys):
        groups.setdefault(key, []).append(position)
    chosen, made = [], []
    for positions in groups.values():
        series = latest_series([{**rows[p], "_position": p} for p in positions])
        chosen.append(best(series)["_position"])
        made.append(len({attempt_of(r.get("attempt")) for r in series}))
    kept = frame.iloc[chosen].assign(attempts=made)
    return kept.sort_values("start_time", kind="stable").reset_index(drop=True)


def _no_sweep(uri: str, experiment: str, why: str) -> ReportError:
    return ReportError(
        f"no sweep in {uri} experiment '{experiment}' ({why}): run python -m sweeps.run +grid=smoke first"
    )


def open_experiment(uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """The client and experiment id; a store not made yet (tracking.store.presence) is an error here, never a new
    empty one; a URI's secrets are refused, never printed; a store that is not one is one line (the check a
    sweep makes before Ray, tracking.store.connect.open_client)."""
    try:
        check_credentials(uri, "--uri ")
        check_reachable(uri)
        if empty := missing_store(uri):  # asked before MLflow makes it (and prints so): a reader never makes one
            raise _no_sweep(uri, experiment, empty)
        client = open_client(uri, "read")
    except TrackingError as exc:
        raise ReportError(str(exc).replace("fix tracking.uri", "fix --uri")) from None
    try:
        found = client.get_experiment_by_name(experiment)
    except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
        raise ReportError(f"cannot read tracking store {uri} ({first_line(exc)}): fix --uri") from None
    if found is None:
        raise _no_sweep(uri, experiment, "no such experiment")
    return client, found.experiment_id


def parent_run(client: MlflowClient, experiment_id: str, sweep: str | None):
    """The sweep's parent run (the latest of that name), or the latest sweep's when sweep is None."""
    where = f"tags.{SWEEP_PARENT} = '{sweep}'" if sweep else f"tags.{SWEEP_PARENT} LIKE '%'"
    runs = client.search_runs(
        [experiment_id], filter_string=where, max_results=1, order_by=["attributes.start_time DESC"]
    )
    return runs[0] if runs else None


def load_sweep(uri: str, experiment: str = "tokengen", sweep: str | None = None, parent=None) -> SweepRuns:
    """Every trial recorded under the sweep's name (across its resumes), one row per trial key; `parent`: its
    parent run where the caller has already found it (a search of the store saved)."""
    client, experiment_id = open_experiment(uri, experiment)
    if sweep and "'" in sweep:
        raise ReportError(f"sweep name {sweep!r} has a quote: pass the name without it")
    parent = parent or parent_run(client, experiment_id, sweep)
    if parent is None and sweep:
        raise ReportError(
            f"no sweep named '{sweep}' in {uri} experiment '{experiment}': run python -m sweeps.run "
            f"+grid=smoke sweep.name={sweep} first, or drop --sweep for the latest"
        )
    if parent is None:
        raise ReportError(f"no sweep in {uri} experiment '{experiment}': run python -m sweeps.run +grid=smoke first")
    name = parent.data.tags[SWEEP_PARENT]
    trials = best_per_trial(sweep_frame(uri, client, experiment_id, parent, name))
    if not trials.empty and (trials[SWEEP_TAG] != name).any():  # the key's best attempt is another sweep's
        trials["reused_from"] = [s if s != name else None for s in trials[SWEEP_TAG]]
    settings = load_saved(parent_artifact(client, parent, SWEEP_CONFIG_FILE)).sweep
    return SweepRuns(uri, experiment, experiment_id, name, parent.info.run_id, trials, client, settings=settings)


def sweep_frame(uri: str, client: MlflowClient, experiment_id: str, parent, name: str) -> pd.DataFrame:
    """Every child run of the sweep, and the runs of other sweeps it reused, flat: a database's tables read in
    bulk (tracking/store/tables.py: Tables), a server's runs searched page by page."""
    if not in_bulk(uri):
        runs = [r for r in search(client, experiment_id, f"tags.{SWEEP_TAG} = '{name}'") if PARENT_TAG in r.data.tags]
        measured = {r.data.tags.get(TRIAL_KEY) for r in runs if attempt_of(r.data.tags.get(ATTEMPT)) == 1}
        return frame_of(runs + reused_runs(client, experiment_id, parent, measured))
    with Tables(uri) as tables:
        frame = tables.runs(int(experiment_id), {SWEEP_TAG: name, PARENT_TAG: None})
        first = frame[frame["attempt"] == 1] if not frame.empty else frame
        wanted = reused_keys(client, parent, set(first.get(TRIAL_KEY, [])))
        if not wanted:
            return frame
        done = tables.runs(int(experiment_id), {STATUS: FINISHED, PARENT_TAG: None})
    return pd.concat([frame, done[done[TRIAL_KEY].isin(wanted)]], ignore_index=True)


def parent_artifact(client: MlflowClient, parent, name: str):
    """A JSON artifact of the sweep's parent run, or None."""
    with tempfile.TemporaryDirectory() as tmp:
        return _read(
            client,
            parent.info.run_id,
            parent.info.artifact_uri,
            name,
            tmp,
            lambda path: json.loads(Path(path).read_text()),
        )


def reused_keys(client: MlflowClient, parent, measured: set[str]) -> set[str]:
    """The keys of the sweep's plan that it reused from earlier runs and never measured itself."""
    plan = parent_artifact(client, parent, PLAN_FILE)
    return set((plan or {}).get("reused", [])) - measured


def reused_runs(client: MlflowClient, experiment_id: str, parent, measured: set[str]) -> list:
    """The finished runs of other sweeps for the keys of the sweep's plan that it reused from earlier runs
    (resume skips a key finished anywhere in the experiment) and never measured itself (`measured`: keys
    with a first attempt of its own), so its report covers its whole plan and a reused key it remeasured
    is judged over all its attempts; `reused_from` names the sweep whose attempt speaks for each."""
    wanted = reused_keys(client, parent, measured)
    if not wanted:
        return []
    return [
        r
        for r in search(client, experiment_id, f"tags.{STATUS} = '{FINISHED}'")
        if r.data.tags.get(TRIAL_KEY) in wanted and PARENT_TAG in r.data.tags
    ]


def add_outside_baselines(runs: SweepRuns) -> None:
    """Baselines recorded by other sweeps: resume skips a trial finished anywhere in the experiment,
    so a sweep can lack its own baseline while the experiment has it."""
    mine = set(runs.trials["run_id"]) if not runs.trials.empty else set()
    if in_bulk(runs.uri):
        with Tables(runs.uri) as tables:
            found = tables.runs(int(runs.experiment_id), {VARIANT: "baseline", STATUS: FINISHED, PARENT_TAG: None})
        others = found[~found["run_id"].isin(mine)] if not found.empty else found
        runs.outside_baselines = best_per_trial(others.reset_index(drop=True))
        return
    found = search(runs.client, runs.experiment_id, f"tags.{VARIANT} = 'baseline' and tags.{STATUS} = '{FINISHED}'")
    others = [r for r in found if r.info.run_id not in mine and PARENT_TAG in r.data.tags]
    runs.outside_baselines = best_per_trial(frame_of(others))


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _on_disk(artifact_uri) -> bool:
    return isinstance(artifact_uri, str) and is_local_uri(artifact_uri, is_tracking_or_registry_uri=False)


def _read(client: MlflowClient, run_id: str, artifact_uri: str, name: str, into: str, load: Callable):
    try:
        if _on_disk(artifact_uri):
            return load(Path(local_file_uri_to_path(artifact_uri)) / name)  # the store's own disk: no copy
        return load(client.download_artifacts(run_id, name, f"{into}/{run_id}"))
    except Exception:  # noqa: BLE001 - a run without the file is reported as unchecked, not as a crash
        return None


def fetch_artifacts(
    client: MlflowClient, frame: pd.DataFrame, labels, name: str, load: Callable, threads: int = 8
) -> dict:
    """`load(path)` of artifact `name` of each listed row's run, by run id (None where it is missing); several at
    once where one is fetched over HTTP (a tracking server), one by one where all are on this disk (threads only
    contend there: 3,254 token files take 0.35 s one by one, 0.88 s with eight threads)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per file buries the output
    rows = frame.loc[list(labels), ["run_id", "artifact_uri"]]
    runs = dict(zip(rows["run_id"].tolist(), rows["artifact_uri"].tolist()))
    if not runs:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        if all(_on_disk(uri) for uri in runs.values()):
            return {run_id: _read(client, run_id, uri, name, tmp, load) for run_id, uri in runs.items()}
        with ThreadPoolExecutor(threads) as pool:
            found = pool.map(lambda item: _read(client, *item, name, tmp, load), runs.items())
            return dict(zip(runs, found))


def fill_error_messages(client: MlflowClient, frame: pd.DataFrame) -> None:
    """A failed trial's message lives in its result.json artifact (tags hold only its error type), read as its
    TrialRecord (a file that is not one reads as missing)."""
    if frame.empty:
        return
    if "error_message" not in frame:
        frame["error_message"] = None
    wanted = frame.index[(frame["status"] != FINISHED) & frame["error_message"].map(is_missing)]
    records = fetch_artifacts(client, frame, wanted, RESULT_FILE, _record_in)
    for label in wanted:
        record = records.get(frame.at[label, "run_id"])
        if record:
            frame.at[label, "error_message"] = record.result.error_message


def _record_in(path) -> TrialRecord:
    """A run's result.json as the record it holds: its flat dict through the door, a field nobody declares now
    left out."""
    return TrialRecord.from_dict(json.loads(Path(path).read_text()), drop_undeclared=True)


def fill_runtimes(client: MlflowClient, frame: pd.DataFrame, threads: int = 8) -> None:
    """Every timed run of a finished trial recorded before its series was also a tag: from the metric
    history, one call per such run (a newer run's list came with the search)."""
    if frame.empty:
        return
    if "runtime_s" not in frame:
        frame["runtime_s"] = None
    wanted = [
        label
        for label in frame.index
        if frame.at[label, "status"] == FINISHED and not isinstance(frame.at[label, "runtime_s"], list)
    ]
    if not wanted:
        return

    def history(run_id: str) -> list | None:
        try:
            found = client.get_metric_history(run_id, "runtime_s")
        except Exception:  # noqa: BLE001 - a run without it keeps none
            return None
        return [m.value for m in sorted(found, key=lambda m: m.step)] or None

    with ThreadPoolExecutor(threads) as pool:
        found = dict(zip(wanted, pool.map(history, [frame.at[label, "run_id"] for label in wanted])))
    frame["runtime_s"] = pd.Series(
        [found.get(label, value) for label, value in frame["runtime_s"].items()], index=frame.index, dtype=object
    )


def load_plan(client, parent_id: str) -> tuple[pd.DataFrame | None, dict]:
    """The parent run's plan.csv (None if the sweep recorded none) and its metrics."""
    parent = client.get_run(parent_id)
    with tempfile.TemporaryDirectory() as tmp:
        plan = _read(client, parent_id, parent.info.artifact_uri, PLAN_ESTIMATE_FILE, tmp, pd.read_csv)
    return plan, dict(parent.data.metrics)
