#!/usr/bin/env bash
# Build the wheel kit for the local GPU profile on a machine without network (see
# scripts/gpu-kit-py312.txt): download the pinned py3.12 wheels, trim what the profile never loads,
# pack them into one tar split into parts that each fit one transfer.
#
#   scripts/gpu-wheel-kit.sh OUT_DIR [PART_MIB]      # PART_MIB: 60 by default
#   KIT_HOPPER_DENSE=1 scripts/gpu-wheel-kit.sh ...  # 258 MB instead of 420: see below
#
# KIT_HOPPER_DENSE=1 also drops vLLM's FlashAttention 2 kernels (129 MB compressed) and its MoE
# kernels (41 MB), both imported only if present: on Hopper vLLM uses FlashAttention 3, and a
# dense model never calls the MoE ops. For head_dim 64 or more on an H100/H200 (the llama-3-8b
# shape); the tiny model's head_dim 32 needs FlashAttention 2, so keep the full kit for it.
#
# On the GPU machine: cat OUT_DIR/kit.tar.* | tar -x -C /tmp && python3 -m pip install -q \
#   --no-index --no-deps --no-compile --target /tmp/site /tmp/kit/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: $0 OUT_DIR [PART_MIB]}"); part_mib=${2:-60}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/kit"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux2014 \
  manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_5 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
grep -v '^#' scripts/gpu-kit-py312.txt | xargs python3 -m pip download -q --no-deps \
  --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d "$work/kit"
# Never loaded by the profile: Ray's Java jars and source maps, NIXL's expert-parallel kernels and
# UCX's perftest, vLLM's Rust front end and deep_gemm builds for other Pythons (about 80 MB).
(cd "$work/kit"
 zip -q -d ray-*.whl 'ray/jars/*' '*.js.map'
 zip -q -d nixl_cu13-*.whl 'nixl_ep_cu13/*' '*libucx_perftest*'
 zip -q -d vllm-*.whl 'vllm/vllm-rs' 'vllm/third_party/deep_gemm/_C.cpython-31[0134]*'
 if [ -n "${KIT_HOPPER_DENSE:-}" ]; then
   zip -q -d vllm-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/_moe_C_stable_libtorch.abi3.so'
 fi)
tar -cf - -C "$work" kit | split -b "$((part_mib * 1024 * 1024))" -d -a 1 - "$out/kit.tar."
ls -l "$out"
