#!/usr/bin/env bash
# The PD vs colocated sweep through the gateway, against a stack `scripts/gpu-profile-run.sh up`
# left running (the llama-3-8b shape on one H200: examples/serving/README.md has its results).
#
#   loadtests/device/pd-sweep.sh OUT_DIR DEADLINE_FILE
#
# Runs its items in order of value and skips one that would not end before the epoch second in
# DEADLINE_FILE (read before each item, so a later command can move it; skipped items are listed
# in OUT_DIR/skipped.txt). Each item is one pd-loadtest report in OUT_DIR/NAME, with the KV
# transfers decode logged meanwhile in OUT_DIR/NAME/kv_transfers.json. OUT_DIR/done at the end.
#   c128  prompts of 128 tokens, concurrency 1, 8, 32: PD and colocated, each through the gateway
#         and direct to its Ray ingress (the gateway's own added latency, same run)
#   c2k, c8k  prompts of 2048 and 8000 tokens (max_model_len 8192), concurrency 1, 8, 32, PD and
#         colocated
#   r2k   open loop (Poisson), 2048-token prompts, 1 to 16 requests/s, PD and colocated: past
#         both knees (PD's is the KV transfer's, about 1.4 requests/s over UCX on TCP loopback)
#   mix   open loop, half 64-token and half 2048-token prompts, 2, 4 and 8 requests/s: the model
#         routed by the gateway (64 tokens to colocated, 2048 to PD) against each pool alone
#   mixslo  the same, with the latency-predicted model beside them (issue 38; needs
#         PD_GATEWAY_EDIT=loadtests/device/latency_overlay.py, else its model does not exist)
# PD_SWEEP_ITEMS="r2k ...": only the items named (default: all, in the order above).
# Every item: 64 output tokens (ignore_eos), 2 warm-up requests per target, 6 s of sending per
# step, SLO TTFT <= 1000 ms and TPOT <= 50 ms for goodput. PD_GPU_DRY_RUN=1: arguments checked only.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: $0 OUT_DIR DEADLINE_FILE}"); deadline_file=${2:?}
mkdir -p "$out"
echo $$ >"$out/sweep.pid"
py=${PYTHON:-python3}
state=${PD_GPU_STATE:-/tmp/pd-gpu}
gw="http://127.0.0.1:${PD_GATEWAY_PORT:-8080}/v1"
field() { "$py" -c 'import json, sys; d = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d = d[k]
print(d)' "$state/serve/state.json" "$@"; }
model=$(field model); tokenizer=$(field tokenizer_file); logs="$(field session_dir)/logs"
pd_direct="$(field base_urls pd)/v1"; co_direct="$(field base_urls colocated)/v1"
key="key_env=PD_LOADTEST_KEY"
pd="name=pd,url=$gw,model=$model-pd,$key"
co="name=colocated,url=$gw,model=$model-colocated,$key"
routed="name=routed,url=$gw,model=$model,$key"
common=(--tokenizer "$tokenizer" --output-tokens 64 --ignore-eos --warmup 2 --duration 6
  --slo-ttft-ms 1000 --slo-tpot-ms 50 --timeout 180)

item() {  # NAME SECONDS_ESTIMATE [pd-loadtest args]
  local name=$1 estimate=$2; shift 2
  if [ -n "${PD_SWEEP_ITEMS:-}" ] && [[ " $PD_SWEEP_ITEMS " != *" $name "* ]]; then
    return
  fi
  if [ "$(($(date +%s) + estimate))" -gt "$(cat "$deadline_file")" ]; then
    echo "$name: skipped (about ${estimate}s, past the deadline)" | tee -a "$out/skipped.txt"
    return
  fi
  if [ -n "${PD_GPU_DRY_RUN:-}" ]; then  # the arguments only (scripts/argcheck.py)
    scripts/gpu-profile-run.sh measure "$out" "$name" "${common[@]}" "$@"
    return
  fi
  "$py" loadtests/device/kv_transfers.py mark "$logs" "$out/.mark"
  scripts/gpu-profile-run.sh measure "$out" "$name" "${common[@]}" "$@"
  "$py" loadtests/device/kv_transfers.py since "$logs" "$out/.mark" "$out/$name/kv_transfers.json"
}

item c128 110 --input-tokens 128 --concurrency 1,8,32 --target "$pd" \
  --target "name=pd-direct,url=$pd_direct,model=$model" --target "$co" \
  --target "name=colocated-direct,url=$co_direct,model=$model"
item c2k 60 --input-tokens 2048 --concurrency 1,8,32 --target "$pd" --target "$co"
item c8k 75 --input-tokens 8000 --concurrency 1,8,32 --target "$pd" --target "$co"
item r2k 240 --input-tokens 2048 --rate 1,2,4,8,16 --target "$pd" --target "$co"
item mix 120 --workload mix --short-tokens 64 --long-tokens 2048 --long-fraction 0.5 \
  --rate 2,4,8 --target "$routed" --target "$pd" --target "$co"
# Issue 38 (PD_GATEWAY_EDIT=loadtests/device/latency_overlay.py): the same mix, each pool alone
# first (their models learn), then routed by the threshold, then by prediction; the gateway's
# prediction-error metrics after it.
predicted="name=predicted,url=$gw,model=$model-predicted,$key"
item mixslo 170 --workload mix --short-tokens 64 --long-tokens 2048 --long-fraction 0.5 \
  --rate 2,4,8 --target "$pd" --target "$co" --target "$routed" --target "$predicted"
[ -z "${PD_GPU_DRY_RUN:-}" ] && [ -d "$out/mixslo" ] &&
  curl -s "${gw%/v1}/metrics" | grep -E '^gateway_(latency_prediction|routing_decisions)' \
    >"$out/mixslo/prediction_metrics.txt"
touch "$out/done"
