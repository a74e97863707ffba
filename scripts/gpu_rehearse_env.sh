# Sourced by `scripts/gpu_sweep.sh --rehearse`: a stand-in of the GPU machine's image on this CPU machine,
# built once outside the checkout (~/.cache/tokengen/gpu-rehearse-<hash>): this machine's Python, torch
# 2.13.0 (CPU), the image's transformers stack (5.17.0), and the image's packages the sweep's bundle was
# resolved against (its manifest's "[provided by the image]"); no Ray, MLflow or Hydra: the bundle, built
# for this Python by the same scripts/gpu_bundle.py, brings them as it does on the GPU machine.
# Sets PYTHON, BUNDLE and REHEARSE_STATE (a temporary state, gone when the rehearsal ends).
REHEARSE_PINS="transformers==5.17.0 huggingface_hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0"
REHEARSE_IMAGE="torch pandas numpy scipy matplotlib psutil nvidia-ml-py tqdm pyyaml pytest"  # the image's, used here
rehearse_python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
rehearse_key=$( { echo "$REHEARSE_PINS $REHEARSE_IMAGE $rehearse_python"; cat "$REPO/constraints.txt"; } | sha256sum | cut -c1-12)
bundle_key=$( { echo "$rehearse_python"; cat "$REPO/constraints.txt" "$REPO/scripts/gpu_image/"*.txt "$REPO/scripts/gpu_bundle.py"; } |
  sha256sum | cut -c1-12)
REHEARSE_HOME=${TOKENGEN_REHEARSE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/tokengen/gpu-rehearse-$rehearse_key}
BUNDLE=$REHEARSE_HOME/bundle-$bundle_key
if [[ ! -f $REHEARSE_HOME/ready-$bundle_key ]]; then
  say "building the stand-in image (Python $rehearse_python) and its bundle, once: $REHEARSE_HOME"
  mkdir -p "$REHEARSE_HOME"
  [[ -f $BUNDLE/manifest.txt ]] || python3 "$REPO/scripts/gpu_bundle.py" "$rehearse_python" "$BUNDLE" >>"$LOG" 2>&1 || return 1
  provided=$(sed -n '/^\[provided/,$p' "$BUNDLE/manifest.txt" | grep '==' | sed 's/==.*//')
  pinned=$(for p in $REHEARSE_PINS; do echo "${p%%==*}"; done | tr '[:upper:]_' '[:lower:]-')
  grep -viE "^($(echo "$pinned" | sed 's/-/[-_.]/g' | paste -sd'|'))==" "$REPO/constraints.txt" >"$REHEARSE_HOME/constraints.txt"
  [[ -x $REHEARSE_HOME/venv/bin/python ]] || python3 -m venv "$REHEARSE_HOME/venv"
  # shellcheck disable=SC2086
  "$REHEARSE_HOME/venv/bin/python" -m pip install -q -c "$REHEARSE_HOME/constraints.txt" $REHEARSE_PINS $REHEARSE_IMAGE \
    $provided >>"$LOG" 2>&1 || return 1
  for absent in ray mlflow hydra; do
    "$REHEARSE_HOME/venv/bin/python" -c "import $absent" 2>/dev/null && { say "the stand-in has $absent: it must come from the bundle"; return 1; }
  done
  touch "$REHEARSE_HOME/ready-$bundle_key"
fi
PYTHON=$REHEARSE_HOME/venv/bin/python
REHEARSE_STATE=$(mktemp -d)/state
