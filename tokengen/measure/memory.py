"""The article's memory figures: CUDA's peak allocated and reserved bytes, fragmentation, the process's RSS;
and what the CUDA caching allocator is really doing, read from torch rather than from the environment
(PYTORCH_ALLOC_CONF is only a request: a record that claims `allocator=expandable` shows the settings the
allocator parsed and whether the segments it holds are expandable)."""

from __future__ import annotations

import os
import resource

import torch

from tokengen.contract.machine.process_env import ALLOC_VARS, trial_environment


def release_cached(device: str) -> None:
    """Hand the caching allocator's free blocks back to the driver: once, before a trial's warmup,
    so the trial starts from its own model's memory. Never between timed runs: an eager variant
    would pay cudaMalloc for its growth again inside the timer, which a real server never does."""
    if device == "cuda":
        torch.cuda.empty_cache()


def reset_peaks(device: str) -> None:
    """Start the peak counters afresh (nothing is freed): the peaks then belong to the next run."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def memory_stats(device: str) -> dict:
    """The article's figures: peaks since the last reset_peaks, fragmentation = reserved - allocated."""
    stats = {
        "mem_allocated_peak_bytes": None,
        "mem_reserved_peak_bytes": None,
        "mem_fragmentation_bytes": None,
        "mem_fragmentation_pct": None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if device == "cuda":
        raw = torch.cuda.memory_stats()
        allocated = raw.get("allocated_bytes.all.peak", 0)
        reserved = raw.get("reserved_bytes.all.peak", 0)
        stats.update(
            mem_allocated_peak_bytes=allocated,
            mem_reserved_peak_bytes=reserved,
            mem_fragmentation_bytes=reserved - allocated,
            mem_fragmentation_pct=100.0 * (reserved - allocated) / reserved if reserved else 0.0,
        )
    return stats


def set_allocator(allocator: str, device: str) -> None:
    """Give this process the allocator setting of process_env's rule; only possible before CUDA starts."""
    wanted = trial_environment(os.environ, allocator).get("PYTORCH_ALLOC_CONF")
    if wanted == os.environ.get("PYTORCH_ALLOC_CONF") and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ:
        return
    if device == "cuda" and torch.cuda.is_initialized():
        raise RuntimeError(
            f"allocator={allocator} must be set before CUDA starts: run the trial in a fresh process (python -m tokengen)"
        )
    for name in ALLOC_VARS:
        os.environ.pop(name, None)
    if wanted:
        os.environ["PYTORCH_ALLOC_CONF"] = wanted


def _parsed_settings() -> str | None:
    """The allocator's own copy of its configuration string (torch >= 2.9), or None."""
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    return getter() if getter else None


def _expandable_segments(segments: list[dict]) -> bool | None:
    """True if any segment is expandable (CUDA-graph pools never are), None with no segment to judge."""
    if not segments:
        return None
    return any(segment.get("is_expandable", False) for segment in segments)


def live_allocator_setting(device: str) -> dict | None:
    """The live CUDA allocator, for the result record; None on the CPU or before CUDA has started.

    `expandable_segments` comes from the memory snapshot's segments, so it is what the allocator
    did, not what it was asked; call this after the trial has allocated (it is None otherwise).
    """
    if device != "cuda" or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    backend = torch.cuda.memory.get_allocator_backend()  # native | cudaMallocAsync
    # cudaMallocAsync keeps no segments of its own (its snapshot is not meaningful)
    snapshot = torch.cuda.memory._snapshot()["segments"] if backend == "native" else []
    here = torch.cuda.current_device()
    segments = [segment for segment in snapshot if segment.get("device", here) == here]
    return {
        "backend": backend,
        "settings": _parsed_settings(),
        "expandable_segments": _expandable_segments(segments),
        "segments": len(segments),
    }


def live_allocator_tag(device: str) -> str | None:
    """live_allocator_setting as one line of text for the record's `allocator_live` tag, e.g.
    'backend=native expandable_segments=True settings=expandable_segments:True'; None where it is None."""
    setting = live_allocator_setting(device)
    if setting is None:
        return None
    return (
        f"backend={setting['backend']} expandable_segments={setting['expandable_segments']} "
        f"settings={setting['settings'] or ''}"
    )
