"""Resume: which planned trials run again. A key finished in the store or in the journal is reused only
where the node that would run it now gives the same environment fingerprint; results an earlier driver
journaled but did not record are queued to be recorded first, without running their trials again.
`outbox` is the driver's (sweeps/delivery/outbox.py), taken as it is: planning imports no later stage."""

from __future__ import annotations

from sweeps.planning.config import SweepConfig
from sweeps.planning.fingerprints import cluster_fingerprints, environment_change, local_fingerprints
from sweeps.planning.grid import GridPlan, PlannedTrial
from sweeps.say import say
from tokengen.contract.names import FINISHED


def expected_fingerprints(plan: GridPlan, config: SweepConfig) -> dict[str, set]:
    """key -> the environment fingerprints the trial may be measured with now (sweeps/planning/fingerprints.py); on a cluster, Ray is joined already."""
    cpus = config.sweep.cpus_per_trial
    if config.ray.address:  # the driver has joined the cluster
        return cluster_fingerprints(plan.trials, cpus)
    return local_fingerprints(plan.trials, cpus, config.ray.num_cpus)


def trials_to_run(plan: GridPlan, outbox, resume: bool, expected: dict[str, set]) -> list[PlannedTrial]:
    """The plan less, when resuming, every key finished in MLflow or in the journal with a fingerprint
    this sweep would measure it with again (`expected`); a key finished elsewhere runs here again.
    Results an earlier run journaled but did not record are queued to be recorded first, whatever
    `resume` says."""
    index = outbox.recorder.index()
    earlier = outbox.take_over(index.attempts, index.half_written, {t.key for t in plan.trials})
    if outbox.outside:
        say(
            f"journal: {outbox.outside} result(s) in {outbox.journal.path} are for keys outside this sweep's plan: "
            "left there, not recorded (rerun the grid that planned them to record them)"
        )
    if outbox.restored:
        say(
            f"journal: {outbox.restored} result(s) the journal marks recorded are missing from the store: "
            "recording them again from the journal, without running their trials again"
        )
    if len(earlier) > outbox.restored:
        say(
            f"journal: {len(earlier) - outbox.restored} result(s) of an earlier run are not yet recorded: recording "
            "them first, without running their trials again"
        )
    if not resume:
        return plan.trials
    finished = {key: dict(prints) for key, prints in index.finished.items()}
    for record in earlier:
        if record.status == FINISHED:
            finished.setdefault(record.key, {})[record.result.env_fingerprint] = record.result.env_facts
    trials = [t for t in plan.trials if not finished.get(t.key, {}).keys() & expected.get(t.key, {}).keys()]
    elsewhere = [t for t in trials if t.key in finished]
    say(
        f"resume: skipping {len(plan.trials) - len(trials)} trial(s) already finished in the experiment"
        + (
            f"; measuring {len(elsewhere)} again that finished in another environment "
            f"({environment_change(elsewhere, finished, expected)})"
            if elsewhere
            else ""
        )
    )
    return trials
