#!/usr/bin/env bash
# Remakes the two locks from pyproject.toml in throwaway venvs:
#   requirements.lock       the runtime (what `make run`, the Dockerfile and production install)
#   requirements-test.lock  `-r requirements.lock` plus the test and interop extras (`make test` installs it)
# Pins already in the locks are kept where the new requirements allow (they are passed as constraints).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
freeze() { "$1/bin/pip" freeze --exclude-editable | grep -v '^environment-studio' | sort; }
constraints=()
[ -f requirements-test.lock ] && grep -v '^-r\|^#' requirements-test.lock > "$work/constraints.txt" && constraints=(-c "$work/constraints.txt")
[ -f requirements.lock ] && grep -v '^#' requirements.lock >> "$work/constraints.txt" && constraints=(-c "$work/constraints.txt")

"$PYTHON" -m venv "$work/runtime"
"$work/runtime/bin/pip" install --quiet "${constraints[@]}" .
"$PYTHON" -m venv "$work/full"
"$work/full/bin/pip" install --quiet "${constraints[@]}" ".[test,interop]"

{ echo "# Runtime: what the studio itself runs on (web, worker, episode host, sandboxes). Made by scripts/lock.sh."
  freeze "$work/runtime"; } > requirements.lock
{ echo "# Tests and interop extras on top of the runtime lock (pytest, the real ecosystem clients the tests drive,"
  echo "# torch/trl/datasets for the export checks, ruff). Made by scripts/lock.sh; \`make test\` installs it."
  echo "-r requirements.lock"
  comm -13 <(freeze "$work/runtime") <(freeze "$work/full"); } > requirements-test.lock
du -sh "$work/runtime" | sed 's/^/runtime venv: /'
