"""How fast the KV cache moved, against what the link it should take can do (``pd-serve doctor``).

NIXL's per-transfer telemetry (serve_app/kv_transfer_log.py: bytes and milliseconds) says how
fast; the rendered serve config says which path was asked for: the connector, the backends, the
KV buffers' device and UCX's transports. NIXL does not say which UCX transport carried a
transfer, so the transport is inferred from the rate: below ``TCP_CEILING_GBPS`` only TCP is that
slow (0.3-0.5 GB/s measured on the H200's loopback, where CUDA IPC WRITE ran at 1,600+ GB/s).
The verdict is SLOW when GPU-resident KV moves at TCP's rate where CUDA IPC or EFA was asked for
or is there to be asked for (``pd.kv_link`` tcp on GPUs counts: it is the slow path by name).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serve_app.kv_transfer_log import Transfer

TCP_CEILING_GBPS = 2.0
# What each link should reach for one long prompt's KV (GB/s): the goal on one host
# (258 MiB in under 3 ms is ~100 GB/s; CUDA IPC WRITE measured 1,600+), and a conservative
# share of one 100 Gb/s EFA adapter (12.5 GB/s line rate) across nodes.
EXPECTED_GBPS: Mapping[str, float] = {"same_host": 100.0, "efa": 10.0}


def gbps(transfer: Transfer) -> float:
    """Achieved GB/s (10^9 bytes a second); 0 for a transfer NIXL timed at 0 ms."""
    return transfer.bytes / (transfer.xfer_ms * 1e6) if transfer.xfer_ms > 0 else 0.0


def side_link(kv_transfer_config: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The link one rendered PD side asks for: same_host, efa, tcp or host_memory."""
    if kv_transfer_config.get("kv_buffer_device") == "cpu":
        return "host_memory"
    backends = kv_transfer_config.get("kv_connector_extra_config", {}).get("backends", [])
    if "LIBFABRIC" in backends:
        return "efa"
    tls = env.get("UCX_TLS")
    # UCX with every transport allowed (unset, or "all") may still pick CUDA IPC.
    if tls is None or tls == "all" or "cuda_ipc" in tls.split(","):
        return "same_host"
    return "tcp"


@dataclass(frozen=True)
class LinkReport:
    link: str
    connector: str
    backends: Sequence[str]
    transfers: Sequence[Transfer]

    @property
    def expected_gbps(self) -> float | None:
        return EXPECTED_GBPS.get(self.link)

    @property
    def median_gbps(self) -> float | None:
        return statistics.median(gbps(t) for t in self.transfers) if self.transfers else None

    @property
    def over_tcp(self) -> bool:
        rate = self.median_gbps
        return rate is not None and rate < TCP_CEILING_GBPS

    @property
    def slow(self) -> bool:
        """GPU KV at TCP's rate where a faster path exists (host memory has none)."""
        if self.link == "host_memory":
            return False
        return self.link == "tcp" or self.over_tcp

    def render(self) -> list[str]:
        expected = self.expected_gbps
        lines = [
            f"KV link: {self.link} ({self.connector}, backends {list(self.backends)}; expected "
            f"{f'>= {expected:g} GB/s' if expected else 'no figure'})"
        ]
        for t in self.transfers:
            transport = "TCP-class" if gbps(t) < TCP_CEILING_GBPS else "faster than TCP"
            lines.append(
                f"  transfer: {t.bytes} bytes in {t.xfer_ms:.3f} ms = {gbps(t):.2f} GB/s "
                f"({transport}, inferred from the rate; {t.descriptors} descriptors)"
            )
        rate = self.median_gbps
        if rate is None:
            lines.append(
                "  no KV transfer line (PD_SERVE_KV_TRANSFER_LOG=1 on the side that "
                "completes it: decode for a pull, prefill for a push)"
            )
        verdict = "SLOW" if self.slow else "ok"
        if rate is not None or self.link == "tcp":
            why = (
                "KV moves over TCP where CUDA IPC (same host) or LIBFABRIC (EFA) is faster"
                if self.slow
                else "faster than TCP"
            )
            shown = "n/a" if rate is None else f"{rate:.2f} GB/s"
            lines.append(f"link verdict: {verdict} (median {shown}; {why})")
        return lines


def link_report(side: Mapping[str, Any], transfers: Sequence[Transfer]) -> LinkReport:
    """The report for one rendered PD side's ``LLMConfig`` (a dict of the serve config)."""
    kv = side.get("engine_kwargs", {}).get("kv_transfer_config", {})
    env = side.get("runtime_env", {}).get("env_vars", {})
    return LinkReport(
        link=side_link(kv, env),
        connector=str(kv.get("kv_connector", "none")),
        backends=tuple(kv.get("kv_connector_extra_config", {}).get("backends", [])),
        transfers=tuple(transfers),
    )
