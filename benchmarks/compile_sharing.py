"""What sharing compiled graphs across a sweep saves: the same compile-heavy CPU grid run cold and shared.

Two real sweeps of the same trials (`python -m sweeps.run`, each with its own store and work folder): one with
sweep.inductor_cache=cold (every trial compiles cold), one with shared (each graph compiled once, its twins
loading it: sweeps/execution/compile_share.py). The grid: static_compiled with every stop check that runs on a
CPU and hf_generate_compiled, on each model and two batch sizes, with rows that run to the end and rows that end
early (a stop check only matters where rows end). Neither the stop check nor where rows stop changes the compiled
graph: each graph of ours serves 6 trials (3 stop checks, 2 stops), each of generate()'s 2.

Printed: each sweep's wall; each warm twin's load against the cold compile it reused (its graph's first trial in
the shared sweep) and against the same trial's cold compile in the cold sweep, compile seconds being the first
run less the mean of the trial's timed runs; whether every trial returned the same tokens in both. The last line is JSON:
`shared_over_cold` (wall ratio), `warm_over_cold_max` (the largest warm load over its graph's cold compile),
`warm_over_same_trial_cold_max` (the same over the same trial's cold compile), `tokens_equal`.

    python benchmarks/compile_sharing.py                       # tiny and gpt2, batch 1 and 4
    python benchmarks/compile_sharing.py --models tiny         # minutes, not tens of them
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokengen.contract.declarations import declared, names
from tokengen.contract.names import COLD, WARM
from tracking.store.reading import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def run(mode: str, folder: Path, args) -> float:
    """One sweep of the grid with sweep.inductor_cache=`mode`; its wall in seconds."""
    checks = [c for c in names("stop_check") if not declared("stop_check", c).cuda_only]
    command = [
        sys.executable,
        "-m",
        "sweeps.run",
        "+grid=smoke",
        f"sweep.name={mode}",
        f"sweep.inductor_cache={mode}",
        "grid.variant=[static_compiled,hf_generate_compiled]",
        f"+grid.stop_check=[{','.join(checks)}]",
        f"+grid.model=[{args.models}]",
        f"grid.batch_size=[{args.batch_sizes}]",
        f"grid.max_seqlen=[{args.steps}]",
        f"+grid.stop=[{','.join(repr(stop) for stop in args.stops.split(','))}]",
        f"trial.runs={args.runs}",
        "sweep.remeasure=0",
        "sweep.trial_timeout_s=1200",
        f"tracking.uri=sqlite:///{folder}/mlflow.db",
        f"sweep.workdir={folder}/work",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} sweep exited {done.returncode}:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,gpt2")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--stops", default="never,uniform:4-16", help="row stops (trial.stop values), comma-separated")
    parser.add_argument("--keep", help="leave both sweeps' stores and work folders in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        walls, trials = {}, {}
        for mode in (COLD, "shared"):
            folder = Path(args.keep or scratch).resolve() / mode
            folder.mkdir()
            walls[mode] = run(mode, folder, args)
            frame = load_sweep(f"sqlite:///{folder}/mlflow.db", "tokengen", mode).trials
            trials[mode] = frame.set_index("trial_key")
    cold, shared = trials[COLD], trials["shared"]
    loads = warm_loads(cold, shared)
    equal = bool((shared["tokens_sha256"] == cold.loc[shared.index, "tokens_sha256"]).all())
    print(
        f"cold sweep {walls[COLD]:.1f} s, shared {walls['shared']:.1f} s ({walls['shared'] / walls[COLD]:.2f}x); "
        f"{len(shared)} trials, {int((shared['compile_cache'] == COLD).sum())} compiled cold, {len(loads)} warm; "
        f"tokens {'equal' if equal else 'DIFFER'} in both"
    )
    for load in sorted(loads, key=lambda load: load["over_graph"]):
        print(
            f"  {load['variant']:<28} {load['model']:<5} batch {load['batch']} stop {load['stop']:<13}: warm load "
            f"{load['warm_s']:.1f} s, its graph's cold compile {load['graph_cold_s']:.1f} s ({load['over_graph']:.2f}x, "
            f"{load['graph']}), the same trial's in the cold sweep {load['cold_s']:.1f} s ({load['over_same']:.2f}x)"
        )
    print(
        json.dumps(
            {
                "cold_s": walls[COLD],
                "shared_s": walls["shared"],
                "shared_over_cold": walls["shared"] / walls[COLD],
                "warm_over_cold_max": max((load["over_graph"] for load in loads), default=None),
                "warm_over_same_trial_cold_max": max((load["over_same"] for load in loads), default=None),
                "warm_trials": len(loads),
                "tokens_equal": equal,
            }
        )
    )


def compile_seconds(row) -> float:
    """A trial's compile as the store's history reads it with warmups (sweeps/pricing/estimate/observed.py): its
    first run less the mean of its timed runs, so a model's own run time does not count as compiling."""
    return float(row["first_run_s"]) - float(row["runtime_mean_s"])


def warm_loads(cold, shared) -> list[dict]:
    """Each warm twin's load against the cold compile it reused (its graph's first trial, in the shared sweep) and
    against the same trial's cold compile in the cold sweep."""
    loads = []
    for key, row in shared[shared["compile_cache"] == WARM].iterrows():
        warm, graph = compile_seconds(row), row["compile_shared_from"]
        graph_cold, same_cold = compile_seconds(shared.loc[graph]), compile_seconds(cold.loc[key])
        loads.append(
            {
                "variant": row["variant"],
                "model": row["model"],
                "batch": int(row["batch_size"]),
                "stop": row["stop"],
                "graph": graph,
                "warm_s": warm,
                "graph_cold_s": graph_cold,
                "cold_s": same_cold,
                "over_graph": warm / graph_cold,
                "over_same": warm / same_cold,
            }
        )
    return loads


if __name__ == "__main__":
    main()
