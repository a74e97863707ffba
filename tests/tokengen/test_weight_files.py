"""A local checkpoint whose model.safetensors is truncated, is not one, or carries bytes past its tensors
is refused by its header before any model is built (tokengen/contract/weight_files.py): one line that
names the file and the fix, exit 2, from `python -m tokengen` and from a sweep before Ray starts; a
whole checkpoint still passes."""

from __future__ import annotations

import os
import shutil

import pytest
import ray
from sweep_helpers import small_sweep

from sweeps.driver import run_sweep
from tokengen.cli import main as cli_main
from tokengen.contract.model_facts import model_facts
from tokengen.contract.spec import SpecError
from tokengen.models import build_model, load_config

FIX = "save the model again with save_pretrained(), or copy the file again in full"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny model saved as transformers saves it: config.json and one model.safetensors."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    build_model("tiny", "float32", "cpu", 0).save_pretrained(path)
    return path


def damaged(saved, tmp_path, how: str):
    path = tmp_path / how
    shutil.copytree(saved, path)
    weights = path / "model.safetensors"
    size = weights.stat().st_size
    if how == "truncated":
        os.truncate(weights, size // 2)
    elif how == "random":
        weights.write_bytes(os.urandom(4096))
    elif how == "trailing":
        with open(weights, "ab") as handle:
            handle.write(b"\0" * 10)
    elif how == "not-json":
        weights.write_bytes((64).to_bytes(8, "little") + b"\xff" * 64)
    return path, weights, size


@pytest.mark.parametrize(
    "how, says",
    [
        ("truncated", "is truncated ({half:,} of the {size:,} bytes its header describes)"),
        ("random", "is not a safetensors file (its first 8 bytes give a "),
        ("trailing", "has 10 bytes after the tensors its header describes"),
        ("not-json", "is not a safetensors file (its header is not a table of tensors)"),
    ],
    ids=["truncated", "random", "trailing", "not-json"],
)
def test_a_damaged_weights_file_is_named_with_the_fix(saved, tmp_path, how, says):
    path, weights, size = damaged(saved, tmp_path, how)
    with pytest.raises(SpecError) as refused:
        model_facts(str(path))
    line = str(refused.value)
    assert line.startswith(f"model path {str(path)!r}: {weights} " + says.format(half=size // 2, size=size)), line
    assert line.endswith(FIX) and "\n" not in line


def test_a_whole_checkpoint_passes(saved):
    assert model_facts(str(saved)).vocab_size == 50257


def test_loading_the_config_asks_the_contracts_check(saved, tmp_path):
    """tokengen.models.load_config judges a checkpoint by the contract's check, not a copy of it."""
    path, _, _ = damaged(saved, tmp_path, "trailing")
    with pytest.raises(SpecError) as by_the_contract:
        model_facts(str(path))
    with pytest.raises(SpecError) as by_the_loader:
        load_config(str(path))
    assert str(by_the_loader.value) == str(by_the_contract.value)
    assert load_config(str(saved)).vocab_size == 50257


def test_python_m_tokengen_exits_2_before_building_the_model(saved, tmp_path, capsys):
    path, weights, _ = damaged(saved, tmp_path, "truncated")
    assert cli_main(["--model", str(path), "--batch-size", "1", "--max-seqlen", "2", "--runs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: model path {str(path)!r}: {weights} is truncated (") and "\n" not in err


def test_a_sweep_refuses_it_before_ray_and_writes_no_store(saved, tmp_path, capsys, monkeypatch):
    path, weights, _ = damaged(saved, tmp_path, "random")
    monkeypatch.chdir(tmp_path)
    assert run_sweep(small_sweep(tmp_path, f"trial.model={path}", seeded=False)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{weights} is not a safetensors file" in lines[0], lines
    assert lines[0].endswith(FIX)
    assert not ray.is_initialized() and not (tmp_path / "mlflow.db").exists()
