"""scripts/gpu_sweep.sh fits a borrowed GPU's minutes, and its bundle is what the GPU machine can install:
the steps' limits add up to the 350 s its header promises; the bundle leaves out what Ray's sweeps never
load, keeps its RECORD true to its files, and carries nothing the image already has; its check says why trials
did not finish."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_bundle  # noqa: E402 - a script's module, beside it
from servers import seeded_uri  # noqa: E402

SCRIPT = ROOT / "scripts" / "gpu_sweep.sh"


def test_the_limits_in_the_script_add_up_to_its_header_and_to_at_most_350_s():
    text = SCRIPT.read_text()
    limit = r"\bstep [a-z]+ \"?(?:\$\{[A-Z_]+:-)?(\d+)\}?\"? "  # a limit, or the default of one set from outside
    steps = [int(n) for n in re.findall(limit, text)]
    header = re.search(r"^# Limits, from a cold machine \(seconds\): (.*) = (\d+)[.;]", text, flags=re.M)
    parts = [int(n) for n in re.findall(r"(\d+)", header.group(1))]
    assert parts == steps, "the header's sum names the script's own limits, in order"
    assert sum(parts) == int(header.group(2)) <= 350  # two calls and two starts in 900 s of device time


EXECUTABLE = "ray/core/src/ray/gcs/gcs_server"


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name)
            entry.external_attr = (0o755 if name == EXECUTABLE else 0o644) << 16
            wheel.writestr(entry, data)
        wheel.writestr("ray-2.60.0.dist-info/RECORD", record)
    return path


def test_ray_is_repacked_stored_without_the_java_workers_and_the_dashboards_web_app(tmp_path):
    files = {
        "ray/__init__.py": b"x" * 100,
        "ray/jars/ray_dist.jar": b"j" * 100,
        EXECUTABLE: b"\x7fELF",
        "ray/dashboard/client/build/index.html": b"h",
        "ray/dashboard/modules/x.py": b"m",
    }
    source = _wheel(tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", files)
    (tmp_path / "out").mkdir()
    gpu_bundle.repack(source, tmp_path / "out")
    with zipfile.ZipFile(tmp_path / "out" / source.name) as wheel:
        names = set(wheel.namelist())
        assert {i.compress_type for i in wheel.infolist()} == {zipfile.ZIP_STORED}  # xz compresses the archive
        record = wheel.read("ray-2.60.0.dist-info/RECORD").decode()
        modes = {i.filename: i.external_attr >> 16 for i in wheel.infolist()}
    assert names == {"ray/__init__.py", "ray/dashboard/modules/x.py", EXECUTABLE, "ray-2.60.0.dist-info/RECORD"}
    assert modes[EXECUTABLE] == 0o755 and modes["ray/__init__.py"] == 0o644  # pip keeps the executable bit
    assert "jars" not in record and "client/build" not in record and "ray/__init__.py" in record


def test_the_bundle_needs_are_not_on_the_image_and_the_image_has_the_trials_own_needs():
    image, needs = gpu_bundle.listed(gpu_bundle.IMAGE), gpu_bundle.listed(gpu_bundle.NEEDS)
    assert not set(needs) & set(image)
    assert {"torch", "transformers", "pandas", "matplotlib", "psutil", "nvidia-ml-py"} <= set(image)
    assert image["transformers"] == "5.17.0" and gpu_bundle.normalized("Huggingface_Hub") == "huggingface-hub"


def test_the_check_says_why_no_trial_finished(tmp_path):
    """On the H200 every trial failed the same way and the check stopped on a missing column, its file unwritten."""
    from tokengen.contract.spec import TrialSpec
    from tokengen.contract.trial_record import make_record
    from tracking.store.recorder import Recorder

    uri = seeded_uri(tmp_path)
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("gpu", {"sweep": {"name": "gpu"}}, resume=False)
    for key in ("k1", "k2"):
        reason = {"error_type": "RuntimeError", "error_message": "Cannot re-initialize CUDA in forked subprocess"}
        recorder.record_trial(make_record(TrialSpec(), key=key, status="failed", **reason))
    out = tmp_path / "check.txt"
    command = [
        sys.executable,
        str(ROOT / "scripts" / "gpu_probe.py"),
        "--check",
        uri,
        "--sweep",
        "gpu",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert out.read_text().splitlines() == [
        "0 of 2 trial run(s) finished",
        "2 did not finish: RuntimeError: Cannot re-initialize CUDA in forked subprocess",
        "no trial finished: nothing to check",
    ]


@pytest.mark.slow  # the probe imports every package of the sweep, then the warm parent's in a process of its own
def test_the_probe_forks_the_trials_warm_parent_before_it_says_ok(tmp_path):
    """The probe's fork line comes before its ok: a parent that started CUDA would stop the call there."""
    out = tmp_path / "versions.txt"
    command = [sys.executable, str(ROOT / "scripts" / "gpu_probe.py"), "--cpu", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = out.read_text().splitlines()
    assert lines[-1] == "ok" and lines[-2].startswith("fork: a fork of the trials' warm parent answered: no CUDA"), (
        lines
    )
    nsys = [line for line in lines if line.startswith(("nsys ", "QdstrmImporter "))]  # which nsys, which importer
    assert len(nsys) == (2 if shutil.which("nsys") else 1), lines
