"""A SQLite store keeps its artifacts beside its file: a second driver started from another folder writes
there too, and a store moved or copied with its `mlartifacts/` (the GPU sweep's returned store) finds them."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

from record_helpers import full_record
from servers import seeded_uri

from tokengen.contract.names import TOKENS_FILE
from tracking.store.artifact_root import FOLDER
from tracking.store.reading import fetch_artifacts, load_sweep, open_experiment
from tracking.store.recorder import Recorder


def _record_one(uri: str) -> str:
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("moved", {}, resume=False)
    return recorder.record_trial(replace(full_record(), files={TOKENS_FILE: b"tokens of the trial"}))


def _tokens(uri: str) -> dict:
    runs = load_sweep(uri, "tokengen", "moved")
    client, _ = open_experiment(uri, "tokengen")
    return fetch_artifacts(client, runs.trials, runs.trials.index, TOKENS_FILE, lambda p: open(p, "rb").read())


def test_artifacts_live_beside_the_store_whatever_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    run_id = _record_one(seeded_uri(tmp_path, "m.db"))
    assert (tmp_path / FOLDER).is_dir() and not os.listdir(tmp_path / "elsewhere")
    assert any(run_id in str(p) for p in (tmp_path / FOLDER).rglob(TOKENS_FILE))


def test_a_moved_store_finds_its_artifacts(tmp_path):
    first = tmp_path / "first"
    _record_one(seeded_uri(first, "m.db"))
    moved = tmp_path / "moved"
    shutil.copytree(first, moved)
    shutil.rmtree(first)  # the folder the store was made in is gone, as on the GPU machine
    assert list(_tokens(f"sqlite:///{moved}/m.db").values()) == [b"tokens of the trial"]
    Recorder(f"sqlite:///{moved}/m.db", "tokengen")  # writing to it again writes beside it
    assert not first.exists()
