"""One trial needs nothing above tokengen/: `python -m tokengen` runs a whole trial with sweeps, tracking, Hydra
and OmegaConf refused at import, in its process and in any it starts, as on a machine where only torch and
transformers are installed. tests/repository/test_import_rules.py holds the same rule on the source; this holds
it on what really runs (an import by name, a plug-in's path, a library that pulls one in)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BLOCKED = ("sweeps", "tracking", "hydra", "omegaconf")
BLOCKER = '''
"""Refuses to run the packages named in TOKENGEN_BLOCKED, as if they were not installed, and notes each attempt.
A look-up that runs nothing (importlib.util.find_spec of a top-level name) is not an import and is answered."""
import importlib.abc
import importlib.machinery
import os
import sys

_blocked = tuple(os.environ["TOKENGEN_BLOCKED"].split(","))


class _Refuse(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name.split(".")[0] in _blocked else None

    def create_module(self, spec):
        with open(os.environ["TOKENGEN_ATTEMPTS"], "a") as attempts:
            attempts.write(spec.name + "\\n")
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked)", name=spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Refuse())
'''


def blocked_env(folder: Path, blocked=BLOCKED) -> dict[str, str]:
    """The environment of a process that cannot import `blocked`: a sitecustomize first on its path (so a process
    it starts inherits it), and a file where each attempt is written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    attempts = folder / "attempts.txt"
    attempts.write_text("")
    return {**os.environ, "PYTHONPATH": path, "TOKENGEN_BLOCKED": ",".join(blocked), "TOKENGEN_ATTEMPTS": str(attempts)}


def test_the_blocker_refuses_what_it_names(tmp_path):
    """The blocker itself: a process that imports a blocked package fails, and the attempt is written."""
    env = blocked_env(tmp_path / "site")
    proc = subprocess.run(
        [sys.executable, "-c", "import tokengen.contract.spec; import sweeps.pricing.memory_guard"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode != 0 and "(blocked)" in proc.stderr
    assert (tmp_path / "site" / "attempts.txt").read_text().split() == ["sweeps"]


@pytest.mark.slow
def test_a_whole_trial_runs_with_the_packages_above_tokengen_blocked(tmp_path):
    """The memory guard (tokengen/contract/memory_estimate.py) included: it is asked before the model is built."""
    env = blocked_env(tmp_path / "site")
    record = tmp_path / "record.json"
    command = [sys.executable, "-m", "tokengen", "--model", "tiny", "--device", "cpu", "--runs", "1"]
    command += ["--batch-size", "2", "--max-seqlen", "8"]  # the defaults' 100 steps of batch 32 take minutes
    proc = subprocess.run([*command, "--json", str(record)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "site" / "attempts.txt").read_text() == ""  # not even an attempt caught and forgiven
    assert '"status": "finished"' in record.read_text()
