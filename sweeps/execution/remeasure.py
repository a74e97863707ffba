"""Measure again what was disturbed: after a sweep's trials, each finished one judged noisy or
contended (tokengen/measure/interference.py) runs again, up to `sweep.remeasure` more attempts.

A key is done once it has an ok attempt or its rounds are used up. Every attempt is a result of
its own: journaled, recorded as its own MLflow run with the tag `attempt` (1 for the first), and
the report speaks for the key with its best attempt (tracking.measurement.best: ok first, then
the lowest runtime_cv) and says which. The attempts are read back from MLflow, so a sweep that
resumes after a driver died between rounds (or a rerun with more rounds) picks up where they were;
a rerun with sweep.resume=false starts each key's attempts afresh. A failed trial is never run
again (its own error would come back); a trial recorded before trials were judged has no verdict
and is left as it is.

Tests make a trial look contended without a busy machine through SWEEPS_TEST_CONTENDED
("VARIANT[@ATTEMPT],..."): the driver adds the evidence of every core taken by others to those
results and judges them again, as the trial's own Watch would have.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable

from sweeps.planning.config import SweepConfig
from sweeps.say import say
from tokengen.contract.names import FINISHED
from tokengen.contract.spec import AUTO_RUNS
from tokengen.contract.trial_record import TrialRecord
from tokengen.measure.interference import record_fields
from tracking.measurement import OK, attempt_of, best, count, judged, latest_series, most_common

TEST_CONTENDED = "SWEEPS_TEST_CONTENDED"


@dataclass
class Remeasured:
    """What the rounds did: the new attempts' records, and for the sweep's last line what became of them."""

    records: list[TrialRecord] = field(default_factory=list)
    keys: set = field(default_factory=set)  # keys measured again
    now_ok: set = field(default_factory=set)  # of those, keys whose best attempt is ok after the rounds
    rounds: int = 0

    @property
    def said(self) -> str:
        """'; 3 remeasured (2 now ok)' for the sweep's last line, '' when none was."""
        if not self.keys:
            return ""
        return f"; {len(self.keys)} remeasured ({len(self.now_ok)} now ok)"


def stamp(record: TrialRecord, attempt: int) -> TrialRecord:
    """The record with the sweep's attempt number, and the test hook's evidence where it asks for some."""
    record = record.with_result(attempt=attempt)
    wanted = [part.strip() for part in os.environ.get(TEST_CONTENDED, "").split(",") if part.strip()]
    for part in wanted:
        variant, _, at = part.partition("@")
        if record.spec.variant == variant and (not at or int(at) == attempt) and record.status == FINISHED:
            cores = record.result.interference_cores or 1
            record = rejudge(record, interference_others_cores=float(cores))
    return record


def rejudge(record: TrialRecord, **evidence) -> TrialRecord:
    """The record with its verdict judged again, `evidence` fields replacing what its Watch saw."""
    result = record.result
    seen = {k: v for k, v in result.to_dict().items() if k.startswith("interference_")}
    auto = record.spec.runs == AUTO_RUNS
    ci, target = result.runtime_ci_rel, record.spec.target_ci
    reached = (ci is not None and ci <= target) if auto else None
    return record.with_result(**record_fields({**seen, **evidence}, cv=result.runtime_cv, target_ci_reached=reached))


def pending(runs: list[dict], rounds: int) -> int | None:
    """The next attempt number for a key whose latest series is finished but not ok and has rounds
    left; None when it is done (an ok attempt, rounds used up, failed, or never judged)."""
    series = latest_series(runs)
    if not series:
        return None
    chosen = best(series)
    if chosen.get("status") != FINISHED or judged(chosen.get("measurement")) in (None, OK):
        return None
    made = max(attempt_of(r.get("attempt")) for r in series)
    return made + 1 if made < 1 + rounds else None


def remeasure(config: SweepConfig, plan, outbox, execute: Callable[[list], list[TrialRecord]]) -> Remeasured:
    """Up to sweep.remeasure rounds: each runs, through `execute`, the plan's keys that pending() names."""
    rounds = int(config.sweep.remeasure or 0)
    done = Remeasured()
    if rounds <= 0:
        return done
    if outbox.unrecorded:  # the attempts so far are read back from the store: it must hold them all
        say(
            f"remeasure: not now, {outbox.unrecorded} result(s) wait for the tracking store (rerunning the same "
            "command records them, then remeasures)"
        )
        return done
    keys = {t.key for t in plan.trials}
    history = defaultdict(list, outbox.recorder.attempts_of(keys))
    for round_ in range(1, rounds + 1):
        again = []
        for trial in plan.trials:
            attempt = pending(history.get(trial.key, []), rounds)
            if attempt is not None:
                again.append(replace(trial, attempt=attempt))
        if not again:
            break
        chosen = [best(history[trial.key]) for trial in again]
        top = most_common(
            count([c.get("measurement") for c in chosen], [c.get("measurement_reasons") for c in chosen])[1]
        )
        say(f"remeasure round {round_} of {rounds}: {len(again)} trial(s) not ok" + (f" ({top})" if top else ""))
        records = execute(again)
        done.records += records
        done.rounds = round_
        for record in records:
            result = record.result
            done.keys.add(result.key)
            history[result.key].append(
                {
                    "attempt": result.attempt,
                    "status": result.status,
                    "measurement": result.measurement,
                    "measurement_reasons": result.measurement_reasons,
                    "runtime_cv": result.runtime_cv,
                    "start_time": float("inf"),  # the newest of its series
                }
            )
        if outbox.unrecorded:
            break
    done.now_ok = {k for k in done.keys if judged(best(history[k]).get("measurement")) == OK}
    return done
