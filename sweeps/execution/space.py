"""A full disk, wherever the sweep writes (its journal, the store, the trials' workdir, the report), is
one line that names the path and the space it needs, and exit 3 with everything finished kept.

The kernel says so as ENOSPC (no space left), EDQUOT (a quota) or EFBIG (a file past its size limit,
RLIMIT_FSIZE); SQLite as "database or disk is full", which MLflow passes on as text. `out_of_space`
finds either anywhere in an exception's chain, so every writer asks the same question.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from tokengen.contract.record import first_line
from tokengen.contract.trial_record import TrialRecord

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded", "file too large")


class OutOfSpace(RuntimeError):
    """Something the sweep must keep could not be written: its message is `full_line`'s."""


def full_line(what: str, path, needed: int | None, reason: str) -> str:
    """`out of space: the sweep's journal PATH could not be written (No space left on device; 0 B free,
    about 20.0 KB needed)`: free space is measured now, on the machine that tried."""
    free = free_bytes(path)
    room = f"{size_text(free)} free" if free is not None else "free space unknown"
    need = f", about {size_text(needed)} needed" if needed else ""
    return f"out of space: {what} {path} could not be written ({reason}; {room}{need})"


def out_of_space(exc: BaseException | None) -> bool:
    """Whether a full disk (or a file size limit) is what `exc`, or an exception behind it, says."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        if any(words in str(exc).lower() for words in FULL_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def reason_of(exc: BaseException) -> str:
    """The kernel's or SQLite's words, without the SQL MLflow quotes after them."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = first_line(exc).lower()
    return next((words for words in FULL_WORDS if words in text), first_line(exc))


def path_of(exc: BaseException | None) -> str | None:
    """The file the kernel refused, where an OSError in the chain names one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.filename:
            return str(exc.filename)
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path) -> int | None:
    """Free bytes on the filesystem holding `path` (its nearest existing parent), None if unknown."""
    place = Path(path).absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        return shutil.disk_usage(place).free
    except OSError:
        return None


def size_text(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def record_bytes(record: TrialRecord) -> int:
    """What a result takes on disk: its files, its log and its JSON line (a few KB)."""
    return sum(len(blob) for blob in record.files.values()) + len(record.log) + 16 * 1024
