"""A knob declared at run time reaches every place that asks about knobs: the CLI, a grid, a report table, a price
and a comparison, with no line written anywhere but its declaration (tokengen.contract.declarations.declare).

The knob acts around the steps with a context that changes nothing (contextlib's nullcontext), so its trial is a
real one: the CLI runs it on the tiny model, and its record and its plain twin's feed the report and compare code.
It runs in a process of its own: TrialSpec takes its fields from the declarations when it is first imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    from tokengen.contract import declarations as d

    d.declare(d.Knob("throwaway", d.STEP, d.PLAIN, graph=True, doc="a context that changes nothing"),
              d.Declared("throwaway", "plain", None, doc="nothing"),
              d.Declared("throwaway", "noop", "contextlib:nullcontext", preset="noop", doc="a null context"))

    import pandas as pd
    from tokengen.cli import build_parser, main
    from tokengen.contract.spec import TrialSpec
    from sweeps.planning.grid import expand
    from sweeps.pricing.price import COMPILED_GRAPH
    from sweeps.pricing.estimate import estimate, fit
    from sweeps.pricing.estimate.model import PRIOR_RUN_FIELDS
    from tracking.report.comparison import prepare
    from tracking.report.knob_tables import knob_tables
    from tracking.compare.points import match
    from tracking.compare.sides import Side
    from tracking.store.reading import SweepRuns

    out, seen = sys.argv[1], {}
    flags = build_parser().parse_args(["--throwaway", "noop"])
    seen["cli_flag"] = flags.throwaway
    records = []
    for value in ("plain", "noop"):
        path = f"{out}/{value}.json"
        assert main(["--model", "tiny", "--cache", "dynamic", "--batch-size", "2", "--max-seqlen", "4", "--runs", "2",
                     "--throwaway", value, "--json", path]) == 0
        records.append(json.load(open(path)))
    seen["cli_variants"] = [r["variant"] for r in records]
    seen["plain_key_unchanged"] = records[0]["key"] == TrialSpec(model="tiny", cache="dynamic", batch_size=2,
                                                                   max_seqlen=4, runs=2).key()
    plan = expand({"model": "tiny"}, {"variant": ["kv_cache"], "throwaway": ["plain", "noop"]})
    seen["grid"] = sorted(t.spec.throwaway for t in plan.trials)
    seen["priced"] = [estimate({**t.spec.to_dict()}, fit(None)).seconds > 0 for t in plan.trials]
    seen["price_keys"] = "throwaway" in COMPILED_GRAPH and "throwaway" in PRIOR_RUN_FIELDS
    frame = pd.DataFrame([{**r, "trial_key": r["key"], "run_id": r["key"], "accelerator_type": None, "gpu_type": None}
                          for r in records])
    prepared, _ = prepare(frame)
    seen["tables"] = [(knob, list(t["variant"]), list(t["plain_variant"])) for knob, t in knob_tables(prepared)]

    def side(label, trials):
        return Side(label, label, SweepRuns("sqlite://", "e", "0", label, "p", trials, None))

    pairs, only, columns = match(side("A", frame), side("B", frame.iloc[::-1].reset_index(drop=True)))
    seen["compare"] = ("throwaway" in columns, len(pairs), len(only))
    print(json.dumps(seen))
""")


@pytest.mark.slow  # processes that import torch and MLflow: CLI, sweep, report, price, comparison
def test_a_knob_declared_at_run_time_reaches_the_cli_a_grid_a_report_table_a_price_and_a_comparison(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["cli_flag"] == "noop"
    assert seen["cli_variants"] == ["kv_cache", "kv_cache_noop"]
    assert seen["plain_key_unchanged"] is True  # a new knob at its plain value stays out of the key
    assert seen["grid"] == ["noop", "plain"] and seen["priced"] == [True, True] and seen["price_keys"] is True
    assert seen["tables"] == [["throwaway", ["kv_cache_noop"], ["kv_cache"]]]
    assert seen["compare"] == [True, 2, 0]  # matched on the knob: each trial with its own value's twin
