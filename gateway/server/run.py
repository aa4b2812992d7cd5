"""Serve the gateway: uvicorn (uvloop + httptools) with the edge protocol and limits.

serve("gateway.cli:app_from_env", config.server, host=..., port=..., workers=2)
"""

from __future__ import annotations

import contextlib
import logging
import resource

import uvicorn
from uvicorn.supervisors import Multiprocess

from gateway.config import ServerConfig
from gateway.server.protocol import EdgeHttpToolsProtocol
from gateway.server.uvicorn_config import EdgeUvicornConfig

logger = logging.getLogger(__name__)

# File descriptors kept free of client connections: upstream pools, the store, logs, listeners.
FD_RESERVE = 256


def connection_cap(configured: int, reserve: int = FD_RESERVE) -> int:
    """The connection cap that fits the open-file limit, raising the soft limit to the hard one
    first: past the limit ``accept`` fails and nobody is answered, not even a normal request."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = configured + reserve
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return configured
    cap = max(1, soft - reserve)
    logger.warning(
        "server.max_connections %d lowered to %d: the open-file limit is %d", configured, cap, soft
    )
    return cap


def serve(
    app: str, server: ServerConfig, *, host: str, port: int, workers: int, log_level: str
) -> int:
    """Run until stopped; the exit status (1 when the server never started)."""
    config = EdgeUvicornConfig(
        app,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        loop="uvloop",
        http=EdgeHttpToolsProtocol,
        access_log=False,  # the gateway writes its own structured access log
        timeout_graceful_shutdown=int(server.graceful_shutdown_seconds) or None,
        timeout_keep_alive=server.keep_alive_timeout,
        log_config=None,
        proxy_headers=server.proxy_headers,
        limits=server,
        max_connections=connection_cap(server.max_connections),
    )
    if workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return 0
    instance = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        instance.run()
    return 0 if instance.started else 1
