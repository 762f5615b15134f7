#!/usr/bin/env bash
# Train on the default config (installs the project into .venv on first use).
#   ./run_async.sh [--debug] [args passed to `python -m mbpo`]
# --debug sets CUDA_LAUNCH_BLOCKING=1 and TORCH_USE_CUDA_DSA=1 before Python starts.
# run_async_test.sh sources this file for ensure_venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$ROOT/.venv"

# ensure_venv EXTRAS: create .venv and `pip install -e .[EXTRAS]` unless the
# same install (pyproject.toml + extras + interpreter) is already there. Under a lock where flock exists:
# two first uses at once (a training and the test suite) would otherwise install over each other.
ensure_venv() {
  if command -v flock >/dev/null 2>&1; then
    (flock 9 && _ensure_venv "$@") 9>"$ROOT/.venv.lock"
  else
    _ensure_venv "$@"
  fi
}

_ensure_venv() {
  local extras="${1:-}" py="${PYTHON:-python3}" spec="." stamp want
  [[ -n "$extras" ]] && spec=".[$extras]"
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$py" -c 'import sys; assert sys.version_info >= (3, 10), "Python >= 3.10 is required"' || {
      echo "[setup] $py is too old or missing; set PYTHON=/path/to/python3.10+" >&2; return 1; }
    echo "[setup] creating $VENV with $("$py" --version)"
    "$py" -m venv "$VENV"
  fi
  want="$( (cat "$ROOT/pyproject.toml"; echo "$extras"; "$VENV/bin/python" --version) | sha256sum | cut -d' ' -f1)"
  stamp="$VENV/.mbpo-install-${extras:-base}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "[setup] installing mbpo$([[ -n "$extras" ]] && echo "[$extras]") into $VENV (first use or pyproject.toml changed)"
  (cd "$ROOT" && "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e "$spec")
  echo "$want" > "$stamp"
}

# extras_for ARGS: the pip extras a command line needs beyond the base install: mjlab for an Mjlab- env id,
# ray for runtime.backend=ray, whether on the command line or in the --config file; plots for `plot`.
extras_for() {
  local text="" config="" prev="" extras=()
  for a in "$@"; do
    text+=" $a"
    [[ "$prev" == "--config" ]] && config="$a"
    [[ "$a" == --config=* ]] && config="${a#--config=}"
    prev="$a"
  done
  [[ -n "$config" && -f "$config" ]] && text+=" $(cat "$config")"
  [[ "$text" == *Mjlab-* ]] && extras+=(mjlab)
  [[ "$text" =~ (runtime\.backend=ray|backend:[[:space:]]*ray) ]] && extras+=(ray)
  [[ "${1:-}" == plot ]] && extras+=(plots)
  local IFS=,
  echo "${extras[*]}"
}

main() {
  local args=()
  for a in "$@"; do
    if [[ "$a" == "--debug" ]]; then
      export CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 MBPO_DEBUG=1
    fi
    args+=("$a")
  done
  ensure_venv "$(extras_for "$@")"
  exec "$VENV/bin/python" -m mbpo "${args[@]}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
