"""A priced sweep: every planned trial with its estimate in submission order (longest first), the pools' workers
and walls, the totals and the budget guard. A pool's wall is LPT's (each trial, longest first, to the worker free
soonest: within 4/3 of the best schedule, Graham 1969); no schedule beats max(total / workers, longest)."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from sweeps.planning.config import SweepSettings
from sweeps.planning.grid import GridPlan, PlannedTrial
from sweeps.pricing.workers import Workers
from tokengen.contract.machine.gpus import price_per_hour
from tokengen.contract.spec import SPEC_FIELDS
from tracking.store.history import History

RUN, REUSED = "run", "reused (unverified)"
PARTS = tuple("warmup_s timed_s instrumented_s profiled_s compile_s build_s harness_s remeasure_s start_s".split())
"""Where a trial's estimated seconds go; they add up to estimated_s."""
PLAN_COLUMNS = (
    *("order", "key", *SPEC_FIELDS),
    *"accelerator_type action device_type pool estimated_s low_s high_s basis in_trial_s".split(),
    *(*PARTS, "memory_rss_gb", "memory_cuda_gb"),
)
SPANS = ["estimated_s", "low_s", "high_s"]
DEVICE_COLUMNS = "device trials device_hours low_hours high_hours usd_per_hour cost_usd cost_range_usd".split()


@dataclass(frozen=True)
class Schedule:
    seconds: float  # LPT's makespan
    lower_bound: float  # max(total / workers, longest): no schedule finishes sooner
    worker: list  # worker of each estimate, in the estimates' order


def makespan(estimates: Iterable, workers: int) -> Schedule:
    """LPT's schedule of `estimates` (Estimates or seconds) on `workers` identical workers."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    seconds = [float(getattr(e, "seconds", e)) for e in estimates]
    free = [(0.0, w) for w in range(workers)]  # (time the worker is free, worker)
    worker = [0] * len(seconds)
    for i in sorted(range(len(seconds)), key=lambda i: -seconds[i]):  # longest first, ties in the given order
        at, worker[i] = heapq.heappop(free)
        heapq.heappush(free, (at + seconds[i], worker[i]))
    bound = max(sum(seconds) / workers, max(seconds, default=0.0))
    return Schedule(max(at for at, _ in free), bound, worker)


@dataclass(frozen=True)
class Limits:
    """The budget guard's limits, as the sweep set them; None: no limit."""

    device_hours: float | None = None  # sweep.max_device_hours
    cost: float | None = None  # sweep.max_cost, USD at sweep.prices

    @classmethod
    def of(cls, sweep: SweepSettings) -> Limits:
        return cls(device_hours=sweep.max_device_hours, cost=sweep.max_cost)

    def set(self) -> dict[str, float]:
        """The limits set, by the setting that sets each (`sweep.max_cost`), as a line names them."""
        named = {"sweep.max_device_hours": self.device_hours, "sweep.max_cost": self.cost}
        return {setting: value for setting, value in named.items() if value is not None}


def money(usd: float) -> str:
    """Dollars with cents, or three significant figures below a dollar (a smoke sweep costs fractions of a cent)."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"


@dataclass
class Priced:
    """Every planned trial with its estimate (table: PLAN_COLUMNS, put in submission order on creation); the pools'
    workers; what the totals are read against."""

    plan: GridPlan
    table: pd.DataFrame
    workers: Workers
    history: History
    prices: dict
    resume: bool
    limits: Limits
    notes: list = field(default_factory=list)  # assumptions the plan rests on
    starts: dict = field(default_factory=dict)  # pool -> a worker's start-up (Span), paid by its first trial
    journaled: int = 0  # results an earlier driver journaled and did not record: recorded, not run
    seconds: float = 0.0  # planning wall: plan, history, fit, every estimate
    nominal_cpu: bool = False  # CPU trials priced at hardware.NOMINAL, not this host's calibration

    def __post_init__(self):
        """Trials to run longest first (numbered), then the reused ones; the first trial each worker of a pool takes
        pays the worker's start-up (start_s), the others none."""
        table = self.table.copy()
        table[SPANS] = table[SPANS].sub(table["start_s"], axis=0)  # a start-up charged before, taken off
        table = table.assign(start_s=0.0, _run=table["action"] == RUN, _pos=range(len(table)))
        table = table.sort_values(["_run", "estimated_s", "_pos"], ascending=[False, False, True], kind="stable")
        runs = int(table["_run"].sum())
        table["order"] = list(range(1, runs + 1)) + [None] * (len(table) - runs)
        table = table.reset_index(drop=True)
        for pool, start in self.starts.items():
            first = table.index[table["_run"] & (table["pool"] == pool)][: self.workers.of(pool)]
            table.loc[first, "start_s"] = start.mid
            table.loc[first, SPANS] += [start.mid, start.low, start.high]
        self.table = table.drop(columns=["_run", "_pos"])

    @property
    def runs(self) -> pd.DataFrame:
        return self.table[self.table["action"] == RUN]

    def submission_order(self, trials: list[PlannedTrial]) -> list[PlannedTrial]:
        """`trials` longest estimate first (ties in the plan's order); a trial the plan does not price last."""
        seconds = dict(zip(self.table["key"], self.table["estimated_s"]))
        position = {t.key: i for i, t in enumerate(trials)}
        return sorted(trials, key=lambda t: (-seconds.get(t.key, -math.inf), position[t.key]))

    def running(self, trials: list[PlannedTrial]) -> "Priced":
        """The same plan with exactly `trials` to run (the driver's own resume), reordered longest first; a peak
        search's further probes stay priced to run (they may)."""
        running = {t.key for t in trials} | {t.key for t in self.plan.later}
        table = self.table.assign(action=np.where(self.table["key"].isin(running), RUN, REUSED))
        return Priced(**{**vars(self), "table": table})

    def by_variant(self) -> pd.DataFrame:
        groups = [*self.table.groupby("variant", sort=False), ("total", self.table)]
        return pd.DataFrame([_summary(label, group) for label, group in groups])

    def by_device(self) -> pd.DataFrame:
        rows = []
        for device, group in self.runs.groupby("device_type", sort=True):
            price = price_per_hour(self.prices, device)
            low, mid, high = (group[column].sum() / 3600 for column in ("low_s", "estimated_s", "high_s"))
            cost = (None, None) if price is None else (mid * price, f"{money(low * price)}-{money(high * price)}")
            rows.append((device, len(group), mid, low, high, price, *cost))
        return pd.DataFrame(rows, columns=DEVICE_COLUMNS)

    @property
    def device_hours(self) -> float:
        return float(self.runs["estimated_s"].sum()) / 3600

    @property
    def unpriced(self) -> list[str]:
        return sorted(d for d in set(self.runs["device_type"]) if price_per_hour(self.prices, d) is None)

    @property
    def cost(self) -> float | None:
        """USD for the trials that run; None when a device type they use has no price."""
        return None if self.unpriced else float(self.by_device()["cost_usd"].sum())

    def walls(self) -> pd.DataFrame:
        """Per pool: workers, LPT's wall on them and the bound no schedule beats."""
        rows = []
        for pool, group in self.runs.groupby("pool", sort=True):
            workers = self.workers.of(pool)
            lpt = makespan(group["estimated_s"].tolist(), workers)
            rows.append((pool, len(group), workers, lpt.seconds, lpt.lower_bound, group["estimated_s"].max()))
        return pd.DataFrame(rows, columns=["pool", "trials", "workers", "wall_s", "lower_bound_s", "longest_s"])

    @property
    def wall(self) -> tuple[float, float]:
        """(LPT wall, lower bound) of the whole sweep: its pools run side by side."""
        walls = self.walls()
        return (float(walls["wall_s"].max()), float(walls["lower_bound_s"].max())) if len(walls) else (0.0, 0.0)

    def refusal(self, plan: str | None = None) -> str | None:
        """One line when the estimate passes sweep.max_device_hours or sweep.max_cost, else None; a dry run names
        the `plan` it wrote where a real run points to the dry run."""
        hours_limit, cost_limit = self.limits.device_hours, self.limits.cost
        hours, cost, runs = self.device_hours, self.cost, self.runs
        told = (
            f"the sweep's estimate is {hours:,.2f} device-hours "
            f"({runs['low_s'].sum() / 3600:,.2f}-{runs['high_s'].sum() / 3600:,.2f})"
            + (f", {money(cost)}" if cost is not None else "")
            + f" for {len(runs)} trial(s)"
        )
        where = f"in {plan}" if plan else "with sweep.dry_run=true (reports/<sweep>/plan.md)"
        see = f"see it trial by trial {where}, then narrow the grid or raise the limit"
        if hours_limit is not None and hours > float(hours_limit):
            return f"{told}, over sweep.max_device_hours={hours_limit:g}: {see}"
        if cost_limit is not None and cost is None:
            return (
                f"{told}, and sweep.max_cost={cost_limit:g} cannot be checked: no price for "
                f"{', '.join(self.unpriced)} (set sweep.prices.{self.unpriced[0]}=USD_PER_HOUR); {see}"
            )
        if cost_limit is not None and cost > float(cost_limit):
            return f"{told}, over sweep.max_cost={cost_limit:g} (USD): {see}"
        return None


def _summary(label: str, group: pd.DataFrame) -> dict:
    runs = group[group["action"] == RUN]
    sums = {column: float(runs[column].sum()) for column in (*SPANS, *PARTS)}
    bases = ", ".join(f"{b} {n}" for b, n in runs["basis"].value_counts().items())
    extra = {"device_hours": sums["estimated_s"] / 3600, "basis": bases or "-"}
    return {"variant": label, "to_run": len(runs), "reused_unverified": len(group) - len(runs), **sums, **extra}


def summary_line(priced: Priced) -> str:
    runs, (wall, bound), cost, pools = priced.runs, priced.wall, priced.cost, priced.walls()
    workers = ", ".join(f"{p} {w}" for p, w in zip(pools["pool"], pools["workers"]))
    return (
        f"estimate: {runs['estimated_s'].sum():,.0f} s of trials ({runs['low_s'].sum():,.0f}-"
        f"{runs['high_s'].sum():,.0f}), {priced.device_hours:,.3f} device-hours"
        + (f", {money(cost)}" if cost is not None else "")
        + f"; wall about {wall:,.0f} s on {workers or 'no'} worker(s) (bound {bound:,.0f} s); longest first"
        + ("; CPU seconds rough (a nominal CPU speed: no calibration kept)" if priced.nominal_cpu else "")
    )
