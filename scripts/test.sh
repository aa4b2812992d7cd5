#!/usr/bin/env bash
# Install everything the tests need from nothing, then run them all: lint, types, unit,
# integration (real gateway, simulator, Redis, PostgreSQL, OTLP receiver processes) and
# end to end (the real Ray Serve LLM stack on CPU with vLLM and NIXL).
#
#   scripts/test.sh                 # everything
#   scripts/test.sh tests/unit      # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"

# Debian packages for the servers the tests start themselves (none is left running).
need=()
command -v redis-server >/dev/null || need+=(redis-server)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql)
command -v taskset >/dev/null || need+=(util-linux)
# The web console's browser tests drive Debian's Chromium through Playwright (tests/browser).
[ -x /usr/bin/chromium ] || need+=(chromium)
# The Open Responses compliance suite's runner (bun) comes from the npm registry.
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e '.[dev]'
VENV="$VENV" bash scripts/install-serve-cpu.sh >/dev/null
# bun and zod for the Open Responses suite, pinned by its package-lock.json (tests/conformance).
bash tests/conformance/install-openresponses.sh

"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy"
"$VENV/bin/lint-imports"
exec "$VENV/bin/pytest" "$@"
