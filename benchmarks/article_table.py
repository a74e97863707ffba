"""The article's summary table from tokengen alone: each variant in its own process, one table.

Each row runs `python -m tokengen --json` in a fresh process (the expandable allocator must be set
before CUDA starts), so this needs only torch and transformers: it is what scripts/gpu_check.sh
runs on a GPU box. Rows that this device cannot run (CUDA-only knobs on a CPU) are skipped with
their reason. Speedup is the baseline's mean runtime over the row's, as in the article.

    python benchmarks/article_table.py --device cuda                  # gpt2, batch 32, 100 steps
    python benchmarks/article_table.py --device cpu --model tiny --max-seqlen 32 --runs 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tokengen.validate import problem, resolve

ROWS = [
    "baseline", "kv_cache", "kv_cache_expandable", "static_cache", "static_compiled",
    "static_compiled_pipelined", "static_compiled_deferred", "static_compiled_nocheck",
    "static_cudagraph", "static_cudagraph_deferred", "static_cudagraph_nocheck",
]


def run_row(variant: str, args, workdir: Path) -> dict:
    out = workdir / f"{variant}.json"
    cmd = [sys.executable, "-m", "tokengen", "--variant", variant, "--model", args.model, "--device", args.device,
           "--dtype", args.dtype, "--batch-size", str(args.batch_size), "--max-seqlen", str(args.max_seqlen),
           "--runs", str(args.runs), "--warmup", str(args.warmup), "--stop", args.stop, "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        return {"variant": variant, "status": "failed", "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.read_text())


def markdown(records: list[dict]) -> str:
    base = next((r for r in records if r["variant"] == "baseline" and r.get("status") == "finished"), None)
    header = ("| variant | mean (s) | std | min | max | tokens/s | speedup | alloc peak (GB) | reserved peak (GB) "
              "| fragmentation | same tokens |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in records:
        if r.get("status") != "finished":
            lines.append(f"| {r['variant']} | {r['status']}: {r.get('error', '')} |")
            continue
        gb = lambda v: "n/a" if v is None else f"{v / 1e9:.3f}"
        frag = "n/a" if r["mem_fragmentation_pct"] is None else f"{gb(r['mem_fragmentation_bytes'])} ({r['mem_fragmentation_pct']:.1f}%)"
        speedup = base["runtime_mean_s"] / r["runtime_mean_s"] if base else float("nan")
        same = "yes" if base and r["tokens_sha256"] == base["tokens_sha256"] else ("n/a" if r["stop_check"] == "none" else "NO")
        lines.append(
            f"| {r['variant']} | {r['runtime_mean_s']:.4f} | {r['runtime_std_s']:.4f} | {r['runtime_min_s']:.4f} "
            f"| {r['runtime_max_s']:.4f} | {r['tokens_per_s']:.0f} | {speedup:.2f}x | {gb(r['mem_allocated_peak_bytes'])} "
            f"| {gb(r['mem_reserved_peak_bytes'])} | {frag} | {same} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seqlen", type=int, default=100)
    parser.add_argument("--stop", default="never")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--variants", nargs="*", default=ROWS)
    parser.add_argument("--json", help="write all records here")
    args = parser.parse_args()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants:
            spec = resolve(variant, model=args.model, device=args.device, batch_size=args.batch_size,
                           max_seqlen=args.max_seqlen, stop=args.stop)
            reason = problem(spec)
            if reason:
                print(f"skip {variant}: {reason}", file=sys.stderr)
                continue
            records.append(run_row(variant, args, Path(tmp)))
            print(f"done {variant}", file=sys.stderr, flush=True)
    first = next((r for r in records if r.get("status") == "finished"), {})
    print(f"\n{args.model} {args.dtype}, batch {args.batch_size}, max_seqlen {args.max_seqlen}, stop={args.stop}, "
          f"on {first.get('env_gpu_name') or args.device} (torch {first.get('env_torch')}, "
          f"transformers {first.get('env_transformers')})\n")
    print(markdown(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
