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


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--quant", "int9"], "error: --quant int9: choose one of none, int8, int4"),
        (
            ["--batch-size", "x"],
            "error: --batch-size: batch_size='x' is not a valid int: see python -m tokengen --help",
        ),
        (["--json"], "error: --json: expected one argument: see python -m tokengen --help"),
        (["--bogus"], "error: unrecognized arguments: --bogus: see python -m tokengen --help"),
    ],
    ids=["choice", "type", "missing", "unknown"],
)
def test_a_usage_error_is_one_line_not_argparses_usage(argv, line, capsys):
    """argparse's own errors came after its 23-line usage; each is one line now, exit 2 as any bad input."""
    with pytest.raises(SystemExit) as stopped:
        main(["--model", "tiny", *argv])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_usage_error_from_a_real_process_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "tokengen", "--quant", "int9"], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "error: --quant int9: choose one of none, int8, int4\n",
    )


def refuse_any_trial(monkeypatch):
    """Were an output check to let a path through, the trial would start: make that a failure, not minutes."""

    def ran(*args, **kwargs):
        raise AssertionError("a trial ran before its output path was checked")

    monkeypatch.setattr("tokengen.measure.trial.run_trial", ran)


SMALL = ["--model", "tiny", "--runs", "1", "--warmup", "0", "--max-seqlen", "2", "--batch-size", "1"]


def test_devices_and_special_files_are_refused_before_a_trial_runs(tmp_path, monkeypatch, capsys):
    """`--json /dev/full` ran the whole trial, then failed with a traceback; /dev/null would lose the record; a
    FIFO would block. Only a regular file (or a new one in a writable folder) is written."""
    import os

    refuse_any_trial(monkeypatch)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flag, path, kind in (
        ("--json", "/dev/full", "a character device"),
        ("--tokens", "/dev/null", "a character device"),
        ("--json", str(fifo), "a FIFO (named pipe)"),
    ):
        assert main([*SMALL, flag, path]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: cannot write {flag} {path}: {path} is {kind}, not a regular file: give another path"
        ]
    assert main([*SMALL, "--tokens", "-"]) == 2
    assert capsys.readouterr().err.startswith("error: --tokens -: the tokens are a binary .npy array")
    from tokengen.writable import unwritable  # the reports' --out and the sweep's run folder ask it too

    assert unwritable("/dev/null", folder=True) == "/dev/null is a character device, not a folder"


def test_tokens_are_written_at_the_path_given(tmp_path, capsys):
    """numpy.save(path) adds .npy to a path without it: `--tokens P` wrote P.npy, a path nobody checked."""
    import numpy as np

    path = tmp_path / "tokens"
    assert main([*SMALL, "--tokens", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens"]
    assert np.load(path).shape == (1, 3)  # one row: the BOS prompt and two generated tokens
    capsys.readouterr()  # the trial's table
