"""What the driver does when a disk it writes to is full (sweeps/execution/space.py says where and what it needs),
or its journal refuses a write for another reason (read-only, permissions, I/O): the sweep's run is marked FAILED
with the reason, what finished is sent to the store while it takes it, what the store did not take goes to a
journal of its own in a new private folder, and the sweep ends in one line (sweeps/driver.py exits 3); rerunning
the same command loses nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sweeps.delivery.journal import Journal, JournalUnwritable
from sweeps.delivery.outbox import Outbox
from sweeps.execution.space import OutOfSpace
from sweeps.say import say
from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord


def mark_full(outbox: Outbox, why: str) -> None:
    """A full disk stopped the sweep: its run is FAILED with the reason, not left RUNNING (a store that is
    itself full may refuse even that: said, and the rerun reopens the run)."""
    if not outbox.recorder.parent_id:
        return
    try:
        outbox.recorder.fail_sweep(why)
    except Exception as exc:  # noqa: BLE001 - every result is journaled; only the parent's status is missing
        say(f"tracking: the sweep's run is left open ({first_line(exc)})")


def stopped_full(outbox: Outbox, records: list[TrialRecord], exc: OutOfSpace) -> None:
    """A disk the sweep must write to is full, or its journal refuses writes: the running trials are already
    stopped (sweeps/execution/schedule.py cancels their tasks), what finished goes to the store while it takes it,
    the sweep's run is marked FAILED; one line that names the path (and the space needed, or where the results
    the store did not take are kept)."""
    flush_all(outbox)
    mark_full(outbox, str(exc))
    if isinstance(exc, JournalUnwritable):
        say(f"error: {exc}: {kept_line(outbox)}; make it writable and rerun the same command to run the rest")
        return
    say(
        f"error: {exc}: make room there and rerun the same command; the {len(records)} result(s) that finished "
        f"are kept in {os.path.relpath(outbox.journal.path)} and recorded without running their trials again"
    )


def flush_all(outbox: Outbox) -> None:
    """Everything waiting sent while the store takes it, though the journal cannot note it (the rerun finds
    those attempts in the store)."""
    while outbox.waiting:
        before = len(outbox.waiting)
        try:
            outbox.flush(now=True)
        except OutOfSpace:
            pass
        if len(outbox.waiting) == before:
            return


def kept_line(outbox: Outbox) -> str:
    """Where the finished results are: the store, and for what it did not take, a journal of their own."""
    if not outbox.waiting:
        return "every finished result is in the store"
    kept = keep_elsewhere(outbox)
    if kept is None:
        return f"{len(outbox.waiting)} finished result(s) the store did not take could not be kept anywhere"
    return (
        f"{len(outbox.waiting)} finished result(s) the store did not take are kept in {kept} (move it and the "
        f"folder beside it to {outbox.journal.path.parent}, then rerun the same command to record them)"
    )


def keep_elsewhere(outbox: Outbox) -> Path | None:
    """What waits, written as a journal of its own in a new folder only this user can enter (mkdtemp: 0700):
    the temporary folder's disk, else the home folder's. None where neither takes it."""
    for root in (tempfile.gettempdir(), Path.home()):
        try:
            journal = Journal(Path(tempfile.mkdtemp(prefix="tokengen-journal-", dir=root)) / outbox.journal.path.name)
            for record in outbox.waiting:
                journal.append(record)
            return journal.path
        except (OSError, OutOfSpace):
            continue
    return None
