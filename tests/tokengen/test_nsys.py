"""Nsight Systems: its importer found in the install that ran, the stats and figures read back, and, with the
real tool where it is installed, nothing of nsys left running after a trial (killed, or its profile failed) and a
stream without importer kept with its note. A sweep's profiled trial under real nsys: test_profiling.py."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.execution.process_guard import kill_session
from tokengen.contract.names import NSYS_REP_FILE, NSYS_STREAM_FILE
from tokengen.contract.rules import problem, resolve
from tokengen.measure.profiler.nsys import NO_SAMPLING, NSYS_TMP, nsys_command, restoring_tmpdir, run_profiler
from tokengen.measure.profiler.nsys_report import IMPORTER, convert, find_importer, kernel_figures, offered_reports

NSYS = shutil.which("nsys")
needs_nsys = pytest.mark.skipif(NSYS is None, reason="nsys not installed (Debian: nsight-systems, see docs/results.md)")


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_importer_is_the_one_beside_the_nsys_that_ran(tmp_path, monkeypatch):
    """Debian's layout: /usr/bin/nsys -> ../lib/nsight-systems/bin/nsys -> ../target-linux-x64/nsys, a folder link
    into another tree; the importer lies in lib/nsight-systems/host-linux-x64, beside a link, not the real file."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    usr = tmp_path / "usr"
    real = _exe(usr / "lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
    home = usr / "lib/nsight-systems"
    (home / "bin").mkdir(parents=True)
    (home / "target-linux-x64").symlink_to("../x86_64-linux-gnu/nsight-systems/target-linux-x64")
    (home / "bin/nsys").symlink_to("../target-linux-x64/nsys")
    (usr / "bin").mkdir()
    (usr / "bin/nsys").symlink_to("../lib/nsight-systems/bin/nsys")
    assert find_importer(usr / "bin/nsys") is None and find_importer(real) is None
    importer = _exe(home / "host-linux-x64" / IMPORTER)
    assert find_importer(usr / "bin/nsys").resolve() == importer
    assert find_importer(real) is None  # the real file's own tree has none, and the PATH none either
    monkeypatch.setenv("PATH", str(importer.parent))
    assert find_importer(real) == importer
    # Nsight Compute's copy: host/target-linux-x64/nsys, its importer in a sibling folder of target-linux-x64
    ncu = tmp_path / "nsight-compute/2025.1/host"
    sibling = _exe(ncu / "linux-desktop-glibc_2_11_3-x64" / IMPORTER)
    assert find_importer(_exe(ncu / "target-linux-x64/nsys")) == sibling


# `nsys stats --format csv --report gpukernsum` (2022.4) as it writes it; cuda_gpu_kern_sum's columns are the same
KERNELS_CSV = """Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
60.0,600000,40,15000.0,15000.0,14000,16000,500.0,"void gemv_kernel<float, 128>(int, float const*)"
30.0,300000,40,7500.0,7500.0,7000,8000,300.0,triton_poi_fused_add_0
10.0,100000,20,5000.0,5000.0,4900,5100,50.0,void at::native::elementwise_kernel<128, 4>()
"""


def test_kernel_figures_from_the_gpu_kernel_summary(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text(KERNELS_CSV)
    figures = kernel_figures(path, steps=20)
    assert figures["gpu_kernel_us_per_step"] == pytest.approx(1_000_000 / 1e3 / 20)
    assert figures["top_kernel"] == "void gemv_kernel<float, 128>(int, float const*)"
    assert figures["top_kernel_pct"] == pytest.approx(60.0)
    assert kernel_figures(tmp_path / "none.csv", 20) == {}
    assert kernel_figures(path, None)["gpu_kernel_us_per_step"] is None  # no steps seen: no per-step figure


def test_the_capture_on_cuda_is_the_window_and_on_the_cpu_the_whole_process():
    """CPU sampling and context switches off on both (with them nsys's agent never ended here); the CPU has no
    cudaProfilerApi to open a capture range, so it gets none, and nsys=profile is a CPU trial's too."""
    cuda = nsys_command("nsys", ["python"], Path("/x/profile"), "cuda")
    cpu = nsys_command("nsys", ["python"], Path("/x/profile"), "cpu")
    assert "--capture-range=cudaProfilerApi" in cuda and "--trace=cuda,nvtx,osrt" in cuda
    assert not [a for a in cpu if a.startswith("--capture-range")] and "--trace=osrt,nvtx" in cpu
    assert {"--sample=none", "--cpuctxsw=none"} <= set(cuda) & set(cpu) and cpu[-1] == cuda[-1] == "python"
    assert problem(resolve(model="tiny", device="cpu", profile="nsys")) is None


def _ours(tmp: Path) -> list[int]:
    """Live processes started with TMPDIR=tmp: nsys, its launcher and its agent (the profiled process gets its own
    TMPDIR back, tokengen.measure.profiler.nsys.restoring_tmpdir)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if state != "Z" and f"TMPDIR={tmp}".encode() in env:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path):
    """Whatever a failing test left running under its folder is killed after it, so one failure stays one."""
    yield
    left = _ours(tmp_path / NSYS_TMP) + [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and str(tmp_path).encode() in _cmdline(p)
    ]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _agent(tmp: Path, outside: int | None = None) -> int | None:
    """nsys's agent (`nsys --start-agent`) among them; `outside`: once it has left that process's session."""
    for pid in _ours(tmp):
        try:
            left = outside is None or os.getsid(pid) != os.getsid(outside)
            if b"--start-agent" in _cmdline(Path(f"/proc/{pid}")) and left:
                return pid
        except ProcessLookupError:
            continue
    return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def _trial_under_nsys(folder: str, code: str) -> None:
    """A sweep's trial process as trial_process._child makes it (its own session), running nsys as it does."""
    os.setsid()
    inner = [sys.executable, "-c", code]
    command = [NSYS, "profile", *NO_SAMPLING, "--trace=osrt", f"--output={folder}/profile", *restoring_tmpdir()]
    status, _ = run_profiler(command + inner, inner, Path(folder) / NSYS_TMP)
    os._exit(status)


@pytest.fixture(scope="module")
def real_stream(tmp_path_factory):
    """The folder of a real .qdstrm: a profiled process that fails (exit 3) under real nsys in a trial-like process,
    its status passed on."""
    if NSYS is None:
        pytest.skip("nsys not installed (Debian: nsight-systems, see docs/results.md)")
    folder = tmp_path_factory.mktemp("failed")
    trial = multiprocessing.get_context("fork").Process(target=_trial_under_nsys, args=(str(folder), "exit(3)"))
    trial.start()
    trial.join(120)
    assert trial.exitcode == 3 and (folder / NSYS_STREAM_FILE).is_file()
    return folder


@pytest.mark.slow
@needs_nsys
def test_a_stream_without_importer_is_kept_with_its_note(real_stream, tmp_path, monkeypatch):
    """The real tool's .qdstrm, its importer out of reach (nsys linked from a folder of its own, the PATH without
    an importer): the stream stays, and one line says what is missing and how to convert it; a trial is never
    failed for it. With the importer found, the same stream becomes a report."""
    shutil.copy(real_stream / NSYS_STREAM_FILE, tmp_path / NSYS_STREAM_FILE)
    alone = tmp_path / "bin"
    alone.mkdir()
    (alone / "nsys").symlink_to(os.path.realpath(NSYS))  # the real file: no host-linux-x64 beside it on Debian
    monkeypatch.setenv("PATH", str(alone))
    if find_importer(alone / "nsys") is not None:
        pytest.skip("this install keeps its importer beside its real nsys file")
    note = convert(tmp_path, alone / "nsys")
    assert note.startswith(f"nsys left {NSYS_STREAM_FILE} unconverted") and "\n" not in note
    assert f"{IMPORTER} -i {tmp_path / NSYS_STREAM_FILE}" in note and "torch.profiler did not run" in note
    assert (tmp_path / NSYS_STREAM_FILE).is_file() and not (tmp_path / NSYS_REP_FILE).exists()
    monkeypatch.undo()
    if find_importer(NSYS) is not None:
        assert convert(tmp_path, NSYS) is None and (tmp_path / NSYS_REP_FILE).is_file()
        assert not (tmp_path / NSYS_STREAM_FILE).exists()  # the report holds it
    assert {"osrtsum", "osrt_sum"} & offered_reports(NSYS)


@pytest.mark.slow
@needs_nsys
def test_nsys_dying_mid_profile_leaves_no_process(tmp_path):
    """A profile that goes wrong (here nsys itself killed while it profiles): its launcher, the profiled process and
    its agent, all still running, are ended by their PIDs when the trial's call to nsys returns."""
    trial = multiprocessing.get_context("fork").Process(
        target=_trial_under_nsys, args=(str(tmp_path), "import time; time.sleep(120)")
    )
    trial.start()
    tmp = tmp_path / NSYS_TMP
    _wait_for(lambda: _agent(tmp), 60, "nsys's agent started")
    (main,) = [pid for pid in _ours(tmp) if _cmdline(Path(f"/proc/{pid}")).split(b"\0")[1:2] == [b"profile"]]
    os.kill(main, signal.SIGKILL)
    trial.join(30)
    assert trial.exitcode is not None and not _ours(tmp)
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and b"time.sleep(120)" in _cmdline(p)]


@pytest.mark.slow
@needs_nsys
def test_a_trial_killed_by_the_sweep_leaves_no_nsys_process(tmp_path):
    """nsys's agent calls setsid: killing the trial's session would leave it running. The launcher ends it by its
    PID, as a descendant of the trial (the trial under nsys is its subreaper)."""
    ctx = multiprocessing.get_context("fork")
    trial = ctx.Process(target=_trial_under_nsys, args=(str(tmp_path), "import time; time.sleep(120)"))
    trial.start()
    tmp = tmp_path / NSYS_TMP

    # the agent leaves the trial's session (a session kill alone misses it), its parent the trial, its subreaper
    def settled():
        agent = _agent(tmp, outside=trial.pid)
        return agent if agent and _parent(agent) == trial.pid else None  # its first fork gone: the trial its parent

    _wait_for(settled, 60, "nsys's agent in a session of its own, the trial its parent")
    kill_session(trial)
    _wait_for(lambda: not _ours(tmp), 5, f"nsys's processes ended (left: {_ours(tmp)})")


@pytest.mark.slow
@needs_nsys
def test_python_m_tokengen_under_nsys_stopped_leaves_no_nsys_process(tmp_path):
    """`python -m tokengen --profile nsys` alone, sent SIGTERM while nsys profiles it: it exits 143, and nothing of
    nsys (its agent included) nor the trial it profiled is left."""
    argv = ["--model", "tiny", "--device", "cpu", "--variant", "kv_cache", "--max-seqlen", "64", "--runs", "400"]
    argv += ["--warmup", "0", "--profile", "nsys", "--profile-dir", str(tmp_path)]
    log = tmp_path / "cli.log"  # a file, not a pipe: nsys left running would hold a pipe open
    with log.open("wb") as err:
        cli = subprocess.Popen([sys.executable, "-m", "tokengen", *argv], stdout=subprocess.DEVNULL, stderr=err)
    tmp = tmp_path / NSYS_TMP
    _wait_for(lambda: _agent(tmp) or cli.poll() is not None, 90, "nsys's agent started")
    cli.send_signal(signal.SIGTERM)
    assert cli.wait(30) == 128 + signal.SIGTERM, log.read_text()[-2000:]
    assert "stopped by SIGTERM" in log.read_text()
    _wait_for(lambda: not _ours(tmp), 5, f"nsys's processes ended (left: {_ours(tmp)})")  # killed ones may still exit
    inner = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(tmp_path).encode() in _cmdline(p)]
    assert not inner


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
