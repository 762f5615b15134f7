#!/usr/bin/env bash
# Lint, types and staged smoke checks, then the whole pytest suite (installs .venv on first use).
#   ./run_async_test.sh            stages, then pytest
#   ./run_async_test.sh --smoke    stages only (lint, types, smoke)
#   ./run_async_test.sh ARGS...    stages, then pytest ARGS... in one process (e.g. -k envs -x)
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
# shellcheck source=run_async.sh
source "$ROOT/run_async.sh"

# pytest_args ARGS: ARGS without --smoke, one per line, each path the caller named from their own directory
# (cd tests; ../run_async_test.sh test_x.py::test_a) made absolute, as pytest runs from the checkout.
pytest_args() {
  local a path prev="" not_a_path='^(-[kmnpoWr]|--(deselect|durations|timeout|maxfail|tb|dist|log-level))$'
  for a in "$@"; do
    path="${a%%::*}"
    if [[ "$a" == --smoke ]]; then continue
    elif [[ "$a" != -* && -e "$path" && ! "$prev" =~ $not_a_path ]]  # -k envs: an expression, not the folder
    then echo "$(cd "$(dirname "$path")" && pwd)/$(basename "$path")${a:${#path}}"
    else echo "$a"; fi
    prev="$a"
  done
}

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

# finished PID LOG: wait for the background command PID, print what it wrote to LOG; its status is the command's.
finished() {
  local status=0
  wait "$1" || status=$?
  trap - EXIT  # it has ended (and its pid may be another process's by now)
  cat "$2"
  rm -f "$2"
  return "$status"
}

main() {
  local smoke_only=0 a args=() types_log types_pid
  for a in "$@"; do [[ "$a" == --smoke ]] && smoke_only=1; done
  [[ $# -gt 0 ]] && mapfile -t args < <(pytest_args "$@")
  if (( smoke_only && ${#args[@]} )); then
    echo "error: --smoke runs the stages only, so pytest's arguments (${args[*]}) would be ignored; drop --smoke" \
         "to run them after the stages, or drop them" >&2
    exit 2
  fi
  ensure_venv test,mjlab
  cd "$ROOT"
  stage Lint "ruff check mbpo envs tests benchmarks examples" "$VENV/bin/ruff" check mbpo envs tests benchmarks examples
  # mypy takes about 40 s of one core, the smoke stages about 20 s of one: side by side on two
  echo "[Types] mypy (files and settings in pyproject.toml), beside the next stages..."
  types_log="$(mktemp)"
  "$VENV/bin/mypy" >"$types_log" 2>&1 &
  types_pid=$!
  # a stage below failed (exit, or set -e, which unwinds main's locals first): mypy goes too
  trap "kill $types_pid 2>/dev/null || true; rm -f '$types_log'" EXIT
  stage Imports "lint-imports (the architecture's import rules, [tool.importlinter] in pyproject.toml)" \
    "$VENV/bin/lint-imports" --no-cache
  "$VENV/bin/python" -m mbpo.smoke
  stage Types "mypy's result" finished "$types_pid" "$types_log"
  (( smoke_only )) && exit 0
  if (( ${#args[@]} )); then
    exec "$VENV/bin/python" -m pytest "${args[@]}"
  fi
  # The whole suite in MBPO_TEST_WORKERS (2) pytest-xdist workers. The runtime tests check that their own runs
  # left nothing behind (their processes, /dev/shm files named after their trainer, their sockets), never the whole
  # machine, so they run beside the other tests and beside a training.
  exec "$VENV/bin/python" -m pytest -n "${MBPO_TEST_WORKERS:-2}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
