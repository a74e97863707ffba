"""A trial's files in its folder, written and read without following a symbolic link.

The folder lies in the user's own workdir (tokengen/contract/machine/user_folders.py), so no one else can plant a file
there; still, a link left in it (by an earlier version's shared /tmp workdir, or by hand) must not turn a trial's
log into an overwrite of the file it points at, nor a file it points at into this trial's result. So the launcher
clears what an earlier attempt left before the trial starts (a link is removed, never followed), every file is
opened with O_NOFOLLOW, and a file read back counts only where it is a regular file.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from tokengen.contract.machine.user_folders import own_subfolder

WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def trial_folder(path: Path) -> Path:
    """The trial's folder, made 0700 in its sweep's folder; refused (FolderRefused) where it is a link or not
    the user's alone."""
    return own_subfolder(path.parent, path.name)


def clear(folder: Path, names, tree: str | None = None) -> None:
    """Removes what an earlier attempt left: the files `names` and the folder `tree` (a compile cache, whose
    entries a cold compile must not find); a link among them is removed itself, never what it points at."""
    for name in names:
        (folder / name).unlink(missing_ok=True)
    if tree is not None:
        path = folder / tree
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


def open_new(path: Path) -> int:
    """A descriptor on `path` for writing, emptied; OSError (ELOOP) where `path` is a link."""
    return os.open(path, WRITE, 0o600)


def write_file(path: Path, data: bytes | str) -> None:
    """`data` written to `path`, never through a link."""
    fd = open_new(path)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def read_file(path: Path) -> bytes | None:
    """`path`'s bytes where it is a regular file; None where it is missing, a link or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read() if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else None


def read_text(path: Path) -> str | None:
    """`read_file` as text (undecodable bytes replaced: a log is for people)."""
    data = read_file(path)
    return None if data is None else data.decode(errors="replace")
