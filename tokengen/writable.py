"""Can a command write where it was told to? Asked before any work starts, so an output path that is a
file where a folder goes, a folder where a file goes, a device or other special file (`/dev/full`, `/dev/null`, a
FIFO), or on a read-only disk is one line that names the path, not a traceback after minutes of work. Only a
regular file (or a new one in a writable folder) is an output file: a device would take or lose the bytes without
the command knowing, and a FIFO would block it. Stdlib only: the planner and the reports ask it too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def unwritable(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why `path` (a file, or with `folder` a directory that may not exist yet) cannot be written, or None.
    Probed by writing: the nearest existing folder takes a probe file, which is removed; nothing is left."""
    target = Path(path)
    if folder and target.exists() and not target.is_dir():
        return f"{target} is {_kind(target)}, not a folder"
    if not folder and target.is_dir():
        return f"{target} is a folder, not a file"
    if not folder and target.exists() and not target.is_file():
        return f"{target} is {_kind(target)}, not a regular file"
    parent = target if folder else target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    parent = Path(os.path.abspath(parent))  # "." said as the folder it is
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    probe = parent / f".write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"{parent} cannot be written ({exc.strerror or exc})"
    if not folder and target.exists() and not os.access(target, os.W_OK):
        return f"{target} is read-only"
    return None


def _kind(path: Path) -> str:
    """What an existing path is, in words (symbolic links followed, as writing would follow them)."""
    mode = path.stat().st_mode
    for test, words in (
        (stat.S_ISREG, "a file"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "a special file"
