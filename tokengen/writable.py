"""Can a command write where it was told to? Asked before any work starts, so an output path that is a
file where a folder goes, a folder where a file goes, or on a read-only disk is one line that names the
path, not a traceback after minutes of work. Stdlib only: the planner and the reports ask it too.
"""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why `path` (a file, or with `folder` a directory that may not exist yet) cannot be written, or None.
    Probed by writing: the nearest existing folder takes a probe file, which is removed; nothing is left."""
    target = Path(path)
    if folder and target.exists() and not target.is_dir():
        return f"{target} is a file, not a folder"
    if not folder and target.is_dir():
        return f"{target} is a folder, not a file"
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
