"""uvicorn's Config carrying the gateway's edge limits to every worker's protocol instances.

uvicorn pickles its Config into each worker process, so what the protocol needs travels on it:
the ``server:`` section and the per-process table of idle connections the cap evicts from.
It knows the protocol only as uvicorn's own httptools protocol, so the edge protocol
(gateway/server/protocol.py) imports this module and not the other way round.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config import ServerConfig


class EdgeUvicornConfig(uvicorn.Config):
    def __init__(
        self, *args: Any, limits: ServerConfig, max_connections: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.effective_max_connections = max_connections
        # Connections with no request in progress, the longest idle first (dicts keep order).
        self.waiting: dict[HttpToolsProtocol, None] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["waiting"] = {}  # each worker has its own connections
        return state
