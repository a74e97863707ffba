#!/usr/bin/env bash
# Build (idempotently) a second Python environment with an older transformers -- by default the GPU
# machine's 5.17.0 stack -- and run the repo's equivalence tests in it, so the repo's transformers floor
# is a tested claim, not a guess. Cold: a few minutes of installs; warm: the tests alone.
#
#   check_transformers_floor.sh [REPO] [-- extra pytest args]
#
# Environment:
#   REPO            the checkout to test (default: the current directory)
#   TF_FLOOR_PINS   the stack under test (default: the GPU machine's)
#                   "transformers==5.17.0 huggingface_hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0"
#   TF_FLOOR_VENV   where the env lives (default: ~/.cache/tokengen/venv-<pins hash>, outside any checkout,
#                   so git never sees it; a path inside REPO must be git-ignored or the script refuses)
#   TF_FLOOR_TESTS  test files (default: tests/tokengen/test_equivalence.py)
#   TF_FLOOR_MARKS  pytest -m expression (default: none, so slow tests run too; "not slow" for the fast lane)
#   PYTHON          interpreter for the venv (default: python3)
#
# Everything but the pinned transformers stack is held to REPO/constraints.txt (torch==2.13.0 above all:
# an unconstrained pip would fetch a multi-GB CUDA torch). The project itself is not installed: PYTHONPATH
# points at REPO, so nothing is written into the checkout.
set -euo pipefail

REPO=${REPO:-}
if [[ $# -gt 0 && $1 != -- ]]; then REPO=$1; shift; fi
[[ ${1:-} == -- ]] && shift
REPO=$(cd "${REPO:-.}" && pwd)
PYTHON=${PYTHON:-python3}
PINS=${TF_FLOOR_PINS:-"transformers==5.17.0 huggingface_hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0"}
TESTS=${TF_FLOOR_TESTS:-tests/tokengen/test_equivalence.py}
MARKS=${TF_FLOOR_MARKS:-}
# What the tests need besides the pins: psutil because transformers 5.17's continuous batching sizes its
# CPU cache from psutil (without it: "available memory 0", MemoryError); 5.24 also reads NUMA sysfs.
EXTRA="torch numpy pytest pytest-timeout psutil"

CONSTRAINTS=$REPO/constraints.txt
[[ -f $CONSTRAINTS ]] || { echo "no $CONSTRAINTS" >&2; exit 2; }
KEY=$( { echo "$PINS $EXTRA"; "$PYTHON" --version; cat "$CONSTRAINTS"; } | sha256sum | cut -c1-12)
VENV=${TF_FLOOR_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokengen/venv-$(echo "$PINS" | sed 's/ .*//;s/==/-/')-$KEY}

case $VENV/ in
  "$REPO"/*)
    if ! git -C "$REPO" check-ignore -q "$VENV/"; then
      echo "refusing: $VENV is inside $REPO and not git-ignored (set TF_FLOOR_VENV elsewhere)" >&2
      exit 2
    fi ;;
esac

# The repo's constraints, less the packages whose versions are under test.
pinned_names=$(for p in $PINS; do echo "${p%%[=<>!~]*}"; done | tr '[:upper:]_' '[:lower:]-')
filtered=$(mktemp)
trap 'rm -f "$filtered"' EXIT
while IFS= read -r line; do
  name=$(echo "${line%%[=<>!~ ]*}" | tr '[:upper:]_' '[:lower:]-')
  grep -qxF -- "$name" <<<"$pinned_names" || echo "$line"
done <"$CONSTRAINTS" >"$filtered"

stamp=$VENV/.tf_floor_stamp
build_start=$SECONDS
if [[ -f $stamp && $(cat "$stamp") == "$KEY" ]]; then
  echo "== env $VENV is up to date ($KEY)"
else
  echo "== building $VENV: $PINS + $EXTRA"
  [[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q -c "$filtered" $PINS $EXTRA
  "$VENV/bin/pip" check
  echo "$KEY" >"$stamp"
fi
build_s=$((SECONDS - build_start))
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
print("== resolved:", ", ".join(f"{n}=={md.version(n)}" for n in
      ["torch", "transformers", "huggingface_hub", "tokenizers", "safetensors", "numpy", "psutil"]))
EOF

cd "$REPO"
run_start=$SECONDS
status=0
# shellcheck disable=SC2086
PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  ${MARKS:+-m "$MARKS"} $TESTS "$@" || status=$?
run_s=$((SECONDS - run_start))
printf '== build %d s, tests %d s, pytest exit %d (load average: %s)\n' \
  "$build_s" "$run_s" "$status" "$(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
