#!/usr/bin/env bash
# The wheels the sweep needs on the GPU machine beyond its image, as one archive of at most 56 MiB and a
# manifest (scripts/gpu_bundle.py says how). Run on a machine that reaches the package registry:
#
#   scripts/gpu_bundle.sh PYTHON_VERSION DIR      # e.g. scripts/gpu_bundle.sh 3.12 .gpu_bundle
#
# DIR inside the checkout must be git-ignored (.gpu_bundle/ is); scripts/gpu_sweep.sh reads .gpu_bundle/.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 PYTHON_VERSION DIR   (e.g. 3.12 .gpu_bundle)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "$2" && cd "$2" && pwd)
case $dir/ in
  "$repo"/*) git -C "$repo" check-ignore -q "$dir/" || { echo "gpu_bundle: $2 is inside the checkout and not git-ignored: use .gpu_bundle" >&2; exit 2; } ;;
esac
exec "${PYTHON:-python3}" "$repo/scripts/gpu_bundle.py" "$1" "$dir"
