"""A trial that breaks or hangs is recorded as failed; every other trial still finishes and is kept."""

from __future__ import annotations

import pytest
import torch
from servers import seeded_uri
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep
from sweeps.execution.trial_process import TrialRequest, _error_type, _outcome, run_trial_process
from tokengen.contract.rules import resolve
from tokengen.contract.spec import SpecError
from tokengen.models import build_model

pytestmark = pytest.mark.slow  # real trials: the sweep on the session's warm Ray, the others in processes of their own


def corrupt_checkpoint(path) -> str:
    """Valid config, a whole safetensors file of tensors the wrong shape: passes planning (a truncated or
    garbage file does not: tests/tokengen/test_weight_files.py), breaks inside the trial's process."""
    from safetensors.torch import save_file

    net = build_model("tiny", "float32", "cpu", 0)
    net.save_pretrained(path)
    save_file({name: t[:1].clone() for name, t in net.state_dict().items()}, str(path / "model.safetensors"))
    return str(path)


def test_broken_and_hung_trials_fail_alone(tmp_path, capsys, warm_ray):
    broken = corrupt_checkpoint(tmp_path / "broken")
    config = small_sweep(tmp_path, "sweep.trial_timeout_s=15", "sweep.cpus_per_trial=1", "grid.variant=[kv_cache]")
    config.grid["blocks"] = [
        {"model": ["tiny"], "batch_size": [1, 2]},
        {"model": [broken]},
        {"model": ["gpt2"], "variant": ["baseline"], "max_seqlen": [1000], "batch_size": [8], "runs": [50]},
    ]
    del config.grid["batch_size"]
    assert run_sweep(config) == 1
    err = capsys.readouterr().err
    assert "2 finished, 2 failed" in err

    runs = {(r.data.params["model"], r.data.params["batch_size"]): r for r in child_runs(config.tracking.uri)}
    assert len(runs) == 4
    for batch in ("1", "2"):
        assert runs[("tiny", batch)].info.status == "FINISHED"
    hung = runs[("gpt2", "8")]
    assert hung.info.status == "FAILED" and hung.data.tags["error_type"] == "Timeout"
    crashed = next(r for (model, _), r in runs.items() if model == broken)
    assert crashed.info.status == "FAILED" and crashed.data.tags["status"] == "failed"
    assert crashed.data.tags["error_type"] not in ("Timeout", "")
    assert "failed" in err and crashed.data.tags["trial_key"] in err


def request(tmp_path, name: str, timeout_s: float = 120, **fields) -> TrialRequest:
    fields = {"model": "tiny", "device": "cpu", "batch_size": 2, "max_seqlen": 4, "warmup": 0, "runs": 1, **fields}
    spec = resolve("kv_cache", **fields)
    return TrialRequest(spec=spec.to_dict(), key=name, folder=str(tmp_path / name), timeout_s=timeout_s, threads=1)


def test_the_trial_process_writes_its_outcome_typed(tmp_path):
    """One protocol: a record, or a failure file the child wrote from its own handler (type,
    message, traceback), never a guess from its log."""
    ok = run_trial_process(request(tmp_path, "ok"))
    assert ok.status == "finished" and ok.result.steps == 4 and "tokens.npy" in ok.files
    refused = run_trial_process(request(tmp_path, "refused", device="cuda")).result
    assert (refused.error_type, refused.error_message) == (
        "SpecError",
        "device=cuda but torch sees no CUDA device: use device=cpu",
    )
    broken = run_trial_process(request(tmp_path, "broken", model=corrupt_checkpoint(tmp_path / "ckpt"))).result
    assert broken.status == "failed" and broken.error_type not in ("Failed", "Crashed", "SpecError")
    assert "Traceback" in broken.log_tail and broken.error_message
    hung = run_trial_process(
        request(tmp_path, "hung", timeout_s=3, model="gpt2", max_seqlen=1000, batch_size=8, runs=50)
    ).result
    assert hung.error_type == "Timeout" and hung.child_wall_s < 30


def test_an_outcome_without_a_file_is_named_by_how_the_process_ended(tmp_path):
    lost = TrialRequest(spec={}, key="k", folder=str(tmp_path), timeout_s=1)
    assert _outcome(lost, -9, False, "")["error_message"] == "the trial process died of SIGKILL"
    assert _outcome(lost, -11, False, "")["error_type"] == "Crashed"
    assert _outcome(lost, 1, False, "")["error_type"] == "Failed"
    assert _error_type(torch.OutOfMemoryError("CUDA out of memory")) == "OutOfMemory"
    assert _error_type(SpecError("x")) == "SpecError" and _error_type(RuntimeError("boom")) == "RuntimeError"


def test_an_error_that_crosses_ray_keeps_its_path_and_reason_without_colour(tmp_path, warm_ray):
    """A task that raises on its node (here: its workdir is under a file) comes back through Ray as a
    RayTaskError in colour; the failed record, and so MLflow, the report and the console, carry the task's
    own error type and its message with the path, and no terminal codes."""
    from sweeps.execution.schedule import schedule
    from sweeps.planning.config import SweepSettings
    from sweeps.planning.grid import PlannedTrial
    from tracking.store.recorder import Recorder

    (tmp_path / "a-file").write_text("")
    sweep = SweepSettings(
        name="s",
        workdir=f"{tmp_path}/a-file/work",
        trial_timeout_s=60,
        retries=0,
        cpus_per_trial=1,
        inductor_cache="cold",
    )
    trial = PlannedTrial(resolve("kv_cache", model="tiny", batch_size=1, max_seqlen=2, warmup=0, runs=1))
    records = []
    schedule([trial], sweep, "", 2, lambda _, record: records.append(record))
    [record] = records
    failed = record.result
    assert failed.error_type == "NotADirectoryError", failed
    assert f"{tmp_path}/a-file/work" in failed.error_message and "Not a directory" in failed.error_message
    assert "\x1b" not in failed.error_message + failed.log_tail
    uri = seeded_uri(tmp_path, "m.db")
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("s", {}, resume=False)
    recorder.record_trial(record)
    [run] = child_runs(uri)
    assert run.data.tags["error_type"] == "NotADirectoryError"
    assert run.data.tags["error_message"] == failed.error_message
