#!/usr/bin/env bash
# Lint, types and staged smoke checks, then the whole pytest suite (installs .venv on first use).
#   ./run_async_test.sh            stages, then pytest
#   ./run_async_test.sh --smoke    stages only (lint, types, smoke)
#   ./run_async_test.sh ARGS...    stages, then pytest ARGS... in one process (e.g. -k envs -x)
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
# shellcheck source=run_async.sh
source "$ROOT/run_async.sh"
ensure_venv test,mjlab
cd "$ROOT"

smoke_only=0
pytest_args=()
for a in "$@"; do
  if [[ "$a" == "--smoke" ]]; then smoke_only=1; else pytest_args+=("$a"); fi
done

# stage NAME WHAT COMMAND...: print what runs, run it, stop here if it finds anything.
stage() {
  local name="$1" what="$2"
  shift 2
  echo "[$name] $what..."
  if ! "$@"; then
    echo "[$name] Error: $what found the problems above; fix them and run again" >&2
    exit 1
  fi
}
stage Lint "ruff check mbpo envs tests benchmarks examples" "$VENV/bin/ruff" check mbpo envs tests benchmarks examples
stage Types "mypy (files and settings in pyproject.toml)" "$VENV/bin/mypy"
stage Imports "lint-imports (the architecture's import rules, [tool.importlinter] in pyproject.toml)" \
  "$VENV/bin/lint-imports" --no-cache
"$VENV/bin/python" -m mbpo.smoke
[[ $smoke_only == 1 ]] && exit 0
if (( ${#pytest_args[@]} )); then
  exec "$VENV/bin/python" -m pytest "${pytest_args[@]}"
fi
# The whole suite in MBPO_TEST_WORKERS (2) pytest-xdist workers. The runtime tests check that their own runs left
# nothing behind (their processes, /dev/shm files named after their trainer, their sockets), never the whole
# machine, so they run beside the other tests and beside a training.
exec "$VENV/bin/python" -m pytest -n "${MBPO_TEST_WORKERS:-2}"
