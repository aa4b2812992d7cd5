"""One upstream session serves every tenant, so an upstream's Set-Cookie must not ride along on
later requests: a real upstream server that sets a cookie and records what it is sent."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.gatewayproc import start_gateway


class CookieSettingUpstream:
    """A minimal OpenAI-ish upstream: every answer sets a cookie; request headers are kept."""

    def __init__(self) -> None:
        self.cookies_received: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if scope["path"].endswith("/chat/completions"):
            headers = dict(scope["headers"])
            cookie = headers.get(b"cookie")
            self.cookies_received.append(None if cookie is None else cookie.decode())
        body = b'{"object": "list", "data": []}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"set-cookie", b"session=tenant-a-secret; Path=/"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def upstream() -> Iterator[tuple[str, CookieSettingUpstream]]:
    app = CookieSettingUpstream()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the upstream never started"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]  # port 0: the one it bound
    try:
        # A host name, not an IP: aiohttp's default jar ignores cookies from IP addresses.
        yield f"http://localhost:{port}", app
    finally:
        server.should_exit = True
        thread.join(10)


def test_upstream_cookies_are_not_replayed(
    upstream: tuple[str, CookieSettingUpstream], tmp_path: Path
) -> None:
    url, app = upstream
    config = {"pools": {"p": {"urls": [url]}}, "models": {"m": {"pool": "p"}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with start_gateway(config, tmp_path) as gateway:
        for _ in range(3):
            answer = httpx.post(gateway.base_url + "/chat/completions", json=body)
            assert answer.status_code == 200
            assert "set-cookie" not in answer.headers  # nor passed on to the client
    assert app.cookies_received == [None, None, None]
