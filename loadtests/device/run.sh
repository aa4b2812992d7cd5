#!/usr/bin/env bash
# Runs loadtests/bench_overhead.py on the lent accelerator machine (device `run`, kind nvidia-h200),
# whose image has Python 3.12 + torch + aiohttp/uvloop/prometheus-client/tokenizers but not the
# gateway's other runtime dependencies, no wrk, and no network.
#
#   loadtests/device/build-kit.sh   # once, here: the wheels, wrk and this script into .device-kit/
#   run(command="bash .device-kit/run.sh --seconds 4 --concurrency 1,64 --rounds 3", carry=[".device-kit"])
#
# What it does, from the carried .device-kit folder:
#   - pip-installs wheels/*.whl (py3.12 manylinux, --no-deps, exact versions from pyproject.toml
#     and the transitive deps the image lacks) into $KIT_SITE (default /tmp/kit), once per machine;
#   - puts wrk (Debian bookworm's 4.1.0, with its libluajit-5.1.so.2) on PATH through a wrapper
#     that sets LD_LIBRARY_PATH for wrk alone;
#   - PYTHONPATH = repo root (gateway, configkit, serve_app, loadtests: the repo is not
#     pip-installed there) + $KIT_SITE, ahead of the image's site-packages so the kit's pinned
#     versions (aiohttp 3.14.5, PyYAML 6.0.4, tokenizers 0.23.3) win over the image's;
#   - checks that the gateway CLI, fast_sim and floor_proxy import, prints the machine, then runs
#     the benchmark with "$@".
# bench_overhead.py takes its Python from sys.executable, so no .venv is needed (--profile would
# need py-spy beside that Python: not carried).
# KIT_ONLY_SETUP=1: set up and check, do not run the benchmark.
set -euo pipefail

KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KIT/.." && pwd)"
SITE="${KIT_SITE:-/tmp/kit}"
PY="${KIT_PYTHON:-python3}"

if [ ! -f "$SITE/.kit-installed" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --disable-pip-version-check \
        --upgrade --target "$SITE" "$KIT"/wheels/*.whl
    mkdir -p "$SITE/kitbin"
    cp "$KIT/bin/wrk" "$SITE/kitbin/wrk.real"
    chmod +x "$SITE/kitbin/wrk.real"
    cat >"$SITE/kitbin/wrk" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$KIT/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$SITE/kitbin/wrk.real" "\$@"
EOF
    chmod +x "$SITE/kitbin/wrk"
    touch "$SITE/.kit-installed"
fi

export PATH="$SITE/kitbin:$PATH"
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"

{
    echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), nproc $(nproc), $("$PY" -V)"
    "$PY" - <<'EOF'
import importlib.metadata as md
names = ["starlette", "uvicorn", "uvloop", "httptools", "aiohttp", "pydantic", "PyYAML", "orjson",
         "tiktoken", "tokenizers", "SQLAlchemy", "aiosqlite", "granian", "httpx", "prometheus_client"]
print("== versions: " + ", ".join(f"{n} {md.version(n)}" for n in names))
import gateway.cli, serve_app.sim.wire, uvicorn, granian, aiohttp, httpx, yaml  # noqa: E401,F401
import sqlalchemy.ext.asyncio, aiosqlite, opentelemetry.sdk.trace, redis.asyncio  # noqa: E401,F401
EOF
    "$PY" -m gateway --help >/dev/null
    "$PY" loadtests/fast_sim.py --help >/dev/null
    "$PY" loadtests/floor_proxy.py --help >/dev/null
    wrk -v 2>&1 | head -1 || true
    echo "== imports ok"
} >&2

if [ -n "${KIT_ONLY_SETUP:-}" ]; then
    exit 0
fi
exec "$PY" loadtests/bench_overhead.py "$@"
