"""benchmarks/article_table.py's Markdown: a number that may be wrong says so in its own row."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "article_table.py"


def load_script():
    spec = importlib.util.spec_from_file_location("article_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(variant: str, runtime: float, **extra) -> dict:
    return {
        "variant": variant,
        "status": "finished",
        "stop_check": "sync",
        "runtime_mean_s": runtime,
        "runtime_std_s": 0.01,
        "runtime_min_s": runtime,
        "runtime_max_s": runtime,
        "tokens_per_s": 1000.0,
        "mem_allocated_peak_bytes": None,
        "mem_reserved_peak_bytes": None,
        "mem_fragmentation_pct": None,
        "allocator_live": None,
        "first_run_s": runtime,
        "steps": 100,
        "tokens_sha256": "same",
        "measurement": "ok",
        "measurement_reasons": "",
        **extra,
    }


def test_skipped_graphs_and_a_contended_row_are_marked_in_the_table():
    table = load_script().markdown(
        [
            row("static_cudagraph", 0.2, cuda_graphs="skipped"),
            row("static_cudagraph_pipelined", 0.15, cuda_graphs="ran"),
            row("kv_cache", 0.5, measurement="contended", measurement_reasons="1 other process on the GPU"),
            row("baseline", 1.0),
        ],
        "title",
    )
    lines = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    assert "| static_cudagraph (CUDA graphs skipped)" in lines
    assert "| static_cudagraph_pipelined" in lines  # graphs ran: the plain name
    assert lines["| kv_cache"].endswith("| contended: 1 other process on the GPU |")
    assert lines["| baseline"].endswith("| yes | ok |") and "| 1.00x |" in lines["| baseline"]
    assert "| 5.00x |" in lines["| static_cudagraph (CUDA graphs skipped)"]
