"""scripts/gpu_sweep.sh's two checks, each ending in one line that says what is wrong (exit 2) or ok (exit 0).

gpu_probe.py [--cpu] --out versions.txt    before the sweep: the versions, a fork of the trials' warm parent
                                           starting CUDA (sweeps/execution/fork_check.py), and what cannot work
gpu_probe.py --check URI [--sweep gpu] --out check.txt   after it: every finished trial saw the device Ray assigned
                                           it, and generate() peers are among them where it plans any
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

NEEDED = (
    "torch",
    "transformers",
    "ray",
    "mlflow",
    "hydra",
    "omegaconf",
    "sqlalchemy",
    "alembic",
    "pandas",
    "matplotlib",
)
TRANSFORMERS_FLOOR = (5, 17)


def probe(cpu: bool) -> list[str]:
    import platform

    lines = [f"python {platform.python_version()} ({sys.executable})"]
    for name in NEEDED:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure: the bundle or the image lacks it
            raise SystemExit(
                lines
                + [
                    f"cannot import {name} ({type(exc).__name__}: {exc}): rebuild the bundle "
                    "(scripts/gpu_bundle.sh) for this Python"
                ]
            )
        lines.append(f"{name} {getattr(module, '__version__', '?')}")
    import torch
    import transformers

    if tuple(int(p) for p in transformers.__version__.split(".")[:2]) < TRANSFORMERS_FLOOR:
        raise SystemExit(lines + [f"transformers {transformers.__version__} is older than 5.17.0, the oldest tested"])
    if torch.cuda.is_available():
        lines.append(
            f"gpu {torch.cuda.get_device_name()} ({torch.cuda.device_count()} visible), cuda {torch.version.cuda}"
        )
        from tokengen.measure.environment import cuda_driver_version

        lines.append(f"driver {cuda_driver_version()}")
    elif not cpu:
        raise SystemExit(lines + ["torch sees no CUDA device: run on the GPU machine, or rehearse with --rehearse"])
    else:
        lines.append("gpu none (rehearsal on the CPU: Ray is given one logical GPU)")
    lines += nsys_lines()
    from sweeps.execution.fork_check import fork_check

    forked, line = fork_check(expect_cuda=not cpu)
    if not forked:
        raise SystemExit(lines + [line])
    return lines + [line, "ok"]


def nsys_lines() -> list[str]:
    """Which nsys the trials run and which importer converts their streams here (versions, paths): a stream is
    converted on this machine only by an importer of the same install, found as the trial finds it."""
    import os
    import shutil

    from tokengen.measure.profiler.nsys_report import HOST_FOLDER, IMPORTER, find_importer, version

    nsys = shutil.which("nsys")
    if nsys is None:
        return ["nsys not found: the nsys trial is profiled by torch.profiler"]
    real = os.path.realpath(nsys)
    importer = find_importer(nsys)
    found = (
        f"{IMPORTER} {version(importer)} ({importer})"
        if importer
        else (
            f"{IMPORTER} not found (no {HOST_FOLDER} folder beside {real}, none on the PATH): the nsys trial keeps its "
            ".qdstrm and its profile_note says how to convert it"
        )
    )
    return [f"nsys {version(nsys)} ({nsys}" + (f" -> {real})" if real != nsys else ")"), found]


def failures(failed, shown: int = 3) -> list[str]:
    """The commonest reasons the trials that did not finish give, one line each with its count."""
    if failed.empty:
        return []
    told = failed.reindex(columns=["error_type", "error_message"]).fillna("?").astype(str)
    reasons = (told["error_type"] + ": " + told["error_message"].str[:200]).value_counts()
    return [f"{count} did not finish: {reason}" for reason, count in reasons.head(shown).items()]


def check(uri: str, sweep: str) -> list[str]:
    from tokengen.contract.declarations import PEER, in_family
    from tokengen.contract.names import FINISHED
    from tracking.store.reading import ReportError, load_sweep

    try:
        runs = load_sweep(uri, "tokengen", sweep)
    except ReportError as exc:
        raise SystemExit([f"the store holds no GPU sweep to check: {exc}"]) from None
    trials = runs.trials
    finished = trials[trials["status"] == FINISHED]
    lines = [f"{len(finished)} of {len(trials)} trial run(s) finished"] + failures(trials[trials["status"] != FINISHED])
    if finished.empty:
        raise SystemExit(lines + ["no trial finished: nothing to check"])
    wrong = finished[
        (finished["node_gpu_ids"].astype(str) == "")
        | (finished["env_visible_devices"].astype(str) != finished["node_gpu_ids"].astype(str))
    ]
    for _, row in wrong.iterrows():
        lines.append(
            f"{row['variant']}: Ray assigned GPU {row['node_gpu_ids']!r}, the trial saw "
            f"CUDA_VISIBLE_DEVICES={row['env_visible_devices']!r}"
        )
    peer_engines = in_family("engine", PEER)
    peers = sorted(set(finished.loc[finished["engine"].isin(peer_engines), "variant"]))
    planned = bool(trials["engine"].isin(peer_engines).any())  # a grid without peers (gpu_peak) is checked without
    lines.append(f"generate() peers finished: {', '.join(peers) or 'none'}" + ("" if planned else " (none planned)"))
    if finished.empty or len(wrong) or (planned and not peers):
        raise SystemExit(lines + ["not every finished trial saw its assigned device, or no planned peer finished"])
    return lines + ["ok"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="a rehearsal: no CUDA device expected")
    parser.add_argument("--check", metavar="URI", help="check the sweep recorded in this store")
    parser.add_argument("--sweep", default="gpu", help="the sweep to check (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        lines, status = (check(args.check, args.sweep) if args.check else probe(args.cpu)), 0
    except SystemExit as stop:
        if not isinstance(stop.code, list):
            raise
        lines, status = stop.code, 2
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
