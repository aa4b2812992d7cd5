"""Local CPU profile only: ask Linux for the AMX tile state before vLLM's CPU kernels use it.

On x86 CPUs with AMX (Sapphire Rapids and later), Linux lets a process execute AMX tile
instructions only after it has asked for the tile state with ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; without that, the first tile instruction is a SIGILL. oneDNN asks when it
first picks an AMX kernel, but vLLM's CPU attention picks its ``amx`` path on its own
(``torch.cpu._is_amx_tile_supported()``, bf16, blocks of 32). A PD decode engine's first forward
pass is a single token after the KV cache arrived over NIXL: oneDNN then chooses a non-AMX GEMM,
never asks, and the attention kernel kills the worker with SIGILL (exit code -4). A colocated
engine's first pass is a prefill, whose GEMM asks first, so it never showed.

This vLLM general plugin (loaded by vLLM in each of its processes) asks once, at start, when the
environment says ``PD_SERVE_AMX_PERMISSION=1`` (the local CPU profile sets it). Asking on a CPU
without AMX, or on another OS, fails quietly: there is nothing to use.
"""

from __future__ import annotations

import ctypes
import os
import platform

ENV = "PD_SERVE_AMX_PERMISSION"
_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def register() -> None:
    if os.environ.get(ENV) == "1":
        request_amx_permission()


def request_amx_permission() -> bool:
    """True if this process may now use AMX tiles (asked and granted)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)) == 0
