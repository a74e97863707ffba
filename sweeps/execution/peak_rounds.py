"""A peak search's later rounds: after the first (every search's low and high rate), one middle per search a round.

Each round asks every search (sweeps/planning/peak_search.py) for its next rate, runs the probes not already
finished (a resumed search reuses those in the store, as any sweep does: sweeps/planning/resume.py) through the
driver's `execute`, and reads every probe's verdict back: this run's records first, the store's for probes an
earlier run finished. A probe that failed to run, or left no verdict, ends its search and says why. The rounds end
when every search has, and each search's figure is said in one line.

Tests make a search's verdicts certain without a quiet machine through SWEEPS_TEST_PEAK_RPS=X: a probe at X rps or
below meets the SLO and one above fails, its figures otherwise as measured (`test_verdict`).
"""

from __future__ import annotations

import os
from typing import Callable

from sweeps.planning.config import SweepConfig
from sweeps.planning.grid import GridPlan, PlannedTrial
from sweeps.planning.peak_search import Search, SearchSettings, probe
from sweeps.planning.resume import expected_fingerprints, trials_to_run
from sweeps.say import say
from tokengen.contract.names import FINISHED
from tokengen.contract.trial_record import TrialRecord

TEST_PEAK = "SWEEPS_TEST_PEAK_RPS"


def test_verdict(record: TrialRecord) -> TrialRecord:
    """A probe's record with the test hook's verdict where SWEEPS_TEST_PEAK_RPS is set, else as it is."""
    peak = os.environ.get(TEST_PEAK)
    if not peak or not record.result.peak_search or record.status != FINISHED:
        return record
    return record.with_result(slo_met=record.spec.request_rate <= float(peak))


def search_rounds(
    config: SweepConfig,
    plan: GridPlan,
    outbox,
    records: list[TrialRecord],
    execute: Callable[[list], list],
    remeasured: list[TrialRecord] = (),
) -> None:
    """Run the searches of `plan` to their end; `records`: this run's results so far (the first round's), to which
    `execute` adds each round's; `remeasured`: the first round's later attempts (the newest verdict counts)."""
    settings = SearchSettings.of(config.sweep)
    if settings is None:
        return
    if outbox.unrecorded:
        say(
            f"peak search: not now, {outbox.unrecorded} result(s) wait for the tracking store (rerunning the same "
            "command records them, then goes on with the search)"
        )
        return
    seeds = {t.search: t for t in plan.trials if t.probe == 1}
    searches = {ident: Search(ident, settings.low, settings.high, settings.precision) for ident in seeds}
    asked: dict[str, PlannedTrial] = {t.key: t for t in plan.trials}
    rounds = 1
    while True:
        read_verdicts(searches, asked, [*records, *remeasured], outbox)
        wanted = [
            probe(seeds[s.id], rate, s.id, len(s.verdicts) + 1) for s in searches.values() for rate in s.next_rates()
        ]
        if not wanted or outbox.unrecorded:
            break
        rounds += 1
        asked.update({t.key: t for t in wanted})
        round_plan = GridPlan(trials=wanted)
        to_run = trials_to_run(round_plan, outbox, config.sweep.resume, expected_fingerprints(round_plan, config))
        say(f"peak search round {rounds}: {len(wanted)} probe(s), {len(to_run)} to run")
        if to_run:
            execute(to_run)
    for search in searches.values():
        seed = seeds[search.id]
        say(f"peak search {seed.spec.variant} [{search.id}]: {search.outcome()}, {len(search.verdicts)} probe(s)")


def read_verdicts(searches: dict[str, Search], asked: dict[str, PlannedTrial], records, outbox) -> None:
    """Each asked probe's verdict not yet read into its search: met the SLO or not; a probe that failed, or has no
    verdict where one was due, stops its search. The store is asked only for pending probes this run did not run."""
    latest = {record.key: record for record in records}
    pending = {
        key: trial
        for key, trial in asked.items()
        if trial.spec.request_rate not in searches[trial.search].verdicts and not searches[trial.search].stopped
    }
    missing = {key for key in pending if key not in latest}
    stored = outbox.recorder.attempts_of(missing) if missing else {}
    for key, trial in pending.items():
        search, rate = searches[trial.search], trial.spec.request_rate
        if search.stopped:  # by an earlier probe of it, just now
            continue
        if key in latest:
            record = latest[key]
            if record.status != FINISHED:
                search.stopped = f"the probe at {rate:g} rps failed ({record.result.error_type})"
            elif record.result.slo_met is None:
                search.stopped = f"the probe at {rate:g} rps has no SLO verdict"
            else:
                search.verdicts[rate] = bool(record.result.slo_met)
            continue
        finished = [
            run for run in stored.get(key, []) if run.get("status") == FINISHED and run.get("slo_met") is not None
        ]
        if finished:
            newest = max(finished, key=lambda run: run.get("start_time") or 0)
            search.verdicts[rate] = bool(newest["slo_met"])
        else:
            search.stopped = f"the probe at {rate:g} rps left no result"
