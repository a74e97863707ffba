"""Where a result was measured, as one comparable value: the environment fingerprint.

A trial's key names what was asked; its fingerprint names where it was measured: the device, torch
and transformers, the CUDA driver, the thread count, the project's version and, for a local
checkpoint, the hash of its files. Resume reuses a finished key only where the node that would run
it now gives the same fingerprint, and a report never divides two results of different
fingerprints without naming the difference. Torch-free and read the same way by the trial process
and by the sweep driver (versions from package metadata, the GPU from nvidia-smi), so the two agree.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

from tokengen.contract.models import is_local_path

FACTS = ("device", "torch", "transformers", "driver", "threads", "project", "model_files")


def facts(device: str, threads: int | None, model: str) -> dict:
    """The facts a result depends on beyond its spec, for a trial on `device` with `threads` torch threads."""
    gpu, driver = _gpu() if device == "cuda" else (None, None)
    return {
        "device": gpu or f"cpu {_cpu_name()}",
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "driver": driver,
        "threads": int(threads) if threads else None,
        "project": _version("tokengen-sweeps"),
        "model_files": model_files_hash(model) if is_local_path(model) else "preset",
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
        out = subprocess.run(["nvidia-smi", *select, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    first = out.stdout.strip().splitlines()[:1] if out.returncode == 0 else []
    if not first or "," not in first[0]:
        return None, None
    name, driver = (part.strip() for part in first[0].rsplit(",", 1))
    return name, driver


def model_files_hash(model: str) -> str:
    """sha256 (16 hex) over a checkpoint directory's files, names and contents: another checkpoint
    saved in the same place is another model."""
    digest = hashlib.sha256()
    root = Path(model)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
