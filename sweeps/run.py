"""`python -m sweeps.run +grid=NAME [overrides]`: expand the grid, run it on Ray, record it in MLflow.

`main` is the thin Hydra entry point; `run_sweep(config)` is the plain function tests call with a
config from `hydra.compose`. Everything that can be wrong with the config or the tracking store is
found before Ray starts; a failed trial never stops the others, and the exit status is non-zero
when any failed.
"""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig, OmegaConf

from sweeps.config import register
from sweeps.grid import GridPlan, PlannedTrial, expand
from sweeps.progress import Progress
from sweeps.schedule import ClusterError, ScheduleSettings, check_cluster, connect, schedule
from tokengen.names import FINISHED
from tokengen.spec import SpecError


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plan_sweep(config: dict) -> GridPlan:
    name = str(config["sweep"]["name"])
    if not name or any(c in name for c in "'\"/\\"):
        raise SpecError(f"sweep.name={name!r}: use a name without quotes or slashes (it names runs and report folders)")
    if not config.get("grid"):
        raise SpecError("no grid: append one with +grid=NAME (smoke, article, full, scaling)")
    return expand(config["trial"], config["grid"], config["sweep"]["accelerator_types"])


def trial_record(trial: PlannedTrial, raw: dict) -> dict:
    """The child's record with the sweep's view of the trial: spec, key, pinned GPU type."""
    return {**trial.spec.to_dict(), **raw, "key": trial.key, "accelerator_type": trial.accelerator_type}


def execute(trials: list[PlannedTrial], config: dict, recorder, plan: GridPlan) -> list[dict]:
    """Run the trials on Ray, recording each in MLflow the moment it arrives; ClusterError if it cannot."""
    sweep = config["sweep"]
    connect(config["ray"]["address"], config["ray"].get("num_cpus"), config["ray"].get("num_gpus"))
    settings = ScheduleSettings(
        workdir=sweep["workdir"], trial_timeout_s=sweep["trial_timeout_s"], retries=sweep["retries"],
        cpus_per_trial=sweep["cpus_per_trial"], inductor_cache=sweep["inductor_cache"], sweep=sweep["name"],
    )
    node_cpus = check_cluster(trials, settings)
    start_sweep(recorder, config, plan, trials)
    records: list[dict] = []
    progress = Progress(len(trials))

    def on_result(trial: PlannedTrial, raw: dict) -> None:
        record = trial_record(trial, raw)
        recorder.record_trial(record)
        records.append(record)
        progress.advance(failed=record["status"] != FINISHED)

    try:
        schedule(trials, settings, node_cpus, on_result, progress.update)
    finally:
        progress.close()
    recorder.end_sweep(sum(r["status"] != FINISHED for r in records))
    return records


def start_sweep(recorder, config: dict, plan: GridPlan, trials: list[PlannedTrial]) -> None:
    """The sweep's parent run, with its plan: the keys it covers and those it reuses."""
    running = {t.key for t in trials}
    planned = [t.key for t in plan.trials]
    recorder.start_sweep(config["sweep"]["name"], config, resume=config["sweep"]["resume"], planned=planned,
                         reused=[k for k in planned if k not in running])


def publish_report(config: dict, recorder, records: list[dict]) -> None:
    """Build the sweep's report from MLflow (every trial of its plan), attach it to its run, print its main table."""
    from tracking.report import build_report
    from tracking.summary import summary_table

    uri, name = config["tracking"]["uri"], config["sweep"]["name"]
    try:
        report = build_report(uri, config["tracking"]["experiment"], name, "reports")
        for path in report.files:
            recorder.log_sweep_artifact(str(path), "report")
        print(report.main)
        _say(f"report: {report.directory / 'report.md'}, attached to the sweep's run")
    except Exception as exc:  # noqa: BLE001 - every trial is already recorded; the report can be rebuilt
        first = (str(exc).splitlines() or [exc.__class__.__name__])[0][:300]
        if not records:
            _say(f"report: none ({first})")
            return
        _say(f"report: not built ({first}): retry with python -m tracking.report --uri {uri} --sweep {name}")
        print(summary_table(records).to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def run_sweep(config: DictConfig | dict) -> int:
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    from tracking.recorder import Recorder, TrackingError

    sweep = config["sweep"]
    started = time.perf_counter()  # the sweep's wall: the store, Ray, every trial and MLflow write
    try:
        plan = plan_sweep(config)
        recorder = Recorder(config["tracking"]["uri"], config["tracking"]["experiment"])
    except (SpecError, TrackingError) as exc:
        _say(f"error: {exc}")
        return 2
    for line in plan.describe():
        _say(line)
    trials = plan.trials
    if sweep["resume"]:
        finished = recorder.finished_keys()
        trials = [t for t in trials if t.key not in finished]
        _say(f"resume: skipping {len(plan.trials) - len(trials)} trial(s) already finished in the experiment")
    _say(f"sweep {sweep['name']}: {len(trials)} trial(s) to run")

    try:
        records = execute(trials, config, recorder, plan) if trials else []
    except ClusterError as exc:
        _say(f"error: {exc}")
        return 2
    if not trials:  # every trial reused: the sweep still gets its parent run and its report
        start_sweep(recorder, config, plan, trials)
        recorder.end_sweep(0)
    wall = time.perf_counter() - started
    publish_report(config, recorder, records)
    failed = [r for r in records if r["status"] != FINISHED]
    _say(f"sweep {sweep['name']}: {len(records) - len(failed)} finished, {len(failed)} failed, in {wall:.1f} s")
    for record in failed:
        _say(f"  failed {record['key']} {record.get('variant')}: {record['error_type']}: {record['error_message']}")
    return 1 if failed else 0


register()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(config: DictConfig) -> None:
    status = run_sweep(config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
