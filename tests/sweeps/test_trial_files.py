"""A trial's folder holds only what this trial wrote: a link or a stale file planted in it is removed before the
trial starts, never followed when the trial writes, and never read back as its result or log. The trial process is
replaced by a stand-in that plants files while it "runs" (no fork, no torch)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from sweeps.execution import trial_process
from sweeps.execution.trial_files import open_new, write_file
from tokengen.contract.machine.user_folders import FolderRefused
from tokengen.contract.names import RESULT_FILE, TRIAL_LOG
from tokengen.contract.trial_record import TrialRecord

FORGED = {"status": "finished", "runtime_mean_s": 0.001}


def outside(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Files and a folder of ours outside the trial's folder: a victim, a forged result, a compile cache."""
    victim, forged, cache = tmp_path / "victim", tmp_path / "forged.json", tmp_path / "cache"
    victim.write_text("ours")
    forged.write_text(json.dumps(FORGED))
    cache.mkdir()
    (cache / "kernel.py").write_text("planted code")
    return victim, forged, cache


def launch(tmp_path: Path, monkeypatch, during=lambda: None) -> TrialRecord:
    """run_trial_process with a trial that exits 0 having written nothing; `during` plants files as it runs."""

    class Process:
        def __init__(self, target, args, daemon):
            self.exitcode = 0

        def start(self):
            during()

        def join(self, timeout=None):
            pass

    monkeypatch.setattr(trial_process, "warm_context", lambda *_: type("Context", (), {"Process": Process})())
    (tmp_path / "work").mkdir(mode=0o700, exist_ok=True)  # the sweep's folder, which sweep_folder makes
    spec = {"allocator": "default", "device": "cpu"}
    return trial_process.run_trial_process(
        trial_process.TrialRequest(spec=spec, key="k", folder=str(tmp_path / "work" / "k"), timeout_s=60)
    )


def test_files_planted_before_the_trial_are_removed_not_followed(tmp_path, monkeypatch):
    victim, forged, cache = outside(tmp_path)
    folder = tmp_path / "work" / "k"
    folder.mkdir(parents=True)
    (folder / RESULT_FILE).write_text(json.dumps(FORGED))  # a stale (or planted) result
    (folder / TRIAL_LOG).symlink_to(victim)
    (folder / "inductor").symlink_to(cache)  # a compile cache the trial would load code from
    record = launch(tmp_path, monkeypatch)
    assert record.status == "failed" and "left no outcome" in record.result.error_message
    assert victim.read_text() == "ours" and (cache / "kernel.py").read_text() == "planted code"
    assert (folder / "inductor").is_dir() and not (folder / "inductor").is_symlink()
    assert not (folder / TRIAL_LOG).exists() and not (folder / RESULT_FILE).exists()


def test_files_planted_while_the_trial_runs_are_not_read_as_its_result_or_log(tmp_path, monkeypatch):
    victim, forged, _ = outside(tmp_path)
    folder = tmp_path / "work" / "k"

    def plant():
        (folder / RESULT_FILE).symlink_to(forged)
        (folder / TRIAL_LOG).symlink_to(victim)

    record = launch(tmp_path, monkeypatch, plant)
    assert record.status == "failed" and record.result.runtime_mean_s is None
    assert "ours" not in record.log


def test_the_trials_own_files_are_never_written_through_a_link(tmp_path):
    victim, _, _ = outside(tmp_path)
    (tmp_path / TRIAL_LOG).symlink_to(victim)
    (tmp_path / RESULT_FILE).symlink_to(victim)
    with pytest.raises(OSError) as log:
        open_new(tmp_path / TRIAL_LOG)  # the child's log, on fds 1 and 2
    with pytest.raises(OSError) as result:
        trial_process._write(tmp_path / RESULT_FILE, FORGED)  # the child's result.json / failure.json
    assert log.value.errno == result.value.errno == errno.ELOOP
    write_file(tmp_path / "fresh", "x")
    assert victim.read_text() == "ours" and (tmp_path / "fresh").read_text() == "x"


def test_a_trial_folder_that_is_a_link_is_refused(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "k").symlink_to(elsewhere)
    with pytest.raises(FolderRefused, match=r"^the folder .*/work/k is a symbolic link: remove it"):
        launch(tmp_path, monkeypatch)
    assert os.listdir(elsewhere) == []
