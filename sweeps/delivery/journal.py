"""The driver's journal: every result lands on local disk before it goes to MLflow, so a tracking
store that is down, or a driver that dies, loses nothing that finished.

`.sweeps/journal/<experiment>/<sweep>.jsonl` under the directory the sweep runs from (not Hydra's
per-run folder, so the same command finds it again) holds one line per result (the record's flat dict,
TrialRecord.to_dict, without its file bytes and log) and one line per result MLflow has taken; a result
line reads back as the TrialRecord it was (older lines too: a field since dropped is left out); the trial's files and log lie
beside it in `<sweep>/<key>/` (a remeasure's in `<sweep>/<key>@<attempt>/`: each attempt is a result
of its own, sweeps/execution/remeasure.py). `Outbox` sends what the journal holds: a store that stops answering
is noticed once, results wait while trials go on at their pace, and it is asked again every few
seconds; a rerun of the same command sends what is left, without running those trials again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from sweeps.delivery.journal_lines import read_lines, record_of, set_aside
from sweeps.execution.space import OutOfSpace, full_line, out_of_space, reason_of, record_bytes
from tokengen.contract.names import TRIAL_LOG, path_component
from tokengen.contract.record import TrialResult, first_line
from tokengen.contract.trial_record import TrialRecord

JOURNAL_ROOT = Path(".sweeps") / "journal"


class JournalError(RuntimeError):
    """The journal cannot be written where the sweep runs: said in one line before Ray starts."""


class JournalUnwritable(OutOfSpace):
    """The journal refused a write during the sweep for another reason than a full disk (a read-only remount,
    permissions, an I/O error): the sweep stops as for a full disk (sweeps/delivery/full_disk.py), its finished
    results in the store or in a journal of their own elsewhere."""


def refused(what: str, path: Path, needed: int, exc: OSError) -> OutOfSpace:
    """The error a journal write becomes: OutOfSpace on a full disk (exit 3, make room), else JournalUnwritable."""
    if out_of_space(exc):
        return OutOfSpace(full_line(what, path, needed, reason_of(exc)))
    return JournalUnwritable(f"{what} {path} could not be written ({exc.strerror or first_line(exc)})")


def result_id(result: TrialResult) -> str:
    """What names a result in the journal: its key, and for a remeasure (attempt 2..) `key@attempt`."""
    return result.key if result.attempt in (None, 1) else f"{result.key}@{result.attempt}"


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
            raise JournalError(
                f"cannot write the sweep's journal under {root} ({exc.strerror or exc}): "
                "run the sweep from a writable directory"
            ) from None
        journal = cls(path)
        journal.check_writable()
        journal.heal()
        return journal

    def check_writable(self) -> None:
        """The journal file and its trials' folder can take a result: a path that is a folder, a file that
        is read-only, or a file where the folder goes is one line before any trial, not a result lost after it."""
        for where, kind in ((self.path, "file"), (self.files_dir, "folder")):
            if where.exists() and (where.is_dir() != (kind == "folder") or not os.access(where, os.W_OK)):
                what = "read-only" if where.is_dir() == (kind == "folder") else f"not a {kind}"
                raise JournalError(
                    f"the sweep's journal {kind} {where} is {what}: move it away or make it writable "
                    "(another sweep.name starts a journal of its own)"
                )

    def heal(self) -> None:
        """Damaged lines (a driver cut mid-write, bytes that are not a result) set aside beside the journal,
        said once; their trials run again."""
        moved = set_aside(self.path)
        if moved:
            print(
                f"journal: set aside {moved[1]} damaged line(s) of {self.path} in {moved[0]} (never a result: "
                "their trials run again)",
                file=sys.stderr,
                flush=True,
            )

    @staticmethod
    def path_for(experiment: str, sweep: str, root: Path | None = None) -> Path:
        """Where the sweep's journal lives under `root` (the current directory), found without writing."""
        root = Path.cwd() if root is None else root
        return root / JOURNAL_ROOT / path_component(experiment) / f"{path_component(sweep)}.jsonl"

    @property
    def files_dir(self) -> Path:
        return self.path.with_suffix("")

    @staticmethod
    def named(record: TrialRecord) -> TrialRecord:
        """The record with its attempt id (one per result: MLflow records each once), a new one if it has none."""
        return record if record.result.attempt_id else record.with_result(attempt_id=uuid.uuid4().hex)

    def append(self, record: TrialRecord) -> TrialRecord:
        """The record's files and log first, then its line, flushed to disk: a line is never without its files;
        returns the record as journaled (named). OutOfSpace where the disk is full (a cut line is skipped on
        reading: that trial runs again)."""
        record = self.named(record)
        try:
            self._append(record)
        except OSError as exc:
            raise refused("the sweep's journal", self.path, record_bytes(record), exc) from None
        return record

    def _append(self, record: TrialRecord) -> None:
        folder = self.files_dir / result_id(record.result)
        folder.mkdir(parents=True, exist_ok=True)
        for name, blob in record.files.items():
            (folder / name).write_bytes(blob)
        (folder / TRIAL_LOG).write_text(record.log)
        self._write({"result": record.to_dict(), "files": sorted(record.files)})

    def mark_recorded(self, record: TrialRecord, run_id: str) -> None:
        """The line that says MLflow holds the result; where the journal refuses it (OutOfSpace, JournalUnwritable)
        it is left out, and the rerun finds the attempt in the store instead."""
        try:
            self._write({"recorded": record.key, "attempt_id": record.result.attempt_id, "run_id": run_id})
        except OSError as exc:
            raise refused("the sweep's journal", self.path, 4096, exc) from None

    def _write(self, entry: dict) -> None:
        """One line, whole or not at all: a disk that fills mid-line has the line's start cut off again."""
        data = (json.dumps(entry, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end and os.pread(fd, 1, end - 1) != b"\n":  # the last line was cut (power loss): never glue to it
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, end)  # frees what the half line took
                raise
        finally:
            os.close(fd)

    def unrecorded(self) -> list[TrialRecord]:
        """Every result MLflow has not taken yet, in the order they came, with files and log read back:
        each attempt once (an entry without an attempt id, from an older journal, stands for its key)."""
        return [self._record(entry) for entry in self._results(recorded=False)]

    def recorded_elsewhere_than(self, held: set[str]) -> list[TrialRecord]:
        """Results this journal marks recorded whose attempt the store does not hold (`held`: the attempt ids
        it holds whole), with files and log read back: a store that lost its last writes (a `-wal` unlinked
        under its driver, a copy made without it) gets them again from here, never by measuring again. An
        older journal's entry without an attempt id cannot be told apart from a later attempt: left as it is."""
        return [
            self._record(entry)
            for entry in self._results(recorded=True)
            if entry["result"].get("attempt_id") and entry["result"]["attempt_id"] not in held
        ]

    def _results(self, recorded: bool) -> list[dict]:
        """The result entries MLflow has (`recorded`) or has not taken, as the journal's last word on each says."""
        results: dict[str, dict] = {}
        taken: set[str] = set()
        for entry in self._entries():
            if "result" in entry:
                attempt = entry["result"].get("attempt_id") or entry["result"]["key"]
                results[attempt] = entry
                taken.discard(attempt)
            elif "recorded" in entry:
                taken.add(entry.get("attempt_id") or entry["recorded"])
        return [entry for attempt, entry in results.items() if (attempt in taken) == recorded]

    def _entries(self) -> list[dict]:
        """The whole lines: a damaged one is never a result (Journal.open sets them aside)."""
        return read_lines(self.path)[0] if self.path.is_file() else []

    def _record(self, entry: dict) -> TrialRecord:
        """A result line as the TrialRecord it holds (journal_lines.record_of: the door), its files and log read
        back from its folder."""
        record = record_of(entry["result"])
        folder = self.files_dir / result_id(record.result)
        files = {name: (folder / name).read_bytes() for name in entry.get("files", []) if (folder / name).is_file()}
        log = (folder / TRIAL_LOG).read_text(errors="replace") if (folder / TRIAL_LOG).is_file() else ""
        return dataclasses.replace(record, files=files, log=log)


def journaled_results(experiment: str, sweep: str) -> list[TrialRecord]:
    """Results an earlier driver of this sweep journaled but did not record, read without writing."""
    path = Journal.path_for(experiment, sweep)
    try:
        return Journal(path).unrecorded() if path.is_file() else []
    except OSError:
        return []
