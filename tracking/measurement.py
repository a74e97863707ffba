"""How sure a sweep's numbers are: each trial's `measurement` (ok | noisy | contended, judged by the
trial's interference Watch: tokengen/measure/interference.py), the line that says it first in the
report and in the sweep's terminal output, and which attempt of a remeasured key speaks for it.

Torch-free (the sweep driver imports it). A trial recorded before trials were judged has no
`measurement`: it counts as `not judged`, is never marked and never remeasured.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Iterable

from tokengen.contract.names import FINISHED
from tokengen.measure.interference import CONTENDED, NOISY, OK  # the watch names its verdicts

JUDGED = (OK, NOISY, CONTENDED)
MARK = "!"
"""Beside a figure from a trial judged noisy or contended, or derived from one, in every table and plot of a
report (tracking/report/marks.py)."""
MOST_COMMON = 3  # reasons named in the line

# a reason's kind: its words without the numbers, so "others used 1.6 of 2 cores" and "others used 1.9 of 2
# cores" count as one (the wording is tokengen/measure/interference.py's verdict())
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def judged(value) -> str | None:
    """A trial's measurement, or None where it was not judged (an older record, a failed trial)."""
    return value if isinstance(value, str) and value in JUDGED else None


def reason_kind(reason: str) -> str:
    """'others used 1.6 of 2 cores' -> 'others used N of N cores'."""
    return _NUMBER.sub("N", reason.strip())


def describe(kind: str, reasons: list[str]) -> str:
    """A kind with its numbers back: each one as it was where all agree, else their range
    ('others used 1.6-1.9 of 2 cores')."""
    values = [_NUMBER.findall(r) for r in reasons]
    parts = kind.split("N")
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        seen = [v[i] for v in values if len(v) > i]
        low, high = min(seen, key=float), max(seen, key=float)
        out += [low if low == high else f"{low}-{high}", rest]
    return "".join(out)


def reasons_of(text) -> list[str]:
    return [r for r in (text.split("; ") if isinstance(text, str) else []) if r.strip()]


def count(measurements: Iterable, reasons: Iterable) -> tuple[Counter, dict[str, list[str]]]:
    """(trials per verdict, each reason kind's reasons, one per trial) over finished trials."""
    verdicts, kinds = Counter(), {}
    for measurement, text in zip(measurements, reasons):
        verdict = judged(measurement)
        verdicts[verdict or "not judged"] += 1
        if verdict and verdict != OK:
            for reason in {reason_kind(r): r for r in reasons_of(text)}.values():
                kinds.setdefault(reason_kind(reason), []).append(reason)
    return verdicts, kinds


def most_common(kinds: dict[str, list[str]], top: int = MOST_COMMON) -> str:
    """'others used 1.6-1.9 of 2 cores (3), CI target not met (cv 12.0%) (1)': the commonest kinds first."""
    ranked = sorted(kinds.items(), key=lambda kv: -len(kv[1]))[:top]
    return ", ".join(f"{describe(kind, found)} ({len(found)})" for kind, found in ranked)


def summary_line(measurements: Iterable, reasons: Iterable, remeasured: str = "") -> str:
    """The line a report and a sweep start with, e.g. 'Measurement: 13 ok, 2 noisy, 1 contended of 16
    finished trials; most common reasons: others used N of N cores (3), ...; speedups marked ! ...'."""
    verdicts, kinds = count(list(measurements), list(reasons))
    total = sum(verdicts.values())
    if not total:
        return "Measurement: no finished trial."
    parts = [f"{verdicts[v]} {v}" for v in (*JUDGED, "not judged") if verdicts[v]]
    if verdicts[OK] == total:
        line = f"Measurement: all {total} finished trials ok (no interference seen, every spread within target)"
    else:
        line = f"Measurement: {', '.join(parts)} of {total} finished trials"
    if kinds:
        line += "; most common reasons: " + most_common(kinds)
    if remeasured:
        line += f"; {remeasured}"
    if verdicts[NOISY] or verdicts[CONTENDED]:
        line += (
            f". Speedups marked {MARK} come from a trial or baseline that is not ok, as does every figure marked "
            "so in any table, and the overview leaves them out of its geometric means where a variant has another"
        )
    return line + "."


def _number(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(value) else value


def attempt_of(value) -> int:
    """A run's attempt number: its tag, or 1 for a run recorded before attempts were numbered."""
    number = _number(value)
    return 1 if math.isinf(number) else int(number)


def latest_series(rows: list[dict]) -> list[dict]:
    """A key's runs, oldest first, from its latest first attempt on: a rerun with sweep.resume=false starts
    a new series, and only the attempts since then (its remeasures) speak for the key."""
    rows = sorted(rows, key=lambda r: (_number(r.get("start_time")), attempt_of(r.get("attempt"))))
    firsts = [i for i, r in enumerate(rows) if attempt_of(r.get("attempt")) == 1]
    return rows[firsts[-1] :] if firsts else rows


def best(rows: list[dict]) -> dict:
    """The attempt that speaks for a key, among its latest series: a finished ok one first, then the
    finished one with the lowest runtime_cv (judged before not judged), then the latest run."""
    series = latest_series(rows)
    done = [r for r in series if r.get("status") == FINISHED]
    if not done:
        return series[-1]
    ok = [r for r in done if judged(r.get("measurement")) == OK]
    if ok:
        return min(ok, key=lambda r: (_number(r.get("runtime_cv")), -_number(r.get("start_time"))))
    return min(
        done,
        key=lambda r: (
            judged(r.get("measurement")) is None,
            _number(r.get("runtime_cv")),
            -_number(r.get("start_time")),
        ),
    )
