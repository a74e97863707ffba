"""Does continuous batching serve more useful tokens per second than static batching, and than transformers'?

One request workload (default: tiny GPT-2, 64 requests, 8 slots, prompt 8, lengths lognormal:10,1.0
with its long tail, max_seqlen 96, float32 on the CPU), served three ways on one model in one
process: `static_cache` (batch after batch of 8, each until its longest request ends),
`static_cache_continuous` (a slot takes the next request when its own ends) and `hf_generate_batch`
(transformers' continuous batching, paged attention). The three are run interleaved, run by run,
so a change in the machine's load hits all alike; each figure is the median over the runs. First,
all three must return the same tokens (every request's own greedy tokens, then EOS padding).

Useful tokens/s counts each request's tokens up to its end (padding and idle slots excluded) over the
run's wall time. For the peer, a run is what a generate_batch() call costs on a warm model (its
loop thread's start and stop, and the gc.collect() its stop runs, included); `peer_last_result_s`
is the time to its last request's result, without that stop: continuous is compared with both.
What it should show: continuous >= 1.5x static, and no slower than the peer.

One torch thread by default: transformers' loop runs its forwards on a thread of its own, where
torch's intra-op pool does not reach (measured here: a tiny-model forward on a helper thread takes
the single-thread time), so one thread each compares batching, not thread pools. On a busy 2-core
machine, two threads that wait for each other at every small op are also ~10x slower than
one (124 ms against 12 ms per forward, measured), which would swamp what is measured.

    python benchmarks/serving.py                      # the default workload
    python benchmarks/serving.py --runs 9 --threads 2 --requests 128
The last line of output is JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from pathlib import Path

import torch

from tokengen.contract.rules import check_runnable, resolve
from tokengen.engines import make_generator
from tokengen.engines.request_server import request_lengths, serving_figures
from tokengen.measure.clocks import timed
from tokengen.models import build_model, eos_ids

VARIANTS = ("static_cache", "static_cache_continuous", "hf_generate_batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--stop", default="lognormal:10,1.0")
    parser.add_argument("--max-seqlen", type=int, default=96)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for ours (default 1: see above)")
    parser.add_argument("--json", help="also write the summary to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)  # its CPU warnings (no psutil)

    model = build_model(args.model, "float32", args.device, seed=0)
    specs = {
        v: resolve(
            v,
            model=args.model,
            device=args.device,
            requests=args.requests,
            batch_size=args.slots,
            prompt_len=args.prompt_len,
            stop=args.stop,
            max_seqlen=args.max_seqlen,
        )
        for v in VARIANTS
    }
    for spec in specs.values():
        check_runnable(spec)
    serve = {v: make_generator(model, spec) for v, spec in specs.items()}
    first = {v: fn() for v, fn in serve.items()}  # warmup, and the correctness check
    base = first["static_cache"].tokens.cpu()  # generate_batch hands its tokens back on the host
    for variant, result in first.items():
        if not torch.equal(result.tokens.cpu(), base):
            raise SystemExit(f"{variant}'s tokens differ from static batching's: a bug")
    useful = int(request_lengths(specs["static_cache"], base, eos_ids(model.config)).sum())

    seconds = {v: [] for v in VARIANTS}
    results = {v: [] for v in VARIANTS}
    for _ in range(args.runs):
        for variant, fn in serve.items():
            result, s = timed(fn, args.device)
            seconds[variant].append(s)
            results[variant].append(result)

    rows = {}
    for variant in VARIANTS:
        median = statistics.median(seconds[variant])
        rows[variant] = {
            "runtime_median_s": median,
            "useful_tokens_per_s": useful / median,
            "steps": results[variant][-1].steps,
            **serving_figures(results[variant], useful),
        }
    last_result = statistics.median(max(r.latencies_s) for r in results["hf_generate_batch"])
    continuous, static = rows["static_cache_continuous"], rows["static_cache"]
    summary = {
        "workload": {
            k: getattr(specs["static_cache"], k)
            for k in ("model", "device", "requests", "batch_size", "prompt_len", "stop", "max_seqlen")
        },
        "threads": args.threads,
        "runs": args.runs,
        "useful_tokens": useful,
        "variants": rows,
        "peer_last_result_s": last_result,
        "continuous_over_static": continuous["useful_tokens_per_s"] / static["useful_tokens_per_s"],
        "continuous_over_peer": continuous["useful_tokens_per_s"] / rows["hf_generate_batch"]["useful_tokens_per_s"],
        "continuous_over_peer_last_result": last_result / continuous["runtime_median_s"],
    }
    for variant, row in rows.items():
        print(
            f"{variant:26s} {row['useful_tokens_per_s']:8.1f} useful tok/s  median {row['runtime_median_s']:.3f} s  "
            f"steps {row['steps']:4d}  occupancy {100 * row['slot_occupancy']:5.1f}%  "
            f"latency p50 {row['request_latency_p50_s']:.3f} s  p90 {row['request_latency_p90_s']:.3f} s"
        )
    print(
        f"continuous / static: {summary['continuous_over_static']:.2f}x   continuous / peer: "
        f"{summary['continuous_over_peer']:.2f}x (against the peer's last result: "
        f"{summary['continuous_over_peer_last_result']:.2f}x)"
    )
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
