"""The trial: one point of a sweep, as a flat typed record.

This dataclass is the single source of defaults. The CLI builds its flags from its fields, Hydra
registers it as the schema of `trial`, and MLflow params are its fields verbatim, so the three can
never drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, fields

KNOBS = ("cache", "compile", "stop_check", "allocator")
"""The fields that make a generator variant; a preset is a named setting of exactly these."""

CHOICES = {
    "dtype": ("float32", "bfloat16", "float16"),
    "device": ("cpu", "cuda"),
    "cache": ("none", "dynamic", "static"),
    "compile": ("off", "default", "reduce-overhead"),
    "stop_check": ("sync", "pipelined", "deferred", "none"),
    "allocator": ("default", "expandable"),
    "profile": ("off", "torch", "nsys", "auto"),
}

LABELS = ("variant",)
"""Fields derived from the others: shown everywhere, hashed nowhere."""


class SpecError(ValueError):
    """Bad input, said in one line that names the fix."""


@dataclass(frozen=True)
class TrialSpec:
    variant: str = "baseline"  # label only: resolved from the knobs (see presets.label_for)
    model: str = "gpt2"  # a preset in models.PRESETS or a local directory of a causal LM
    dtype: str = "float32"  # float32 keeps every variant's tokens bit-comparable
    device: str = "cpu"
    batch_size: int = 32  # the article's main batch
    max_seqlen: int = 100  # decode steps, as in the article (BOS excluded)
    cache: str = "none"
    compile: str = "off"
    stop_check: str = "sync"
    allocator: str = "default"
    stop: str = "never"  # model | never | fixed:N | uniform:LO-HI | lognormal:MEDIAN,SIGMA
    sampling: str = "greedy"  # greedy | topk:K[,TEMPERATURE]
    seed: int = 0  # weights, target lengths and sampling all derive from it
    warmup: int = 1  # untimed runs first; the first one carries compile time
    runs: int = 10  # timed runs, as in the article
    profile: str = "off"  # off | torch | nsys | auto: one extra run, profiled over profile_steps
    profile_steps: str = "30-50"  # the article's window (0-based steps); clipped to shorter runs

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key(self) -> str:
        """Hash of the canonical spec: same spec, same key, on any machine."""
        canonical = {k: v for k, v in sorted(self.to_dict().items()) if k not in LABELS}
        blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def knobs(self) -> dict:
        return {k: getattr(self, k) for k in KNOBS}


FIELD_TYPES = {f.name: f.type for f in fields(TrialSpec)}
