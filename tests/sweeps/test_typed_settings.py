"""The sweep's settings are typed once, at the door (sweeps/planning/config.py `load_config`, and `load_saved` for a
sweep's saved settings), and every stage's entry point takes the SweepConfig: a setting is an attribute, so a typo
fails where it is written, not as a KeyError deep in a run. No look-up of a setting by a name in a string is left
in sweeps/ or tracking/: not `config["sweep"]`, `.get("max_cost")`, `getattr(sweep, "max_cost")`, nor
`getattr(sweep, name) for name in LIMITS` (the rule reads the source's syntax, `setting_look_ups`)."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from sweeps import driver, dry_run
from sweeps.delivery import sweep_run
from sweeps.execution import execute, remeasure
from sweeps.planning import grid, resume
from sweeps.planning.config import (
    RaySettings,
    SweepConfig,
    SweepSettings,
    TrackingSettings,
    as_stored,
    load_config,
    load_saved,
)
from sweeps.pricing import memory_guard, plan_tables, price, workers
from sweeps.pricing.priced import Limits
from tokengen.contract.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = [
    grid.plan_sweep,
    resume.expected_fingerprints,
    price.price_sweep,
    price.price_for_run,
    workers.find_workers,
    memory_guard.check_local_memory,
    plan_tables.render,
    plan_tables.write_plan,
    dry_run.dry_run,
    execute.execute,
    execute.run_on_cluster,
    execute.check_local_devices,
    remeasure.remeasure,
    sweep_run.open_sweep,
    sweep_run.publish_report,
    driver.prepare,
    driver.choose_trials,
    driver.finish,
]
SETTINGS = frozenset(
    f.name for kind in (SweepConfig, SweepSettings, RaySettings, TrackingSettings) for f in dataclasses.fields(kind)
)
"""Every name a setting is set by: the config's groups (sweep, ray, ...) and each group's settings."""
HOLDERS = frozenset({"config", "cfg", "settings", "sweep", "saved"})
"""What code calls a holder of settings: any key looked up on one is a setting's name."""
EXTERNAL = {
    "sweeps/planning/config.py: raw.get('trial')": "the door: a dict of the config's shape becomes the SweepConfig",
    "sweeps/planning/config.py: raw.get('sweep')": "the door",
    "sweeps/planning/config.py: raw.get('ray')": "the door",
    "sweeps/planning/config.py: raw.get('tracking')": "the door",
    "sweeps/planning/config.py: raw.get('grid')": "the door",
    "sweeps/delivery/sweep_run.py: pools['workers']": "a column of the pools' walls (Priced.walls), not sweep.workers",
    "sweeps/pricing/priced.py: pools['workers']": "a column of the pools' walls (Priced.walls), not sweep.workers",
    "sweeps/execution/schedule.py: options['num_gpus']": "Ray's task option, not ray.num_gpus",
    "tracking/report/comparison.py: rows['fidelity_gate']": "each trial's own record: the gate it was judged at",
    "tracking/report/plan_report.py: makespan['workers']": "a row of the plan against the actual: its workers",
    "tracking/report/plan_report.py: span['workers']": "a row of the plan against the actual: its workers",
    "tracking/store/reading.py: trials[SWEEP_TAG]": "a column of MLflow's rows: each trial run's sweep tag",
}
"""Look-ups by a setting's name that read data from outside (a frame's column, a store's row, Ray's options), each
with why; an entry nothing matches any more fails too, so the list stays true."""


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_stage_entry_point_takes_the_typed_config(entry):
    assert typing.get_type_hints(entry)["config"] is SweepConfig


def _strings(node) -> set[str] | None:
    """The names a literal tuple, list or set of strings holds (None if it is not one)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            return {e.value for e in node.elts}
    return None


def _module_names(tree: ast.Module, imported=None) -> dict[str, set[str]]:
    """A module's constants that hold names: `NAME = "x"` or `NAMES = ("x", "y")`, its own and (by `imported`, the
    project's modules) those it imports."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            held = (
                {value.value} if isinstance(value, ast.Constant) and isinstance(value.value, str) else _strings(value)
            )
            if held:
                found[node.targets[0].id] = held
        elif isinstance(node, ast.ImportFrom) and imported and node.module and node.level == 0:
            theirs = imported(node.module)
            found |= {a.asname or a.name: theirs[a.name] for a in node.names if a.name in theirs}
    return found


def _project_names(module: str) -> dict[str, set[str]]:
    base = ROOT / module.replace(".", "/")
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    return _module_names(ast.parse(path.read_text())) if path.exists() else {}


def _holder(node) -> str | None:
    """What a looked-up object is called: `config`, `self.sweep` -> `sweep`; None for anything else."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def setting_look_ups(source: str) -> list[str]:
    """Each look-up of a setting by a name held in a string, as `line: expression`: a subscript, `.get`, `.pop`,
    `.setdefault` or `getattr` whose key is a string, a constant holding one, or a loop variable over names held in
    strings, where that name is a setting's (SETTINGS) or the object is a holder of settings (HOLDERS)."""
    tree = ast.parse(source)
    constants = _module_names(tree, _project_names)
    loops = {}  # loop variable -> the names it runs over
    for node in ast.walk(tree):
        for target, over in [(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension)) else []:
            held = _strings(over) or (constants.get(over.id) if isinstance(over, ast.Name) else None)
            if held and isinstance(target, ast.Name):
                loops[target.id] = held

    def names(key) -> set[str]:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return {key.value}
        return (loops.get(key.id) or constants.get(key.id) or set()) if isinstance(key, ast.Name) else set()

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            looked_up, key = node.value, node.slice
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            if node.func.attr not in ("get", "pop", "setdefault"):
                continue
            looked_up, key = node.func.value, node.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            if len(node.args) < 2:
                continue
            looked_up, key = node.args[0], node.args[1]
        else:
            continue
        held = names(key)
        if held & SETTINGS or (held and _holder(looked_up) in HOLDERS):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_setting_is_looked_up_by_its_name():
    found = {}
    for folder in ("sweeps", "tracking"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for hit in setting_look_ups(path.read_text()):
                line, expression = hit.split(": ", 1)
                found.setdefault(f"{path.relative_to(ROOT)}: {expression}", []).append(line)
    assert sorted(set(found) - set(EXTERNAL)) == [], "a setting is an attribute of the typed config"
    assert sorted(set(EXTERNAL) - set(found)) == [], "an allowed look-up no longer in the code: drop it from EXTERNAL"


@pytest.mark.parametrize(
    "source",
    [
        'rounds = config["sweep"]["remeasure"]',
        'gate = config.sweep.get("fidelity_gate")',
        'cost = getattr(config.sweep, "max_cost")',
        'limits = {name: getattr(sweep, name) for name in ("max_device_hours", "max_cost")}',
        'LIMITS = ("max_device_hours", "max_cost")\nset = [n for n in LIMITS if getattr(sweep, n) is not None]',
        "from sweeps.planning.entry_errors import GROUPS\nfor group in GROUPS:\n    raw[group]",  # a project's tuple
        'URI = "uri"\nwhere = tracking[URI]',
        'first = settings["anything"]',
    ],
)
def test_the_rule_finds_a_setting_looked_up_by_a_name_in_a_string(source):
    assert setting_look_ups(source), source


@pytest.mark.parametrize(
    "source",
    [
        "rounds = config.sweep.remeasure",
        'seconds = getattr(estimate, "seconds", estimate)',  # duck typing, no setting
        'done = row.get("status") == "finished"',
        "shown = {f.name: getattr(sweep, f.name) for f in fields(sweep)}",  # the schema's own fields, no string
        'cpus = frame["node_threads"]',
    ],
)
def test_the_rule_leaves_attributes_and_other_data_alone(source):
    assert setting_look_ups(source) == [], source


def test_a_mistyped_setting_fails_at_load_in_one_line():
    with pytest.raises(SpecError, match=r"^sweep\.remeasures is not a setting: use one of "):
        load_config({"sweep": {"remeasures": 2}})
    assert load_config({"sweep": {"remeasure": 2}}).sweep == SweepSettings(remeasure=2)


def test_a_saved_config_reads_back_typed_and_an_older_one_too():
    """What a sweep's parent run saves (sweep_config.json) loads back equal; an older one, written before some
    settings existed and holding one since removed, loads with the defaults and without the removed one."""
    config = load_config({"sweep": {"name": "s", "remeasure": 0, "max_cost": 5.0}, "ray": {"num_cpus": 2}})
    assert load_saved(json.loads(json.dumps(as_stored(config)))) == config
    older = {  # the shape of an earlier release's file: no prices, max_cost, memory_guard; an earlier word
        "trial": {"model": "tiny"},
        "sweep": {"name": "old", "resume": True, "inductor_cache": "per_trial", "reuse_compiles": True},
        "ray": {"address": None},
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "tokengen", "log_system_metrics": False},
    }
    saved = load_saved(older)
    assert saved.sweep == SweepSettings(name="old", inductor_cache="cold")
    assert saved.tracking == TrackingSettings() and saved.trial == {"model": "tiny"}
    assert load_saved(None) == load_saved({}) == SweepConfig(trial={}, grid=None)


def test_budget_limits_are_typed_and_name_their_settings():
    limits = Limits.of(SweepSettings(max_cost=5.0))
    assert (limits.device_hours, limits.cost) == (None, 5.0)
    assert limits.set() == {"sweep.max_cost": 5.0} and Limits().set() == {}
