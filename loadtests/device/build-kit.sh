#!/usr/bin/env bash
# Build the kit that runs loadtests/bench_overhead.py on the lent accelerator machine (device
# `run`, kind nvidia-h200: 16 cores, Python 3.12, no network): the py3.12 wheels its image lacks
# (kit-wheels.txt), this machine's wrk with its libluajit, and run.sh. About 30 MiB, under the
# 64 MiB that one call carries. The kit lands in .device-kit/ (git-ignored):
#
#   loadtests/device/build-kit.sh
#   run(command='bash .device-kit/run.sh --seconds 4 --concurrency 1,64 --rounds 3 ...',
#       carry=[".device-kit"])
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=loadtests/device
KIT=.device-kit
PYTHON="${PYTHON:-.venv/bin/python}"

rm -rf "$KIT/wheels" "$KIT/bin" "$KIT/lib"
mkdir -p "$KIT/wheels" "$KIT/bin" "$KIT/lib"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$KIT/wheels" -r "$HERE/kit-wheels.txt"
cp "$(command -v wrk)" "$KIT/bin/wrk"
cp "$(ldd "$(command -v wrk)" | awk '/libluajit/ {print $3}')" "$KIT/lib/"
cp "$HERE/run.sh" "$KIT/run.sh"
du -sh "$KIT"
