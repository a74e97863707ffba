"""One table per knob that changes how a generation advances (declared `advances=True`: `speculate`), for the
report: each trial at another value beside its plain twin (the workload and every other knob equal, the engine
included, so transformers' own speculation sits beside plain generate()), with the ratio of their runtimes and its
95% interval, what the advance did (acceptance, proposed tokens accepted per verify forward, the model's forwards
per token, the proposer's share of the time), our trial's runtime against the library's at the same point and value
(`vs_library`: the fastest transformers engine's runtime over ours, above 1.0 ours is faster), and the tokens'
verdict against the twin (`ok`, or the first divergence with the twin's margin there). A runtime from a disturbed
trial, and a ratio from one or from tokens that diverged, carry the mark.
"""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.declarations import LOOP, PEER, in_family, knobs_where, plain
from tokengen.contract.fidelity import below_gate
from tracking.report.comparison import REPORT_MATCH
from tracking.report.figures.baselines import match_keys
from tracking.report.knob_tables import pair_columns, twinned
from tracking.report.marks import either, mark

FIGURES = ("acceptance_rate", "accepted_per_verify", "forwards_per_token", "proposer_share")
"""What the advance did, per trial (tokengen/contract/record.py: the speculation fields)."""
UNITS = {"vs_plain": "x", "vs_library": "x", "acceptance_rate": "pct100", "proposer_share": "pct100"}
UNITS.update(accepted_per_verify="g4", forwards_per_token="g4")  # tracking/report/markdown.py's units


def library_runtimes(rows: pd.DataFrame, knob: str) -> tuple[dict, dict]:
    """(the fastest transformers engine's runtime, whether its measurement is marked) per point and value of `knob`."""
    engines = rows["engine"] if "engine" in rows else pd.Series(plain("engine").name, index=rows.index)
    peers = rows[engines.astype(str).isin(in_family("engine", PEER))]
    runtime = pd.to_numeric(peers["runtime_mean_s"], errors="coerce")
    peers = peers.assign(_key=match_keys(peers, REPORT_MATCH + [knob]), _runtime=runtime)
    fastest = peers.sort_values("_runtime", kind="stable").drop_duplicates("_key").set_index("_key")
    return fastest["_runtime"].to_dict(), fastest["own_marked"].astype(bool).to_dict()


def advance_table(frame: pd.DataFrame, knob: str) -> pd.DataFrame | None:
    """Trials at a value of `knob` other than its plain one, beside their plain twins (None without a pair)."""
    paired = twinned(frame, knob)
    if paired is None:
        return None
    rows, mine, twin, ratios = paired
    library, library_marked = library_runtimes(rows, knob)
    ours = ~mine["engine"].astype(str).isin(in_family("engine", PEER)) if "engine" in mine else [True] * len(mine)
    keys = match_keys(mine, REPORT_MATCH + [knob])
    runtime = pd.to_numeric(mine["runtime_mean_s"], errors="coerce")
    vs_library = [library.get(k, math.nan) / r if own else math.nan for k, r, own in zip(keys, runtime, ours)]
    table = pd.DataFrame(
        {
            **pair_columns(frame, knob, mine, twin, ratios),
            **{c: pd.to_numeric(mine.get(c), errors="coerce") for c in FIGURES},
            "vs_library": vs_library,
            "tokens": mine["tokens"],
        }
    ).reset_index(drop=True)
    table.attrs["unit"] = dict(UNITS)
    diverged = [below_gate(t) for t in mine["tokens"]]
    mark(table, "runtime_mean_s", mine["own_marked"])
    mark(table, "plain_runtime_mean_s", twin["own_marked"])
    mark(table, "vs_plain", either(mine["own_marked"], twin["own_marked"], diverged))
    peer_marked = [bool(library_marked.get(k)) for k in keys]
    return mark(table, "vs_library", either(mine["own_marked"], peer_marked, diverged))


def advance_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(knob, table) for every knob declared to change how a generation advances that the sweep varied."""
    knobs = knobs_where(acts=LOOP, advances=True)
    return [(knob, table) for knob in knobs if (table := advance_table(frame, knob)) is not None]
