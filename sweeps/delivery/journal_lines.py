"""A journal's lines judged one by one: a line is a result (`{"result": {"key": ..., "status": ...},
"files": [...]}`, whose result builds the TrialRecord it was written from) or a note that MLflow took one
(`{"recorded": KEY, ...}`), or it is damaged (cut by a driver that stopped mid-write, a byte that is not UTF-8,
`42`, `{"result": {}}`, a field of the wrong type). A damaged line is
never a result: the driver that opens the journal sets it aside in a file beside it, kept for a person
to read, and says so once; the trial it may have held runs again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokengen.contract.trial_record import TrialRecord

SET_ASIDE_SUFFIX = ".set-aside"  # <sweep>.jsonl.set-aside: the damaged lines, as they were


def record_of(result: dict) -> TrialRecord:
    """A result line's record: the door from the journal's JSON. A field an older driver wrote and nobody declares
    now is left out; a value of the wrong type is refused (TypeError, or SpecError for a spec field)."""
    return TrialRecord.from_dict(result, drop_undeclared=True)


def entry_of(raw: bytes) -> dict | None:
    """The line's entry, or None where it is damaged."""
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(entry, dict):
        return None
    if "result" in entry:
        result = entry["result"]
        whole = (
            isinstance(result, dict)
            and isinstance(result.get("key"), str)
            and isinstance(result.get("status"), str)
            and _builds(result)
        )
        return entry if whole and isinstance(entry.get("files", []), list) else None
    return entry if isinstance(entry.get("recorded"), str) else None


def _builds(result: dict) -> bool:
    try:
        record_of(result)
    except (TypeError, ValueError):  # SpecError is a ValueError
        return False
    return True


def read_lines(path: Path) -> tuple[list[dict], list[bytes], list[bytes]]:
    """The journal's entries, the raw lines they came from, and its damaged lines."""
    entries, kept, damaged = [], [], []
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        entry = entry_of(raw)
        if entry is None:
            damaged.append(raw)
        else:
            entries.append(entry)
            kept.append(raw)
    return entries, kept, damaged


def set_aside(path: Path) -> tuple[Path, int] | None:
    """Move the journal's damaged lines to `<journal>.set-aside` (appended, as they were) and rewrite the
    journal without them (a new file renamed over it, so a crash leaves one or the other whole); the side
    file and how many lines went there, or None where every line is whole."""
    if not path.is_file():
        return None
    _, kept, damaged = read_lines(path)
    if not damaged:
        return None
    side = path.with_name(path.name + SET_ASIDE_SUFFIX)
    with open(side, "ab") as handle:
        handle.write(b"".join(raw + b"\n" for raw in damaged))
        handle.flush()
        os.fsync(handle.fileno())
    fresh = path.with_name(path.name + ".new")
    with open(fresh, "wb") as handle:
        handle.write(b"".join(raw + b"\n" for raw in kept))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(fresh, path)
    return side, len(damaged)
