"""Is our decode loop at least as fast as transformers' own generate() with the same cache?

Measures, in one process and interleaved run by run (so both see the same machine state), the
median wall time of our `kv_cache` and `static_cache` generators and of `model.generate(
do_sample=False, cache_implementation=...)` on the same model and prompts, checks that both
return the same tokens, and reports ours/theirs (<= 1.0 means ours is no slower). Two workloads
by default: the article's BOS-only prompt (P = 1) and a prompted one (P = 64: one prefill forward
over 64 tokens, then the same decode), where both sides prefill once and keep only the last
position's logits. `--threads 1` keeps the figures steady on a CPU shared with other work: with
more threads than free cores, one descheduled thread stalls every parallel op of both sides. The
last line of output is JSON for scripts.

    python benchmarks/vs_transformers.py                          # gpt2, batch 4, 32 steps, P = 1 and 64, CPU
    python benchmarks/vs_transformers.py --model tiny --runs 5 --prompt-lens 1,32
    python benchmarks/vs_transformers.py --threads 1                # a busy CPU box
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from tokengen.contract.rules import check_runnable, resolve
from tokengen.decode.loop import Generator
from tokengen.engines.hf_generate import hf_generate
from tokengen.measure.clocks import timed
from tokengen.models import build_model


def compare(model, variant: str, prompt_len: int, args) -> dict:
    spec = resolve(
        variant,
        model=args.model,
        device=args.device,
        batch_size=args.batch_size,
        max_seqlen=args.max_seqlen,
        prompt_len=prompt_len,
        stop="never",
    )
    check_runnable(spec)
    ours_fn = Generator(model, spec)
    ours, theirs = ours_fn(), hf_generate(model, spec)  # warmup, and the correctness check
    if not torch.equal(ours.tokens, theirs):
        raise SystemExit(f"{variant}, prompt_len={prompt_len}: our tokens differ from generate()'s: a bug")
    ours_s, theirs_s = [], []
    for _ in range(args.runs):
        ours_s.append(timed(ours_fn, args.device)[1])
        theirs_s.append(timed(lambda: hf_generate(model, spec), args.device)[1])
    return {
        "variant": variant,
        "cache": spec.cache,
        "prompt_len": prompt_len,
        "ours_median_s": statistics.median(ours_s),
        "generate_median_s": statistics.median(theirs_s),
        "ratio": statistics.median(ours_s) / statistics.median(theirs_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-seqlen", type=int, default=32)
    parser.add_argument("--prompt-lens", default="1,64", help="comma-separated prompt lengths (1 = BOS only)")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args.model, "float32", args.device, seed=0)
    prompt_lens = [int(p) for p in args.prompt_lens.split(",")]
    rows = [compare(model, variant, p, args) for p in prompt_lens for variant in ("kv_cache", "static_cache")]
    print(
        f"{args.model}, batch {args.batch_size}, {args.max_seqlen} steps, {args.device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.runs}"
    )
    print(f"{'variant':<14}{'cache':<9}{'prompt':>7}{'ours (s)':>10}{'generate (s)':>14}{'ours/generate':>15}")
    for r in rows:
        print(
            f"{r['variant']:<14}{r['cache']:<9}{r['prompt_len']:>7}{r['ours_median_s']:>10.4f}"
            f"{r['generate_median_s']:>14.4f}{r['ratio']:>15.3f}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
