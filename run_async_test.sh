#!/usr/bin/env bash
# Lint, types and staged smoke checks, then the whole pytest suite (installs .venv on first use).
#   ./run_async_test.sh            stages, then pytest
#   ./run_async_test.sh --smoke    stages only (lint, types, smoke)
#   ./run_async_test.sh ARGS...    stages, then pytest ARGS... in one process (e.g. -k envs -x)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
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
"$VENV/bin/python" -m mbpo.smoke
[[ $smoke_only == 1 ]] && exit 0
if (( ${#pytest_args[@]} )); then
  exec "$VENV/bin/python" -m pytest "${pytest_args[@]}"
fi
# The whole suite: all but tests/runtime in MBPO_TEST_WORKERS (2) pytest-xdist workers, then tests/runtime alone,
# one test at a time: its tests check that /dev/shm, the sockets and the process table are clean afterwards,
# which another test's live processes would break.
rc=0
"$VENV/bin/python" -m pytest -n "${MBPO_TEST_WORKERS:-2}" --ignore=tests/runtime || rc=$?
"$VENV/bin/python" -m pytest tests/runtime || rc=$?
exit "$rc"
