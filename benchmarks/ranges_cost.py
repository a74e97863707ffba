"""Do the profiling ranges cost anything when profiling is off?

The decode loop always passes through `ranges.step/forward/check`. Off, those are one shared
`nullcontext`; on, NVTX (CUDA) or record_function ranges. This measures, interleaved in one
process on the smallest steps we have (tiny model, batch 1, so per-step overhead weighs most):
the loop with ranges off, the loop with ranges on but no profiler attached, and the bare cost of
the three off-contexts a step enters. The last line is JSON.

    python benchmarks/ranges_cost.py                 # CPU
    python benchmarks/ranges_cost.py --device cuda   # NVTX ranges
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit

from tokengen.contract.rules import resolve
from tokengen.decode.loop import Generator
from tokengen.decode.ranges import NO_RANGES, NvtxRanges, TorchRanges
from tokengen.measure.clocks import timed
from tokengen.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", default="kv_cache")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    spec = resolve(args.variant, model="tiny", device=args.device, batch_size=1, max_seqlen=args.steps)
    generate = Generator(build_model("tiny", "float32", args.device, 0), spec)
    on = NvtxRanges() if args.device == "cuda" else TorchRanges()
    generate(), generate(ranges=on)  # warm both paths
    off_s, on_s = [], []
    for _ in range(args.runs):
        off_s.append(timed(generate, args.device)[1])
        on_s.append(timed(lambda: generate(ranges=on), args.device)[1])
    per_step_off_ns = (
        min(
            timeit.repeat(
                "with r.step(1):\n with r.forward(): pass\n with r.check(): pass",
                globals={"r": NO_RANGES},
                number=100_000,
                repeat=5,
            )
        )
        / 100_000
        * 1e9
    )
    result = {
        "device": args.device,
        "steps": args.steps,
        "off_median_s": statistics.median(off_s),
        "on_median_s": statistics.median(on_s),
        "on_over_off": statistics.median(on_s) / statistics.median(off_s),
        "off_noise_pct": 100 * statistics.stdev(off_s) / statistics.median(off_s),
        "off_ranges_ns_per_step": per_step_off_ns,
        "step_ms": 1e3 * statistics.median(off_s) / args.steps,
    }
    print(f"{args.variant}, tiny, batch 1, {args.steps} steps, {args.device}, median of {args.runs} interleaved runs")
    print(
        f"  ranges off: {result['off_median_s'] * 1e3:.2f} ms   ranges on ({type(on).__name__}, no profiler): "
        f"{result['on_median_s'] * 1e3:.2f} ms   on/off {result['on_over_off']:.3f}   run-to-run noise "
        f"{result['off_noise_pct']:.1f}%"
    )
    print(
        f"  the off ranges themselves: {per_step_off_ns:.0f} ns per step, against a {result['step_ms']:.3f} ms step "
        f"({100 * per_step_off_ns / (result['step_ms'] * 1e6):.4f}%)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
