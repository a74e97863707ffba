"""After `nsys profile`: its raw stream converted where nsys did not, the report summarized as CSV, a few
figures taken from the summaries.

nsys writes a `.qdstrm` and converts it with `QdstrmImporter`, which a full install keeps in its
`host-linux-x64` folder; an install without that folder (Debian's `nsight-systems-target`, and Debian's
`/usr/bin/nsys`, whose real file lies in another tree than the importer) leaves the `.qdstrm` alone. The
importer of the same install is looked for beside every link on the way from `nsys` to its file, since
an importer of another version cannot be assumed to read the stream; the PATH's comes last. `nsys stats`
names its reports differently by version (`osrtsum` in 2022.4, `osrt_sum` later): the names this nsys
offers are read from `nsys stats --help-reports`, and the CSVs get the fixed names of
tokengen.contract.names.NSYS_SUMMARIES.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

from tokengen.contract.names import NSYS_REP_FILE, NSYS_REPORT, NSYS_STREAM_FILE, NSYS_SUMMARIES

IMPORTER = "QdstrmImporter"
HOST_FOLDER = "host-linux-x64"
STATS = {  # each summary's report name, newest nsys first
    "osrt": ("osrt_sum", "osrtsum"),
    "kernels": ("cuda_gpu_kern_sum", "gpukernsum"),
    "cuda_api": ("cuda_api_sum", "cudaapisum"),
    "nvtx": ("nvtx_sum", "nvtxsum"),
}
CUDA_SUMMARIES = ("kernels", "cuda_api")
TOOL_TIMEOUT_S = 600  # one conversion or export; a sweep's trial timeout bounds the whole trial anyway


def link_chain(path: str | Path) -> list[Path]:
    """`path`, each link it passes through (read one at a time, as written), and its real file."""
    chain, current = [Path(path)], Path(path)
    while current.is_symlink() and len(chain) < 40:
        target = Path(os.readlink(current))
        current = target if target.is_absolute() else current.parent / target
        chain.append(current)
    chain.append(Path(os.path.realpath(path)))
    return chain


def find_importer(nsys: str | Path | None) -> Path | None:
    """The QdstrmImporter of the install `nsys` belongs to: a `host-linux-x64` folder (or any sibling folder
    holding one, as Nsight Compute's copy has) beside each link of nsys's chain, or one level up in a
    `nsight-systems*` folder (a CUDA toolkit's bin/); then the PATH's."""
    for link in link_chain(nsys) if nsys else []:
        top = link.parent.parent
        candidates = [top / HOST_FOLDER / IMPORTER, *sorted(top.glob(f"*/{IMPORTER}"))]
        candidates += sorted(top.glob(f"nsight-systems*/{HOST_FOLDER}/{IMPORTER}"))
        for candidate in candidates:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return Path(os.path.realpath(candidate))
    found = shutil.which(IMPORTER)
    return Path(found) if found else None


def version(tool: str | Path, flag: str = "--version") -> str:
    """A tool's version line, for versions.txt; '?' where it does not answer."""
    try:
        out = subprocess.run([str(tool), flag], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "?"
    lines = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else "?"


def _tail(out: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in re.split(r"[\r\n]+", out.stdout + out.stderr) if line.strip()]
    return lines[-1][:200] if lines else f"exit {out.returncode}"


def stream_note(stream: Path, nsys: str | Path | None, why: str) -> str:
    """One line: what is missing, and how to convert the kept stream later."""
    real = os.path.realpath(nsys) if nsys else "nsys"
    return (
        f"nsys left {stream.name} unconverted ({why}; no {IMPORTER} in a {HOST_FOLDER} folder beside {real} that "
        f"could read it, nor on the PATH): it is kept in {stream.parent}; convert it with a full Nsight Systems "
        f"install of the same version (Debian: nsight-systems) by `{IMPORTER} -i {stream}`; torch.profiler did not "
        "run instead"
    )


def convert(folder: Path, nsys: str | Path | None) -> str | None:
    """The folder's stream made a report where nsys left only the stream; None where a report exists (the
    stream removed: the report holds it), else the note that says why not."""
    stream, report = folder / NSYS_STREAM_FILE, folder / NSYS_REP_FILE
    if report.is_file() or not stream.is_file():
        return None
    importer = find_importer(nsys)
    if importer is None:
        return stream_note(stream, nsys, "no importer found")
    try:
        out = subprocess.run(
            [str(importer), "-i", str(stream), "-o", str(report)],
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return stream_note(stream, nsys, f"{importer} passed {TOOL_TIMEOUT_S} s")
    if out.returncode != 0 or not report.is_file():
        return stream_note(stream, nsys, f"{importer} failed: {_tail(out)}")
    stream.unlink()
    return None


def offered_reports(nsys: str | Path) -> set[str]:
    """The report names `nsys stats` offers, from its `--help-reports` list."""
    out = subprocess.run([str(nsys), "stats", "--help-reports"], capture_output=True, text=True, timeout=120)
    return {m.group(1) for m in re.finditer(r"^\s+([a-z][a-z0-9_]*)(?:\[[^\]]*\])?\s+--", out.stdout, re.M)}


def summarize(report: Path, nsys: str | Path, device: str) -> list[str]:
    """`nsys stats` reports of `report` as CSV under their fixed names; the names of those with rows. A CUDA
    summary is asked only of a CUDA trial; a report this nsys lacks, or one with no data, is left out."""
    offered = offered_reports(nsys)
    wanted = {
        role: next((name for name in names if name in offered), None)
        for role, names in STATS.items()
        if device == "cuda" or role not in CUDA_SUMMARIES
    }
    chosen = {role: name for role, name in wanted.items() if name}
    if not chosen:
        return []
    prefix = report.parent / f"{NSYS_REPORT}_stats"
    command = [str(nsys), "stats", "--format", "csv", "--output", str(prefix), "--force-overwrite", "true"]
    for name in chosen.values():
        command += ["--report", name]
    subprocess.run([*command, str(report)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    written = []
    for role, name in chosen.items():
        made, kept = Path(f"{prefix}_{name}.csv"), report.parent / NSYS_SUMMARIES[role]
        kept.unlink(missing_ok=True)
        if made.is_file() and made.stat().st_size > 0:
            made.replace(kept)
            written.append(kept.name)
        else:
            made.unlink(missing_ok=True)
    return written


def _number(text: str | None) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def kernel_figures(summary: Path, steps: int | None) -> dict:
    """From the GPU kernel summary: kernel time per profiled step (us), the top kernel and its share."""
    if not summary.is_file():
        return {}
    with summary.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    total_column = next((c for c in (rows[0] if rows else {}) if c.startswith("Total Time")), None)
    if not rows or total_column is None:
        return {}
    totals = [(_number(row.get(total_column)) or 0.0, row) for row in rows]
    total_ns = sum(t for t, _ in totals)
    top_ns, top = max(totals, key=lambda pair: pair[0])
    return {
        "gpu_kernel_us_per_step": total_ns / 1e3 / steps if steps else None,
        "top_kernel": (top.get("Name") or "")[:250] or None,
        "top_kernel_pct": 100.0 * top_ns / total_ns if total_ns else None,
    }
