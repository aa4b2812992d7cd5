"""The floor for a Python proxy: the thinnest pass-through that still streams.

Pure ASGI under uvicorn (uvloop + httptools), one pooled upstream client, no parsing, no logs,
no metrics: read the body, send it upstream, relay status, content type and body chunks as they
arrive. The gateway's overhead is judged against this. ``--client`` picks the upstream HTTP
client, so the candidates for the gateway can be measured on equal terms:

    python loadtests/floor_proxy.py --upstream http://127.0.0.1:8001 --port 9000 --client aiohttp

``--server granian`` serves the same app with granian's ASGI interface instead of uvicorn, which
measures what a server swap could win for the gateway.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

Relay = Callable[[str, bytes, Any], Awaitable[None]]


def aiohttp_relay(upstream: str) -> tuple[Relay, Callable[[], Awaitable[None]]]:
    import aiohttp

    session: aiohttp.ClientSession | None = None

    async def relay(path: str, body: bytes, send: Any) -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1024), auto_decompress=False
            )
        async with session.post(
            upstream + path, data=body, headers={"content-type": "application/json"}
        ) as response:
            content_type = response.headers.get("content-type", "application/json").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": [(b"content-type", content_type)],
                }
            )
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def close() -> None:
        if session is not None:
            await session.close()

    return relay, close


def httpx_relay(upstream: str, transport: str) -> tuple[Relay, Callable[[], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    if transport == "aiohttp":
        import httpx_aiohttp

        client = httpx.AsyncClient(transport=httpx_aiohttp.AiohttpTransport(), limits=limits)
    else:
        client = httpx.AsyncClient(limits=limits)

    async def relay(path: str, body: bytes, send: Any) -> None:
        request = client.build_request(
            "POST", upstream + path, content=body, headers={"content-type": "application/json"}
        )
        response = await client.send(request, stream=True)
        try:
            content_type = response.headers.get("content-type", "application/json").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(b"content-type", content_type)],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b""})

    return relay, client.aclose


def make_app(relay: Relay, close: Callable[[], Awaitable[None]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        await relay(scope["path"], body, send)

    return app


def from_env() -> Any:
    """The app for granian's worker process (a factory: the worker imports this module anew)."""
    return make_app(*aiohttp_relay(os.environ["FLOOR_UPSTREAM"]))


def serve_granian(upstream: str, port: int) -> None:
    from granian.constants import Interfaces, Loops
    from granian.server import Server

    here = str(Path(__file__).resolve().parent)
    os.environ["FLOOR_UPSTREAM"] = upstream
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, here)
    Server(
        "floor_proxy:from_env",
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        workers=1,
        loop=Loops.uvloop,
        log_enabled=False,
        factory=True,
        working_dir=Path(here),
    ).serve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--client", choices=["aiohttp", "httpx", "httpx-aiohttp"], default="aiohttp"
    )
    parser.add_argument("--server", choices=["uvicorn", "granian"], default="uvicorn")
    args = parser.parse_args()
    upstream = args.upstream.rstrip("/")
    if args.server == "granian":
        serve_granian(upstream, args.port)
        return
    if args.client == "aiohttp":
        relay, close = aiohttp_relay(upstream)
    else:
        relay, close = httpx_relay(upstream, "aiohttp" if args.client == "httpx-aiohttp" else "h11")
    uvicorn.run(
        make_app(relay, close),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
