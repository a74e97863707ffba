"""A real small filesystem to fill: a tmpfs mounted for one test, and a ballast that fills it to the byte.

A test of a full disk must meet the kernel's own ENOSPC, not a patched Python function; mounting needs
root (or CAP_SYS_ADMIN), so where the machine refuses, the test says so and skips.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

BALLAST = "ballast"


@contextmanager
def tmpfs(path: Path, size: str = "4m"):
    """A tmpfs of `size` mounted at `path` for the block; unmounted after, whatever is open on it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root: run as root to test a full disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): a full disk is not testable")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path, leave: int = 0) -> int:
    """Write a ballast file on `disk` until the kernel says ENOSPC, or until `leave` bytes are left free;
    returns the bytes it took."""
    room = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave
    written = 0
    with open(disk / BALLAST, "ab", buffering=0) as handle:
        try:
            while written < room:
                written += handle.write(b"\0" * min(1 << 16, room - written))
        except OSError as exc:
            assert exc.errno == 28, exc
    return written


def free(disk: Path) -> None:
    (disk / BALLAST).unlink(missing_ok=True)
