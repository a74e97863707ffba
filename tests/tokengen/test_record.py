"""The result record is declared once (tokengen/contract/record.py): what the recorder writes, the reader
reads back with the same types, and a field added to the spec reaches every layer by itself."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from record_helpers import full_record
from servers import seeded_uri

from tokengen.contract.record import METRIC, PARAM, ROLES, TAG, typed, unknown_fields, with_role
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tracking.store.reading import load_sweep
from tracking.store.recorder import Recorder

ROOT = Path(__file__).resolve().parents[2]


def test_make_record_refuses_a_field_it_does_not_declare():
    with pytest.raises(TypeError):
        make_record(TrialSpec(), speedup=2.0)
    assert unknown_fields({**full_record().to_dict(), "speedup": 2.0}) == ["speedup"]


def test_recorded_fields_read_back_equal_and_typed(tmp_path):
    made = full_record()
    record = made.to_dict()
    uri = seeded_uri(tmp_path, "m.db")
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("rt", {}, resume=False)
    recorder.record_trial(made)
    row = load_sweep(uri, "tokengen", "rt").trials.iloc[0].to_dict()
    for name in with_role(PARAM) + with_role(METRIC) + with_role(TAG):
        got = row[name]
        assert type(got) is type(record[name]) and got == record[name], (name, ROLES[name], got, record[name])
    assert row["runtime_s"] == [0.3, 0.2, 0.25]  # a series: the whole list from its tag, and the history per step
    history = recorder.client.get_metric_history(row["run_id"], "runtime_s")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [0.3, 0.2, 0.25]


def test_typed_reads_mlflow_text_and_floats_back():
    assert typed("batch_size", "4") == 4 and typed("steps", 12.0) == 12 and isinstance(typed("steps", 12.0), int)
    assert typed("deterministic", 1.0) is True and typed("ttft_s", "0.5") == 0.5
    assert typed("tokens_sha256", "None") is None and typed("ttft_s", math.nan) is None
    assert typed("not_declared", "x") == "x"


ADDED_FIELD = """
import json, sys, tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sweeps.planning.config import load_config, register
from sweeps.planning.grid import plan_sweep
from tokengen.cli import build_parser
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tracking.store.recorder import Recorder
from tracking.report.build import build_report
from tracking.store.reading import load_sweep

root, store = Path(sys.argv[1]), sys.argv[2]
register()
with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
    config = load_config(compose("config", overrides=["+grid=smoke", "trial.top_p=0.9"]))
hydra_value = plan_sweep(config).trials[0].spec.top_p
cli_value = build_parser().parse_args(["--top-p", "0.9"]).top_p
spec = TrialSpec(model="tiny", top_p=0.9)
recorder = Recorder(store, "tokengen")
recorder.start_sweep("added", {}, resume=False)
recorder.record_trial(make_record(spec, key=spec.key(), steps=3, runtime_mean_s=1.0, tokens_sha256="x"))
mlflow_value = load_sweep(store, "tokengen", "added").trials.iloc[0].to_dict()["top_p"]
report = build_report(store, "tokengen", "added", root / "reports")
import pandas
csv_value = pandas.read_csv(report.directory / "results.csv")["top_p"].iloc[0]
print(json.dumps({"hydra": [type(hydra_value).__name__, hydra_value], "cli": [type(cli_value).__name__, cli_value],
                  "mlflow": [type(mlflow_value).__name__, mlflow_value], "csv": float(csv_value),
                  "key_changed": spec.key() != TrialSpec(model="tiny").key()}))
"""


@pytest.mark.slow  # the CLI and a report in processes of their own
def test_a_float_field_added_to_the_spec_survives_hydra_the_cli_mlflow_and_the_report(tmp_path):
    """A copy of the project whose TrialSpec gains `top_p: float = 1.0`: nothing else is edited."""
    for package in ("tokengen", "sweeps", "tracking", "conf"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    spec_file = tmp_path / "tokengen" / "contract" / "spec.py"
    text = spec_file.read_text()
    anchor = '    matmul_precision: str = _field("highest", WORKLOAD)'
    assert anchor in text
    spec_file.write_text(text.replace(anchor, anchor + "\n    top_p: float = _field(1.0, WORKLOAD)", 1))
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(ADDED_FIELD))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), seeded_uri(tmp_path, "m.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "hydra": ["float", 0.9],
        "cli": ["float", 0.9],
        "mlflow": ["float", 0.9],
        "csv": 0.9,
        "key_changed": True,
    }
