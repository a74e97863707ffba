"""Shared test setup: the `gpu` marker skips without CUDA; the tiny model keeps CPU tests fast."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest
import torch

from sweeps.pricing.estimate import hardware
from sweeps.pricing.estimate.hardware import CACHE_VARIABLE

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "PYTEST_XDIST_WORKER" not in os.environ:  # the run's own: its workers, drivers and trials inherit it
    # the CPU calibration that prices CPU trials is kept here for the run, not in the user's ~/.cache
    os.environ[CACHE_VARIABLE] = tempfile.mkdtemp(prefix="tokengen-test-cache-")
    atexit.register(shutil.rmtree, os.environ[CACHE_VARIABLE], True)
    # one calibration for the whole run, kept however busy the machine is (a user's is kept only when quiet): it
    # prices test sweeps only, and each driver and dry run of the run reads it instead of taking a second of both cores
    hardware.keep(hardware.host_name(), hardware.measure_watched())


WARM = "warm_ray"
ONE_PER_SESSION = {WARM, "postgres"}  # the session's warm Ray and its PostgreSQL server
WARM_MODULES = (  # the modules with a test on the warm Ray or PostgreSQL: one xdist worker runs them all
    "tests/end_to_end/test_compare_sweep.py",
    "tests/end_to_end/test_concurrent.py",
    "tests/end_to_end/test_driver_killed.py",
    "tests/end_to_end/test_failures.py",
    "tests/end_to_end/test_full_disk.py",
    "tests/end_to_end/test_interrupts.py",
    "tests/end_to_end/test_journal.py",
    "tests/end_to_end/test_peak_search_sweep.py",
    "tests/end_to_end/test_pricing_cluster.py",
    "tests/end_to_end/test_remeasure_sweep.py",
    "tests/end_to_end/test_report_sweep.py",
    "tests/end_to_end/test_sweep_local.py",
    "tests/sweeps/test_one_record.py",
    "tests/tokengen/test_profiling.py",
    "tests/tracking/test_auth.py",
    "tests/tracking/test_postgres.py",
    "tests/tracking/test_sweep_lock.py",
    "tests/tracking/test_tracking_server.py",
)


def xdist_group(nodeid: str) -> str:
    """Where pytest-xdist runs a test (pyproject.toml: -n 2 --dist loadgroup): the modules of WARM_MODULES in one
    group, on one worker, in the order below, so one warm Ray and one PostgreSQL serve them; every other module as a
    whole on whichever worker is free, so its module fixtures are made once."""
    module = nodeid.split("::")[0]
    return WARM if module in WARM_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with the groups of xdist_group. xdist's own marks a group in the test's nodeid, which
    pytest 9 no longer reads, so the groups are named here from the nodeid. Any other `--dist` is xdist's own
    (scripts/gpu_check.sh: `--dist load`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return Groups(config, log)


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without CUDA; the tests on the session's warm Ray run last, together, so one Ray
    serves them all (tests/sweep_helpers.py: warm_local_ray). A test on the warm Ray or PostgreSQL outside
    WARM_MODULES is refused: under xdist its worker would start a second one."""
    for item in items:
        uses = ONE_PER_SESSION & set(item.fixturenames)
        if uses and xdist_group(item.nodeid) != WARM:
            raise pytest.UsageError(
                f"{item.nodeid} uses {', '.join(sorted(uses))}: add its module to WARM_MODULES in tests/conftest.py"
            )
    items[:] = [item for item in items if WARM not in item.fixturenames] + [
        item for item in items if WARM in item.fixturenames
    ]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs these on a GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def ray_down() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(autouse=True)
def no_ray_left_over(request):
    """Every test but a warm_ray one starts with no Ray connected: its sweep's connect() must start
    or join the Ray its config names, not find one left over."""
    if WARM not in request.fixturenames:
        ray_down()
    yield


@pytest.fixture
def fresh_ray(monkeypatch, tmp_path):
    """A sweep test runs in its own directory (journal, reports) on a Ray of its own and leaves none
    behind: for tests that set the trials' environment or count Ray's own start."""
    monkeypatch.chdir(tmp_path)
    yield
    ray_down()


@pytest.fixture
def warm_ray(monkeypatch, tmp_path):
    """A sweep test in its own directory on the session's one local Ray, which stays up for the next:
    its workers keep torch imported, so a small sweep takes ~5 s instead of ~24 s on 2 cores. Only for
    tests whose trials need nothing from the test's environment and that do not count Ray's start."""
    from sweep_helpers import warm_local_ray

    monkeypatch.chdir(tmp_path)
    warm_local_ray()
    yield


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the session (tests/postgres_helpers.py); each test makes its own
    database. Skipped, in one line, where PostgreSQL or its driver cannot be had."""
    import shutil

    from postgres_helpers import missing, started

    why = missing()
    if why:
        pytest.skip(why)
    server = started()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
