#!/usr/bin/env bash
# Staged smoke checks, then the whole pytest suite (installs .venv on first use).
#   ./run_async_test.sh            stages, then pytest
#   ./run_async_test.sh --smoke    stages only
#   ./run_async_test.sh ARGS...    stages, then pytest ARGS... (e.g. -k envs -x)
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

"$VENV/bin/python" -m mbpo.smoke
[[ $smoke_only == 1 ]] && exit 0
exec "$VENV/bin/python" -m pytest "${pytest_args[@]}"
