#!/usr/bin/env bash
# Install the Open Responses suite's runner (bun) and dependency (zod), pinned by package-lock.json,
# from the npm registry into tests/conformance/openresponses/node_modules (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/openresponses"
command -v npm >/dev/null || { echo "npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error
node_modules/.bin/bun --version >/dev/null
