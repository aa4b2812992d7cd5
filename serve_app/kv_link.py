"""Which link the KV cache takes between prefill and decode, chosen from where the engines run.

NIXL moves KV at very different speeds by path, and it falls to TCP silently: UCX without
``cuda_ipc``/``cuda_copy`` in ``UCX_TLS`` does not see GPU buffers, PyTorch's
``expandable_segments`` allocations cannot be opened over CUDA IPC (nixl#1754: ~0.3 GB/s), and
NIXL's LIBFABRIC backend without EFA is no faster. ``pd.kv_link`` names the path, and this module
turns it into the replicas' environment and into the checks and notices that keep it honest:

- ``same_host``: prefill and decode on one machine's GPUs: UCX over CUDA IPC (``UCX_TLS`` with
  ``cuda_ipc,cuda_copy``; ``tcp`` stays for UCX's active messages, without it NIXL's UCX backend
  is not created). On one GPU, or GPUs without NVLink between them, NIXL 1.3.2's UCX refuses a
  CUDA IPC *read* (the NixlConnector's pull) and falls back to TCP (0.4 GB/s measured on the H200,
  ../shared/ENVIRONMENT.md), so the notice says so.
- ``efa``: separate nodes on EFA: NIXL's LIBFABRIC backend with ``FI_PROVIDER=efa`` (the seeds).
- ``tcp``: UCX over TCP, only when asked for by name; check-config and the start-up log say so.
- ``host_memory``: the CPU stack's KV in host memory (UCX shared memory / TCP on loopback); no
  faster path exists there, so nothing is announced.

``auto`` (the default) picks: host_memory on accelerator.kind cpu; efa where the backends are
LIBFABRIC; same_host where accelerator.gpus puts every engine on one machine; otherwise tcp, and
then the notice says that UCX between GPU nodes without EFA moves KV over TCP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from serve_app.config import PDPool, PDSide, ServingConfig

Link = Literal["same_host", "efa", "tcp", "host_memory"]
# UCX's transports for GPU buffers on one host; tcp carries UCX's active messages (wire-up).
SAME_HOST_UCX_TLS = "cuda_ipc,cuda_copy,tcp"
_IPC_TRANSPORTS = ("cuda_ipc", "cuda_copy")
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def resolve_link(cfg: ServingConfig, pd: PDPool) -> Link:
    if pd.kv_link != "auto":
        return pd.kv_link
    if cfg.accelerator.kind == "cpu":
        return "host_memory"
    if "LIBFABRIC" in _backends(pd.prefill):
        return "efa"
    if cfg.accelerator.gpus is not None:
        return "same_host"
    return "tcp"


def link_env(cfg: ServingConfig, pd: PDPool) -> dict[str, str]:
    """Environment the link needs in each PD replica (under the config's own env, which wins)."""
    if resolve_link(cfg, pd) == "same_host":
        return {"UCX_TLS": SAME_HOST_UCX_TLS}
    return {}


def check_link(cfg: ServingConfig, pd: PDPool, env_of: dict[str, dict[str, str]]) -> Iterator[str]:
    """Configs whose link cannot be what ``pd.kv_link`` says (``env_of``: each side's env)."""
    link = resolve_link(cfg, pd)
    backends = {
        name: _backends(side) for name, side in (("prefill", pd.prefill), ("decode", pd.decode))
    }
    if link == "host_memory" and cfg.accelerator.kind != "cpu":
        yield "pd.kv_link: host_memory is the CPU stack's link; choose another for GPUs"
    if link in ("same_host", "efa", "tcp") and cfg.accelerator.kind == "cpu":
        yield f"pd.kv_link: {link} moves GPU buffers; accelerator.kind cpu has only host_memory"
    for name, side_backends in backends.items():
        path = f"pd.{name}.kv_transfer_config.kv_connector_extra_config.backends"
        if link == "efa" and "LIBFABRIC" not in side_backends:
            yield f"{path}: kv_link efa needs backend LIBFABRIC (UCX would cross nodes over TCP)"
        if link in ("same_host", "tcp") and side_backends and "UCX" not in side_backends:
            yield f"{path}: kv_link {link} needs backend UCX"
        env = env_of[name]
        if link == "same_host":
            tls = env.get("UCX_TLS")
            if tls is not None and not all(t in tls.split(",") for t in _IPC_TRANSPORTS):
                yield (
                    f"pd.{name}.env.UCX_TLS: {tls!r} lacks cuda_ipc/cuda_copy, so the KV of "
                    f"kv_link same_host would move over TCP; remove it ({SAME_HOST_UCX_TLS} is set)"
                )
            if "expandable_segments:true" in env.get(ALLOC_CONF, "").lower():
                yield (
                    f"pd.{name}.env.{ALLOC_CONF}: expandable_segments cannot be opened over CUDA "
                    "IPC (nixl#1754: ~0.3 GB/s); remove it for kv_link same_host"
                )


def link_notices(cfg: ServingConfig, pd: PDPool) -> list[str]:
    """What check-config and the start-up log announce about the KV path (empty: nothing slow)."""
    link = resolve_link(cfg, pd)
    if link == "tcp":
        why = (
            "as asked (pd.kv_link: tcp)"
            if pd.kv_link == "tcp"
            else (
                "UCX between GPU engines not known to share a machine (no accelerator.gpus) and no "
                "LIBFABRIC backend"
            )
        )
        return [
            f"pd.kv_link: the KV cache moves over TCP ({why}): about 0.3-0.5 GB/s, seconds per "
            "long prompt; same_host (CUDA IPC) or efa (LIBFABRIC) is the fast path"
        ]
    if link == "same_host" and cfg.accelerator.gpus == 1:
        return [
            "pd.kv_link: same_host on one GPU: NIXL 1.3.2's UCX refuses CUDA IPC reads without "
            "an NVLink peer, so the NixlConnector's pull falls back to TCP (0.4 GB/s measured on "
            "an H200); `pd-serve doctor` shows the achieved rate"
        ]
    return []


def _backends(side: PDSide) -> tuple[str, ...]:
    kv = side.kv_transfer_config
    return () if kv is None else tuple(kv.kv_connector_extra_config.backends)


# Ray Serve LLM's NixlConnectorBackend gives each replica a side-channel port from these bases;
# a connector Ray has no backend for (NixlPushConnector) gets none, so the config sets it.
RAY_PORT_BASES = {"prefill": 20000, "decode": 22000}
PUSH = "NixlPushConnector"


def is_push(pd: PDPool) -> bool:
    kv = pd.prefill.kv_transfer_config
    return kv is not None and kv.kv_connector == PUSH


def pd_side_env(
    cfg: ServingConfig, pd: PDPool, name: Literal["prefill", "decode"]
) -> dict[str, str]:
    """One PD side's environment from the link: UCX's transports, and for a push the
    side-channel port that Ray Serve LLM's DefaultConnectorBackend leaves unset (vLLM's default
    5600 on both sides would collide on one host)."""
    env = link_env(cfg, pd)
    if is_push(pd):
        side = pd.prefill if name == "prefill" else pd.decode
        base = side.side_channel_port_base or RAY_PORT_BASES[name]
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(base)
    return env


def check_push(pd: PDPool) -> Iterator[str]:
    connectors = {
        name: side.kv_transfer_config.kv_connector
        for name, side in (("prefill", pd.prefill), ("decode", pd.decode))
        if side.kv_transfer_config is not None
    }
    if len(set(connectors.values())) > 1:
        yield (
            f"pd.decode.kv_transfer_config.kv_connector: {connectors.get('decode')} differs from "
            f"prefill's {connectors.get('prefill')}; a pull and a push never meet"
        )
    if PUSH in connectors.values():
        for name, side in (("prefill", pd.prefill), ("decode", pd.decode)):
            if (side.replicas or 1) > 1 or side.autoscaling is not None:
                yield (
                    f"pd.{name}.replicas: {PUSH} runs one replica a side (Ray Serve LLM has no "
                    "backend for it, so no per-replica side-channel port or engine id)"
                )


def config_notices(cfg: ServingConfig) -> list[str]:
    """Every notice about a config's KV path (check-config and ``local up`` print them)."""
    return [] if cfg.pd is None else link_notices(cfg, cfg.pd)
