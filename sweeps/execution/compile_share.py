"""Each compiled graph compiled once for the whole sweep, on any node, its twins loading it warm.

The first trial of a graph key (tokengen/contract/graphs.py) compiles cold in its own empty inductor cache, as
with sharing off, so its first run is the honest cold figure. Its cache (inductor's FX graphs and generated
kernels, AOTAutograd's entries, the compiled C++ or Triton binaries, autotuning results) goes back to the driver
packed with a manifest of what it was compiled with: torch, Triton, CUDA, transformers, the GPU and the measuring
code. The driver keeps it on its shelf (Ray's object store: no shared disk) and hands it to every twin, which
unpacks it into its own empty cache before it builds anything, on whatever node it runs. A twin whose own facts
differ from the manifest's compiles cold and says why; one that unpacked it is `warm` only where inductor's
cache-hit counters say so (tokengen/measure/compile_counters.py), and names the trial whose compile it reused.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from sweeps.execution.trial_files import read_file, write_file
from tokengen.contract.graphs import graph_key
from tokengen.contract.names import COLD, PARTLY_WARM, WARM
from tokengen.contract.record import first_line

SHARED_IN = "compile_cache.in.tar.gz"  # what a twin was handed, in its folder
SHARED_OUT = "compile_cache.tar.gz"  # what a cold trial offers, in its folder
MANIFEST = "compile_manifest.json"
FACTS = ("torch", "triton", "cuda", "transformers", "gpu", "code")


def compile_facts(device: str) -> dict:
    """What a compiled graph depends on beyond its key, on this machine (the trial process: torch imported)."""
    import importlib.metadata

    import torch
    import transformers

    from tokengen.contract.machine.fingerprint import code_hash

    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    gpu = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else None
    return {
        "torch": torch.__version__,
        "triton": triton,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "gpu": gpu,
        "code": code_hash(),
    }


def pack(cache_dir: Path, facts: dict) -> bytes:
    """The cache folder and its manifest as one gzipped tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        manifest = json.dumps(facts, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for path in sorted(cache_dir.rglob("*")):
            if path.is_file() and "locks" not in path.relative_to(cache_dir).parts:
                tar.add(path, arcname=f"cache/{path.relative_to(cache_dir).as_posix()}")
    return buffer.getvalue()


def unpack(blob: bytes, cache_dir: Path, facts: dict) -> str | None:
    """Unpacks a shared cache into `cache_dir` where its manifest matches `facts`; else says why not. A damaged
    blob (cut short, not a gzipped tar, no manifest) is a cold compile: what it half unpacked is removed."""
    try:
        return _unpack(blob, cache_dir, facts)
    except (tarfile.TarError, EOFError, zlib.error, OSError, KeyError, ValueError, AttributeError) as exc:
        shutil.rmtree(cache_dir, ignore_errors=True)
        return f"the handed cache is damaged ({type(exc).__name__}: {first_line(exc)}): compiled cold"


def _unpack(blob: bytes, cache_dir: Path, facts: dict) -> str | None:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        theirs = json.loads(tar.extractfile(MANIFEST).read())
        differ = [
            f"{name} {theirs.get(name)} vs {facts.get(name)}" for name in FACTS if theirs.get(name) != facts.get(name)
        ]
        if differ:
            return "compiled with other " + "; ".join(differ)
        members = [m for m in tar.getmembers() if m.name.startswith("cache/") and m.isfile()]
        for member in members:
            member.name = member.name.removeprefix("cache/")
        cache_dir.mkdir(parents=True, exist_ok=True)
        tar.extractall(cache_dir, members=members, filter="data")
    return None


def receive(folder: Path, cache_dir: Path, device: str) -> dict:
    """Before the trial: unpack what the driver handed this trial, if anything. The record's fields on it."""
    given = read_file(folder / SHARED_IN)  # a regular file the launcher wrote, never a link's target
    if given is None:
        return {}
    started = time.perf_counter()
    refused = unpack(given, cache_dir, compile_facts(device))
    return {"compile_share_note": refused} if refused else {"compile_load_s": time.perf_counter() - started}


def settle(record: dict, received: dict, shared_from: str | None) -> dict:
    """The record's sharing fields: the trial whose compile it reused, only where inductor found its graphs."""
    fields = dict(received)
    if "compile_load_s" in received:
        if record.get("compile_cache") == WARM:
            fields["compile_shared_from"] = shared_from
        else:
            fields["compile_share_note"] = (
                f"handed {shared_from}'s graphs, but inductor found {record.get('compile_cache')}"
            )
    return {**record, **fields}


def offer(folder: Path, cache_dir: Path, record: dict, device: str) -> None:
    """After a trial that compiled something new: its cache, packed, for the driver to hand to its twins."""
    if record.get("compile_cache") in (COLD, PARTLY_WARM) and cache_dir.is_dir():
        write_file(folder / SHARED_OUT, pack(cache_dir, compile_facts(device)))


@dataclass
class Shelf:
    """The driver's shelf of compiled graphs for one sweep: each graph key's first trial, its offer (a Ray
    object), and the twins waiting for it. A twin is held back until its graph's first trial is done."""

    waiting: dict = field(default_factory=dict)  # graph key -> twins held back
    offers: dict = field(default_factory=dict)  # graph key -> (key of the trial that compiled it, its object)

    def split(self, trials: list, sharing: bool) -> list:
        """The trials to submit now: every eager trial, each graph's first (in the given order: longest first)
        and the twins of graphs already on the shelf; the other twins wait for their first."""
        now = []
        for trial in trials:
            key = graph_key(trial.spec.to_dict(), trial.accelerator_type) if sharing else None
            if key is None or key in self.offers:
                now.append(trial)
            elif key in self.waiting:
                self.waiting[key].append(trial)
            else:
                self.waiting[key] = []
                now.append(trial)
        return now

    def handed(self, trial) -> tuple[str | None, object]:
        """(the key of the trial whose graphs `trial` gets, the object holding them), or (None, None)."""
        return self.offers.get(graph_key(trial.spec.to_dict(), trial.accelerator_type), (None, None))

    def done(self, trial, blob: bytes | None, put) -> list:
        """A trial's result is in: shelve its offer (`blob`, the record's compile_offer; `put` makes the Ray
        object) and return the twins to submit now; without an offer (it failed, or inductor had them all) the
        next twin compiles for the rest."""
        key = graph_key(trial.spec.to_dict(), trial.accelerator_type)
        if key is None:
            return []
        if blob:
            self.offers[key] = (trial.key, put(blob))
        twins = self.waiting.pop(key, [])
        if key in self.offers or not twins:
            return twins
        self.waiting[key] = twins[1:]
        return twins[:1]
