#!/usr/bin/env bash
# Compare routed-by-length (tiny) with PD-only (tiny-pd) and colocated-only (tiny-colocated) on
# the real local CPU stack, through the gateway, with pd-loadtest. Starts the stack, the gateway
# and a key of its own, and stops all of them at the end (only what it started).
#
#   flock /tmp/pd-heavy.lock loadtests/compare_local.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
OUT="${1:-docs/loadtest-local}"
STATE="$(mktemp -d /tmp/pd-loadtest-local.XXXXXX)"
gateway_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill -TERM "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  "$PY" -m serve_app.cli local down --state-dir "$STATE/serve" || true
}
trap cleanup EXIT

port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# local up writes the stack's one gateway config (the same the e2e tests and run-local.sh use).
"$PY" -m serve_app.cli local up --state-dir "$STATE/serve" --port 0 --gateway-port "$port"
cp "$STATE/serve/gateway.yaml" "$STATE/gateway.yaml"
"$PY" -m gateway tenants create --config "$STATE/gateway.yaml" loadtest --name "pd-loadtest" >/dev/null
PD_LOADTEST_KEY=$("$PY" -m gateway keys create --config "$STATE/gateway.yaml" --tenant loadtest --name loadtest --print-secret-only)
export PD_LOADTEST_KEY
"$PY" -m gateway run --config "$STATE/gateway.yaml" >"$STATE/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
tokenizer="$(dirname "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["driver_log"])' "$STATE/serve/state.json")")/tiny-model/tokenizer.json"

base="http://127.0.0.1:$port/v1"
"$PY" -m loadtests.pdload \
  --target "name=routed,url=$base,model=tiny" \
  --target "name=pd-only,url=$base,model=tiny-pd" \
  --target "name=colocated-only,url=$base,model=tiny-colocated" \
  --api-key-env PD_LOADTEST_KEY --tokenizer "$tokenizer" \
  --workload mix --short-tokens 24 --long-tokens 200 --long-fraction 0.5 --output-tokens 16 \
  --temperature 0 --ignore-eos --rate 0.5,1,2 --requests 12 --warmup 2 \
  --slo-ttft-ms 1500 --slo-tpot-ms 100 --no-progress \
  --title "Local CPU stack through the gateway: routed vs PD-only vs colocated-only" --out "$OUT"
