"""The dry run's tables: the plan as Markdown (per variant, per device, the memory guard's peaks, the wall on the
workers), plan.csv and plan.md, and the totals a sweep's parent run records as metrics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sweeps.planning.config import SweepConfig
from sweeps.pricing.priced import PLAN_COLUMNS, REUSED, Priced, money
from tokengen.contract.names import PLAN_ESTIMATE_FILE as PLAN_CSV
from tokengen.contract.names import PLAN_TEXT_FILE as PLAN_MD
from tracking.report.markdown import to_markdown

MEMORY_NOTE = (
    "Each trial's estimated peak (tokengen/contract/memory_estimate.py; plan.csv: memory_rss_gb, memory_cuda_gb), the "
    "largest per variant: rss_gb the trial process's resident memory (torch and transformers included), cuda_gb "
    "what CUDA's allocator reserves (n/a on the CPU). A local Ray's sweep refuses a trial above sweep.memory_guard "
    "of the free memory."
)
ESTIMATE_NOTE = (
    "estimated_s: seconds the trials hold a worker, the sum of their parts: warmup, timed, instrumented (the per-step "
    "timer's run) and profiled runs, the compile (the first run's extra), the model's build, the harness around each "
    "trial process (its start-up and exit, the Ray task), remeasure rounds where sweep.remeasure is set, and start_s, "
    "a worker's start-up, on the first trial each worker takes (columns left out are zero); range_s: the model's "
    "low..high; basis: history (this very trial ran before), fit (its family's law) or prior (first "
    "principles, rescaled by the nearest runs)."
)
DEVICE_NOTE = "Prices from sweep.prices (USD per device-hour; `cpu`: one CPU trial's node)."
HOURS_GO = {"timed_s": "timed runs", "compile_s": "compiles", "remeasure_s": "remeasure rounds", "warmup_s": "warmups"}
HOURS_GO |= {"instrumented_s": "instrumented runs", "profiled_s": "profiled runs", "build_s": "model builds"}
HOURS_GO |= {"harness_s": "the harness", "start_s": "worker start-ups"}


def where_hours_go(runs: pd.DataFrame) -> str:
    """'Device-hours in timed runs: 46.9% (compiles 16.5%, ...)': what measures, and what the rest pays for."""
    total = float(runs["estimated_s"].sum()) or 1.0
    shares = {name: float(runs[column].sum()) / total for column, name in HOURS_GO.items() if column in runs}
    rest = ", ".join(
        f"{name} {share:.1%}" for name, share in shares.items() if name != "timed runs" and share >= 0.0005
    )
    return f"Device-hours in timed runs: {shares.get('timed runs', 0.0):.1%}" + (f" ({rest})" if rest else "")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.1f} s"
    return f"{seconds / 60:,.1f} min" if seconds < 2 * 3600 else f"{seconds / 3600:,.1f} h"


def _figure(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 100):
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def shown(frame: pd.DataFrame, **digits: int) -> str:
    """The frame as Markdown, numbers with thousands separators (a full grid's seconds run into the 100,000s)."""
    out = frame.copy().astype(object)
    for column in frame.columns:
        if pd.api.types.is_numeric_dtype(frame[column]) or frame[column].map(lambda v: isinstance(v, float)).any():
            out[column] = [v if isinstance(v, str) else _figure(v, digits.get(column, 1)) for v in frame[column]]
    return to_markdown(out)


def render(priced: Priced, config: SweepConfig, dry: bool = True) -> str:
    """The plan as Markdown: what the dry run prints and plan.md holds (`dry`: from a dry run, else the plan a
    real sweep recorded before its first trial)."""
    runs, (wall, bound), cost, described = priced.runs, priced.wall, priced.cost, priced.plan.describe()
    lines = [
        f"# Plan of sweep `{config.sweep.name}` "
        + ("(dry run: nothing ran)" if dry else "(made before its first trial)"),
        "",
        f"{len(priced.table)} planned trial(s): {len(runs)} to run, {len(priced.table) - len(runs)} reused "
        "(unverified: a key finished in the store, its environment not checked)"
        + ("" if priced.resume else "; sweep.resume=false runs them all")
        + ".",
        f"History: {len(priced.history.frame)} finished run(s) in {priced.history.source}, experiment "
        f"`{config.tracking.experiment}`; {len(priced.history.trusted())} measured ok fit the cost model.",
    ]
    if priced.journaled:
        lines.append(
            f"Journal: {priced.journaled} result(s) of an earlier driver wait to be recorded (a real run "
            "records them first, without running their trials)."
        )
    lines += [""] + [f"- {line}" for line in described] + ([""] if described else [])
    variants = priced.by_variant()
    variants.insert(
        4, "range_s", [f"{_figure(lo)}-{_figure(hi)}" for lo, hi in zip(variants["low_s"], variants["high_s"])]
    )
    unused = [p for p in ("profiled_s", "remeasure_s") if not variants[p].any()]
    variants = variants.drop(columns=["low_s", "high_s", *unused]).rename(columns={"reused_unverified": REUSED})
    lines += ["## Per variant", "", ESTIMATE_NOTE, "", shown(variants, device_hours=3), ""]
    devices = priced.by_device()
    if not devices.empty:
        digits = dict(device_hours=3, low_hours=3, high_hours=3, usd_per_hour=2, cost_usd=2)
        lines += ["## Device-hours and cost per accelerator type", "", DEVICE_NOTE, "", shown(devices, **digits), ""]
    lines += ["## Memory", "", MEMORY_NOTE, "", shown(memory_table(priced.table), rss_gb=2, cuda_gb=2), ""]
    lines += [
        "## Wall on the workers",
        "",
        f"Workers: {priced.workers.source}. Trials are submitted longest first (LPT); no schedule beats "
        "max(total / workers, longest trial).",
        "",
    ]
    walls = priced.walls()
    lines += [shown(walls), ""] if not walls.empty else []
    lines += [
        f"**Total**: {len(runs)} trial(s), {priced.device_hours:,.3f} device-hours "
        f"({runs['low_s'].sum() / 3600:,.3f}-{runs['high_s'].sum() / 3600:,.3f}), "
        + (money(cost) if cost is not None else f"cost n/a (no price for {', '.join(priced.unpriced)})")
        + f", wall about {duration(wall)} (no schedule beats {duration(bound)}).",
        "",
        where_hours_go(runs),
        "",
    ]
    refusal, limits = priced.refusal(), priced.limits.set()
    if refusal:
        lines += [f"A real run would be refused: {refusal}.", ""]
    elif limits:
        lines += ["Within " + ", ".join(f"{setting}={v:g}" for setting, v in limits.items()) + ".", ""]
    if priced.notes:
        lines += ["Assumptions:", ""] + [f"- {note}" for note in priced.notes] + [""]
    lines.append(f"Planned in {priced.seconds:.2f} s (plan, read the store, fit once, estimate each trial).")
    return "\n".join(lines) + "\n"


def memory_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant, the largest estimated peak of its trials (plan.csv has every trial's)."""
    groups = table.groupby("variant", sort=False)
    rows = [(v, len(g), g["memory_rss_gb"].max(), g["memory_cuda_gb"].max()) for v, g in groups]
    return pd.DataFrame(rows, columns=["variant", "trials", "rss_gb", "cuda_gb"])


def write_plan(priced: Priced, config: SweepConfig, out: str | Path = "reports") -> tuple[Path, Path, str]:
    directory = Path(out) / str(config.sweep.name).replace("/", "_")
    directory.mkdir(parents=True, exist_ok=True)
    text, csv, md = render(priced, config), directory / PLAN_CSV, directory / PLAN_MD
    priced.table[list(PLAN_COLUMNS)].to_csv(csv, index=False)
    md.write_text(text)
    return csv, md, text


def plan_metrics(priced: Priced) -> dict[str, float]:
    """The estimate's totals as the parent run's metrics (the trials this run will run)."""
    runs, (wall, bound) = priced.runs, priced.wall
    sums = {"estimated_s": "estimated_s", "estimated_low_s": "low_s", "estimated_high_s": "high_s"}
    metrics = {name: runs[column].sum() for name, column in {**sums, "estimated_in_trial_s": "in_trial_s"}.items()}
    metrics |= {"estimated_wall_s": wall, "estimated_wall_lower_bound_s": bound}
    metrics |= {"estimated_device_hours": priced.device_hours, "estimated_trials": len(runs)}
    if priced.cost is not None:
        metrics["estimated_cost_usd"] = priced.cost
    return {k: float(v) for k, v in metrics.items()}
