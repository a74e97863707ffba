#!/usr/bin/env bash
# The project's own job on the GPU machine: `python -m sweeps.run +grid=gpu` on a local Ray that sees the
# GPU, recorded in a SQLite store, reported, and packed into at most 8 files under $OUT. Run it first when
# GPU time is short (scripts/gpu_check.sh runs the `gpu` tests and the in-process article table).
#
#   OUT=DIR scripts/gpu_sweep.sh              # on the GPU machine; the bundle travels in .gpu_bundle/
#                                             # (scripts/gpu_bundle.sh 3.12 .gpu_bundle, here first)
#   GRID=gpu_more OUT=DIR scripts/gpu_sweep.sh  # the second run, where GPU time remains (conf/grid/gpu_more.yaml)
#   GRID=gpu_peak OUT=DIR scripts/gpu_sweep.sh  # serving under load and its peak rate (conf/grid/gpu_peak.yaml)
#   OUT=DIR scripts/gpu_sweep.sh --rehearse   # on a CPU machine: a stand-in of the image (Python here, torch
#                                             # 2.13.0 CPU, transformers 5.17.0, no Ray, MLflow or Hydra),
#                                             # the same bundle steps, the grid on the CPU (models shrunk,
#                                             # CUDA-only rows dropped with their reason), one logical GPU
#
# Limits, from a cold machine (seconds): unpack 30 + probe 45 + sweep 200 + report 30 + check 25 + ui 15 + pack 5 = 350;
# TOKENGEN_GPU_SWEEP_S gives the sweep another limit where the lease holds more (or less) time.
# Run again on the same machine, it resumes: the store, the journal and the compile cache live in
# $TOKENGEN_GPU_STATE (default .gpu_sweep/, git-ignored), so only what did not finish runs again.
# Out: store.tar.xz (mlflow.db and mlartifacts/, open it anywhere), report.tar.xz, logs.tar.xz, steps.log,
# versions.txt, left_out.txt (files over LARGE_MIB not packed), check.txt.
set -uo pipefail
REHEARSE=0
[[ ${1:-} == --rehearse ]] && REHEARSE=1
# the rehearsal's stand-in is a 2-core CPU, slower to import and to run than the GPU host: its limits are
# the GPU host's times TOKENGEN_GPU_LIMIT_SCALE (3 there, 1 on the GPU host)
SCALE=${TOKENGEN_GPU_LIMIT_SCALE:-$([[ $REHEARSE == 1 ]] && echo 3 || echo 1)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
: "${OUT:?set OUT to the folder whose files come back}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STATE=${TOKENGEN_GPU_STATE:-$REPO/.gpu_sweep}
BUNDLE=${TOKENGEN_BUNDLE:-$REPO/.gpu_bundle}
PYTHON=${PYTHON:-python3}
GRID=${GRID:-gpu}  # the grid, and the sweep's name
LARGE_MIB=${LARGE_MIB:-4}
LOG=$OUT/steps.log
: >"$LOG"
say() { echo "gpu_sweep: $*" | tee -a "$LOG" >&2; }
step() {  # step NAME LIMIT_S COMMAND...: its output in steps.log, its status said; SIGTERM leaves a quarter
  local name=$1 limit=$(($2 * SCALE)) started=$SECONDS status grace  # of the limit (at most 20 s) to stop cleanly
  shift 2
  if declare -F "$1" >/dev/null; then export -f "$1"; set -- bash -c "$1"; fi  # timeout runs programs, not functions
  grace=$((limit / 4 < 20 ? limit / 4 : 20))
  timeout --signal=TERM --kill-after="$grace" "$((limit - grace))" "$@" >>"$LOG" 2>&1
  status=$?
  say "$name: exit $status in $((SECONDS - started)) s (limit $limit s)"
  return $status
}

if [[ $REHEARSE == 1 ]]; then
  # shellcheck source=scripts/gpu_rehearse_env.sh
  source "$REPO/scripts/gpu_rehearse_env.sh" || { say "the rehearsal's environment could not be built (steps.log)"; exit 2; }
  STATE=${TOKENGEN_GPU_STATE:-$REHEARSE_STATE}
  [[ -n ${TOKENGEN_GPU_STATE:-} ]] && REHEARSE_STATE=  # a given state stays; a temporary one goes at the end
fi
mkdir -p "$STATE"
SITE=$(mktemp -d)/site
export SITE BUNDLE PYTHON STATE OUT
trap 'rm -rf "$(dirname "$SITE")" ${REHEARSE_STATE:+"$(dirname "$REHEARSE_STATE")"}' EXIT

# 1. the bundle into a site folder of its own, exactly as on the GPU machine
[[ -f $BUNDLE/gpu_bundle.tar.xz ]] || { say "no $BUNDLE/gpu_bundle.tar.xz: run scripts/gpu_bundle.sh 3.12 .gpu_bundle here first, and carry .gpu_bundle"; exit 2; }
unpack() {  # the trained presets' checkpoints too (trained.tar.xz): the same weights and prompts as where it was built
  tar -xJf "$BUNDLE/gpu_bundle.tar.xz" -C "$(dirname "$SITE")" &&
    { [[ ! -f $BUNDLE/trained.tar.xz ]] || tar -xJf "$BUNDLE/trained.tar.xz" -C "$(dirname "$SITE")"; } &&
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$(dirname "$SITE")"/wheels/*.whl
}
step unpack 30 unpack || { say "the bundle did not install (steps.log): rebuild it with scripts/gpu_bundle.sh for this Python"; exit 2; }
export PYTHONPATH=$SITE:$REPO PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
[[ -d $(dirname "$SITE")/trained ]] && export TOKENGEN_TRAINED_DIR=$(dirname "$SITE")/trained  # tokengen/contract/trained.py
if ! command -v nsys >/dev/null; then  # the image's nsys lives inside Nsight Compute
  for dir in /opt/nvidia/nsight-compute/*/host/target-linux-x64; do [[ -x $dir/nsys ]] && export PATH=$PATH:$dir; done
fi

# 2. versions, a fork of the trials' warm parent starting CUDA, and one line for what cannot work
step probe 45 "$PYTHON" "$REPO/scripts/gpu_probe.py" $([[ $REHEARSE == 1 ]] && echo --cpu) --out "$OUT/versions.txt" ||
  { say "$(tail -n 1 "$OUT/versions.txt" 2>/dev/null || echo 'the probe failed: see steps.log')"; exit 2; }

# 3. the sweep (a rerun resumes from the journal and the store in $STATE)
URI=sqlite:///$STATE/mlflow.db
overrides=("+grid=$GRID" "tracking.uri=$URI" "sweep.workdir=$STATE/work" ray.num_gpus=1)
[[ $REHEARSE == 1 ]] && overrides+=(trial.device=cpu sweep.trial_gpus=1 '+grid.model=[tiny]' '+grid.max_seqlen=[32]' '+grid.batch_size=[4]'
  trial.runs=1 trial.warmup=1 '+grid.exclude=[{dtype: bfloat16, compile: default}]')  # the path, not the figures
(cd "$STATE" && step sweep "${TOKENGEN_GPU_SWEEP_S:-200}" "$PYTHON" -m sweeps.run "${overrides[@]}")
sweep_status=$?

# 4. the report from what the store holds (the sweep writes one when it ends; a stopped one did not)
(cd "$STATE" && step report 30 "$PYTHON" -m tracking.report --uri "$URI" --sweep "$GRID" --out "$STATE/reports")

# 5. every trial on the device Ray assigned it; the UI's view opens on the store
(cd "$STATE" && step check 25 "$PYTHON" "$REPO/scripts/gpu_probe.py" --check "$URI" --sweep "$GRID" --out "$OUT/check.txt" &&
  step ui 15 "$PYTHON" -m tracking.ui --uri "$URI" --sweep "$GRID" --print-only)
check_status=$?

# 6. at most 8 files back: artifacts over LARGE_MIB (traces, nsys reports) stay behind, listed
(cd "$STATE" && find mlartifacts reports work -type f -size +"$LARGE_MIB"M 2>/dev/null | sort) >"$OUT/left_out.txt"
pack() {  # each archive of what exists: a sweep that stopped early still sends its logs
  local status=0 name list paths
  # the store copied through SQLite's backup API, never as a file: a killed driver's results sit in its -wal
  rm -rf "$STATE/packed"
  if [[ -e $STATE/mlflow.db ]]; then
    "$PYTHON" -m tracking.store.backup --uri "sqlite:///$STATE/mlflow.db" "$STATE/packed/mlflow.db" || status=1
  fi
  for name in store:packed/mlflow.db,mlartifacts report:reports logs:outputs,.sweeps,work; do
    list=${name#*:}
    paths=$(cd "$STATE" && for p in ${list//,/ }; do [[ -e $p ]] && echo "$p"; done)
    [[ -n $paths ]] || continue
    # shellcheck disable=SC2086
    tar -C "$STATE" -cJf "$OUT/${name%%:*}.tar.xz" -X "$OUT/left_out.txt" --exclude='*/inductor/*' \
      --transform='s,^packed/,,' $paths || status=1
  done
  return $status
}
step pack 5 pack
say "sweep exit $sweep_status, check exit $check_status; $(wc -l <"$OUT/left_out.txt") file(s) left out; $(ls "$OUT" | wc -l) file(s) in $OUT"
[[ $sweep_status == 0 && $check_status == 0 ]]
