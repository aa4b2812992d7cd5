#!/usr/bin/env bash
# Install the project and run the local stack with the gateway in front, on embedded defaults.
#
#   scripts/run-local.sh          # Ray Serve LLM on CPU: PD app (prefill + decode, NIXL) and colocated app
#   scripts/run-local.sh --sim    # the gateway in front of the simulator instead (no Ray, seconds)
#
# One short line per phase with the seconds since start; pip stays quiet unless it fails (then the
# end of its log is shown; the whole log is in $STATE/install.log). Prints the gateway's base URL
# and an API key; Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
STATE="${PD_LOCAL_STATE:-.local}"
PORT="${PD_GATEWAY_PORT:-8080}"
mode="${1:-serve}"
mkdir -p "$STATE"
SECONDS=0

phase() { printf '[%6ss] %s\n' "$SECONDS" "$*"; }

# Runs a command with its output in $STATE/install.log; on failure shows the log's end and exits.
quietly() {
  if ! "$@" >>"$STATE/install.log" 2>&1; then
    echo "failed: $*" >&2
    tail -n 40 "$STATE/install.log" >&2
    echo "(the whole log: $STATE/install.log)" >&2
    exit 1
  fi
}

: >"$STATE/install.log"
phase "installing the project into $VENV (pip, quiet; log $STATE/install.log)"
[ -x "$VENV/bin/python" ] || quietly python3 -m venv "$VENV"
quietly "$VENV/bin/pip" install -q --upgrade pip
quietly "$VENV/bin/pip" install -q -e .
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
  phase "starting the simulator"
  # The real local stack's model names (scripts/local_gateway_config.py SIM_MODELS).
  "$py" -m serve_app.sim --host 127.0.0.1 --port 0 --model tiny --model tiny-pd --model tiny-colocated \
    >"$STATE/sim.out" 2>"$STATE/sim.log" &
  sim_pid=$!
  for _ in $(seq 100); do grep -q SIM_LISTENING "$STATE/sim.out" && break; sleep 0.1; done
  sim_url=$(awk '/SIM_LISTENING/ {print $2}' "$STATE/sim.out")
  gateway_yaml="$STATE/gateway.yaml"
  "$py" scripts/local_gateway_config.py --sim "$sim_url" --port "$PORT" --out "$gateway_yaml" >/dev/null
else
  if ! "$py" -c 'import vllm, ray.serve.llm' 2>/dev/null; then
    phase "installing the serving stack: vLLM (CPU), Ray Serve LLM, NIXL (about 1.5 min, 4.5 GB)"
    VENV="$VENV" quietly bash scripts/install-serve-cpu.sh
  fi
  # local up prints its own phases (the model, Ray, each deployment ready) and writes the
  # gateway config for this stack: the one file the gateway below runs with.
  phase "starting the local stack (pd-serve local up; about 2 min on 2 cores)"
  "$VENV/bin/pd-serve" local up --state-dir "$STATE/serve" --gateway-port "$PORT"
  gateway_yaml="$STATE/serve/gateway.yaml"
fi

# A tenant and a key for this machine (the key's secret is shown once, here).
phase "creating an API key"
gw="$VENV/bin/pd-gateway"
"$gw" tenants create --config "$gateway_yaml" local --name "This machine" --if-missing >/dev/null
key=$("$gw" keys create --config "$gateway_yaml" --tenant local --name "run-$(date +%s)" \
  --print-secret-only)

phase "starting the gateway"
cat <<MSG

  base URL:  http://127.0.0.1:$PORT/v1
  API key:   $key
  config:    $gateway_yaml

  python -c 'from openai import OpenAI; c = OpenAI(base_url="http://127.0.0.1:$PORT/v1", api_key="$key"); print(c.models.list())'
MSG
"$VENV/bin/pd-gateway" run --config "$gateway_yaml" &
gateway_pid=$!
trap 'kill -TERM "$gateway_pid" 2>/dev/null || true' INT TERM
wait "$gateway_pid" || true
wait "$gateway_pid" 2>/dev/null || true  # a trapped signal interrupts the first wait
