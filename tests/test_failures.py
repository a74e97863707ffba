"""A trial that breaks or hangs is recorded as failed; every other trial still finishes and is kept."""

from __future__ import annotations

import pytest
import ray

from sweeps.child import classify
from sweeps.run import run_sweep
from sweep_helpers import child_runs, small_sweep
from tokengen.models import build_model

pytestmark = pytest.mark.slow  # starts Ray (a local cluster) and runs real trials


@pytest.fixture(autouse=True)
def fresh_ray(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    yield
    ray.shutdown()


def corrupt_checkpoint(path) -> str:
    """Valid config, garbage weights: passes planning, breaks inside the trial's process."""
    build_model("tiny", "float32", "cpu", 0).save_pretrained(path)
    (path / "model.safetensors").write_bytes(b"\x00garbage" * 64)
    return str(path)


def test_broken_and_hung_trials_fail_alone(tmp_path, capsys):
    broken = corrupt_checkpoint(tmp_path / "broken")
    config = small_sweep(tmp_path, "sweep.trial_timeout_s=30", "sweep.cpus_per_trial=1", "grid.variant=[kv_cache]")
    config["grid"]["blocks"] = [
        {"model": ["tiny"], "batch_size": [1, 2]},
        {"model": [broken]},
        {"model": ["gpt2"], "variant": ["baseline"], "max_seqlen": [1000], "batch_size": [8], "runs": [50]},
    ]
    del config["grid"]["batch_size"]
    assert run_sweep(config) == 1
    err = capsys.readouterr().err
    assert "2 finished, 2 failed" in err

    runs = {(r.data.params["model"], r.data.params["batch_size"]): r for r in child_runs(config["tracking"]["uri"])}
    assert len(runs) == 4
    for batch in ("1", "2"):
        assert runs[("tiny", batch)].info.status == "FINISHED"
    hung = runs[("gpt2", "8")]
    assert hung.info.status == "FAILED" and hung.data.tags["error_type"] == "Timeout"
    crashed = next(r for (model, _), r in runs.items() if model == broken)
    assert crashed.info.status == "FAILED" and crashed.data.tags["status"] == "failed"
    assert crashed.data.tags["error_type"] not in ("Timeout", "")
    assert "failed" in err and crashed.data.tags["trial_key"] in err


def test_classify_names_signals_errors_and_spec_errors():
    assert classify(-9, "") == ("Crashed", "the trial process died of SIGKILL")
    assert classify(-11, "") == ("Crashed", "the trial process died of SIGSEGV")
    log = "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    assert classify(1, log) == ("OutOfMemory", "CUDA out of memory. Tried to allocate 2 GiB")
    assert classify(1, "RuntimeError: boom") == ("RuntimeError", "boom")
    assert classify(2, "error: device=cuda but torch sees no CUDA device: use device=cpu")[0] == "SpecError"
    assert classify(2, "UserWarning: CUDA init\nerror: stop='x' is not understood")[0] == "SpecError"
