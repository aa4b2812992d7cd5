"""Local CPU profile only: NIXL agents without their busy-polling progress thread.

NIXL's UCX progress thread polls with a zero timeout, so each PD engine keeps a core at 100%
even when idle; on a two-core machine that halves decode speed and starves everything else.
vLLM exposes no setting for it. This vLLM general plugin (entry point ``vllm.general_plugins``,
loaded by vLLM in each of its processes) makes ``nixl_agent_config`` default to no progress
thread, with the KV transfer still progressing as vLLM polls it. Measured here: idle CPU of the
PD app from 2 busy cores to about 10%, one-stream decode 2x faster.

It does nothing unless the process's environment says ``PD_SERVE_NIXL_PROGRESS_THREAD=0``,
which only the local CPU profile sets, on its PD sides. Production configs never set it: with
EFA and GPUs the progress thread is what keeps transfers moving while the GPU computes.
"""

from __future__ import annotations

import functools
import os
from typing import Any

ENV = "PD_SERVE_NIXL_PROGRESS_THREAD"


def register() -> None:
    if os.environ.get(ENV) != "0":
        return
    # vLLM sets this before it imports NIXL itself (UCX reads it once); importing NIXL first
    # here must not lose it.
    os.environ.setdefault("UCX_RCACHE_MAX_UNRELEASED", "1024")
    from nixl._api import nixl_agent_config

    without_progress_thread(nixl_agent_config)


def without_progress_thread(config_class: Any) -> None:
    """Make ``config_class(...)`` default to ``enable_prog_thread=False`` (idempotent)."""
    original = config_class.__init__
    if getattr(original, "_pd_serve_no_progress_thread", False):
        return

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("enable_prog_thread", False)
        original(self, *args, **kwargs)

    init._pd_serve_no_progress_thread = True  # type: ignore[attr-defined]
    config_class.__init__ = init
