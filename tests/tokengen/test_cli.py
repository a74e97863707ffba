"""`python -m tokengen`: one line and exit 2 for bad input, a table and a full record otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tokengen.cli import main

RECORD_FIELDS = [
    "runtime_mean_s",
    "runtime_std_s",
    "runtime_min_s",
    "runtime_max_s",
    "runtime_median_s",
    "steps",
    "tokens_generated",
    "tokens_per_s",
    "step_latency_median_s",
    "step_latency_p90_s",
    "first_run_s",
    "mem_allocated_peak_bytes",
    "mem_reserved_peak_bytes",
    "mem_fragmentation_bytes",
    "mem_fragmentation_pct",
    "peak_rss_bytes",
    "weight_bandwidth_gbs",
    "tokens_sha256",
    "key",
    "status",
    "env_torch",
    "env_transformers",
    "env_host",
    "env_gpu_name",
]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "gpt9"], "unknown model 'gpt9'"),
        (["--variant", "turbo"], "unknown variant 'turbo'"),
        (["--batch-size", "0"], "batch_size must be an integer >= 1"),
        (["--max-seqlen", "0"], "max_seqlen must be an integer >= 1"),
        (["--max-seqlen", "5000"], "beyond the model's 1024 positions"),
        (["--prompt-len", "0"], "prompt_len must be an integer >= 1 (got 0)"),
        (
            ["--prompt-len", "100", "--max-seqlen", "1000"],
            "prompt_len + max_seqlen = 1100 is beyond the model's 1024 positions: use prompt_len + max_seqlen <= 1025",
        ),
        (["--stop-check", "pipelined"], "stop_check=pipelined needs a CUDA device (got device=cpu)"),
        (["--stop-check", "deferred"], "stop_check=deferred needs a CUDA device"),
        (["--variant", "static_cudagraph"], "compile=reduce-overhead needs a CUDA device"),
        (["--allocator", "expandable"], "allocator=expandable needs a CUDA device"),
        (["--stop", "uniform:9-3"], "need 1 <= LO <= HI"),
        (["--stop", "sometimes"], "is not understood"),
        (["--sampling", "topk:0"], "sampling='topk:0' is not understood"),
        (["--model", "/nonexistent/dir"], "has no config.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(["--model", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


def test_non_causal_model_path_is_rejected(tmp_path, capsys):
    from transformers import BertConfig

    BertConfig().save_pretrained(tmp_path)
    assert main(["--model", str(tmp_path)]) == 2
    assert "is not a causal LM (model_type='bert')" in capsys.readouterr().err


@pytest.mark.slow  # a trial in a process of its own
def test_cli_runs_a_trial_and_writes_the_record(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokengen",
            "--variant",
            "kv_cache",
            "--model",
            "tiny",
            "--batch-size",
            "2",
            "--max-seqlen",
            "8",
            "--runs",
            "2",
            "--stop",
            "fixed:5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Runtime Results:" in proc.stdout and "kv_cache" in proc.stdout
    record = json.loads(out.read_text())
    for field in RECORD_FIELDS:
        assert field in record, field
    assert record["steps"] == 5 and record["tokens_generated"] == 10
    assert record["variant"] == "kv_cache" and record["status"] == "finished"
    assert record["mem_allocated_peak_bytes"] is None and record["peak_rss_bytes"] > 0
    assert len(record["runtime_s"]) == 2 and record["runtime_median_s"] == pytest.approx(sum(record["runtime_s"]) / 2)
    # ttft comes from the instrumented run and the median from the timed ones: no order between them holds on a
    # loaded machine, so only that both were measured
    assert record["ttft_s"] > 0 and record["tpot_s"] is not None
    from tokengen.contract import record as declared

    assert sorted(record) == sorted(declared.RECORD_FIELDS)  # every declared field, nothing undeclared
    assert record["deterministic"] is True


def test_bad_input_from_a_real_process_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "tokengen", "--model", "tiny", "--stop-check", "pipelined"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: stop_check=pipelined needs a CUDA device (got device=cpu)"


def test_model_path_without_weights_is_rejected(tmp_path, capsys):
    from transformers import GPT2Config

    GPT2Config(n_layer=1).save_pretrained(tmp_path)
    assert main(["--model", str(tmp_path)]) == 2
    assert "has no weights" in capsys.readouterr().err
