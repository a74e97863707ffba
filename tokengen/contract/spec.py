"""The trial: one point of a sweep, as a flat typed record.

This dataclass is the single source of defaults and of field types. The CLI builds its flags from
its fields, Hydra registers it as the schema of `trial`, MLflow params are its fields verbatim and
the report reads them back with `parse_field`, so none of them can drift apart. Each field says its
role: a knob makes a variant, a workload field is the point variants are compared on (a trial's
baseline and peers share every one), and measurement settings pick neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, fields

from tokengen.contract import declarations

KNOB, WORKLOAD, MEASUREMENT, LABEL = "knob", "workload", "measurement", "label"


def _field(default, role: str):
    return dataclasses.field(default=default, metadata={"role": role})


def _with_knobs(after: str):
    """Adds one `str` field per declared knob (tokengen.contract.declarations), after field `after`, its
    default the knob's plain value: a knob declared there is a spec field, a CLI flag and a Hydra key."""

    def add(cls):
        annotations, merged = dict(cls.__annotations__), {}
        for name, kind in annotations.items():
            merged[name] = kind
            if name == after:
                for knob in declarations.KNOBS:
                    merged[knob] = "str"
                    setattr(cls, knob, _field(declarations.plain(knob).name, KNOB))
        cls.__annotations__ = merged
        return cls

    return add


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Each dtype a trial may run in and the bytes of one element: the memory estimate and the cost model read it."""

CHOICES = {
    **{knob: declarations.names(knob) for knob in declarations.KNOBS},  # a knob's values are its declarations
    "dtype": tuple(DTYPE_BYTES),
    "device": ("cpu", "cuda"),
    "matmul_precision": ("highest", "high"),
    "profile": ("off", "torch", "nsys", "auto"),
}


AUTO_RUNS = 0
"""`runs` = 0 is runs=auto: `runs` stays an int, so every key hashed before auto existed is unchanged."""
SPELLINGS: dict[str, dict[str, object]] = {"runs": {"auto": AUTO_RUNS}}
"""Words a field takes besides its type's values, and what they stand for (`trial.runs=auto` is runs=0)."""


class SpecError(ValueError):
    """Bad input, said in one line that names the fix."""


@dataclass(frozen=True)
@_with_knobs(after="max_seqlen")
class TrialSpec:
    variant: str = _field("baseline", LABEL)  # resolved from the knobs (see tokengen.contract.variants.label_for)
    model: str = _field(
        "gpt2", WORKLOAD
    )  # a preset in tokengen.contract.model_facts.PRESET_FACTS or a local directory of a causal LM
    dtype: str = _field("float32", WORKLOAD)  # float32 keeps every variant's tokens bit-comparable
    device: str = _field("cpu", WORKLOAD)
    batch_size: int = _field(32, WORKLOAD)  # the article's main batch
    max_seqlen: int = _field(100, WORKLOAD)  # decode steps, as in the article (prompt excluded)
    # here: one field per declared knob (cache, compile, stop_check, ...), added by _with_knobs
    stop: str = _field("never", WORKLOAD)  # model | never | fixed:N | uniform:LO-HI | lognormal:MEDIAN,SIGMA
    sampling: str = _field("greedy", WORKLOAD)  # greedy | topk:K[,TEMPERATURE]
    seed: int = _field(0, WORKLOAD)  # weights, prompts, target lengths and sampling all derive from it
    warmup: int = _field(1, MEASUREMENT)  # untimed runs first; the first one carries compile time
    runs: int = _field(10, MEASUREMENT)  # timed runs, as in the article; 0 ("auto"): min_runs..max_runs until sure
    profile: str = _field("off", MEASUREMENT)  # off | torch | nsys | auto: one extra run over profile_steps
    profile_steps: str = _field("30-50", MEASUREMENT)  # the article's window (0-based steps); clipped
    # fields below came after the first release: at their default they stay out of the key
    prompt_len: int = _field(1, WORKLOAD)  # 1 = BOS only (the article); P > 1: BOS + P-1 seeded ids per row
    matmul_precision: str = _field("highest", WORKLOAD)  # high = TF32, as the article runs float32
    requests: int = _field(0, WORKLOAD)  # 0: one batch of batch_size rows; N > 0: N requests served by batch_size slots
    # when requests arrive (tokengen/contract/arrivals.py): 0 offline, all at the start; R > 0 requests/s, open loop
    request_rate: float = _field(0.0, WORKLOAD)
    burstiness: float = _field(1.0, WORKLOAD)  # the gaps' gamma shape: 1 Poisson, below 1 burstier (vLLM's)
    request_trace: str = _field("", WORKLOAD)  # an absolute path: a CSV of arrival time, prompt and output length
    # runs=auto (0): at least min_runs, then until the 95% interval of the mean runtime is within target_ci of the
    # mean (half-width / mean), at most max_runs (tokengen/measure/run_count.py); a fixed count ignores them
    min_runs: int = _field(3, MEASUREMENT)
    max_runs: int = _field(20, MEASUREMENT)
    target_ci: float = _field(0.02, MEASUREMENT)

    def to_dict(self) -> dict:
        """Every field by name (each a str, int or float: nothing to copy deeply, as dataclasses.asdict would)."""
        return {name: getattr(self, name) for name in SPEC_FIELDS}

    def key(self) -> str:
        """Hash of the canonical spec: same spec, same key, on any machine. The first release's fields
        are always hashed; a later field only away from its default, so adding one keeps every key. Made once per
        spec (a frozen one: its fields never change) and kept beside them, outside the fields."""
        kept = self.__dict__.get("_key")
        if kept is None:
            canonical = {
                f.name: getattr(self, f.name)
                for f in fields(self)
                if f.metadata["role"] != LABEL and (f.name in FIRST_RELEASE or getattr(self, f.name) != f.default)
            }
            blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
            kept = self.__dict__["_key"] = hashlib.sha256(blob.encode()).hexdigest()[:16]
        return kept

    @property
    def knobs(self) -> dict:
        return {k: getattr(self, k) for k in KNOBS}

    @property
    def workload(self) -> dict:
        return {k: getattr(self, k) for k in WORKLOAD_FIELDS}


FIRST_RELEASE = frozenset(
    "model dtype device batch_size max_seqlen stop sampling seed warmup runs profile profile_steps".split()
) | {k.field for k in declarations.KNOB_DECLARATIONS if k.keyed}
SPEC_FIELDS = tuple(f.name for f in fields(TrialSpec))
FIELD_TYPES: dict[str, type] = typing.get_type_hints(TrialSpec)
"""Each field's Python type, resolved once: the CLI, Hydra's schema and the report's reader use it."""
_ROLES = {f.name: f.metadata["role"] for f in fields(TrialSpec)}
KNOBS = tuple(n for n in SPEC_FIELDS if _ROLES[n] == KNOB)
"""The fields that make a generator variant; a preset is a named setting of exactly these."""
WORKLOAD_FIELDS = tuple(n for n in SPEC_FIELDS if _ROLES[n] == WORKLOAD)
"""The point a variant is compared on: a trial's baseline and peers share every one."""
LABELS = tuple(n for n in SPEC_FIELDS if _ROLES[n] == LABEL)
"""Fields derived from the others: shown everywhere, hashed nowhere."""


def parse_field(name: str, text):
    """A spec field's value from text (a CLI flag, an MLflow param), typed as the dataclass says;
    a value already of the type passes through, a word of SPELLINGS becomes its value ("auto" runs: 0).
    SpecError names the field and the type wanted."""
    kind = FIELD_TYPES[name]
    if type(text) is kind and name not in SPELLINGS:  # already typed (a grid's values, a spec's): the most calls
        return text
    if isinstance(text, str) and text.strip().lower() in SPELLINGS.get(name, {}):
        return SPELLINGS[name][text.strip().lower()]
    if kind in (int, float) and isinstance(text, bool) or kind is int and isinstance(text, float):
        # int(1.5) is 1 and int(True) is 1: a grid's 1.5 or true would run (and share the key of) batch 1
        raise SpecError(
            f"{name}={text!r} is not a valid {kind.__name__}" + (" (a whole number)" if kind is int else "")
        )
    if text is None or isinstance(text, kind) and not (kind is int and isinstance(text, bool)):
        return text
    try:
        if kind is bool:
            return {"true": True, "false": False}[str(text).lower()]
        return kind(text)
    except (KeyError, TypeError, ValueError):
        words = " or ".join(repr(w) for w in SPELLINGS.get(name, {}))
        raise SpecError(
            f"{name}={text!r} is not a valid {kind.__name__}" + (f" (nor {words})" if words else "")
        ) from None
