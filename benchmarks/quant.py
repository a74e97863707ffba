"""What weight-only quantization does to a decode step on this machine: each quantized value against the
unquantized model, side by side in one process.

For every value of the `quant` knob that this device can run (read from tokengen/contract/declarations.py, so a
value declared there is measured here with no line added), at each batch size: the median time per decode step
of our loop on a dynamic KV cache (runs interleaved with the unquantized twin's, so both see the same machine),
their ratio (quantized / plain: below 1.0 the quantized step is faster), the weight bytes each model holds, and
the quantized model's top-1 agreement with the plain one (teacher-forced, tokengen/measure/agreement.py). On a CPU
the int8 weights are dequantized inside the matmul, which costs more than the bytes it saves; on a GPU a decode
step at small batch is bound by the bytes it streams, which is where quantization is meant to pay. The last
line of output is JSON for scripts.

    python benchmarks/quant.py                              # gpt2, batch 1 and 8, 32 steps, CPU
    python benchmarks/quant.py --model tiny --runs 3 --batch-sizes 1
    python benchmarks/quant.py --device cuda --dtype bfloat16 --model gpt2-xl
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from tokengen import models
from tokengen.contract.declarations import EXACT, declared, names, plain
from tokengen.contract.rules import check_runnable, resolve
from tokengen.engines import make_generator
from tokengen.knobs import on_model
from tokengen.measure import agreement as fidelity_measure
from tokengen.measure.clocks import timed


def quantized_values(device: str, dtype: str) -> list[str]:
    """The quant knob's non-plain values this device and dtype can run, as declared."""
    found = []
    for name in names("quant"):
        value = declared("quant", name)
        if (
            value.fidelity != EXACT
            and not (value.cuda_only and device != "cuda")
            and (not value.dtypes or dtype in value.dtypes)
        ):
            found.append(name)
    return found


def step_times(generate, steps: int, device: str, runs: int) -> list[float]:
    return [timed(generate, device)[1] / steps for _ in range(runs)]


def measure(args, value: str, batch: int) -> dict:
    point = dict(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        cache="dynamic",
        batch_size=batch,
        prompt_len=args.prompt_len,
        max_seqlen=args.max_seqlen,
        stop="never",
    )
    plain_spec, spec = resolve(None, **point), resolve(None, **point, quant=value)
    check_runnable(spec)
    plain_model = models.build_model(args.model, args.dtype, args.device, 0)
    quant_model = on_model(models.build_model(args.model, args.dtype, args.device, 0), spec)
    generators = {"plain": make_generator(plain_model, plain_spec), value: make_generator(quant_model, spec)}
    for generate in generators.values():
        generate()  # warmup
    times = {name: [] for name in generators}
    for _ in range(args.runs):  # interleaved: both see the same machine state
        for name, generate in generators.items():
            times[name] += step_times(generate, args.max_seqlen, args.device, 1)
    plain_s, quant_s = statistics.median(times["plain"]), statistics.median(times[value])
    agreement = fidelity_measure.teacher_forced(plain_model, quant_model, generators["plain"]().tokens, args.prompt_len)
    return {
        "quant": value,
        "batch_size": batch,
        "plain_step_ms": plain_s * 1e3,
        "quant_step_ms": quant_s * 1e3,
        "ratio": quant_s / plain_s,
        "plain_weight_bytes": models.weight_bytes(plain_model),
        "quant_weight_bytes": models.weight_bytes(quant_model),
        **agreement,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--max-seqlen", type=int, default=32)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [
        measure(args, value, int(batch))
        for value in quantized_values(args.device, args.dtype)
        for batch in args.batch_sizes.split(",")
    ]
    print(
        f"{args.model} {args.dtype} on {args.device}, {torch.get_num_threads()} threads, {args.max_seqlen} steps "
        f"after a {args.prompt_len}-token prompt, median of {args.runs} runs each (plain = quant={plain('quant').name}):"
    )
    for r in rows:
        print(
            f"  {r['quant']:>5} batch {r['batch_size']:>2}: {r['quant_step_ms']:.2f} ms/step against "
            f"{r['plain_step_ms']:.2f} ({r['ratio']:.2f}x the time), weights {r['quant_weight_bytes'] / 1e6:.0f} MB "
            f"against {r['plain_weight_bytes'] / 1e6:.0f} MB, top-1 agreement {100 * r['top1_agreement']:.1f}% "
            f"(reference margin {r['top1_margin_median']:.3g})"
        )
    print(json.dumps({"model": args.model, "device": args.device, "dtype": args.dtype, "rows": rows}))


if __name__ == "__main__":
    main()
