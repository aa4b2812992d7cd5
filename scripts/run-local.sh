#!/usr/bin/env bash
# Install the project and run the local stack with the gateway in front, on embedded defaults.
#
#   scripts/run-local.sh          # Ray Serve LLM on CPU: PD app (prefill + decode, NIXL) and colocated app
#   scripts/run-local.sh --sim    # the gateway in front of the simulator instead (no Ray, seconds)
#
# Prints the gateway's base URL and an API key; Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
STATE="${PD_LOCAL_STATE:-.local}"
PORT="${PD_GATEWAY_PORT:-8080}"
mode="${1:-serve}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e .
mkdir -p "$STATE"
py="$VENV/bin/python"

sim_pid=""
gateway_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill -TERM "$gateway_pid" 2>/dev/null || true; fi
  if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; fi
  if [ "$mode" != "--sim" ]; then "$VENV/bin/pd-serve" local down --state-dir "$STATE/serve" || true; fi
}
trap cleanup EXIT

if [ "$mode" = "--sim" ]; then
  "$py" -m serve_app.sim --host 127.0.0.1 --port 0 --model sim-model >"$STATE/sim.out" 2>"$STATE/sim.log" &
  sim_pid=$!
  for _ in $(seq 100); do grep -q SIM_LISTENING "$STATE/sim.out" && break; sleep 0.1; done
  sim_url=$(awk '/SIM_LISTENING/ {print $2}' "$STATE/sim.out")
  "$py" scripts/local_gateway_config.py --sim "$sim_url" --port "$PORT" --out "$STATE/gateway.yaml"
else
  "$py" -c 'import vllm, ray.serve.llm' 2>/dev/null || VENV="$VENV" bash scripts/install-serve-cpu.sh
  "$VENV/bin/pd-serve" local up --state-dir "$STATE/serve"
  "$py" scripts/local_gateway_config.py --serve-state "$STATE/serve/state.json" --port "$PORT" \
    --out "$STATE/gateway.yaml"
fi

# A tenant and a key for this machine (the key's secret is shown once, here).
gw="$VENV/bin/pd-gateway"
"$gw" tenants create --config "$STATE/gateway.yaml" local --name "This machine" --if-missing >/dev/null
key=$("$gw" keys create --config "$STATE/gateway.yaml" --tenant local --name "run-$(date +%s)" \
  --print-secret-only)

cat <<MSG

  base URL:  http://127.0.0.1:$PORT/v1
  API key:   $key
  config:    $STATE/gateway.yaml

  python -c 'from openai import OpenAI; c = OpenAI(base_url="http://127.0.0.1:$PORT/v1", api_key="$key"); print(c.models.list())'
MSG
"$VENV/bin/pd-gateway" run --config "$STATE/gateway.yaml" &
gateway_pid=$!
trap 'kill -TERM "$gateway_pid" 2>/dev/null || true' INT TERM
wait "$gateway_pid" || true
wait "$gateway_pid" 2>/dev/null || true  # a trapped signal interrupts the first wait
