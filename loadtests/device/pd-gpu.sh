#!/usr/bin/env bash
# The llama-3-8b-shape run on the lent H200 machine (device `run`, kind nvidia-h200), in two
# back-to-back calls after the kit's parts have been copied to /tmp/kit there (one part a call:
# `mkdir -p /tmp/kit && cp .device-kit/<part>/* /tmp/kit/`):
#
#   bash loadtests/device/pd-gpu.sh up      # install, local up, gateway, checks, sweep started
#   bash loadtests/device/pd-gpu.sh collect SECONDS   # wait for the sweep, stop, results to $OUT
#
# `up` installs the kit (scripts/gpu-wheel-kit.sh, KIT_HOPPER_DENSE=1) into /tmp/site with an
# entry-point record of serve_app's vLLM plugins, runs `scripts/gpu-profile-run.sh up` with
# examples/serving/local-gpu-llama-8b.yaml, and starts loadtests/device/pd-sweep.sh in a session
# of its own: it runs on between the two calls. `collect` moves the sweep's deadline to SECONDS
# from now, waits for it, stops everything and packs /tmp/pd-run into $OUT/pd-run.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
# The kit, then this checkout (serve_app for the engines' plugins, Ray workers included).
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 PD_GPU_STATE=/tmp/pd-gpu
export PD_GPU_CONFIG=${PD_GPU_CONFIG:-examples/serving/local-gpu-llama-8b.yaml}
run_dir=/tmp/pd-run
mkdir -p "$run_dir"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0))s] $*"; }

case "${1:?usage: $0 up | collect SECONDS}" in
  up)
    say "kit: $(ls /tmp/kit | tr '\n' ' ')"
    cat /tmp/kit/kit.tar.* | tar -x -C /tmp || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      /tmp/kit/*.whl || exit 1
    # This checkout's vllm.general_plugins entry points (serve_app/kv_transfer_log.py), as a
    # distribution of their own: vLLM finds plugins through installed metadata only.
    plugins=/tmp/site/pd_serve_plugins-0.1.0.dist-info
    mkdir -p "$plugins"
    printf 'Metadata-Version: 2.1\nName: pd-serve-plugins\nVersion: 0.1.0\n' >"$plugins/METADATA"
    python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))
group = p["project"]["entry-points"]["vllm.general_plugins"]
print("[vllm.general_plugins]"); [print(f"{k} = {v}") for k, v in group.items()]' \
      >"$plugins/entry_points.txt" || exit 1
    say "installed; $(python3 -c 'import vllm, ray, nixl; print("vllm", vllm.__version__, "ray", ray.__version__)')"
    python3 -c 'from importlib.metadata import entry_points as e
print("vllm plugins:", sorted(p.name for p in e(group="vllm.general_plugins")))'
    # On failure no sweep starts; `collect` then stops the stack and brings back the logs.
    scripts/gpu-profile-run.sh up "$run_dir" || { touch "$run_dir/done"; exit 1; }
    echo $(($(date +%s) + 900)) >"$run_dir/deadline"
    setsid -f bash loadtests/device/pd-sweep.sh "$run_dir" "$run_dir/deadline" \
      >"$run_dir/sweep.log" 2>&1 </dev/null
    sleep 5
    say "sweep started"; cat "$run_dir/sweep.log"
    ;;
  collect)
    seconds=${2:?collect needs SECONDS}
    echo $((t0 + seconds - 25)) >"$run_dir/deadline"
    while [ ! -f "$run_dir/done" ] && [ "$(($(date +%s) - t0))" -lt "$((seconds - 20))" ] &&
      kill -0 "$(cat "$run_dir/sweep.pid" 2>/dev/null || echo 0)" 2>/dev/null; do
      sleep 2
    done
    say "sweep $([ -f "$run_dir/done" ] && echo done || echo 'NOT done')"
    tail -60 "$run_dir/sweep.log"
    scripts/gpu-profile-run.sh down "$run_dir"
    tar -czf "$OUT/pd-run.tgz" -C /tmp --exclude=logs.tgz pd-run
    # The engines' logs come back only if they fit what one returned file may be (16 MiB).
    [ "$(stat -c %s "$run_dir/logs.tgz" 2>/dev/null || echo 99999999)" -lt 16000000 ] &&
      cp "$run_dir/logs.tgz" "$OUT/"
    ls -la "$OUT"
    ;;
esac
