"""The result record of one trial: every field declared once, with its type and its role.

A trial's record is its spec's fields (MLflow params, declared in tokengen.contract.spec) plus these. The
role says where a field lives in MLflow: a `metric` (a number, comparable across runs), a `series`
(one metric value per timed run, step = run index, and the whole list as a JSON tag of the same name,
which a search returns), a `tag` (text: statuses, checksums, machine
facts), a `param` (set by the sweep: the pinned GPU type), or `record` (kept in the run's
result.json only). The CLI's JSON, the recorder, the report's reader, the terminal table and the
tests all derive from this class, so a field renamed here is renamed, or fails, everywhere. A result
saves itself to a dict and to JSON and builds itself back from either, or from a trial's result.json
(`from_dict`, `from_json`): the same object, a NaN read back equal to the NaN it was. A value not of its
field's declared type is refused where the result is made, in one line that names the field, so a typo
never travels on to the last stage. `tokens_generated` and `tokens_per_s` count the tokens a generation
says it produced (tokengen.decode.loop.Generation.produced), which is batch x steps wherever a step makes one
token per row, so an older store's figures mean the same. A trial's spec and result together are a `TrialRecord`
(tokengen/contract/trial_record.py). Torch-free: the sweep driver and the report import it without torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import re
import typing
from dataclasses import dataclass

from tokengen.contract.names import FINISHED
from tokengen.contract.spec import FIELD_TYPES, SPEC_FIELDS, SpecError, parse_field

METRIC, SERIES, TAG, PARAM, RECORD = "metric", "series", "tag", "param", "record"


def _f(role: str, default=None):
    return dataclasses.field(default=default, metadata={"role": role})


@dataclass(frozen=True)
class TrialResult:
    # identity
    key: str | None = _f(TAG)  # TrialSpec.key(), or the sweep's key of a GPU-pinned trial
    status: str = _f(TAG, FINISHED)  # finished | failed (tokengen.contract.names)
    attempt: int | None = _f(
        TAG
    )  # 1, or 2.. for a remeasure of the same key (sweeps/execution/remeasure.py); set by the sweep
    accelerator_type: str | None = _f(PARAM)  # the GPU type a sweep pinned the trial to
    # work done
    steps: int | None = _f(METRIC)  # decode steps of the last timed run (requests: forwards, prefills included)
    tokens_generated: int | None = _f(METRIC)  # tokens produced, padding included: batch x steps where a step makes
    # one token per row (requests: slots x forwards)
    useful_tokens: int | None = _f(METRIC)  # tokens before each row's end: padding excluded
    rows_ended: int | None = _f(METRIC)  # rows that ended before max_seqlen (under stop=model: at their own EOS)
    # time (seconds; the runs' median unless said)
    runtime_s: list | None = _f(SERIES)  # every timed run, in order
    runtime_mean_s: float | None = _f(METRIC)
    runtime_std_s: float | None = _f(METRIC)
    runtime_min_s: float | None = _f(METRIC)
    runtime_max_s: float | None = _f(METRIC)
    runtime_median_s: float | None = _f(METRIC)
    runtime_cv: float | None = _f(METRIC)  # std / mean over the timed runs
    runtime_ci_rel: float | None = _f(METRIC)  # the mean's 95% interval half-width / mean (Student t; None for 1 run)
    runs_done: int | None = _f(METRIC)  # timed runs made: `runs`, or what runs=auto took
    warmup_done: int | None = _f(METRIC)  # warmup runs made (runs=auto warms on until a run settles)
    tokens_per_s: float | None = _f(METRIC)  # tokens_generated / median runtime
    useful_tokens_per_s: float | None = _f(METRIC)  # useful tokens / median runtime
    request_latency_p50_s: float | None = _f(METRIC)  # requests: run start -> the host learns one ended (median run)
    request_latency_p90_s: float | None = _f(METRIC)
    slot_occupancy: float | None = _f(METRIC)  # requests: useful tokens / (slots x forwards), the rest idle or padding
    # requests under load (tokengen/measure/load_figures.py): each request's figures from its own arrival, warm-up
    # and drain left out, the median over the timed runs of each run's p50/p90/p99 (a p99 of < 100 requests: their
    # maximum) and mean; queue: arrival -> its prefill; ttft: -> the host holds its first token; tpot: first -> last
    # token over the tokens after the first; itl: the host's gaps between its tokens; e2e: -> its last token
    request_queue_p50_s: float | None = _f(METRIC)
    request_queue_p90_s: float | None = _f(METRIC)
    request_queue_p99_s: float | None = _f(METRIC)
    request_queue_mean_s: float | None = _f(METRIC)
    request_ttft_p50_s: float | None = _f(METRIC)
    request_ttft_p90_s: float | None = _f(METRIC)
    request_ttft_p99_s: float | None = _f(METRIC)
    request_ttft_mean_s: float | None = _f(METRIC)
    request_tpot_p50_s: float | None = _f(METRIC)
    request_tpot_p90_s: float | None = _f(METRIC)
    request_tpot_p99_s: float | None = _f(METRIC)
    request_tpot_mean_s: float | None = _f(METRIC)
    request_itl_p50_s: float | None = _f(METRIC)
    request_itl_p90_s: float | None = _f(METRIC)
    request_itl_p99_s: float | None = _f(METRIC)
    request_itl_mean_s: float | None = _f(METRIC)
    request_e2e_p50_s: float | None = _f(METRIC)
    request_e2e_p90_s: float | None = _f(METRIC)
    request_e2e_p99_s: float | None = _f(METRIC)
    request_e2e_mean_s: float | None = _f(METRIC)
    requests_measured: int | None = _f(METRIC)  # the requests those figures count (warm-up and drain left out)
    offered_rate_rps: float | None = _f(METRIC)  # their arrival rate: the drawn schedule's own (None: offline)
    achieved_rate_rps: float | None = _f(METRIC)  # their completion rate: below offered, the server falls behind
    output_tokens_per_s: float | None = _f(METRIC)  # every request's tokens, first arrival -> last token
    arrival_error_median_s: float | None = _f(METRIC)  # an arrival registered less its scheduled time (the clock's)
    arrival_error_p99_s: float | None = _f(METRIC)
    goodput_rps: float | None = _f(METRIC)  # requests/s within both SLO limits (tokengen/contract/slo.py)
    slo_met: bool | None = _f(METRIC)  # the SLO's percentile of TTFT and of TPOT within its limits
    slo_ttft_s: float | None = _f(METRIC)  # the SLO it was judged by
    slo_tpot_s: float | None = _f(METRIC)
    slo_percentile: float | None = _f(METRIC)
    peak_search: str | None = _f(TAG)  # the peak search this trial probed for (sweeps/planning/peak_search.py)
    peak_probe: int | None = _f(TAG)  # its probe's number in that search, 1 for the first
    serving_note: str | None = _f(TAG)  # falling behind; a p99 that is a maximum
    request_trace_sha256: str | None = _f(TAG)  # the content of the request_trace file served
    ttft_s: float | None = _f(METRIC)  # time to first token: prefill + first sample (instrumented run)
    tpot_s: float | None = _f(METRIC)  # time per output token after the first: (median - ttft) / (row's tokens - 1)
    step_latency_median_s: float | None = _f(METRIC)
    step_latency_p90_s: float | None = _f(METRIC)
    first_run_s: float | None = _f(METRIC)  # the first run, compile included
    trial_wall_s: float | None = _f(METRIC)  # inside the trial process: model build, compile, every run
    # compilation (tokengen/measure/compile_counters.py): torch's own counters over warmup and timed runs
    compile_graphs: int | None = _f(METRIC)
    compile_graph_breaks: int | None = _f(METRIC)
    compile_recompiles: int | None = _f(METRIC)
    cudagraph_skips: int | None = _f(METRIC)
    cuda_graphs: str | None = _f(TAG)  # reduce-overhead only: ran | skipped (a skipped one is not a CUDA-graph result)
    compile_notes: str | None = _f(TAG)  # the first graph-break, recompile and cudagraph-skip reasons
    compile_cache: str | None = _f(TAG)  # warm | cold | partly warm: inductor's FX graph cache over the compiles
    compile_shared_from: str | None = _f(
        TAG
    )  # warm from the sweep's shared graphs: the key of the trial that compiled them
    compile_share_note: str | None = _f(TAG)  # why graphs handed to the trial were not used (other versions, a miss)
    compile_load_s: float | None = _f(
        METRIC
    )  # unpacking the shared graphs before the build (their re-trace: first_run_s)
    child_wall_s: float | None = _f(METRIC)  # the trial process as the sweep saw it
    # memory
    mem_allocated_peak_bytes: int | None = _f(METRIC)
    mem_reserved_peak_bytes: int | None = _f(METRIC)
    mem_fragmentation_bytes: int | None = _f(METRIC)  # reserved - allocated, the article's definition
    mem_fragmentation_pct: float | None = _f(METRIC)
    peak_rss_bytes: int | None = _f(METRIC)
    allocator_live: str | None = _f(TAG)  # the allocator's setting as torch reports it, not the variable
    # weights, energy
    weight_bytes: int | None = _f(METRIC)
    weight_bandwidth_gbs: float | None = _f(METRIC)
    weight_bandwidth_pct_of_peak: float | None = _f(METRIC)
    energy_j: float | None = _f(METRIC)  # NVML's counter over the timed runs (null without one)
    energy_j_per_token: float | None = _f(METRIC)  # per useful token
    # interference over the timed runs (tokengen/measure/interference.py: Watch, verdict)
    measurement: str | None = _f(TAG)  # ok | noisy (spread above target) | contended (the machine interfered)
    measurement_reasons: str | None = _f(TAG)  # "; "-joined, "" when ok
    interference_device: str | None = _f(TAG)  # the device the CPU-share rule judged
    interference_wall_s: float | None = _f(METRIC)  # the Watch's span: the timed runs
    interference_window_s: float | None = _f(METRIC)  # others' CPU read over: the runs, widened to 10 ticks
    interference_threads: int | None = _f(METRIC)  # torch threads the trial had
    interference_cores: int | None = _f(METRIC)  # cores the process may run on
    interference_cpu_util: float | None = _f(METRIC)  # our CPU time / (wall x min(threads, cores))
    interference_cpu_waited: float | None = _f(METRIC)  # share of our threads' wanted CPU time spent waiting
    interference_others_cores: float | None = _f(METRIC)  # cores-worth of CPU others used on our cores (/proc/stat)
    interference_load: float | None = _f(METRIC)  # 1-minute load average, the larger of start and end
    interference_gpu_procs: int | None = _f(METRIC)  # other compute processes on our GPU (NVML)
    interference_sm_clock_mhz: int | None = _f(METRIC)  # SM clock, the lower of start and end (NVML)
    interference_throttle: str | None = _f(TAG)  # NVML clock event reasons seen, comma-joined ("" none)
    # the model: a trained checkpoint's own metadata (tokengen/contract/trained.py); None on random weights
    model_heldout_loss: float | None = _f(METRIC)  # nats per byte on its held-out text
    model_corpus: str | None = _f(TAG)  # the content hash of the corpus it learned
    model_train_steps: int | None = _f(METRIC)
    # tokens
    tokens_sha256: str | None = _f(TAG)  # the last timed run's, docs/design.md's checksum
    deterministic: bool | None = _f(METRIC)  # every timed run returned the same tokens
    # fidelity: a trial with equivalent or lossy values against the reference model (tokengen/measure/agreement.py),
    # a speculative one against its plain twin (tokengen/measure/speculation_proof.py)
    fidelity: str | None = _f(TAG)  # equivalent | lossy | speculative (tokengen.contract.declarations); None: exact
    fidelity_verdict: str | None = _f(TAG)  # tokengen.contract.fidelity.verdict at fidelity_gate
    fidelity_gate: float | None = _f(METRIC)  # the top-1 agreement it had to reach
    top1_agreement: float | None = _f(METRIC)  # teacher-forced: steps whose argmax is the reference's
    max_logit_diff: float | None = _f(METRIC)  # teacher-forced: the largest |logit - reference's|
    kl_divergence: float | None = _f(METRIC)  # teacher-forced: mean KL(reference || trial) per step
    top1_margin_median: float | None = _f(METRIC)  # the reference's median top-1 minus top-2 logit
    rows_exact: int | None = _f(METRIC)  # free-running: rows whose tokens are the reference's
    first_divergence_step: int | None = _f(METRIC)  # free-running: first step where a row differs (None: none)
    divergence_margin: float | None = _f(METRIC)  # speculative: the twin's top-1 minus top-2 logit at that step
    # speculation: a generation whose advance verifies proposals (tokengen/decode/speculate.py), its last timed run
    accepted_per_verify: float | None = _f(METRIC)  # proposed tokens accepted per verify forward (mean, 0..k)
    acceptance_rate: float | None = _f(METRIC)  # accepted / proposed
    forwards_per_token: float | None = _f(METRIC)  # the model's forwards per generated token of a row (plain: 1.0)
    proposer_share: float | None = _f(METRIC)  # the run's time spent proposing (draft forwards, n-gram search)
    # profiling
    profile_window: str | None = _f(TAG)
    profile_trace: str | None = _f(TAG)
    profile_report: str | None = _f(TAG)
    profile_skipped: str | None = _f(TAG)  # why a trial that asked for a profile has none (its engine cannot be traced)
    profile_note: str | None = _f(TAG)  # why the profile is not what was asked (no nsys report: torch's, or a .qdstrm)
    profile_summaries: str | None = _f(TAG)  # the nsys report's CSV summaries (tokengen.contract.names), comma-joined
    gpu_idle_us_per_step: float | None = _f(METRIC)
    gpu_busy_pct: float | None = _f(METRIC)
    host_sync_us_per_step: float | None = _f(METRIC)
    profiled_steps: int | None = _f(METRIC)
    gpu_kernel_us_per_step: float | None = _f(METRIC)  # nsys: every GPU kernel's time in the capture / profiled steps
    top_kernel: str | None = _f(TAG)  # nsys: the GPU kernel with the most time in the capture
    top_kernel_pct: float | None = _f(METRIC)  # its share of all kernel time
    # failure
    error_type: str | None = _f(TAG)
    error_message: str | None = _f(TAG)
    log_tail: str | None = _f(RECORD)
    # where it ran
    env_host: str | None = _f(TAG)
    env_python: str | None = _f(TAG)
    env_torch: str | None = _f(TAG)
    env_transformers: str | None = _f(TAG)
    env_cuda: str | None = _f(TAG)
    env_driver: str | None = _f(TAG)
    env_gpu_name: str | None = _f(TAG)
    env_cpu: str | None = _f(TAG)
    env_cpu_count: int | None = _f(TAG)
    env_torch_threads: int | None = _f(TAG)
    env_alloc_conf: str | None = _f(TAG)
    env_visible_devices: str | None = _f(TAG)  # CUDA_VISIBLE_DEVICES in the trial process (Ray's assignment)
    env_fingerprint: str | None = _f(TAG)  # contract.machine.fingerprint: resume reuses a key only where it matches
    env_facts: str | None = _f(TAG)  # the fingerprint's facts, `device=...;threads=2;...`, to name a difference
    env_revision: str | None = _f(TAG)  # the checkout's git commit (+dirty): for people, outside the fingerprint
    attempt_id: str | None = _f(TAG)  # one per result the sweep journals: MLflow records each attempt once
    node_id: str | None = _f(TAG)
    node_host: str | None = _f(TAG)
    node_gpu_ids: str | None = _f(TAG)
    node_threads: int | None = _f(TAG)
    node_started_at: float | None = _f(METRIC)  # time.time() when the trial began on its node
    node_finished_at: float | None = _f(METRIC)

    def __post_init__(self) -> None:
        """Every value of its field's declared type (a whole number where a float is declared reads as that float;
        a numpy scalar as its Python value); TypeError in one line that names the field otherwise."""
        values = self.__dict__  # a report reads thousands of runs: each field looked up once
        for name, kind in _KINDS.items():
            value = values[name]
            if (value is None and name in _OPTIONAL) or type(value) is kind:
                continue
            checked = _checked(kind, value)
            if checked is _REFUSED:
                raise TypeError(
                    f"TrialResult.{name}={value!r}: a {type(value).__name__} where {kind.__name__} is declared"
                )
            if checked is not value:
                object.__setattr__(self, name, checked)

    def to_dict(self) -> dict:
        """Every field by name, in declaration order; a list copied, never shared."""
        fields = dict(self.__dict__)
        for name in _LISTS:
            if fields[name] is not None:
                fields[name] = list(fields[name])
        return fields

    @classmethod
    def from_dict(cls, record: dict) -> TrialResult:
        """The result a record holds: this class's own dict, or the flat record (TrialRecord.to_dict, result.json)
        whose spec fields sit beside the result's; a field it leaves out takes its default. TypeError
        names a field that neither the spec nor the result declares, or a value not of its field's type."""
        undeclared = unknown_fields(record)
        if undeclared:
            raise TypeError(f"TrialResult.from_dict: fields neither the spec nor the result declares: {undeclared}")
        return cls(**{name: record[name] for name in RESULT_FIELDS if name in record})

    def to_json(self) -> str:
        """The result as JSON; a NaN stays NaN (Python's json writes and reads it)."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> TrialResult:
        """The result of a JSON record: to_json's, or a flat record's such as a trial's result.json."""
        return cls.from_dict(json.loads(text))

    def __eq__(self, other) -> bool:
        """Field by field, a NaN equal to a NaN: a figure not measured is the same record read back."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(_same(getattr(self, name), getattr(other, name)) for name in RESULT_FIELDS)


_REFUSED = object()


def _checked(kind: type, value):
    """`value` as a field of `kind` holds it, or _REFUSED; a bool is never a number."""
    if kind is bool or isinstance(value, bool):
        return value if kind is bool and isinstance(value, bool) else _REFUSED
    if kind is int:
        return value if type(value) is int else int(value) if isinstance(value, numbers.Integral) else _REFUSED
    if kind is float:
        return value if type(value) is float else float(value) if isinstance(value, numbers.Real) else _REFUSED
    if kind is list:
        return value if type(value) is list else list(value) if isinstance(value, tuple) else _REFUSED
    return value if isinstance(value, kind) else _REFUSED


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TrialResult))
ROLES: dict[str, str] = {f.name: f.metadata["role"] for f in dataclasses.fields(TrialResult)}
ROLES.update({name: PARAM for name in SPEC_FIELDS})
RECORD_FIELDS = SPEC_FIELDS + RESULT_FIELDS
"""Every name a record may carry, spec fields first."""
_RECORD_NAMES = frozenset(RECORD_FIELDS)
_TYPES = typing.get_type_hints(TrialResult)
_OPTIONAL = frozenset(name for name, kind in _TYPES.items() if type(None) in typing.get_args(kind))


def with_role(role: str) -> tuple[str, ...]:
    return tuple(name for name in RECORD_FIELDS if ROLES[name] == role)


def unknown_fields(record: dict) -> list[str]:
    """Names in `record` that neither the spec nor the result declares."""
    return sorted(set(record) - _RECORD_NAMES)


@functools.cache  # read for every metric of every run a report loads
def base_type(name: str) -> type:
    """A result field's declared type without its Optional: int, float, bool, str or list."""
    kind = _TYPES[name]
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return typing.get_origin(args[0]) or args[0] if args else kind


_KINDS = {name: base_type(name) for name in RESULT_FIELDS}
_LISTS = tuple(name for name, kind in _KINDS.items() if kind is list)


def typed(name: str, value):
    """A value read back from MLflow (text params and tags, float metrics) as the record types it;
    names the record does not declare pass through unchanged (a text spec field's "" stays "": request_trace unset)."""
    if value == "" and name in SPEC_FIELDS and FIELD_TYPES[name] is str:
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)) or value in ("None", ""):
        return None
    if name in SPEC_FIELDS:
        try:
            return parse_field(name, value)
        except SpecError:
            return value
    if name not in _TYPES:
        return value
    kind = base_type(name)
    try:
        if kind is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "1.0", "true")
        if kind is int:
            return int(float(value))
        if kind is float:
            return float(value)
    except ValueError:
        return value
    return value if kind is list else str(value)


ANSI_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours, as Ray puts in the errors it passes on


def without_colours(text: str) -> str:
    """Text without terminal colour codes: what a report, a tag or a log line can show."""
    return ANSI_CODES.sub("", text)


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as a failed record's message and a one-line error: its first line, cut at `limit`."""
    text = without_colours(str(exc)).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]
