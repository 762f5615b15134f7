#!/usr/bin/env bash
# Train on the default config (installs the project into .venv on first use).
#   ./run_async.sh [--debug] [args passed to `python -m mbpo`]
# --debug sets CUDA_LAUNCH_BLOCKING=1 and TORCH_USE_CUDA_DSA=1 before Python starts.
# run_async_test.sh sources this file for ensure_venv.
set -euo pipefail

ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
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
  local extras="${1:-}" py="${PYTHON:-python3}" spec="." stamp want site
  [[ -n "$extras" ]] && spec=".[$extras]"
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$py" -c 'import sys; assert sys.version_info >= (3, 10), "Python >= 3.10 is required"' || {
      echo "[setup] $py is too old or missing; set PYTHON=/path/to/python3.10+" >&2; return 1; }
    echo "[setup] creating $VENV with $("$py" --version)"
    "$py" -m venv "$VENV" || { echo "[setup] could not create $VENV with $py" >&2; return 1; }
  fi
  want="$( (cat "$ROOT/pyproject.toml"; echo "$extras"; "$VENV/bin/python" --version) | sha256sum | cut -d' ' -f1)"
  stamp="$VENV/.mbpo-install-${extras:-base}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "[setup] installing mbpo$([[ -n "$extras" ]] && echo "[$extras]") into $VENV (first use or pyproject.toml changed)"
  # pip compiles the installed modules one at a time (about a minute for torch and the rest); compileall -j 0
  # does the same on every core. Its status is pip's rule: a module that does not compile (a library's test data)
  # is left to fail where it is imported.
  # Each step checked by itself: called in a `cmd && ...` list or a $(...), bash runs this with set -e off, and
  # a failed install went on to write the stamp (every later start then skipped the install).
  (cd "$ROOT" && "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile -e "$spec") || {
    echo "[setup] installing mbpo$([[ -n "$extras" ]] && echo "[$extras]") into $VENV failed (above)" >&2; return 1; }
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
  "$VENV/bin/python" -m compileall -q -j 0 "$site" >/dev/null || true
  echo "$want" > "$stamp"
}

# extras_for ARGS: the pip extras a command line needs beyond the base install: mjlab for an Mjlab- env.id,
# ray for runtime.backend=ray, each from an override or else the config: the --config file (over its bases), or
# the run's own config.yaml for `resume RUN_DIR` and `eval --checkpoint RUN_DIR/checkpoints/X.pt`; mjlab for
# `rollout --env Mjlab-...`; plots for `plot`; video for `eval --video` and an eval_video=true override. A
# --config that is not a YAML mapping is refused here (one line, status 2), before anything installs.
extras_for() {
  local config="" prev="" env_id="" backend="" keys video="" extras=() command="" run_config=""
  for a in "$@"; do
    if [[ -z "$command" && "$a" != --debug ]]; then  # the first word that is not --debug (a global flag)
      command="$a"
    elif [[ "$command" == resume && -z "$run_config" && "$a" != -* && "$a" != *=* ]]; then
      run_config="$a/config.yaml"
    fi
    [[ "$prev" == "--config" ]] && config="$a"
    [[ "$a" == --config=* ]] && config="${a#--config=}"
    [[ "$command" == eval && "$prev" == "--checkpoint" ]] && run_config="$(dirname "$(dirname "$a")")/config.yaml"
    [[ "$command" == eval && "$a" == --checkpoint=* ]] && \
      run_config="$(dirname "$(dirname "${a#--checkpoint=}")")/config.yaml"
    [[ "$command" == rollout && "$prev" == "--env" ]] && env_id="$a"
    [[ "$command" == rollout && "$a" == --env=* ]] && env_id="${a#--env=}"
    prev="$a"
  done
  [[ -n "$config" && ! -e "$config" && "$config" != /* ]] && config="$ROOT/$config"  # as the CLI finds it
  [[ -z "$config" && -n "$run_config" && -f "$run_config" ]] && config="$run_config"
  if [[ -n "$config" && -f "$config" ]]; then  # a missing one: the CLI says so
    keys="$(config_keys "$config")" || return 2
    { read -r env_id || true; read -r backend || true; } <<<"$keys"  # $(...) dropped the empty last line
  fi
  for a in "$@"; do  # overrides beat the file
    [[ "$a" == env.id=* ]] && env_id="${a#env.id=}"
    [[ "$a" == runtime.backend=* ]] && backend="${a#runtime.backend=}"
    [[ "$a" == --video || "$a" == --video=* || "${a,,}" =~ ^eval_video=(true|yes|on|y|1)$ ]] && video=1
  done
  [[ "$env_id" == Mjlab-* ]] && extras+=(mjlab)
  [[ "$backend" == ray ]] && extras+=(ray)
  [[ "$command" == plot ]] && extras+=(plots)
  [[ -n "$video" ]] && extras+=(video)
  local IFS=,
  echo "${extras[*]}"
}

# config_keys FILE: the config's env.id and runtime.backend (two lines, empty where unset; the nearest file of
# its base chain wins), read with PyYAML; "error: ..." and status 2 where FILE is not a YAML mapping.
config_keys() {
  local py
  py="$(yaml_python)" || { ensure_venv "" >&2 && py="$VENV/bin/python"; }  # rare: no PyYAML outside the venv
  "$py" - "$1" <<'PY'
import sys
from pathlib import Path

import yaml

path, found, seen = Path(sys.argv[1]), {}, set()
while path.is_file() and path.resolve() not in seen:  # a missing base or a cycle: the CLI says so
    seen.add(path.resolve())
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        sys.exit(f"error: {path} is not valid YAML ({str(exc).splitlines()[0]}); expected a config file such as "
                 "configs/pendulum_sac.yaml")
    if data is not None and not isinstance(data, dict):
        sys.exit(f"error: {path} holds a YAML {type(data).__name__} at the top level; expected a mapping of config "
                 "keys (e.g. 'seed: 0' and 'env:' with 'id: Pendulum-v1' under it)")
    for section, key in (("env", "id"), ("runtime", "backend")):
        value = (data or {}).get(section)
        if isinstance(value, dict) and value.get(key) is not None:
            found.setdefault(f"{section}.{key}", str(value[key]))
    base = (data or {}).get("base")
    if not isinstance(base, str):
        break
    path = path.parent / base
print(found.get("env.id", ""), found.get("runtime.backend", ""), sep="\n")
PY
}

# yaml_python: a Python that imports PyYAML (the venv's, else $PYTHON or python3); fails if there is none.
yaml_python() {
  local py
  for py in "$VENV/bin/python" "${PYTHON:-python3}"; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done
  return 1
}

main() {
  local args=()
  for a in "$@"; do
    if [[ "$a" == "--debug" ]]; then
      export CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 MBPO_DEBUG=1
    fi
    args+=("$a")
  done
  local extras
  extras="$(extras_for "$@")" || exit 2  # a --config that is not a config: nothing installed
  ensure_venv "$extras"
  exec "$VENV/bin/python" -m mbpo "${args[@]}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
