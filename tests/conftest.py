"""Shared test setup: the `gpu` marker skips without CUDA; the tiny model keeps CPU tests fast."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs these on a GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_ray(monkeypatch, tmp_path):
    """A sweep test runs in its own directory (journal, reports) and leaves no Ray behind."""
    import ray

    monkeypatch.chdir(tmp_path)
    yield
    ray.shutdown()
