"""The folders this user's sweeps keep files in, resolved in one place and proven theirs alone.

Two folders: the trials' workdir (`sweep.workdir`, by default `sweeps/` in the cache folder) and the cache folder
(`$TOKENGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/tokengen`, else `~/.cache/tokengen`: the kept CPU calibration).
Each is resolved on the machine that uses it (a trial's node expands `$VAR` and `~` there), missing levels are made
0700, and it is refused in one line where another user could plant a file in it: the folder not owned by this
user, or writable by group or others; a folder above it not this user's or root's, or writable by others without
the sticky bit (/tmp's); a symbolic link on the way owned by someone else. So a trial's log, its result and the
compile cache it loads are never a file another local user placed or points at.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

CACHE_VARIABLE = "TOKENGEN_CACHE_DIR"  # a folder of its own (the tests give each run one)
WORKDIR_SETTING = "sweep.workdir"


class FolderRefused(PermissionError):
    """A folder the sweep would keep files in is not this user's alone: one line naming it and the fix."""


def cache_root() -> Path:
    """The cache folder's path as this machine's environment names it, not yet made or checked."""
    named = os.environ.get(CACHE_VARIABLE)
    if named:
        return _expand(named)
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _expand(os.path.join(root, "tokengen"))


def cache_folder() -> Path:
    """This user's cache folder, made and proven theirs (FolderRefused, or the OSError that stopped it)."""
    given = os.environ.get(CACHE_VARIABLE)
    named = f"${CACHE_VARIABLE}={given}" if given else f"the cache folder {cache_root()}"
    example = (
        f"{CACHE_VARIABLE}=/tmp/tokengen-cache-{os.geteuid()}" if not given else f"{CACHE_VARIABLE}=~/.cache/tokengen"
    )
    return own_folder(cache_root(), named, example)


def workdir(setting: str | None) -> Path:
    """The trials' workdir on this machine: `sweep.workdir` expanded here (None: `sweeps/` in the cache folder),
    made and proven this user's own."""
    if not setting:
        path = cache_root() / "sweeps"
        return own_folder(
            path, f"{WORKDIR_SETTING} (default {path})", f"{WORKDIR_SETTING}=/tmp/tokengen-{os.geteuid()}"
        )
    path = _expand(setting)
    named = f"{WORKDIR_SETTING}={setting}" + (f" ({path})" if str(path) != setting else "")
    return own_folder(path, named, f"{WORKDIR_SETTING}=~/.cache/tokengen/sweeps")


def own_folder(path: Path, named: str, example: str) -> Path:
    """`path`, its missing levels made 0700, then the whole way to it checked (see the module's docstring)."""
    missing, level = [], path
    while not os.path.lexists(level) and level != level.parent:
        missing.append(level)
        level = level.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:  # a trial beside this one made it first: checked below like any other
            pass
    uid, fix = os.geteuid(), f"give a folder of your own, e.g. {example}"
    for level in [path, *path.parents][::-1]:  # a link on the way, by whoever can redirect it
        if os.path.islink(level) and os.lstat(level).st_uid not in (0, uid):
            raise FolderRefused(f"{named}: {level} is a link owned by uid {os.lstat(level).st_uid}, not you: {fix}")
    real = Path(os.path.realpath(path))
    for level in real.parents:
        info = os.stat(level)
        if info.st_uid not in (0, uid):
            raise FolderRefused(f"{named}: {level} is owned by uid {info.st_uid}, not you (uid {uid}) or root: {fix}")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise FolderRefused(f"{named}: {level} is writable by {_who(info.st_mode)} without the sticky bit: {fix}")
    _check_own(real, os.stat(real), named, fix)
    return path


def own_subfolder(parent: Path, name: str) -> Path:
    """`parent/name`, a folder inside one already proven (a sweep's, a trial's): made 0700 where missing, and
    refused where it is a link, or not this user's alone."""
    path = parent / name
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    fix = "remove it and run the sweep again"
    if stat.S_ISLNK(info.st_mode):
        raise FolderRefused(f"the folder {path} is a symbolic link: {fix}")
    _check_own(path, info, f"the folder {path}", fix)
    return path


def _check_own(path: Path, info: os.stat_result, named: str, fix: str) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
    uid = os.geteuid()
    if info.st_uid != uid:
        raise FolderRefused(f"{named} is owned by uid {info.st_uid}, not you (uid {uid}): {fix}")
    if info.st_mode & 0o022:
        raise FolderRefused(
            f"{named} is writable by {_who(info.st_mode)}: make it yours alone (chmod 700 {path}) or {fix}"
        )


def _who(mode: int) -> str:
    return (
        " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)
        + f" (mode {mode & 0o7777:04o})"
    )


def _expand(text: str) -> Path:
    """`$VAR`s and `~` expanded on this machine, relative to its current folder."""
    return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(text))))
