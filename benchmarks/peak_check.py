"""Does a peak search's figure hold? Its variant served alone, a few times, at a rate above the figure.

A peak search (sweeps/planning/peak_search.py) ends with the highest rate it found meeting the SLO, to a precision p:
the lowest failing rate it probed is within 1 + p of it. One probe decided each rate, so the figure is checked here
the other way round: the same workload at (1 + 2p) times the figure, served RUNS times, each alone on the machine with
the sweep's torch threads (+grid=peak runs one probe at a time on both cores), should fail the SLO in most runs. Each run is a whole trial (tokengen.measure.
trial.run_trial) under the SLO handed through TOKENGEN_SLO, as the sweep hands it. The workload and the SLO are +grid=peak's (conf/grid/peak.yaml).
The last line is JSON: per rate, the verdicts and how many met the SLO.

    python benchmarks/peak_check.py --variant static_cache --rate 29.6 [--rate ...] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import yaml

from tokengen.contract.rules import resolve
from tokengen.contract.slo import SLO_ENV, Slo
from tokengen.measure.trial import run_trial

PEAK_GRID = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "grid" / "peak.yaml").read_text())
WORKLOAD = PEAK_GRID["trial"]  # the workload +grid=peak searches, and the SLO it is held to
SLO = Slo(*(float(PEAK_GRID["sweep"][f"slo_{name}"]) for name in ("ttft_ms", "tpot_ms", "percentile")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True)
    parser.add_argument("--rate", type=float, action="append", required=True, help="requests/s; repeat for more")
    parser.add_argument("--runs", type=int, default=3)
    threads = PEAK_GRID["sweep"]["cpus_per_trial"]
    parser.add_argument("--threads", type=int, default=threads, help="torch threads (the grid's cpus_per_trial)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ[SLO_ENV] = SLO.to_env()
    rows = []
    for rate in args.rate:
        verdicts = []
        for run in range(args.runs):
            record = run_trial(resolve(args.variant, request_rate=rate, **WORKLOAD))
            verdicts.append(bool(record["slo_met"]))
            print(
                f"{args.variant} at {rate:g} rps, run {run + 1}: SLO {'met' if record['slo_met'] else 'failed'} "
                f"(p99 TTFT {record['request_ttft_p99_s'] * 1e3:.0f} ms, p99 TPOT {record['request_tpot_p99_s'] * 1e3:.1f}"
                f" ms, achieved {_g(record['achieved_rate_rps'])} of {_g(record['offered_rate_rps'])} req/s)",
                flush=True,
            )
        rows.append({"variant": args.variant, "rate": rate, "met": sum(verdicts), "runs": len(verdicts)})
    print(json.dumps({"rows": rows}))
    return 0


def _g(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


if __name__ == "__main__":
    raise SystemExit(main())
