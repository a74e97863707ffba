"""The sweep's settings are typed once, at the door (sweeps/planning/config.py `load_config`), and every stage's
entry point takes the SweepConfig: a setting is an attribute, so a typo fails where it is written, not as a
KeyError deep in a run. No string look-up of a setting is left in sweeps/ or tracking/."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from sweeps import driver, dry_run
from sweeps.delivery import sweep_run
from sweeps.execution import execute, remeasure
from sweeps.planning import grid, resume
from sweeps.planning.config import SweepConfig, SweepSettings, load_config
from sweeps.pricing import memory_guard, plan_tables, price, workers
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
LOOK_UP = re.compile(r'\b(sweep|settings|config)\[["\']')


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_stage_entry_point_takes_the_typed_config(entry):
    assert typing.get_type_hints(entry)["config"] is SweepConfig


def test_no_setting_is_looked_up_by_its_name():
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for folder in ("sweeps", "tracking")
        for p in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if LOOK_UP.search(line)
    ]
    assert found == []


def test_a_mistyped_setting_fails_at_load_in_one_line_and_the_rule_can_fail():
    with pytest.raises(SpecError, match=r"^sweep\.remeasures is not a setting: use one of "):
        load_config({"sweep": {"remeasures": 2}})
    assert load_config({"sweep": {"remeasure": 2}}).sweep == SweepSettings(remeasure=2)
    assert LOOK_UP.search('rounds = config["sweep"]["remeasure"]') and not LOOK_UP.search("config.sweep.remeasure")
