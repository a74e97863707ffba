"""A checkpoint's own Python never runs: a local model folder whose config.json names classes of its own
(`auto_map`) is refused in one line before any model is built, by the planner and by `python -m tokengen`,
with `y` waiting on stdin (transformers' trust prompt) and a module that would leave a marker if imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sweep_helpers import driver_environment

from tokengen.contract.model_facts import model_facts
from tokengen.contract.spec import SpecError

# What such a folder carries: a config naming its own classes, and their module.
CONFIG = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 8,
    "vocab_size": 64,
    "n_positions": 64,
    "auto_map": {"AutoConfig": "own.OwnConfig", "AutoModelForCausalLM": "own.OwnModel"},
}


@pytest.fixture
def own_code(tmp_path):
    folder = tmp_path / "own-code"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "own.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import GPT2Config as OwnConfig, GPT2LMHeadModel as OwnModel\n"
    )
    return folder, marker


def refusal(folder) -> str:
    return (
        f"model path {str(folder)!r} needs its own Python code (auto_map in config.json), which is never run "
        "here: save the model as one of transformers' own architectures"
    )


def test_the_planner_refuses_a_folder_that_needs_its_own_code(own_code):
    folder, marker = own_code
    with pytest.raises(SpecError) as refused:
        model_facts(str(folder))
    assert str(refused.value).startswith(refusal(folder))
    assert not marker.exists()


def test_the_single_trial_cli_refuses_it_without_reading_stdin(own_code, tmp_path):
    folder, marker = own_code
    proc = subprocess.run(
        [sys.executable, "-m", "tokengen", "--model", str(folder), "--device", "cpu"],
        cwd=tmp_path,
        input="y\ny\n",
        env=driver_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: " + refusal(folder)) and proc.stderr.count("\n") == 1, proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "where, nested",
    [
        (", under text_config", {"text_config": {"auto_map": CONFIG["auto_map"]}}),
        (", under vision_config", {"vision_config": {"model_type": "own", "auto_map": CONFIG["auto_map"]}}),
        (", under decoder.layers.0", {"decoder": {"layers": [{"auto_map": CONFIG["auto_map"]}]}}),
    ],
    ids=["text_config", "vision_config", "deeper"],
)
def test_auto_map_in_a_sub_config_is_refused_the_same_way(own_code, where, nested):
    """`auto_map` was looked for at the top and in text_config only: one in any other sub-config went past the
    check (to a traceback, or to transformers' own judgement). Any depth is refused now, naming where it is."""
    folder, marker = own_code
    config = {k: v for k, v in CONFIG.items() if k != "auto_map"}
    (folder / "config.json").write_text(json.dumps({**config, **nested}))
    with pytest.raises(SpecError) as refused:
        model_facts(str(folder))
    assert str(refused.value).startswith(refusal(folder).replace("config.json)", f"config.json{where})"))
    assert not marker.exists()
