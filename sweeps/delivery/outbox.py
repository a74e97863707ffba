"""The Outbox: every result journaled first, then sent to the store while it answers; what a store that
stopped answering (or a full disk) did not take waits in the journal, and a rerun records it first. What it
keeps, takes and sends is a TrialRecord (tokengen/contract/trial_record.py)."""

from __future__ import annotations

import time

from sweeps.delivery.journal import Journal
from sweeps.execution.space import OutOfSpace, full_line, out_of_space, path_of, reason_of, record_bytes
from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord
from tracking.store.connect import sqlite_path


class Outbox:
    """Results into the journal first, then to MLflow while the store answers.

    A write that fails, or a health probe that does not answer, marks the store down; while it is
    down, results only wait (no per-trial stall) and the store is asked again every `retry_s`."""

    def __init__(self, journal: Journal, recorder, retry_s: float = 10.0):
        self.journal, self.recorder, self.retry_s = journal, recorder, retry_s
        self.waiting: list[TrialRecord] = []
        self.down_since: float | None = None
        self.last_error = ""  # why the store did not take the oldest waiting result: said in the sweep's last line
        self.full: str | None = None  # the store's disk is full: the line that says where, and what it needs
        self.outside = 0  # journaled results for keys outside the plan: left in the journal, never recorded
        self.restored = 0  # results the journal marks recorded that the store had lost: recorded again

    def take_over(
        self, recorded: dict[str, str], half_written: dict[str, list] | None = None, planned: set[str] | None = None
    ) -> list[TrialRecord]:
        """Results an earlier run journaled but MLflow lacks: queued to be sent before anything else.
        An attempt MLflow already holds whole (`recorded`: attempt id -> run id) made it there before the
        driver could note it: noted now with its run, never recorded twice. One whose run was cut short
        (`half_written`: no status tag, metrics missing) counts as not recorded: that run is deleted as
        the attempt is recorded again, whole. A result the journal marks recorded that the store lacks (its
        last writes lost) is recorded again from the journal, counted in `restored`. A result for a key outside
        the plan (`planned`) is never recorded by this sweep: it stays in the journal, counted in `outside`."""
        earlier = []
        self.outside = 0
        lost = self.journal.recorded_elsewhere_than(set(recorded))
        self.restored = sum(planned is None or record.key in planned for record in lost)
        for record in self.journal.unrecorded() + lost:
            if planned is not None and record.key not in planned:
                self.outside += 1
                continue
            attempt = record.result.attempt_id
            if attempt in recorded:
                self.journal.mark_recorded(record, recorded[attempt])
                continue
            if attempt in (half_written or {}):
                self.recorder.cut_short(attempt, half_written[attempt])
            earlier.append(record)
        self.waiting.extend(earlier)
        return earlier

    def put(self, record: TrialRecord) -> TrialRecord:
        """Journal the result, then send it; returns it as journaled (with its attempt id). A journal whose
        disk is full still hands the result to the store (which may have room) before OutOfSpace stops the
        sweep: nothing that finished is lost."""
        record = self.journal.named(record)
        try:
            self.journal.append(record)
        except OutOfSpace:
            self.waiting.append(record)
            self.flush(now=True)
            raise
        self.waiting.append(record)
        self.flush()
        return record

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
                    self.full = full_line(
                        "the tracking store", where, sum(map(record_bytes, self.waiting)), reason_of(exc)
                    )
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
