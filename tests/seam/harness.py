"""The gateway built in-process by ``create_app`` with a scripted upstream, driven over raw ASGI.

A real app (real parsing, admission, limiter, SQLite ledger, relay, metrics), no sockets: fast
enough for hundreds of exit paths, and exact about when a client leaves. The client is a pair of
ASGI callables: it sends its body, then waits; with ``leave_after=k`` it hangs up once it has
received ``k`` body messages (``0``: right after sending the request)::

    async with running_gateway(tmp_path, scripts) as gw:
        reply = await gw.call("/v1/chat/completions", body, leave_after=1)
        reply.outcome            # the request's one Outcome
        gw.clock.advance(60)     # the app's clock: limits, key cache, canary, ledger times
    gw.ledger_rows()             # after shutdown, every row flushed
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette

from gateway.app import create_app
from gateway.clock import Clock, ManualClock
from gateway.config import GatewayConfig, parse_config
from gateway.limits.memory import MemoryLimiter
from gateway.limits.types import Ticket
from gateway.runtime.state import GatewayState
from gateway.wire.outcome import OUTCOME_KEY, Outcome
from tests.conformance.openapi_check import check_answer
from tests.seam.upstream import Script, ScriptedUpstream, factory


class CountingLimiter(MemoryLimiter):
    """The real in-process limiter, counting its settlements per request id."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock.wall)
        self.settled: Counter[str] = Counter()

    def settle(self, ticket: Ticket, used_tokens: int, used_money: int = 0) -> None:
        self.settled[ticket.request_id] += 1
        super().settle(ticket, used_tokens, used_money)

    def in_flight(self) -> int:
        return sum(state.in_flight for state in self._states.values())


@dataclass
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    outcome: Outcome | None
    complete: bool = True
    """The answer's last body message was sent (a client that left early may see only part)."""

    @property
    def content_type(self) -> str:
        return self.headers.get(b"content-type", b"").decode()

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Gateway:
    app: Starlette
    state: GatewayState
    upstreams: list[ScriptedUpstream]
    limiter: CountingLimiter
    db_path: Path
    clock: ManualClock
    """The app's clock: time moves only when the test advances it."""
    outcomes: list[Outcome] = field(default_factory=list)
    conform: bool = True
    """Check every whole answer against OpenAI's document (off only where a test scripts an
    upstream that breaks the protocol on purpose, and the gateway relays what it was sent)."""

    async def get(self, path: str, method: str = "GET") -> Reply:
        return await self.call(path, b"", method=method)

    async def call(
        self,
        path: str,
        body: bytes,
        *,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        leave_after: int | None = None,
        method: str = "POST",
    ) -> Reply:
        messages: list[dict[str, Any]] = []
        gone = asyncio.Event()
        if leave_after == 0:
            gone.set()
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if gone.is_set():
                return  # as uvicorn does: what is sent to a closed connection is dropped
            messages.append(message)
            bodies = sum(m["type"] == "http.response.body" for m in messages)
            if leave_after is not None and bodies >= leave_after:
                gone.set()

        scope = _scope(path, headers, method)
        await self.app(scope, receive, send)
        slot = scope.get(OUTCOME_KEY)  # none when refused before the gateway's own layers
        outcome = None if slot is None else slot.value
        if outcome is not None:
            self.outcomes.append(outcome)
        start = next((m for m in messages if m["type"] == "http.response.start"), None)
        reply = Reply(
            status=0 if start is None else start["status"],
            headers={} if start is None else dict(start["headers"]),
            body=b"".join(
                m.get("body", b"") for m in messages if m["type"] == "http.response.body"
            ),
            outcome=outcome,
            complete=any(
                m["type"] == "http.response.body" and not m.get("more_body", False)
                for m in messages
            ),
        )
        if self.conform and reply.status and (leave_after is None or reply.complete):
            # Every whole answer, against OpenAI's document for its path and status: a new
            # endpoint is covered by being tested at all (tests/conformance/openapi_check.py).
            check_answer(method, path, reply.status, reply.content_type, reply.body)
        return reply

    def ledger_rows(self) -> list[sqlite3.Row]:
        with sqlite3.connect(self.db_path) as db:
            db.row_factory = sqlite3.Row
            return db.execute("SELECT * FROM usage_ledger").fetchall()


JSON_TYPE = (b"content-type", b"application/json")


def _scope(
    path: str, headers: tuple[tuple[bytes, bytes], ...], method: str = "POST"
) -> dict[str, Any]:
    path, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        # JSON unless the test names its own content type (a multipart upload).
        "headers": [
            *([] if any(k == b"content-type" for k, _ in headers) else [JSON_TYPE]),
            *headers,
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }


def gateway_config(tmp_path: Path, **overrides: Any) -> GatewayConfig:
    document: dict[str, Any] = {
        "server": {"access_log": False},
        "pools": {"pd": {"urls": ["http://replica-a:8000", "http://replica-b:8000"]}},
        "models": {"m": {"pool": "pd"}},
        "storage": {"url": f"sqlite:///{tmp_path}/gateway.db"},
        "auth": {"enabled": False},
        "accounting": {"ledger_interval": 0.05},
        "limits": {"defaults": {"concurrent_requests": 10_000, "tokens_per_minute": 10**9}},
        **overrides,
    }
    return parse_config(document, env={})


@asynccontextmanager
async def running_gateway(
    tmp_path: Path, scripts: dict[str, Script], clock: ManualClock | None = None, **overrides: Any
) -> AsyncIterator[Gateway]:
    """The app on ``tmp_path``'s store; two on one path are two replicas sharing it (give them
    one ``clock``)."""
    made, make = factory(scripts)
    clock = clock or ManualClock()
    config = gateway_config(tmp_path, **overrides)
    app = create_app(config, upstream_factory=make, clock=clock)  # type: ignore[arg-type]
    state: GatewayState = app.state.gateway
    limiter = CountingLimiter(clock)
    state.accounting.limiter.backend = limiter
    gateway = Gateway(app, state, made, limiter, tmp_path / "gateway.db", clock)
    async with app.router.lifespan_context(app):
        yield gateway
