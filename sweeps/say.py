"""The sweep's one way to print a line for the user: standard error, flushed (standard output is the report's)."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
