"""The article's memory figures: CUDA's peak allocated and reserved bytes, fragmentation, the process's RSS."""

from __future__ import annotations

import resource

import torch


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
