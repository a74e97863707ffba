"""Every `sweep.*` setting and name checked before anything is written or Ray starts: one line each.

Names become folders (`reports/<sweep>/`, the journal's `<experiment>/<sweep>.jsonl`, the trials'
`<workdir>/<sweep>-<store>/<key>`), so a sweep name is a name of safe characters or nothing; an experiment name (MLflow
allows `/`) is turned into one path component wherever it names a folder
(tokengen.contract.names.path_component).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from sweeps.planning.peak_search import search_problem
from tokengen.contract.machine.user_folders import FolderRefused, cache_root, workdir
from tokengen.contract.slo import slo_problem
from tokengen.contract.spec import SpecError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SHARED, COLD = "shared", "cold"
INDUCTOR_CACHES = (SHARED, COLD)
INDUCTOR_ALIASES = {"per_sweep": SHARED, "per_trial": COLD}
"""sweep.inductor_cache's earlier words, still read from older grids and stored configs."""


def inductor_mode(value) -> str:
    """sweep.inductor_cache as one of INDUCTOR_CACHES: `shared` (each graph compiled once for the sweep, its
    twins loading it warm) or `cold` (every trial compiles cold); the earlier words read as these."""
    return INDUCTOR_ALIASES.get(value, value)


def check_settings(sweep: dict) -> None:
    """SpecError naming the first bad `sweep.*` setting and its fix."""
    name = str(sweep.name)
    if not NAME.fullmatch(name) or name in (".", ".."):
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise SpecError(
            f"sweep.name={shown!r}: use a name of letters, digits, '_', '-' and '.', starting with a "
            "letter or digit, at most 64 characters (it names runs and folders)"
        )
    if not _number(sweep.trial_timeout_s) or sweep.trial_timeout_s <= 0:
        raise SpecError(
            f"sweep.trial_timeout_s={sweep.trial_timeout_s!r}: give a timeout in seconds above 0, "
            "e.g. sweep.trial_timeout_s=1800"
        )
    if not _integer(sweep.retries) or sweep.retries < 0:
        raise SpecError(
            f"sweep.retries={sweep.retries!r}: give 0 or more retries for a lost node, e.g. sweep.retries=1"
        )
    cpus = sweep.cpus_per_trial
    if cpus is not None and (not _integer(cpus) or cpus < 1):
        raise SpecError(f"sweep.cpus_per_trial={cpus!r}: give 1 or more CPUs, or null for all of a node's CPUs")
    gpus = sweep.trial_gpus
    if gpus is not None and (not _integer(gpus) or gpus < 0):
        raise SpecError(
            f"sweep.trial_gpus={gpus!r}: give 0 or more GPUs per trial, or null (1 for CUDA trials, 0 for CPU)"
        )
    if inductor_mode(sweep.inductor_cache) not in INDUCTOR_CACHES:
        raise SpecError(f"sweep.inductor_cache={sweep.inductor_cache!r}: use one of {', '.join(INDUCTOR_CACHES)}")
    if not _integer(sweep.max_trials) or sweep.max_trials < 1:
        raise SpecError(f"sweep.max_trials={sweep.max_trials!r}: give 1 or more")
    gate = sweep.fidelity_gate
    if not _number(gate) or not 0 < gate <= 1:
        raise SpecError(
            f"sweep.fidelity_gate={gate!r}: give the top-1 agreement a lossy trial must reach, a fraction "
            "in (0, 1], e.g. sweep.fidelity_gate=0.99"
        )
    slo = slo_problem(sweep.slo_ttft_ms, sweep.slo_tpot_ms, sweep.slo_percentile)
    if slo:
        raise SpecError(slo)
    search = search_problem(sweep.peak_low_rps, sweep.peak_high_rps, sweep.peak_precision)
    if search:
        raise SpecError(search)
    guard = sweep.memory_guard
    if guard is not None and (not _number(guard) or guard <= 0):
        raise SpecError(
            f"sweep.memory_guard={guard!r}: give a fraction of the free memory a trial may take, e.g. "
            "sweep.memory_guard=0.9, or null for no guard"
        )
    prices = sweep.prices
    if not isinstance(prices, dict) or not all(isinstance(k, str) and _number(v) and v >= 0 for k, v in prices.items()):
        raise SpecError(
            f"sweep.prices={prices!r}: give USD per device-hour by type, e.g. 'sweep.prices={{cpu:0.1,L40S:1.86}}'"
        )
    for kind in sweep.accelerator_types:
        if not NAME.fullmatch(str(kind)):
            raise SpecError(
                f"sweep.accelerator_types has {kind!r}: use Ray's accelerator type names, e.g. [L40S, H100]"
            )


def prepare_workdir(setting: str | None) -> None:
    """A local Ray's trials write their files under `sweep.workdir` on this machine: made, proven this user's
    own (tokengen/contract/machine/user_folders.py) and writable here, before Ray starts, so a path that cannot be one is a
    line naming it and why, not a failed trial each. A cluster's nodes resolve and check their own (a node's
    refusal is its trials' failure, in the same line)."""
    try:
        path = workdir(setting)
        probe = path / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except FolderRefused as exc:
        raise SpecError(str(exc)) from None
    except OSError as exc:
        shown = setting or str(cache_root() / "sweeps")
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != shown else ""
        raise SpecError(
            f"sweep.workdir={shown} cannot be used{where}: {exc.strerror or exc}: give a writable directory of "
            "your own, e.g. sweep.workdir=~/.cache/tokengen/sweeps"
        ) from None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def local_gpus() -> list[str] | None:
    """The GPUs a local Ray would see on this machine, read without CUDA or Ray; None where it cannot tell,
    [] where it has none. As Ray counts them: CUDA_VISIBLE_DEVICES where set, else every GPU nvidia-smi
    names, else NVML's count (where the optional pynvml is installed). The driver refuses CUDA trials for
    a local Ray by it, and the pricing sizes a local GPU pool by it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [f"GPU {d.strip()}" for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    named = _nvidia_smi_names()
    if named is not None:
        return named
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [f"GPU {i}" for i in range(int(pynvml.nvmlDeviceGetCount()))]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver: unknown
        return None


def _nvidia_smi_names() -> list[str] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
