"""Run names that read in the MLflow UI: `static_compiled b32 p1 L100` (variant, batch size, prompt
length, max_seqlen; `r64` after the variant for a workload of 64 requests), then the model, dtype, device and GPU type where the sweep varies them, and a
short piece of the trial key where two of the sweep's trials would still share a name."""

from __future__ import annotations

from collections import Counter

CONTEXT = ("model", "dtype", "device")
KEY_CHARS = 6


def _base(fields: dict) -> list[str]:
    requests = [f"r{fields['requests']}"] if (fields.get("requests") or 0) > 0 else []  # a request workload
    return [
        str(fields.get("variant") or "trial"),
        *requests,
        f"b{fields.get('batch_size')}",
        f"p{fields.get('prompt_len')}",
        f"L{fields.get('max_seqlen')}",
    ]


def run_names(trials) -> dict[str, str]:
    """Name per trial key, for a sweep's planned trials (each with `.key`, `.spec` and `.accelerator_type`)."""
    rows = [(t.key, t.spec.to_dict(), t.accelerator_type) for t in trials]
    varying = [c for c in CONTEXT if len({str(fields.get(c)) for _, fields, _ in rows}) > 1]
    gpus = len({gpu for _, _, gpu in rows}) > 1
    names = {}
    for key, fields, gpu in rows:
        parts = _base(fields) + [str(fields.get(c)) for c in varying] + ([gpu or "any-gpu"] if gpus else [])
        names[key] = " ".join(parts)
    shared = {name for name, count in Counter(names.values()).items() if count > 1}
    return {key: f"{name} {key[:KEY_CHARS]}" if name in shared else name for key, name in names.items()}


def run_name(record: dict, names: dict[str, str] | None = None) -> str:
    """The planned name of a trial's run; without a plan, the readable part and a piece of its key."""
    key = str(record.get("key") or "")
    if names and key in names:
        return names[key]
    return " ".join(_base(record) + ([key[:KEY_CHARS]] if key else []))
