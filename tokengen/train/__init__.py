"""The trained presets' build: `python -m tokengen.train` (tokengen/train/__main__.py).

`ensure` is what a trial and a sweep's driver ask: torch-free, it finds each checkpoint (tokengen/contract/trained.py)
and builds the missing ones in a process of its own, so the build's threads, random streams and OpenMP's waiting
are its own whoever asks, and a driver that never imports torch stays so. The pieces: documents.py (the corpus as
documents), fit.py (the training loop and held-out figures), checkpoints.py (built once, under a lock, kept).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

from tokengen.contract.spec import SpecError
from tokengen.contract.trained import COMPANIONS, carried_path, damage, find


def with_companions(names: Iterable[str]) -> list[str]:
    """The names, each followed by what is built beside it (its draft model), once each, in order."""
    found: list[str] = []
    for name in names:
        for one in (name, *COMPANIONS.get(name, ())):
            if one not in found:
                found.append(one)
    return found


def ensure(names: Iterable[str], say: Callable[[str], None]) -> None:
    """Each trained preset named (and its companions) built where this machine has none whole: said in one line,
    then built by `python -m tokengen.train` with its progress bar on this process's standard error; SpecError
    where the build fails."""
    missing = [name for name in with_companions(names) if find(name) is None]
    if not missing:
        return
    for name in missing:  # a carried checkpoint is the one to measure: never replaced by other weights built here
        carried = carried_path(name)
        if carried is not None and carried.exists():
            raise SpecError(f"model {name}: {damage(carried)}: carry it again (scripts/gpu_bundle.py)")
    say(f"model {', '.join(missing)}: not built on this machine yet, building once (python -m tokengen.train)")
    package_root = str(Path(__file__).resolve().parents[2])  # where `tokengen` is, for a copy that Ray shipped
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_WAIT_POLICY": "PASSIVE"}  # waiting threads sleep, not spin
    done = subprocess.run([sys.executable, "-m", "tokengen.train", *missing], env=env, stdin=subprocess.DEVNULL)
    still = [name for name in missing if find(name) is None]
    if done.returncode != 0 or still:
        raise SpecError(
            f"model {', '.join(still or missing)} could not be built (python -m tokengen.train exited "
            f"{done.returncode}): run it alone to see why"
        )
