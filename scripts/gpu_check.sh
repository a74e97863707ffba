#!/usr/bin/env bash
# The GPU checks, in one command, for a box that has only torch, transformers and pytest:
#   1. the `gpu`-marked tests (lagged stop checks, CUDA graphs, expandable allocator, CUDA memory stats);
#   2. the article's summary table (gpt2, batch 32, 100 steps) with every CUDA variant;
#   3. the pipelining gain at small batches (sync vs pipelined vs deferred, compiled, 100 steps;
#      batch 32 is in table 2);
#   4. profiled trials (nsys where it is on the PATH, else torch.profiler): the GPU idle gap
#      between steps that the article's trace shows, as numbers; and what the ranges cost.
# Every step has its own time bound (sum under 10 minutes; about 6 expected on an H100/H200, most
# of it compiling). Later steps reuse the compile cache of earlier ones, so keep their shapes.
# Writes logs and tables under $OUT (default: gpu_check_out/).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"

echo "== 1. gpu tests"
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -o addopts="" 2>&1 | tee "$out/pytest.log" || status=1

echo "== 2. article table"
timeout 210 python3 benchmarks/article_table.py --device cuda --runs 5 --warmup 2 \
  --json "$out/article.json" 2>&1 | tee "$out/article.md" || status=1

echo "== 3. pipelining gain at small batches"
for batch in 1 4; do
  timeout 70 python3 benchmarks/article_table.py --device cuda --runs 5 --warmup 2 --batch-size "$batch" \
    --variants baseline static_compiled static_compiled_pipelined static_compiled_deferred \
    --json "$out/pipelining_b$batch.json" 2>&1 | tee "$out/pipelining_b$batch.md" || status=1
done

echo "== 4. profiled trials (steps 30-50) and the cost of the ranges"
for variant in static_compiled static_compiled_pipelined static_compiled_deferred; do
  timeout 30 python3 -m tokengen --variant "$variant" --model gpt2 --device cuda --batch-size 32 --max-seqlen 100 \
    --runs 3 --warmup 2 --profile auto --profile-dir "$out/profile_$variant" --json "$out/profile_$variant.json" \
    2>&1 | tail -6 | tee -a "$out/profile.log" || status=1
done
timeout 30 python3 benchmarks/ranges_cost.py --device cuda 2>&1 | tee "$out/ranges_cost.log" || status=1
exit $status
