"""What the driver does when a disk it writes to is full (sweeps/execution/space.py says where and what it needs):
the sweep's run is marked FAILED with the reason, what finished is sent to the store while it takes it,
and the sweep ends in one line (sweeps/driver.py exits 3); rerunning the same command loses nothing."""

from __future__ import annotations

import os

from sweeps.delivery.outbox import Outbox
from sweeps.execution.space import OutOfSpace
from sweeps.say import say
from tokengen.contract.record import first_line


def mark_full(outbox: Outbox, why: str) -> None:
    """A full disk stopped the sweep: its run is FAILED with the reason, not left RUNNING (a store that is
    itself full may refuse even that: said, and the rerun reopens the run)."""
    if not outbox.recorder.parent_id:
        return
    try:
        outbox.recorder.fail_sweep(why)
    except Exception as exc:  # noqa: BLE001 - every result is journaled; only the parent's status is missing
        say(f"tracking: the sweep's run is left open ({first_line(exc)})")


def stopped_full(outbox: Outbox, records: list[dict], exc: OutOfSpace) -> None:
    """A disk the sweep must write to is full: the running trials are already stopped (sweeps/execution/schedule.py
    cancels their tasks), what finished goes to the store while it takes it, the sweep's run is marked
    FAILED; one line that names the path and the space needed."""
    try:
        outbox.flush(now=True)
    except OutOfSpace:
        pass  # the journal cannot note what the store took: the rerun finds it there
    mark_full(outbox, str(exc))
    say(
        f"error: {exc}: make room there and rerun the same command; the {len(records)} result(s) that finished "
        f"are kept in {os.path.relpath(outbox.journal.path)} and recorded without running their trials again"
    )
