"""Writing runs: one parent run per sweep, one child run per trial.

The sweep driver alone holds a Recorder, and records each trial the moment its result arrives, so
a driver killed mid-sweep keeps every finished trial, and a rerun skips their keys. Everything
wrong with the store (an unknown scheme, a server that is down, missing or wrong credentials) is
one line before any trial runs; a server that goes down later fails a write in about a second
instead of MLflow's minutes of retries, and the driver's journal (sweeps/delivery/journal.py) keeps the
result until the server answers again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric, RunTag
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

from tokengen.contract.names import (
    ATTEMPT,
    ATTEMPT_ID,
    FAILED_TRIALS,
    FINISHED,
    PLAN_FILE,
    RESULT_FILE,
    REUSED_TRIALS,
    STATUS,
    STOPPED,
    SWEEP_CONFIG_FILE,
    SWEEP_PARENT,
    SWEEP_TAG,
    TRIAL_KEY,
    TRIAL_LOG,
)
from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord
from tracking.run_names import run_name
from tracking.store.artifact_root import artifact_location
from tracking.store.connect import (
    CREDENTIALS,
    TrackingError,
    _fail_fast_http,
    _one_opener,
    check_reachable,
    check_uri,
    failing_fast,
    is_server,
    open_client,
    redacted,
    server_answers,
)
from tracking.store.runs import MAX_PARAM_CHARS, PARENT_TAG, metrics_of, params_of, tags_of
from tracking.store.search import search
from tracking.store.tables import Tables, in_bulk


@dataclasses.dataclass
class StoreIndex:
    finished: dict = dataclasses.field(default_factory=dict)  # trial key -> {fingerprint: its facts text}
    attempts: dict = dataclasses.field(default_factory=dict)  # attempt id -> the run that holds it whole
    half_written: dict = dataclasses.field(default_factory=dict)  # attempt id -> runs cut short (no status tag)


class Recorder:
    def __init__(self, uri: str, experiment: str):
        self.uri = uri
        check_uri(uri)
        check_reachable(uri)
        try:
            with _one_opener(uri), _fail_fast_http():
                self.client = open_client(uri)
                self.experiment_id = self._experiment_id(experiment)
        except TrackingError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store failure here means: fix the URI
            raise TrackingError(
                f"cannot write to tracking store {redacted(uri)} ({first_line(exc)}): fix tracking.uri"
            ) from None
        self._check_writable(experiment)
        self.parent_id: str | None = None
        self.sweep = ""
        self.names: dict[str, str] = {}  # run name per trial key (tracking.run_names), set by start_sweep
        self._cut: dict[
            str, list[str]
        ] = {}  # attempt id -> runs left without their status, deleted before it is recorded

    def _check_writable(self, experiment: str) -> None:
        """A write the sweep would make anyway (the experiment's last-sweep tag), so a user who may read
        but not write (MLflow's default READ permission), or an unwritable SQLite file, is told now,
        before Ray starts, not by a traceback from the first trial's run."""
        try:
            with _fail_fast_http():
                self.client.set_experiment_tag(self.experiment_id, "tokengen.last_sweep_check", str(int(time.time())))
        except Exception as exc:  # noqa: BLE001 - any refused write here means: fix the permission
            text = str(exc)
            if "403" in text or "PERMISSION_DENIED" in text:
                user = os.environ.get(CREDENTIALS[0])
                raise TrackingError(
                    f"user {user!r} may read experiment {experiment!r} at {redacted(self.uri)} but not "
                    "write to it (HTTP 403): ask its admin for EDIT permission"
                ) from None
            raise TrackingError(
                f"cannot write to tracking store {redacted(self.uri)} ({first_line(exc)}): make it "
                "writable or fix tracking.uri"
            ) from None

    def _experiment_id(self, name: str) -> str:
        """The experiment's id, created if missing; another driver creating it at the same moment is fine."""
        found = self.client.get_experiment_by_name(name)
        if found:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=artifact_location(self.uri, name))
        except Exception:  # noqa: BLE001 - lost the race to a concurrent driver: use its experiment
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def answers(self) -> bool:
        """Whether the store can take a write now: a server's health probe (2 s at most); a database is
        assumed up, and a write that fails says otherwise."""
        return server_answers(self.uri) if is_server(self.uri) else True

    @failing_fast
    def finished_keys(self) -> set[str]:
        """Keys of trials that already have a finished child run anywhere in the experiment."""
        return set(self.index().finished)

    def _tags(self, wanted: dict) -> dict[str, dict]:
        """Run id -> tags of the experiment's runs with the wanted tags (a value, or None: present, not empty):
        a database's tables in four queries (tracking/store/tables.py), a server searched page by page."""
        if in_bulk(self.uri):
            with Tables(self.uri) as tables:
                return tables.tags(int(self.experiment_id), wanted)
        where = " and ".join(f"tags.{k} = '{v}'" if v is not None else f"tags.{k} != ''" for k, v in wanted.items())
        return {run.info.run_id: run.data.tags for run in search(self.client, self.experiment_id, where)}

    @failing_fast
    def index(self) -> "StoreIndex":
        """What the experiment already holds: each finished key's fingerprints, every attempt recorded whole,
        and the runs of attempts whose recording was cut short (a full disk, a store gone mid-write)."""
        index = StoreIndex()
        for run_id, tags in self._tags({TRIAL_KEY: None}).items():
            attempt = tags.get(ATTEMPT_ID)
            if attempt and not tags.get(STATUS):  # the status tag comes last: a write cut short lacks it
                index.half_written.setdefault(attempt, []).append(run_id)
                continue
            if attempt:
                index.attempts[attempt] = run_id
            if tags.get(STATUS) == FINISHED and tags.get(TRIAL_KEY):
                index.finished.setdefault(tags[TRIAL_KEY], {})[tags.get("env_fingerprint")] = tags.get("env_facts")
        return index

    @failing_fast
    def attempts_of(self, keys: set[str]) -> dict[str, list[dict]]:
        """Every recorded run of these keys anywhere in the experiment (a reused key's first attempt may be
        another sweep's): trial key -> [{attempt, status, measurement, runtime_cv, slo_met, start_time}]."""
        found: dict[str, list[dict]] = {}
        for run in search(self.client, self.experiment_id, f"tags.{TRIAL_KEY} LIKE '%'"):
            tags = run.data.tags
            if tags.get(TRIAL_KEY) in keys and PARENT_TAG in tags:
                found.setdefault(tags[TRIAL_KEY], []).append(
                    {
                        "attempt": tags.get(ATTEMPT),
                        "status": tags.get(STATUS),
                        "measurement": tags.get("measurement"),
                        "measurement_reasons": tags.get("measurement_reasons"),
                        "runtime_cv": run.data.metrics.get("runtime_cv"),
                        "slo_met": run.data.metrics.get("slo_met"),
                        "start_time": run.info.start_time,
                    }
                )
        return found

    @failing_fast
    def attach_plan(self, files: dict[str, str], metrics: dict[str, float], tags: dict[str, str]) -> None:
        """The sweep's estimate on its parent run before any trial starts: text files as artifacts, its
        totals as metrics, and tags."""
        now = int(time.time() * 1000)
        for name, text in files.items():
            self.client.log_text(self.parent_id, text, name)
        self.client.log_batch(
            self.parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()], synchronous=True
        )
        for key, value in tags.items():
            self.client.set_tag(self.parent_id, key, value)

    @failing_fast
    def start_sweep(
        self,
        name: str,
        config: dict,
        resume: bool,
        planned: list[str] = (),
        reused: list[str] = (),
        names: dict[str, str] | None = None,
    ) -> str:
        """The sweep's parent run (the latest one of this name when resuming, else a new one), with its
        plan: every key it covers, and those finished by earlier runs that this one reuses; `names`:
        each trial's run name (tracking.run_names.run_names of the plan)."""
        self.sweep = name
        self.names = dict(names or {})
        self.parent_id = self._parent(name, config, resume)
        plan = {"planned": list(planned), "reused": list(reused)}
        self.client.log_text(self.parent_id, json.dumps(plan), PLAN_FILE)
        self.client.set_tag(self.parent_id, REUSED_TRIALS, str(len(plan["reused"])))
        return self.parent_id

    def _parent(self, name: str, config: dict, resume: bool) -> str:
        if resume:
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.{SWEEP_PARENT} = '{name}'",
                max_results=1,
                order_by=["attributes.start_time DESC"],
            )
            if runs:
                self.parent_id = runs[0].info.run_id
                self.client.update_run(self.parent_id, status="RUNNING")
                self._close_orphans()
                return self.parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags={SWEEP_PARENT: name, SWEEP_TAG: name})
        self.client.log_text(run.info.run_id, json.dumps(config, indent=2, default=str), SWEEP_CONFIG_FILE)
        return run.info.run_id

    def _close_orphans(self) -> None:
        """Child runs a killed driver left half-written: KILLED, and never counted as finished."""
        orphans = search(
            self.client, self.experiment_id, f"tags.{PARENT_TAG} = '{self.parent_id}' and attributes.status = 'RUNNING'"
        )
        for run in orphans:
            self.client.set_terminated(run.info.run_id, "KILLED")

    def cut_short(self, attempt: str, run_ids: list[str]) -> None:
        """Runs whose recording of `attempt` was cut short (no status tag: a full disk, a store gone mid-write),
        found by a rerun's index: deleted when the attempt is recorded, so it is recorded whole, once."""
        self._cut.setdefault(attempt, []).extend(run_ids)

    @failing_fast
    def record_trial(self, record: TrialRecord) -> str:
        """One child run with the trial's params, metrics, tags and artifacts (its result.json the record's flat
        dict); FAILED if it failed. A try cut short by the store (full, gone) leaves a run without its status tag:
        the next try of the same attempt deletes it first, and a rerun's index finds any it could not."""
        flat = record.to_dict()
        tags = tags_of(record, self.sweep)
        status = tags.pop(STATUS)  # set last: a run cut short never counts as finished
        attempt = record.result.attempt_id
        while self._cut.get(attempt):  # one run per key and attempt: what an earlier try left goes first
            self.client.delete_run(self._cut[attempt][-1])
            self._cut[attempt].pop()
        run = self.client.create_run(
            self.experiment_id, run_name=run_name(flat, self.names), tags={PARENT_TAG: self.parent_id, **tags}
        )
        run_id = run.info.run_id
        if attempt:
            self._cut[attempt] = [run_id]  # until its status tag is set
        files = {RESULT_FILE: json.dumps(flat, indent=2).encode()}
        if record.log:
            files[TRIAL_LOG] = record.log.encode()
        # one folder for all (log_text makes one each); log_artifact, not log_artifacts, writes each file whole
        # (staged, then renamed): a disk that fills mid-file leaves no part of it and names its destination
        # the run's own repository: MLflow's client would read the whole run back from the store to find it
        repository = get_artifact_repository(run.info.artifact_uri, tracking_uri=self.client.tracking_uri)
        with tempfile.TemporaryDirectory() as tmp:
            for name, blob in {**files, **record.files}.items():
                Path(tmp, name).write_bytes(blob)
                repository.log_artifact(str(Path(tmp, name)))
        # the files, the run's end, then one log_batch (MLflow commits its params, metrics, then tags): the status
        # tag last, so a run with its status holds everything and has ended; one without it was cut short
        self.client.set_terminated(run_id, "FINISHED" if status == FINISHED else "FAILED")
        self.client.log_batch(
            run_id,
            metrics=metrics_of(record, int(time.time() * 1000)),
            params=params_of(record),
            tags=[RunTag(STATUS, status)],
            synchronous=True,
        )
        self._cut.pop(attempt, None)
        return run_id

    @failing_fast
    def kill_sweep(self) -> None:
        """The sweep was interrupted: its run says so (a rerun of the same command resumes it)."""
        self.client.set_terminated(self.parent_id, "KILLED")

    @failing_fast
    def fail_sweep(self, why: str) -> None:
        """The sweep stopped on something it could not write (a full disk): its run says why, FAILED."""
        self.client.set_tag(self.parent_id, STOPPED, why[:MAX_PARAM_CHARS])
        self.client.set_terminated(self.parent_id, "FAILED")

    @failing_fast
    def end_sweep(self, failed: int) -> None:
        self.client.set_tag(self.parent_id, FAILED_TRIALS, str(failed))
        self.client.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")
