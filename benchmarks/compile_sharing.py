"""What sharing compiled graphs across a sweep saves: the same compile-heavy CPU grid run cold and shared.

Two real sweeps of the same trials (`python -m sweeps.run`, each with its own store and work folder): one with
sweep.inductor_cache=cold (every trial compiles cold), one with shared (each graph compiled once, its twins
loading it: sweeps/execution/compile_share.py). The grid: static_compiled with every stop check that runs on a
CPU and hf_generate_compiled, on each model and two batch sizes, with rows that run to the end and rows that end
early (a stop check only matters where rows end). Neither the stop check nor where rows stop changes the compiled
graph: each graph of ours serves 6 trials (3 stop checks, 2 stops), each of generate()'s 2. Printed: each sweep's wall, each warm trial's first run against the same trial's cold first run in
the cold sweep, and whether every trial returned the same tokens in both. The last line is JSON:
`shared_over_cold` (wall ratio), `warm_over_cold_max` (the largest warm first run over its cold one),
`tokens_equal`.

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
    warm = shared[shared["compile_cache"] == WARM]
    ratios = {key: float(row["first_run_s"]) / float(cold.at[key, "first_run_s"]) for key, row in warm.iterrows()}
    equal = bool((shared["tokens_sha256"] == cold.loc[shared.index, "tokens_sha256"]).all())
    print(
        f"cold sweep {walls[COLD]:.1f} s, shared {walls['shared']:.1f} s ({walls['shared'] / walls[COLD]:.2f}x); "
        f"{len(shared)} trials, {int((shared['compile_cache'] == COLD).sum())} compiled cold, {len(warm)} warm; "
        f"tokens {'equal' if equal else 'DIFFER'} in both"
    )
    for key, ratio in sorted(ratios.items(), key=lambda kv: kv[1]):
        row = warm.loc[key]
        print(
            f"  {row['variant']:<28} {row['model']:<5} batch {int(row['batch_size'])}: warm first run "
            f"{float(row['first_run_s']):.1f} s against {float(cold.at[key, 'first_run_s']):.1f} s cold ({ratio:.2f}x), "
            f"graphs from {row['compile_shared_from']}"
        )
    print(
        json.dumps(
            {
                "cold_s": walls[COLD],
                "shared_s": walls["shared"],
                "shared_over_cold": walls["shared"] / walls[COLD],
                "warm_over_cold_max": max(ratios.values(), default=None),
                "warm_trials": len(ratios),
                "tokens_equal": equal,
            }
        )
    )


if __name__ == "__main__":
    main()
