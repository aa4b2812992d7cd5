#!/usr/bin/env bash
# The local GPU profile end to end, measured: `pd-serve local up --config FILE`, the gateway in
# front with the config `local up` writes itself (<state>/serve/gateway.yaml), a routing check
# (short prompt -> colocated, long -> PD) with decode's KV evidence for the long one,
# `pd-serve doctor`, then pd-loadtest through the gateway.
#
#   scripts/gpu-profile-run.sh all OUT_DIR           # up, a short pd-loadtest, down
#   scripts/gpu-profile-run.sh up OUT_DIR            # leaves the stack and the gateway running
#   scripts/gpu-profile-run.sh measure OUT_DIR NAME [pd-loadtest args]   # report in OUT_DIR/NAME
#   scripts/gpu-profile-run.sh down OUT_DIR          # logs into OUT_DIR/logs.tgz, stops all
#
# `up` starts the stack and the gateway in sessions of their own, so they outlive the command
# (one device call starts them, the next measures). Environment: PYTHON (python3),
# PD_GPU_CONFIG (examples/serving/local-gpu.yaml), PD_GPU_STATE (/tmp/pd-gpu), PD_GATEWAY_PORT
# (8080), PD_GPU_UP_TIMEOUT (540 s), PD_GATEWAY_EDIT (a script run on the gateway config first). PD_GPU_DRY_RUN=1 runs no step: each command goes through
# scripts/argcheck.py (its own parser, its real arguments), so a renamed flag fails a unit test.
# Any step that fails stops the script with a non-zero status and the end of the log at fault.
set -uo pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: $0 all|up|measure|down OUT_DIR ...}
out=$(realpath -m "${2:?usage: $0 $action OUT_DIR}"); shift 2
mkdir -p "$out"
py=${PYTHON:-python3}
config=${PD_GPU_CONFIG:-examples/serving/local-gpu.yaml}
state=${PD_GPU_STATE:-/tmp/pd-gpu}
port=${PD_GATEWAY_PORT:-8080}
dry=${PD_GPU_DRY_RUN:-}
gw_yaml="$state/serve/gateway.yaml"
gw_url="http://127.0.0.1:$port"
mkdir -p "$state"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$out/summary.txt"; }
fail() { stamp "FAILED: $*"; exit 1; }

# A project command: run it, or in a dry run only parse its arguments.
run_py() {
  if [ -n "$dry" ]; then "$py" scripts/argcheck.py "$@"; else "$py" "$@"; fi
}

state_field() {  # a field of local up's state.json
  [ -n "$dry" ] && { echo "dry-run-$1"; return; }
  "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$state/serve/state.json" "$1"
}

start_gateway() {
  # PD_GATEWAY_EDIT: a script that edits the gateway config first (loadtests/device/latency_overlay.py).
  if [ -n "${PD_GATEWAY_EDIT:-}" ] && [ -z "$dry" ]; then
    "$py" "$PD_GATEWAY_EDIT" "$gw_yaml" | tee -a "$out/summary.txt" || fail "gateway config edit"
  fi
  run_py -m gateway tenants create --config "$gw_yaml" local --name "GPU run" --if-missing \
    >/dev/null || fail "gateway tenants create"
  key=$(run_py -m gateway keys create --config "$gw_yaml" --tenant local --name gpu \
    --print-secret-only) || fail "gateway keys create"
  if [ -n "$dry" ]; then
    run_py -m gateway run --config "$gw_yaml" || fail "gateway run"
    echo "dry-run-key" >"$state/key"
    return
  fi
  echo "$key" >"$state/key"
  # A session of its own, so it outlives this command; its pid goes to a file for `down`.
  "$py" - "$state" "$gw_yaml" <<'PY' || fail "gateway start"
import subprocess, sys
state, config = sys.argv[1], sys.argv[2]
with open(f"{state}/gateway.log", "ab") as log:
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "run", "--config", config],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
open(f"{state}/gateway.pid", "w").write(str(proc.pid))
PY
  for _ in $(seq 240); do
    curl -sf "$gw_url/readyz" >/dev/null && { stamp "gateway ready on $gw_url"; return; }
    kill -0 "$(cat "$state/gateway.pid")" 2>/dev/null || break
    sleep 0.5
  done
  tail -40 "$state/gateway.log"
  fail "the gateway did not answer $gw_url/readyz (log above: $state/gateway.log)"
}

routing_check() {
  local model; model=$(state_field model)
  if [ -n "$dry" ]; then "$py" -m py_compile scripts/gpu_routing_check.py; return; fi
  "$py" scripts/gpu_routing_check.py "$gw_url" "$(cat "$state/key")" "$model" \
    "$state/serve/state.json" 2>&1 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || fail "routing check"
}

up() {
  [ -z "$dry" ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
    >>"$out/summary.txt" 2>&1
  stamp "local up --config $config"
  run_py -m serve_app.cli local up --config "$config" --state-dir "$state/serve" \
    --gateway-port "$port" --timeout "${PD_GPU_UP_TIMEOUT:-540}" 2>&1 | tee -a "$out/summary.txt"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    tail -80 "$state/serve/driver.log" 2>/dev/null
    fail "local up"
  fi
  [ -z "$dry" ] && nvidia-smi --query-compute-apps=pid,used_memory --format=csv \
    >>"$out/summary.txt" 2>&1
  start_gateway
  routing_check
  stamp "routing checked"
  run_py -m serve_app.cli doctor --state-dir "$state/serve" 2>&1 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || fail "doctor"
  stamp "doctor done"
}

measure() {  # NAME [pd-loadtest args]; targets name key_env=PD_LOADTEST_KEY (the gateway's key)
  local name=${1:?measure needs a report NAME}; shift
  PD_LOADTEST_KEY=$(cat "$state/key") run_py -m loadtests.pdload --out "$out/$name" \
    --no-progress "$@" 2>&1 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || fail "pd-loadtest $name"
  stamp "measured $name"
}

down() {
  if [ -f "$state/gateway.pid" ]; then
    kill -TERM "$(cat "$state/gateway.pid")" 2>/dev/null
    rm -f "$state/gateway.pid"
  fi
  local session
  session=$([ -z "$dry" ] && state_field session_dir 2>/dev/null)
  if [ -n "$session" ] && [ -d "$session/logs" ]; then
    tar -czf "$out/logs.tgz" -C "$session/logs" --exclude='*.err.gz' . -C "$state" \
      serve/driver.log serve/serve-config.yaml serve/gateway.yaml gateway.log 2>/dev/null
  fi
  run_py -m serve_app.cli local down --state-dir "$state/serve"
  stamp "down"
}

case "$action" in
  up) up ;;
  measure) measure "$@" ;;
  down) down ;;
  all)
    trap down EXIT
    up
    model=$(state_field model)
    tokenizer=$(state_field tokenizer_file)
    case "$tokenizer" in /*) ;; *) tokenizer=cl100k_base ;; esac
    measure pd-vs-colocated --target "name=pd,url=$gw_url/v1,model=$model-pd,key_env=PD_LOADTEST_KEY" \
      --target "name=colocated,url=$gw_url/v1,model=$model-colocated,key_env=PD_LOADTEST_KEY" \
      --tokenizer "$tokenizer" \
      --input-tokens 1024 --output-tokens 128 --ignore-eos --concurrency 1,8 --requests 24
    ;;
  *) echo "unknown action $action: all, up, measure or down" >&2; exit 2 ;;
esac
