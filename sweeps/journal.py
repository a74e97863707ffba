"""The driver's journal: every result lands on local disk before it goes to MLflow, so a tracking
store that is down, or a driver that dies, loses nothing that finished.

`.sweeps/journal/<experiment>/<sweep>.jsonl` under the directory the sweep runs from (not Hydra's
per-run folder, so the same command finds it again) holds one line per result (the record without
its file bytes and log) and one line per result MLflow has taken; the trial's files and log lie
beside it in `<sweep>/<key>/` (a remeasure's in `<sweep>/<key>@<attempt>/`: each attempt is a result
of its own, sweeps/remeasure.py). `Outbox` sends what the journal holds: a store that stops answering
is noticed once, results wait while trials go on at their pace, and it is asked again every few
seconds; a rerun of the same command sends what is left, without running those trials again.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sweeps.space import OutOfSpace, full_line, out_of_space, path_of, reason_of, record_bytes, sqlite_path
from tokengen.contract.names import TRANSPORT, TRIAL_LOG
from tokengen.contract.names import path_component
from tokengen.contract.record import first_line

JOURNAL_ROOT = Path(".sweeps") / "journal"


class JournalError(RuntimeError):
    """The journal cannot be written where the sweep runs: said in one line before Ray starts."""


def result_id(record: dict) -> str:
    """What names a result in the journal: its key, and for a remeasure (attempt 2..) `key@attempt`."""
    attempt = record.get("attempt")
    return record["key"] if attempt in (None, 1) else f"{record['key']}@{attempt}"


@dataclass
class Journal:
    path: Path  # the .jsonl file

    @classmethod
    def open(cls, experiment: str, sweep: str, root: Path | None = None) -> Journal:
        """The sweep's journal under `root` (the current directory), its folder made and proven writable;
        the file itself is created by the first result, so a sweep refused before it runs leaves none."""
        root = Path.cwd() if root is None else root
        path = cls.path_for(experiment, sweep, root)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            probe = path.parent / f".probe-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise JournalError(f"cannot write the sweep's journal under {root} ({exc.strerror or exc}): "
                               "run the sweep from a writable directory") from None
        return cls(path)

    @staticmethod
    def path_for(experiment: str, sweep: str, root: Path | None = None) -> Path:
        """Where the sweep's journal lives under `root` (the current directory), found without writing."""
        root = Path.cwd() if root is None else root
        return root / JOURNAL_ROOT / path_component(experiment) / f"{path_component(sweep)}.jsonl"

    @property
    def files_dir(self) -> Path:
        return self.path.with_suffix("")

    def append(self, record: dict) -> None:
        """The record's files and log first, then its line, flushed to disk: a line is never without its files.
        OutOfSpace where the disk is full (a cut line is skipped on reading: that trial runs again)."""
        record["attempt_id"] = record.get("attempt_id") or uuid.uuid4().hex  # one per result: recorded once
        try:
            self._append(record)
        except OSError as exc:
            if not out_of_space(exc):
                raise
            line = full_line("the sweep's journal", self.path, record_bytes(record), reason_of(exc))
            raise OutOfSpace(line) from None

    def _append(self, record: dict) -> None:
        folder = self.files_dir / result_id(record)
        folder.mkdir(parents=True, exist_ok=True)
        files = dict(record.get("files") or {})
        for name, blob in files.items():
            (folder / name).write_bytes(blob)
        (folder / TRIAL_LOG).write_text(record.get("log") or "")
        result = {k: v for k, v in record.items() if k not in TRANSPORT}
        self._write({"result": result, "files": sorted(files)})

    def mark_recorded(self, record: dict, run_id: str) -> None:
        """The line that says MLflow holds the result; where the disk is full it is left out (OutOfSpace), and
        the rerun finds the attempt in the store instead."""
        try:
            self._write({"recorded": record["key"], "attempt_id": record.get("attempt_id"), "run_id": run_id})
        except OSError as exc:
            if not out_of_space(exc):
                raise
            raise OutOfSpace(full_line("the sweep's journal", self.path, 4096, reason_of(exc))) from None

    def _write(self, entry: dict) -> None:
        with open(self.path, "ab+") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell():
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":  # the last line was cut (power loss): never glue this one to it
                    handle.write(b"\n")
            handle.write((json.dumps(entry, default=str) + "\n").encode())
            handle.flush()
            os.fsync(handle.fileno())

    def unrecorded(self) -> list[dict]:
        """Every result MLflow has not taken yet, in the order they came, with files and log read back:
        each attempt once (an entry without an attempt id, from an older journal, stands for its key)."""
        waiting: dict[str, dict] = {}
        for entry in self._entries():
            if "result" in entry:
                waiting[entry["result"].get("attempt_id") or entry["result"]["key"]] = entry
            elif "recorded" in entry:
                waiting.pop(entry.get("attempt_id") or entry["recorded"], None)
        return [self._record(entry) for entry in waiting.values()]

    def _entries(self):
        if not self.path.is_file():
            return
        cut = 0
        for line in self.path.read_text().splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                cut += 1
        if cut:
            print(f"journal: skipped {cut} cut line(s) in {self.path} (a driver stopped mid-write): "
                  "their trials run again", file=sys.stderr)

    def _record(self, entry: dict) -> dict:
        result = entry["result"]
        folder = self.files_dir / result_id(result)
        files = {name: (folder / name).read_bytes() for name in entry["files"] if (folder / name).is_file()}
        log = (folder / TRIAL_LOG).read_text(errors="replace") if (folder / TRIAL_LOG).is_file() else ""
        return {**result, "files": files, "log": log}


class Outbox:
    """Results into the journal first, then to MLflow while the store answers.

    A write that fails, or a health probe that does not answer, marks the store down; while it is
    down, results only wait (no per-trial stall) and the store is asked again every `retry_s`."""

    def __init__(self, journal: Journal, recorder, retry_s: float = 10.0):
        self.journal, self.recorder, self.retry_s = journal, recorder, retry_s
        self.waiting: list[dict] = []
        self.down_since: float | None = None
        self.last_error = ""  # why the store did not take the oldest waiting result: said in the sweep's last line
        self.full: str | None = None  # the store's disk is full: the line that says where, and what it needs

    def take_over(self, recorded: dict[str, str], half_written: dict[str, list] | None = None) -> list[dict]:
        """Results an earlier run journaled but MLflow lacks: queued to be sent before anything else.
        An attempt MLflow already holds whole (`recorded`: attempt id -> run id) made it there before the
        driver could note it: noted now with its run, never recorded twice. One whose run was cut short
        (`half_written`: no status tag, metrics missing) counts as not recorded: that run is deleted as
        the attempt is recorded again, whole."""
        earlier = []
        for record in self.journal.unrecorded():
            attempt = record.get("attempt_id")
            if attempt in recorded:
                self.journal.mark_recorded(record, recorded[attempt])
                continue
            if attempt in (half_written or {}):
                self.recorder.cut_short(attempt, half_written[attempt])
            earlier.append(record)
        self.waiting.extend(earlier)
        return earlier

    def put(self, record: dict) -> None:
        """Journal the result, then send it. A journal whose disk is full still hands the result to the store
        (which may have room) before OutOfSpace stops the sweep: nothing that finished is lost."""
        try:
            self.journal.append(record)
        except OutOfSpace:
            self.waiting.append(record)
            self.flush(now=True)
            raise
        self.waiting.append(record)
        self.flush()

    @property
    def unrecorded(self) -> int:
        return len(self.waiting)

    def flush(self, now: bool = False) -> None:
        """Send what waits, oldest first, while the store takes it; `now` asks a store that was down at
        once instead of after `retry_s` (the sweep's last try)."""
        if not self.waiting or not self._store_answers(now):
            return
        while self.waiting:
            record = self.waiting[0]
            try:
                run_id = self.recorder.record_trial(record)
            except Exception as exc:  # noqa: BLE001 - any failed write: the result waits in the journal
                self._went_down(first_line(exc))
                if out_of_space(exc):
                    # the file refused (an artifact), else the database
                    where = path_of(exc) or sqlite_path(self.recorder.uri) or self.recorder.uri
                    self.full = full_line("the tracking store", where, sum(map(record_bytes, self.waiting)),
                                          reason_of(exc))
                return
            self.full = None
            self.waiting.pop(0)  # before the journal's note: a journal too full to take it never sends it twice
            self.journal.mark_recorded(record, run_id)

    def _store_answers(self, now: bool = False) -> bool:
        if self.down_since is not None and not now and time.monotonic() - self.down_since < self.retry_s:
            return False
        if self.recorder.answers():
            self.down_since = None
            return True
        self._went_down("it did not answer its health check")
        return False

    def _went_down(self, why: str) -> None:
        self.down_since, self.last_error = time.monotonic(), why
