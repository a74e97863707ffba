"""The sweep's typed configuration, registered in Hydra's ConfigStore as the schema of conf/config.yaml.

Every default is written here once; conf/config.yaml only composes (and names Hydra's run folder).

`trial` is TrialSpec itself (as a mutable twin Hydra can override), so a typo in YAML or on the
command line fails at compose time and the trial's defaults are written once, in tokengen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from sweeps.planning.settings import INDUCTOR_ALIASES
from tokengen.contract.machine.gpus import list_prices
from tokengen.contract.spec import FIELD_TYPES, KNOBS, SPELLINGS, SpecError, TrialSpec

TrialSchema = dataclasses.make_dataclass(
    "TrialSchema",  # a field that also takes words (runs: 5 or auto) is typed when the grid expands (parse_field)
    [
        (f.name, Any if f.name in SPELLINGS else FIELD_TYPES[f.name], field(default=f.default))
        for f in dataclasses.fields(TrialSpec)
    ],
)


def knob_axes() -> dict:
    """The schema's grid before a grid file is appended: every knob an axis, none set."""
    return {knob: None for knob in KNOBS}


@dataclass
class SweepSettings:
    name: str = "sweep"
    resume: bool = True  # skip trials whose key already has a finished run in the experiment
    trial_timeout_s: int = 1800  # a trial past this is killed and recorded as failed
    retries: int = 1  # retries for a lost node or worker; a trial's own errors are never retried
    accelerator_types: list[str] = field(default_factory=list)  # e.g. [L40S, H100]: replicate CUDA trials per type
    cpus_per_trial: Optional[int] = None  # CPU trials; None = all of a node's CPUs, one trial at a time
    trial_gpus: Optional[int] = None  # GPUs a trial holds; None: 1 for a CUDA trial, 0 for a CPU one (1 rehearses
    # a GPU sweep on a CPU: each trial holds a logical GPU of ray.num_gpus, as on the GPU machine)
    # shared: each compiled graph is compiled cold once for the whole sweep (every node) and loaded warm by its
    # twins (sweeps/execution/compile_share.py; the cold trial keeps the cold figure); cold: every trial compiles
    # cold. per_sweep and per_trial, the earlier words, read as shared and cold.
    inductor_cache: str = "shared"
    # on each node: <workdir>/<sweep name>-<store>/<key>: JSON, logs, compile caches; None: sweeps/ in the node's own
    # cache folder ($TOKENGEN_CACHE_DIR, $XDG_CACHE_HOME/tokengen or ~/.cache/tokengen); $VARs and ~ expanded on the
    # node; refused where it is not the node's user's alone (tokengen/contract/machine/user_folders.py)
    workdir: Optional[str] = None
    remeasure: int = 1  # rounds: a finished trial judged noisy or contended runs again, up to this many more times
    max_trials: int = 100_000  # a grid with more points is refused before it is expanded: raise this to run it
    # a trial with equivalent or lossy values (an attention kernel, quantized weights) passes at this share of
    # steps whose top-1 token is the reference model's (tokengen/contract/fidelity.py; MLPerf's 99% of reference)
    fidelity_gate: float = 0.99
    # request workloads' service level objective (tokengen/contract/slo.py): the chosen percentile of TTFT and of TPOT
    # within these limits, and goodput counted against them; MLPerf's llama3.1-8b Server figures by default
    slo_ttft_ms: float = 2000.0
    slo_tpot_ms: float = 100.0
    slo_percentile: float = 99.0
    # the peak-rate search (sweeps/planning/peak_search.py): with both rates set, every point of the grid (its
    # request_rate left to the search) is probed at the low and the high rate, then bisected until the highest rate
    # meeting the SLO is known to peak_precision (the lowest failing rate at most 1 + p times it); null: no search
    peak_low_rps: Optional[float] = None
    peak_high_rps: Optional[float] = None
    peak_precision: float = 0.1
    # USD for one device for one hour, per accelerator type (`cpu`: one CPU trial's node), for the report's cost
    # column: example on-demand list prices (2026, tokengen/contract/machine/gpus.py), not quotes; set yours with
    # sweep.prices.<TYPE>=...
    prices: Any = field(default_factory=list_prices)
    # Pricing a sweep before it runs (sweeps/pricing/price.py): dry_run plans and estimates it, prints the estimate and
    # writes reports/<name>/plan.csv and plan.md, and runs nothing, starts no Ray, writes nothing to the store
    dry_run: bool = False
    workers: Optional[int] = None  # trials at once, for the estimated wall; None: the cluster's GPUs (ray.address) or
    # for a local Ray its CPUs // cpus_per_trial (one CPU trial at a time by default) and its GPUs
    max_device_hours: Optional[float] = None  # refuse, before Ray starts, a sweep estimated above this; None: no limit
    # USD at sweep.prices; refuse above it (or when a device has no price); None: no limit
    max_cost: Optional[float] = None
    # a local Ray's trial estimated (tokengen/contract/memory_estimate.py) above this fraction of its device's free
    # memory (host RAM, the freest GPU) is refused before Ray starts; null: no guard
    memory_guard: Optional[float] = 0.9

    def __post_init__(self):
        """inductor_cache's earlier words (per_sweep, per_trial) read as the current ones, once, wherever settings are
        made: the scheduler, the trial task, the pricing and a report of an older sweep all compare it with one word."""
        self.inductor_cache = INDUCTOR_ALIASES.get(self.inductor_cache, self.inductor_cache)


@dataclass
class RaySettings:
    address: Optional[str] = None  # None: start a local Ray; "auto": join the cluster of `ray start`
    num_cpus: Optional[int] = None  # local Ray only
    num_gpus: Optional[int] = None  # local Ray only


@dataclass
class TrackingSettings:
    uri: str = "sqlite:///mlflow.db"  # or an MLflow server, http://host:5000
    experiment: str = "tokengen"


@dataclass
class SweepConfig:
    trial: Any = field(default_factory=TrialSchema)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    tracking: TrackingSettings = field(default_factory=TrackingSettings)
    grid: Optional[dict[str, Any]] = field(default_factory=knob_axes)  # +grid=NAME appends axes, blocks, `exclude`


def load_config(raw) -> SweepConfig:
    """The typed configuration, once, at the door: from Hydra's composed config, or from a dict of its shape (a
    test's). A field no setting has is refused in one line naming the ones there are; `trial` stays the dict of
    the trial's fields the grid expands over, `grid` its axes."""
    if isinstance(raw, SweepConfig):
        return raw
    if not isinstance(raw, dict):
        from omegaconf import OmegaConf

        raw = OmegaConf.to_container(raw, resolve=True)
    return _typed(raw, strict=True)


def load_saved(stored: dict | None) -> SweepConfig:
    """A sweep's saved configuration (sweep_config.json, `as_stored`) read back as the typed config, an older one
    too: a setting it lacks takes its default, and one this version no longer has is left out (it sets nothing
    now). None (a sweep that saved none) reads as every default."""
    return _typed(stored or {}, strict=False)


def _typed(raw: dict, strict: bool) -> SweepConfig:
    """Each section of a dict of the config's shape, by the schema's own fields: the one place a setting is a key."""
    return SweepConfig(
        trial=dict(raw.get("trial") or {}),
        sweep=_section(SweepSettings, "sweep", raw.get("sweep") or {}, strict),
        ray=_section(RaySettings, "ray", raw.get("ray") or {}, strict),
        tracking=_section(TrackingSettings, "tracking", raw.get("tracking") or {}, strict),
        grid=raw.get("grid"),
    )


def _section(kind, group: str, values: dict, strict: bool):
    known = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(values) - known)
    if unknown and strict:
        raise SpecError(f"{group}.{unknown[0]} is not a setting: use one of {', '.join(sorted(known))}")
    return kind(**{name: value for name, value in values.items() if name in known})


def as_stored(config: SweepConfig) -> dict:
    """The configuration as a sweep's run stores it (sweep_config.json) and tracking reads it back."""
    return dataclasses.asdict(config)


def register() -> None:
    """The schema in Hydra's ConfigStore; Hydra is imported here alone, so the Ray task (which is handed
    SweepSettings) and the reports (which read a sweep's saved settings back) never import it."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)
