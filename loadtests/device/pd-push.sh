#!/usr/bin/env bash
# Issue 40 on the lent H200, one call after the kit's parts are in /tmp/kit (as pd-gpu.sh): PD
# with the KV pushed (examples/serving/local-gpu-llama-8b-push.yaml), three 2,048-token prompts
# one at a time, `pd-serve doctor --strict`, every KV transfer line and the engines' errors to $OUT.
#
#   bash loadtests/device/pd-push.sh [CONFIG]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
cfg=${1:-examples/serving/local-gpu-llama-8b-push.yaml}
state=/tmp/pd-push
out=${OUT:-/tmp/pd-push-out}
mkdir -p "$state" "$out"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0))s] $*"; }
pd_serve() { python3 -c 'import sys; from serve_app.cli import main; sys.exit(main())' "$@"; }

cat /tmp/kit/kit.tar.* | tar -x -C /tmp || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  /tmp/kit/*.whl || exit 1
plugins=/tmp/site/pd_serve_plugins-0.1.0.dist-info
mkdir -p "$plugins"
printf 'Metadata-Version: 2.1\nName: pd-serve-plugins\nVersion: 0.1.0\n' >"$plugins/METADATA"
python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))
group = p["project"]["entry-points"]["vllm.general_plugins"]
print("[vllm.general_plugins]"); [print(f"{k} = {v}") for k, v in group.items()]' \
  >"$plugins/entry_points.txt" || exit 1
say "installed"
pd_serve check-config "$cfg"
pd_serve local up --config "$cfg" --state-dir "$state" --timeout 470 2>&1 | tail -25
logs=$(python3 -c 'import json; print(json.load(open("/tmp/pd-push/state.json"))["session_dir"])')/logs
url=$(python3 -c 'import json; print(json.load(open("/tmp/pd-push/state.json"))["base_urls"]["pd"])')
say "up: $url"
for i in 1 2 3; do
  python3 - "$url" <<'PY'
import json, random, sys, time, urllib.request
url = sys.argv[1]
model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
prompt = [random.randrange(10, 2000) for _ in range(2048)]
body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0}
req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                             {"content-type": "application/json"})
t = time.perf_counter()
r = json.load(urllib.request.urlopen(req, timeout=120))
print("2048-token prompt:", round((time.perf_counter() - t) * 1e3, 1), "ms", r.get("usage"))
PY
done
sleep 3
pd_serve doctor --state-dir "$state" --strict; echo "doctor rc=$?"
grep -h "pd-serve kv_transfer" "$logs"/worker-*.out | tee "$out/kv_transfer_lines.txt"
grep -hiE "error|traceback|NixlPush|Backend .* was instantiated|UCX.*(WARN|ERROR)" \
  "$logs"/worker-*.out "$logs"/worker-*.err 2>/dev/null | grep -v DEBUG | tail -60 >"$out/engine_errors.txt"
tail -30 "$out/engine_errors.txt"
tar -czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
pd_serve local down --state-dir "$state"
say "done"
