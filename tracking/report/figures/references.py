"""What each trial's tokens are checked against: a speedup is worth only the tokens behind it, so every
trial gets a reference, the first of these that ran at its point (same workload, same GPU type):

1. the workload's `baseline`, measured with the same code;
2. its plain twin: the trial with every knob a report does not compare with the baseline (the stop
   check, the allocator, the engine, the batching, the quantization, the attention kernel) at its
   plain value, the cache and compile kept: `static_cache` for `static_cache_every_k`;
3. its `generate()` peer: a transformers engine at the point, the one with the trial's cache and
   compile first.

A reference holds exact numbers (a gated value is judged by its fidelity instead) and ran the same
measuring code: a candidate from another code fingerprint (`env_facts`' code) is skipped, and where
only such candidates ran the verdict says so. Where none ran, the trial's tokens are `unchecked` and
the report's first lines name the fix.
"""

from __future__ import annotations

import pandas as pd

from tokengen.contract.declarations import BASELINE, EXACT, KNOB_DECLARATIONS, PEER, fidelity_of, in_family, plain
from tokengen.contract.declarations import value_of as declared_value
from tokengen.contract.machine.fingerprint import from_text
from tokengen.contract.names import FINISHED
from tokengen.contract.variants import VARIANTS
from tracking.report.figures.baselines import match_keys

BASELINE_REF, TWIN, PEER_REF = "baseline", "twin", "peer"
UNCHECKED = "unchecked"
NO_REFERENCE = f"{UNCHECKED}: no reference at this point"
OTHER_CODE = f"{UNCHECKED}: its reference ran other code"
FIX = "add `baseline` or the plain variant to the grid (`grid.variant`)"
OTHER_FIX = "add `baseline` to the grid to measure one with this code"


def named(knobs: dict) -> dict:
    """Every knob's value by name, the plain one where a store older than the knob has none."""
    out = {}
    for k in KNOB_DECLARATIONS:
        value = declared_value(knobs, k.field)
        out[k.field] = value.name if value is not None else str(knobs.get(k.field))
    return out


def twin_of(knobs: dict) -> dict:
    """The plain twin's knobs: those compared with the baseline (cache, compile) kept, every other at its plain value."""
    return {k.field: knobs[k.field] if k.beside == BASELINE else plain(k.field).name for k in KNOB_DECLARATIONS}


def unproven(verdict) -> bool:
    """Tokens checked against nothing: no reference at the point, or no checksum to compare."""
    return isinstance(verdict, str) and (verdict.startswith(UNCHECKED) or verdict == "n/a")


def _code(text, seen: dict) -> str:
    if text not in seen:
        seen[text] = from_text(text).get("code") or ""
    return seen[text]


def references(
    frame: pd.DataFrame, base: pd.Series, knobs: list[dict], match: list[str]
) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Per row: its reference's index label (None without one), its kind (baseline, twin, peer) and the verdict
    where no reference could be used ("" otherwise). `base` holds each row's matching baseline (baseline_of),
    `knobs` each row's knobs (comparison.row_knobs)."""
    done = (frame["status"] == FINISHED).tolist()
    names = [named(k) for k in knobs]
    exact = [fidelity_of(k) == EXACT for k in names]
    points = match_keys(frame, match)
    facts = frame["env_facts"].tolist() if "env_facts" in frame else [None] * len(frame)
    seen: dict = {}
    code = dict(zip(frame.index, (_code(f, seen) for f in facts)))
    own = frame["in_sweep"].astype(bool).tolist() if "in_sweep" in frame else [True] * len(frame)
    rank = {v: i for i, v in enumerate(VARIANTS)}
    variants = frame["variant"].tolist()
    order = sorted(range(len(frame)), key=lambda i: (not own[i], rank.get(variants[i], len(rank))))
    by_knobs: dict = {}
    peers: dict = {}
    engines = set(in_family("engine", PEER))
    for i in order:  # the sweep's own rows first, then in preset order
        if done[i] and exact[i]:
            label = frame.index[i]
            by_knobs.setdefault((points[i], tuple(names[i].values())), label)
            if names[i]["engine"] in engines:
                peers.setdefault(points[i], []).append(label)
    but_engine = {label: {k: v for k, v in n.items() if k != "engine"} for label, n in zip(frame.index, names)}
    out = {"label": [], "kind": [], "unchecked": []}
    for i, label in enumerate(frame.index):
        candidates = []
        if done[i]:
            if base.iat[i] is not None:
                candidates.append((base.iat[i], BASELINE_REF))
            twin = twin_of(names[i])
            if twin != names[i] and (found := by_knobs.get((points[i], tuple(twin.values())))) is not None:
                candidates.append((found, TWIN))
            mine = [p for p in peers.get(points[i], []) if p != label]
            mine.sort(key=lambda p: but_engine[p] != but_engine[label])  # the peer with the trial's cache and compile
            candidates += [(p, PEER_REF) for p in mine]
        usable = [(r, kind) for r, kind in candidates if not code[label] or not code[r] or code[r] == code[label]]
        reference, kind = usable[0] if usable else (None, "")
        out["label"].append(reference)
        out["kind"].append(kind)
        other = f"{OTHER_CODE} (code {code[candidates[0][0]]} vs {code[label]})" if candidates else NO_REFERENCE
        out["unchecked"].append("" if usable or not done[i] else other)
    return tuple(pd.Series(out[c], index=frame.index, dtype=object) for c in ("label", "kind", "unchecked"))


def verdicts_against(tokens: pd.Series, label: pd.Series, kind: pd.Series, unchecked: pd.Series, variant) -> tuple:
    """The token verdicts with their reference named where it is not the baseline (`ok vs twin static_cache`),
    `unchecked: ...` where there was none; and each row's reference in words (`twin static_cache`)."""
    variants = dict(zip(label.index, variant))
    texts, named_refs = [], []
    for verdict, ref, how, missing in zip(tokens, label, kind, unchecked):
        said = f"{how} {variants[ref]}" if ref is not None and how != BASELINE_REF else how
        texts.append(missing or (f"{verdict} vs {said}" if verdict and how != BASELINE_REF else verdict))
        named_refs.append(said if verdict and not missing else "")
    return pd.Series(texts, index=tokens.index, dtype=object), pd.Series(named_refs, index=tokens.index, dtype=object)


def summary(named_refs: pd.Series, verdicts: pd.Series) -> str | None:
    """The report's line on what the finished trials' tokens were checked against, where any was not checked
    against its baseline: `Tokens: 2 checked against their plain twin, 2 unchecked: no reference at their
    point: add ...`; None where every checked trial was checked against its baseline."""
    counts = {TWIN: 0, PEER_REF: 0}
    for named_ref, verdict in zip(named_refs, verdicts):
        kind = named_ref.split(" ", 1)[0] if isinstance(named_ref, str) else ""
        if kind in counts and isinstance(verdict, str) and verdict and not unproven(verdict):
            counts[kind] += 1
    alone = sum(isinstance(v, str) and v.startswith(NO_REFERENCE) for v in verdicts)
    other = sum(isinstance(v, str) and v.startswith(OTHER_CODE) for v in verdicts)
    parts = [f"{counts[TWIN]} checked against their plain twin"] * bool(counts[TWIN])
    parts += [f"{counts[PEER_REF]} against their generate() peer"] * bool(counts[PEER_REF])
    parts += [f"{alone} unchecked: no reference at their point ({FIX})"] * bool(alone)
    parts += [f"{other} unchecked: their reference ran other code ({OTHER_FIX})"] * bool(other)
    return "Tokens: " + "; ".join(parts) + "." if parts else None
