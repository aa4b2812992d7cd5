#!/usr/bin/env bash
# The local GPU profile end to end, measured: `pd-serve local up --gpu`, the gateway in front with
# the config scripts/run-local.sh writes, a routing check (short prompt -> colocated, long -> PD)
# with decode's KV evidence for the long one, `pd-serve doctor`, TTFT/ITL of PD vs colocated.
#
#   scripts/gpu-profile-run.sh OUT_DIR        # PYTHON=python3 by default; stops all it started
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: $0 OUT_DIR}"); mkdir -p "$out"
py=${PYTHON:-python3}
state=${PD_GPU_STATE:-/tmp/pd-gpu}; mkdir -p "$state"
port=${PD_GATEWAY_PORT:-8080}
gw_pid=""
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$out/summary.txt"; }
finish() {
  [ -n "$gw_pid" ] && kill -TERM "$gw_pid" 2>/dev/null
  logs=$(ls -d /tmp/ray/session_latest/logs 2>/dev/null)
  [ -n "$logs" ] && tar -czf "$out/logs.tgz" -C "$logs" --exclude='*.err.gz' . "$state/serve/driver.log" \
    "$state/serve/serve-config.yaml" "$state/gateway.yaml" 2>/dev/null
  "$py" -m serve_app.cli local down --state-dir "$state/serve"
  stamp "down"
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/summary.txt" 2>&1
stamp "local up --gpu"
"$py" -m serve_app.cli local up --gpu --state-dir "$state/serve" --timeout 540 2>&1 | tee -a "$out/summary.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { tail -80 "$state/serve/driver.log"; exit 1; }
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$out/summary.txt" 2>&1

"$py" scripts/local_gateway_config.py --serve-state "$state/serve/state.json" --port "$port" \
  --out "$state/gateway.yaml"
gw=("$py" -m gateway)
"${gw[@]}" tenants create --config "$state/gateway.yaml" local --name "GPU run" --if-missing >/dev/null
key=$("${gw[@]}" keys create --config "$state/gateway.yaml" --tenant local --name gpu \
  --print-secret-only)
"${gw[@]}" run --config "$state/gateway.yaml" >"$state/gateway.log" 2>&1 &
gw_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.3; done
stamp "gateway ready"

"$py" - "$port" "$key" "$state/serve/state.json" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import json, sys, urllib.request
from pathlib import Path
from serve_app.doctor import replica_logs, unique_prompt, wait_for_kv_evidence
port, key, state = sys.argv[1], sys.argv[2], json.loads(Path(sys.argv[3]).read_text())
logs = Path(state["session_dir"]) / "logs"
for name, prompt in (("short", "hello there"), ("long", unique_prompt(" ".join(["prefill builds the cache"] * 60)))):
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json", "authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        pool, answer = r.headers["x-gateway-pool"], json.loads(r.read())
    line = f"gateway model tiny, {name} prompt ({answer['usage']['prompt_tokens']} tokens): x-gateway-pool={pool}"
    if pool == "pd":
        ev = wait_for_kv_evidence(replica_logs(logs, "pd", "Decode"), answer["id"], 30)
        line += f"; decode pulled KV of {ev.num_external_tokens} tokens, transfer finished: {ev.finished_recving}"
        line += "".join(f"\n  decode log: {l[:240]}" for l in ev.lines)
    print(line)
PY
stamp "routing checked"
"$py" -m serve_app.cli doctor --state-dir "$state/serve" 2>&1 | tee -a "$out/summary.txt"
stamp "doctor done"
"$py" loadtests/ttft_itl.py --base-url "http://127.0.0.1:$port/v1" --api-key "$key" \
  --model tiny-pd --model tiny-colocated --prompt-tokens 64 --prompt-tokens 1536 \
  --concurrency 1 --concurrency 8 --requests 24 --max-tokens 128 --json "$out/ttft_itl.json" \
  2>&1 | tee "$out/ttft_itl.txt"
stamp "measured"
