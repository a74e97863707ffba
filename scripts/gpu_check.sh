#!/usr/bin/env bash
# The GPU checks, for a lent GPU box that has torch and transformers (pytest if it happens to).
# A lent GPU gives about 15 minutes in all, machine start included, and a rerun must fit too, so
# the whole script stays under 300 s on one H200: every step runs under `timeout`; the three
# steps' limits add up to 265 s (271 s with their 2 s kill grace), the probes before them to 25 s
# at most (a few seconds in practice). Steps, most valuable first:
#   1. the `gpu`-marked tests: lagged stop checks on a GPU made to lag, sync-debug traps, the live
#      allocator, CUDA memory stats, torch profiling, the energy counter            (limit 115 s)
#   2. the article's summary table: gpt2, batch 32, 100 steps, 5 runs, 9 variants   (limit 110 s;
#      a cold inductor cache may cost it its last row, a rerun on the same machine starts warm)
#   3. profiled trials, static_compiled vs static_compiled_pipelined: nsys where it is on the
#      PATH, else torch.profiler; the GPU idle gap between steps, as numbers       (limit  40 s)
# One inductor cache (TORCHINDUCTOR_CACHE_DIR) serves every step, so a row compiles code an
# earlier row or step already compiled only once; tables are rewritten after each row, so a step
# cut short keeps the rows it finished. `set -u` without -e: a failing step does not stop the rest.
# Writes at most 7 files, all directly under $OUT (default gpu_check_out/): summary.md (what
# passed, what failed, the tables), pytest.log, steps.log, article.{md,json}, profile.{md,json}.
set -u -o pipefail
cd "$(dirname "$0")/.."
unset PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF  # each trial sets its own allocator; none may leak in
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/tokengen-inductor}"
out="${OUT:-gpu_check_out}"
scratch="${TMPDIR:-/tmp}/tokengen-gpu-check"  # traces and nsys reports: big, and not worth a file slot
mkdir -p "$out" "$scratch"
rm -f "$out"/article.{md,json} "$out"/profile.{md,json} "$out/pytest.log"  # a rerun shows only its own results
summary="$out/summary.md"
log="$out/steps.log"
: >"$log"
failures=0

py="" versions="no python with torch and transformers"
for candidate in "${PYTHON:-}" python3 python; do
  [ -n "$candidate" ] || continue
  if found=$(timeout 15 "$candidate" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'available', torch.cuda.is_available(), '| transformers', transformers.__version__)" 2>/dev/null); then
    py="$candidate" versions="$found"
    break
  fi
done

# step NAME LIMIT_S LOGFILE COMMAND...: run COMMAND bounded, append its output to LOGFILE, note how it went
step() {
  local name="$1" limit="$2" logfile="$3"
  shift 3
  local started=$SECONDS rc verdict
  echo "== $name (limit ${limit} s)" | tee -a "$logfile"
  timeout --kill-after=2 "$limit" "$@" >>"$logfile" 2>&1
  rc=$?
  case $rc in
    0) verdict="passed" ;;
    124 | 137) verdict="TIMED OUT at ${limit} s"; failures=$((failures + 1)) ;;
    *) verdict="FAILED (exit $rc)"; failures=$((failures + 1)) ;;
  esac
  echo "| $name | $verdict | $((SECONDS - started)) s |" >>"$summary"
  echo "   $verdict in $((SECONDS - started)) s"
}

skip() {  # skip NAME REASON
  echo "| $1 | skipped: $2 | 0 s |" >>"$summary"
  echo "== $1: skipped: $2"
}

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo '```'
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 5 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  else
    echo "nvidia-smi: not on the PATH"
  fi
  echo "${py:-python}: $versions"
  echo "nsys: $(command -v nsys || echo 'not on the PATH')"
  echo "TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR"
  echo '```'
  echo
  echo "| step | result | time |"
  echo "|---|---|---|"
} >"$summary"

gpt2=(--device cuda --model gpt2 --batch-size 32 --max-seqlen 100)

if [[ "$versions" != *"available True"* ]]; then  # the gpu tests would all skip and look passed
  echo "| CUDA | NOT AVAILABLE to torch: every check below is void | 0 s |" >>"$summary"
  failures=$((failures + 1))
fi

if [ -z "$py" ]; then
  skip "gpu tests" "no python with torch and transformers"
elif ! timeout 5 "$py" -c "import pytest" 2>/dev/null; then
  skip "gpu tests" "pytest is not importable here (nothing is installed from the network)"
else
  # --maxfail=5, not -x: on a lent GPU one failure should not hide the other checks' results
  step "gpu tests" 115 "$out/pytest.log" "$py" -m pytest -m gpu tests/test_gpu.py -q -rfEs --maxfail=5 \
    --durations=8 -p no:cacheprovider -o addopts=""
fi

if [ -n "$py" ]; then
  step "article table" 110 "$log" "$py" benchmarks/article_table.py "${gpt2[@]}" --runs 5 --warmup 2 --timeout 70 \
    --variants baseline kv_cache kv_cache_expandable static_cache static_compiled static_compiled_pipelined \
    static_compiled_deferred static_cudagraph static_cudagraph_deferred \
    --json "$out/article.json" --markdown "$out/article.md"

  profiler=torch
  command -v nsys >/dev/null 2>&1 && profiler=nsys  # never the nsys wrapper without nsys
  step "profiled trials ($profiler)" 40 "$log" "$py" benchmarks/article_table.py "${gpt2[@]}" --runs 3 --warmup 1 \
    --timeout 17 --profile "$profiler" --profile-dir "$scratch/profiles" \
    --variants static_compiled static_compiled_pipelined --json "$out/profile.json" --markdown "$out/profile.md"
else
  skip "article table" "no python with torch and transformers"
  skip "profiled trials" "no python with torch and transformers"
fi

rm -f "$out"/*.tmp  # a table write cut by a time limit
{
  echo
  echo "$failures step(s) failed or timed out; $SECONDS s in all."
  for table in "$out/article.md" "$out/profile.md"; do
    echo
    if [ -s "$table" ]; then cat "$table"; else echo "($(basename "$table"): no row finished)"; fi
  done
  if [ -s "$out/pytest.log" ]; then
    echo
    echo '```'
    tail -n 40 "$out/pytest.log"
    echo '```'
  fi
} >>"$summary"
echo
cat "$summary"
[ "$failures" -eq 0 ]
