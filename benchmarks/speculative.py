"""Speculative decoding against the plain loop at the same point, on the trained preset at batch 1.

For each proposer (prompt lookup, the draft companion) and k, on the trial's own held-out prompts (`--prompt-len`
bytes of text the model never trained on, one prompt per seed, rows ending at the model's own EOS): the plain loop
and every speculative value are run in one process, interleaved run by run (so a busy machine slows them alike),
and each one's median runtime per prompt is kept. Speedup = the plain loop's summed medians over the value's (the
tokens are the same: tokens_equal says whether they were, bit for bit, on every prompt); acceptance = accepted /
proposed tokens; forwards_per_token = the model's forwards per generated token; proposer_share = the time spent
proposing. Also the cost that makes speculation pay or not: one verify forward of k + 1 positions against a
one-token step, at the prompt's end on a dynamic KV cache (median of many). The last line is JSON for scripts.

    python benchmarks/speculative.py                      # tiny-trained, 6 prompts of 256 bytes, 7 runs each
    python benchmarks/speculative.py --cache static --prompts 3 --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def verify_costs(model, prompt, ks, repeats: int = 30) -> dict[int, float]:
    """Median seconds of a forward of n positions after the prompt, over a one-token step's, for n = k + 1."""
    import torch
    from transformers import DynamicCache

    from tokengen.decode.caches import cache_kwarg

    cache = DynamicCache(config=model.config)
    kwarg = cache_kwarg(model)
    model(prompt, use_cache=True, **{kwarg: cache})

    def timed(n: int) -> float:
        fed = prompt[:, -n:]  # any n tokens: the cost, not the numbers
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            model(fed, use_cache=True, **{kwarg: cache})
            seconds.append(time.perf_counter() - started)
            cache.crop(-n)
        return statistics.median(seconds)

    with torch.inference_mode():
        one = timed(1)
        return {k: timed(k + 1) / one for k in ks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-trained")
    parser.add_argument("--cache", default="dynamic", help="dynamic or static")
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts, one per seed")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--max-seqlen", type=int, default=128)
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each value per prompt, interleaved")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    args = parser.parse_args(argv)
    import torch

    from tokengen.contract.declarations import declared, names, plain
    from tokengen.contract.rules import resolve
    from tokengen.engines import make_generator
    from tokengen.models import build_model
    from tokengen.train import ensure

    if args.threads:
        torch.set_num_threads(args.threads)
    ensure([args.model], say=print)
    model = build_model(args.model, "float32", "cpu", 0)
    values = names("speculate")  # the plain value first
    point = dict(model=args.model, cache=args.cache, stop="model", batch_size=1, prompt_len=args.prompt_len,
                 max_seqlen=args.max_seqlen)  # fmt: skip
    medians = {v: [] for v in values}
    equal = {v: True for v in values}
    counted = {v: [0, 0, 0, 0, 0.0, 0.0] for v in values}  # proposed, accepted, forwards, tokens, proposing, time
    for seed in range(args.prompts):
        generators = {v: make_generator(model, resolve(None, speculate=v, seed=seed, **point)) for v in values}
        expected = generators[values[0]]().tokens  # also each value's warmup, below
        for v, generate in generators.items():
            equal[v] &= torch.equal(generate().tokens, expected)
        seconds = {v: [] for v in values}
        for _ in range(args.runs):
            for v, generate in generators.items():
                started = time.perf_counter()
                done = generate()
                seconds[v].append(time.perf_counter() - started)
                c = done.counts
                tally = (c.proposed, c.accepted, c.forwards, done.tokens.shape[1] - args.prompt_len, c.proposer_s)
                counted[v] = [a + b for a, b in zip(counted[v], (*tally, seconds[v][-1]))]
        for v in values:
            medians[v].append(statistics.median(seconds[v]))
        print(f"prompt {seed}: {len(expected[0]) - args.prompt_len} tokens; " + ", ".join(
            f"{v} {1e3 * medians[v][-1]:.0f} ms" for v in values))  # fmt: skip
    prompt = make_generator(model, resolve(None, **point)).prompts  # (1, P)
    costs = verify_costs(model, prompt, sorted({_k(v) for v in values[1:]}))
    rows = []
    for v in values[1:]:
        proposed, accepted, forwards, tokens, proposing, total = counted[v]
        rows.append(
            {
                "proposer": declared("speculate", v).family,
                "k": _k(v),
                "speedup": sum(medians[plain("speculate").name]) / sum(medians[v]),
                "acceptance": accepted / proposed if proposed else None,
                "tokens_equal": bool(equal[v]),
                "forwards_per_token": forwards / tokens,
                "proposer_share": proposing / total,
                "verify_vs_step": costs[_k(v)],
            }
        )
    print(f"{args.model}, cache={args.cache}, batch 1, {args.prompts} held-out prompts of {args.prompt_len} bytes, "
          f"stop=model, at most {args.max_seqlen} tokens; medians of {args.runs} interleaved runs")  # fmt: skip
    print("proposer  k  speedup  acceptance  forwards/token  proposing  verify/step  tokens equal")
    for r in rows:
        print(
            f"{r['proposer']:8} {r['k']:2d}  {r['speedup']:6.2f}x  {100 * (r['acceptance'] or 0):9.1f}%  "
            f"{r['forwards_per_token']:14.3f}  {100 * r['proposer_share']:8.1f}%  {r['verify_vs_step']:10.2f}x  "
            f"{r['tokens_equal']}"
        )
    print(f"torch threads {torch.get_num_threads()}")
    print(json.dumps({"rows": rows}))
    return 0


def _k(value: str) -> int:
    """The k of a speculate value's declared implementation (its factory's)."""
    from tokengen.contract.declarations import load

    return load("speculate", value).k


if __name__ == "__main__":
    sys.exit(main())
