"""The body of a trial process forked from a warm parent (see sweeps/launcher.py).

The parent imported torch, transformers and the model code once, and never touched CUDA, so a
fork starts a trial in milliseconds instead of seconds of imports. The child becomes what a fresh
`python -m tokengen` would be: its own session (a timeout kills what it starts), its own log on
fds 1 and 2, the environment the sweep decided (allocator, compile cache, threads), then the CLI.
"""

from __future__ import annotations

import os
import sys

import torch
import transformers.models.gpt2.modeling_gpt2  # noqa: F401 - imported once in the warm parent
import transformers.models.llama.modeling_llama  # noqa: F401

import tokengen.benchmark  # noqa: F401
from tokengen.cli import main as cli_main


def run(argv: list[str], env: dict[str, str], threads: int | None, log_path: str) -> None:
    """Exit with the CLI's status (0 finished, 2 bad input); an exception exits 1 with its traceback in the log."""
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)  # read lazily by torch: the allocator at CUDA start, inductor at compile
    if threads:
        torch.set_num_threads(threads)
    sys.argv = ["python -m tokengen", *argv]
    status = cli_main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
