"""Where a result was measured, as one comparable value: the environment fingerprint.

A trial's key names what was asked; its fingerprint names where and with what it was measured: the
device, torch and transformers, the CUDA driver, the thread count, the project's version, the hash of
the code that measures (every source file of `tokengen/` and the trial process's module: a changed
decode loop is another measurement, whatever the version says) and, for a local checkpoint or a trained
preset's (tokengen/contract/trained.py), the hash of its files: a resume never reuses a result measured
on other weights. Resume reuses a finished key only where the node that would run it now gives the same
fingerprint, and a report never divides two results of different fingerprints without naming the
difference. Torch-free and read the same way by the trial process and by the sweep driver (versions
from package metadata, the GPU from nvidia-smi, the code from the files Python imports), so the two
agree. The checkout's git commit (`revision`) is recorded beside it, for people, outside the match:
a node that gets the code through Ray has no git.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

from tokengen.contract.model_facts import is_local_path
from tokengen.contract.trained import find, trained

FACTS = ("device", "torch", "transformers", "driver", "threads", "project", "code", "model_files")
MEASURING_CODE = (
    "tokengen",
    "sweeps.execution.trial_process",
)  # what a trial process runs: packages whole, modules alone


def facts(device: str, threads: int | None, model: str, draft: str | None = None) -> dict:
    """The facts a result depends on beyond its spec, for a trial on `device` with `threads` torch threads; `draft`:
    the model that proposes for it (speculative decoding), whose files it depends on too."""
    gpu, driver = _gpu() if device == "cuda" else (None, None)
    return {
        "device": gpu or f"cpu {_cpu_name()}",
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "driver": driver,
        "threads": int(threads) if threads else None,
        "project": _version("tokengen-sweeps"),
        "code": code_hash(),
        "model_files": model_files(model) + (f" draft {model_files(draft)}" if draft else ""),
    }


def fingerprint(environment: dict) -> str:
    return hashlib.sha256(json.dumps(environment, sort_keys=True).encode()).hexdigest()[:16]


def as_text(environment: dict) -> str:
    """The facts as one line for a tag: `device=NVIDIA H200;torch=2.11.0;...`."""
    return ";".join(f"{name}={environment.get(name)}" for name in FACTS)


def from_text(text: str | None) -> dict:
    if not isinstance(text, str) or "=" not in text:
        return {}
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def differences(a: dict, b: dict) -> list[str]:
    """What differs between two environments, as `threads 1 vs 2`."""
    return [f"{name} {a.get(name)} vs {b.get(name)}" for name in FACTS if str(a.get(name)) != str(b.get(name))]


@functools.lru_cache(maxsize=None)
def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def _gpu() -> tuple[str | None, str | None]:
    """(name, driver) of the first GPU this process may use (CUDA_VISIBLE_DEVICES), from nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None, None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    select = ["-i", visible] if visible else []
    try:
        out = subprocess.run(
            ["nvidia-smi", *select, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    first = out.stdout.strip().splitlines()[:1] if out.returncode == 0 else []
    if not first or "," not in first[0]:
        return None, None
    name, driver = (part.strip() for part in first[0].rsplit(",", 1))
    return name, driver


def model_files(model: str) -> str:
    """The model's files as the fingerprint names them: a local checkpoint's hash, a trained preset's checkpoint's
    (`not built` before its build), or `preset` for seeded random weights."""
    if is_local_path(model):
        return model_files_hash(model)
    if trained(model):
        path = find(model)
        return model_files_hash(str(path)) if path is not None else "not built"
    return "preset"


def model_files_hash(model: str) -> str:
    """sha256 (16 hex) over a checkpoint directory's files, names and contents: another checkpoint
    saved in the same place is another model. Hashed again only when a file's size or time changed
    (the driver asks once per planned trial)."""
    root = Path(model)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    stamps = tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _hash_checkpoint(str(root), stamps)


@functools.lru_cache(maxsize=16)
def _hash_checkpoint(root: str, stamps: tuple) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stamps:
        digest.update(name.encode() + b"\0")
        with open(Path(root) / name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def located(name: str):
    """A module's spec, or None where it is not installed, found without running its parent packages (which
    importlib.util.find_spec imports): the trial process's module is hashed where the sweep is installed, and
    `python -m tokengen` alone needs no sweep (tests/tokengen/test_stands_alone.py)."""
    from importlib.machinery import PathFinder

    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    for part in rest:
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = PathFinder.find_spec(f"{spec.name}.{part}", list(spec.submodule_search_locations))
    return spec


def measuring_files() -> list[tuple[str, Path]]:
    """(name, path) of every source file of MEASURING_CODE, found as Python imports them (a checkout, an
    installed package, or the copy Ray ships to a node): named relative to their package, so two copies
    of the same code in two places name the same files."""
    found = []
    for name in MEASURING_CODE:
        spec = located(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:  # a package: its every .py file
            root = Path(next(iter(spec.submodule_search_locations)))
            found += [(f"{name}/{p.relative_to(root).as_posix()}", p) for p in root.rglob("*.py")]
        elif spec.origin:
            found.append((name, Path(spec.origin)))
    return sorted(found)


def code_hash() -> str:
    """sha256 (16 hex) over the measuring code's file names and contents, computed again only when a
    file's size or time changed (the driver asks once per planned trial)."""
    files = measuring_files()
    stamps = tuple((name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in files)
    return _hash_files(stamps, tuple(p for _, p in files))


@functools.lru_cache(maxsize=4)
def _hash_files(stamps: tuple, paths: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for (name, _, _), path in zip(stamps, paths):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def revision() -> str | None:
    """The git commit of the checkout the measuring code comes from, `+dirty` when its tracked files differ
    from it; None outside a git checkout (a node that got the code through Ray, an installed wheel)."""
    spec = importlib.util.find_spec("tokengen")
    if spec is None or not spec.submodule_search_locations or not shutil.which("git"):
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip()[:12] + ("+dirty" if status.stdout.strip() else "")
