"""Shared test setup: the `gpu` marker skips without CUDA; the tiny model keeps CPU tests fast."""

from __future__ import annotations

import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


WARM = "warm_ray"


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without CUDA; the tests on the session's warm Ray run last, together, so one Ray
    serves them all (tests/sweep_helpers.py: warm_local_ray)."""
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
