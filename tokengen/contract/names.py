"""Names that cross a process or a store: artifact files, trial statuses, profiler ranges.

Torch-free, so the sweep driver, the Ray task, the recorder and the report all import the one
spelling without paying for torch. A renamed constant here renames it everywhere at once.
"""

from __future__ import annotations

import re

# a trial's status, in its record and as the MLflow tag `status`
FINISHED, FAILED = "finished", "failed"
TRIAL_KEY = "trial_key"  # the MLflow tag of a trial's run that holds its key (the record's `key`)

# MLflow tags a query or a reader names: every search filter and tag look-up is built from these. A record's own
# field is tagged by its name (tokengen/contract/record.py); those a query names are here too, and
# tests/repository/test_store_names.py holds each to its field
STATUS = "status"  # a trial's run: FINISHED or FAILED, tagged last (a run without it was cut short)
ATTEMPT = "attempt"  # a trial's run: 1, or 2.. for a remeasure of its key
ATTEMPT_ID = "attempt_id"  # a trial's run: one per journaled result, so each is recorded once
VARIANT = "variant"  # a trial's run: its label (TrialSpec.variant), a param and, to be searched, a tag
SWEEP_TAG = "sweep"  # every run of a sweep, its trials' and its parent's: the sweep's name
SWEEP_PARENT = "sweep_parent"  # a sweep's parent run: the sweep's name (the latest run of a name speaks for it)
REUSED_TRIALS = "reused_trials"  # the parent run: how many of its plan's trials earlier runs had finished
PLANNED_WORKERS = "planned_workers"  # the parent run: each pool's workers, as the estimate counted them
STOPPED = "stopped"  # the parent run of a sweep stopped by what it could not write: why
FAILED_TRIALS = "failed_trials"  # the parent run, once every result is in: how many trials failed
OUT_OF_SPACE = "OutOfSpace"  # a trial's error type when its folder's disk is full: the sweep stops (exit 3)

# a compile's cache state, in the record's `compile_cache` (tokengen/measure/compile_counters.py): inductor's
# FX graph cache found every graph, none, or some
WARM, COLD, PARTLY_WARM = "warm", "cold", "partly warm"

# files a trial leaves beside its record, and the artifacts of its MLflow run
RESULT_FILE = "result.json"
FAILURE_FILE = "failure.json"  # a trial that raised: error type, message, traceback (sweeps/execution/trial_process.py)
TOKENS_FILE = "tokens.npy"
TRIAL_LOG = "trial.log"
TORCH_TRACE = "profile_trace.json"
NSYS_REPORT = "profile"  # nsys adds .nsys-rep
NSYS_REP_FILE = f"{NSYS_REPORT}.nsys-rep"
NSYS_STREAM_FILE = f"{NSYS_REPORT}.qdstrm"  # nsys's raw stream, kept where no importer could convert it
NSYS_SUMMARIES = {  # `nsys stats` reports as CSV, by what they summarize (the report names differ by version)
    "osrt": f"{NSYS_REPORT}_osrt.csv",  # OS runtime calls
    "kernels": f"{NSYS_REPORT}_gpu_kernels.csv",  # CUDA GPU kernels
    "cuda_api": f"{NSYS_REPORT}_cuda_api.csv",  # CUDA API calls
    "nvtx": f"{NSYS_REPORT}_nvtx.csv",  # NVTX ranges
}
PLAN_FILE = "plan.json"  # on a sweep's parent run: every planned key, and those reused from earlier runs
SWEEP_CONFIG_FILE = "sweep_config.json"
PLAN_ESTIMATE_FILE = "plan.csv"  # on a sweep's parent run (and reports/<sweep>/): each planned trial's estimate
PLAN_TEXT_FILE = "plan.md"  # the same plan as the dry run prints it
ARTIFACT_FILES = (TOKENS_FILE, TORCH_TRACE, NSYS_REP_FILE, *NSYS_SUMMARIES.values())
"""The trial's files that travel back to the driver (the record and log travel as text)."""
DEADLINE_ENV = "TOKENGEN_DEADLINE"
"""A trial process's environment: the time.time() at which the sweep kills it (its timeout); runs=auto stops
its runs in time for the instrumented run rather than be killed."""
"""What travels with a record from its node and is not part of it: the files' bytes, the log's text."""

# profiler ranges in the decode loop (NVTX or record_function), read back from traces
STEP_RANGE = "step {}"
FORWARD_RANGE = "forward"
CHECK_RANGE = "stop check"


def path_component(name: str) -> str:
    """A name (a sweep's, an experiment's: MLflow allows `/`) as one safe path component: letters,
    digits, `_`, `-` and `.` only, never `.` or `..`, so no folder it names leads out of its parent."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return safe if safe.strip(".") else "_" + safe
