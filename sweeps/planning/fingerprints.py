"""The environment fingerprint each planned trial would be measured with, learned before scheduling.

Resume reuses a finished key only where the fingerprint it finished with is one a node that may run
it gives now (tokengen/contract/machine/fingerprint.py): another thread count, torch, GPU, driver, measuring
code or checkpoint measures again, and the facts beside each fingerprint name what differs. A local
Ray's node is this machine, read here without starting Ray; a cluster's nodes each answer for
themselves through a small task pinned to them.
"""

from __future__ import annotations

import os

from sweeps.planning.grid import PlannedTrial
from tokengen.contract.fact_rules import draft_for
from tokengen.contract.machine.fingerprint import as_text, differences, facts, fingerprint, from_text


def trial_threads(trial: PlannedTrial, cpus_per_trial: int | None, node_cpus: int) -> int:
    """The torch threads the trial gets: the CPUs its Ray task holds (sweeps/execution/schedule.py task_options)."""
    if trial.spec.device == "cuda":
        return cpus_per_trial or 1
    return cpus_per_trial or node_cpus


def facts_asked(trial: PlannedTrial, cpus_per_trial: int | None, node_cpus: int) -> tuple:
    """What `facts` is asked for a trial on a node of `node_cpus` CPUs: its device, threads, model and draft model."""
    spec = trial.spec
    return spec.device, trial_threads(trial, cpus_per_trial, node_cpus), spec.model, draft_for(spec)


def described(environment: dict) -> tuple[str, str]:
    """(fingerprint, its facts as text): the first to match, the second to name a difference."""
    return fingerprint(environment), as_text(environment)


def local_fingerprints(trials: list[PlannedTrial], cpus_per_trial: int | None, num_cpus: int | None) -> dict:
    """key -> {fingerprint: facts text} on this machine, for a local Ray of `num_cpus` CPUs (default: all)."""
    node_cpus = num_cpus or os.cpu_count() or 1
    return {t.key: dict([described(facts(*facts_asked(t, cpus_per_trial, node_cpus)))]) for t in trials}


def cluster_fingerprints(trials: list[PlannedTrial], cpus_per_trial: int | None) -> dict:
    """key -> {fingerprint: facts text} of every alive node that may run the trial, each computed on its node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def node_facts(wanted: list[tuple]) -> list[tuple[str, str]]:
        return [described(facts(*asked)) for asked in wanted]

    expected: dict[str, dict] = {t.key: {} for t in trials}
    for node in (n for n in ray.nodes() if n.get("Alive")):
        resources = node["Resources"]
        able = [t for t in trials if _may_run(t, resources)]
        if not able:
            continue
        wanted = [facts_asked(t, cpus_per_trial, int(resources.get("CPU", 1))) for t in able]
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        for trial, (value, text) in zip(able, ray.get(node_facts.options(scheduling_strategy=strategy).remote(wanted))):
            expected[trial.key][value] = text
    return expected


def _may_run(trial: PlannedTrial, resources: dict) -> bool:
    if trial.accelerator_type:
        return f"accelerator_type:{trial.accelerator_type}" in resources
    return resources.get("GPU", 0) > 0 if trial.spec.device == "cuda" else resources.get("CPU", 0) > 0


def environment_change(trials: list[PlannedTrial], finished: dict, expected: dict) -> str:
    """What differs between where the trials finished and where they would run now, as `code 1a.. vs 2b..;
    threads 1 vs 2`, each difference once (tokengen/contract/machine/fingerprint.py names them)."""
    named: dict[str, None] = {}
    for trial in trials:
        now = [from_text(text) for text in expected.get(trial.key, {}).values()]
        for text in finished[trial.key].values():
            for difference in (d for theirs in now for d in differences(from_text(text), theirs)):
                named[difference] = None
    return "; ".join(named) or "threads, versions, device, code or model files"
