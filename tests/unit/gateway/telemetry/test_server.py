"""The server span: continues an incoming traceparent, is current for the pipeline, and reads
the request's one outcome."""

from __future__ import annotations

import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import ASGIApp

from gateway.asgi import Message, Receive, Scope, Send
from gateway.telemetry import Tracing
from gateway.telemetry.server import ServerSpanMiddleware, current_trace_id
from gateway.wire.outcome import (
    ARRIVAL_KEY,
    OUTCOME_KEY,
    Arrival,
    Delivered,
    Ending,
    Outcome,
    OutcomeSlot,
    RouteFacts,
    outcome_slot,
)
from gateway.wire.usage import NOTHING

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
CHAT = "/v1/chat/completions"


def scope_for(path: str, headers: list[tuple[bytes, bytes]]) -> Scope:
    arrival = Arrival("req-9", None, time.perf_counter(), time.time())
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": headers,
        ARRIVAL_KEY: arrival,
        OUTCOME_KEY: OutcomeSlot(),
    }


async def run(middleware: ServerSpanMiddleware, scope: Scope) -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        pass

    await middleware(scope, receive, send)


def answering(status: int, seen: list[trace.Span]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(trace.get_current_span())
        arrival: Arrival = scope[ARRIVAL_KEY]
        error = "upstream_error" if status >= 500 else None
        outcome_slot(scope).put(
            Outcome(
                arrival=arrival,
                method="POST",
                path=scope["path"],
                operation=None,
                model="m",
                stream=False,
                tenant_id="acme",
                key_id=None,
                route=RouteFacts("default", "pd", None, "single_pool"),
                delivered=Delivered(status=status, error_code=error),
                ending=Ending.COMPLETE if status < 500 else Ending.UPSTREAM_FAILED,
                admitted=True,
                reached_upstream=False,
                usage=NOTHING,
                prompt_tokens=None,
                finished=time.perf_counter(),
                trace_id=current_trace_id(),
            )
        )

    return app


async def test_incoming_traceparent_is_continued_and_the_span_is_current(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    seen: list[trace.Span] = []
    middleware = ServerSpanMiddleware(
        answering(200, seen),
        tracing=tracing,
        traced_paths=[CHAT],
    )
    header = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
    scope = scope_for(CHAT, [(b"traceparent", header)])
    await run(middleware, scope)
    (span,) = exporter.get_finished_spans()
    assert span.name == "POST /v1/chat/completions" and span.kind is SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID
    assert seen[0].get_span_context() == span.context
    outcome = outcome_slot(scope).value
    assert outcome is not None and outcome.trace_id == TRACE_ID  # for the access log
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["gateway.request_id"] == "req-9"
    assert span.attributes["gateway.tenant"] == "acme"
    assert span.attributes["gateway.pool"] == "pd"
    assert "error.type" not in span.attributes
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached afterwards


async def test_server_errors_mark_the_span_and_client_errors_only_name_the_type(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    for status in (502, 404):
        middleware = ServerSpanMiddleware(
            answering(status, []),
            tracing=tracing,
            traced_paths=[CHAT],
        )
        await run(middleware, scope_for(CHAT, []))
    bad_gateway, not_found = exporter.get_finished_spans()
    assert bad_gateway.status.status_code is StatusCode.ERROR
    assert bad_gateway.attributes["error.type"] == "upstream_error"
    assert not_found.status.status_code is StatusCode.UNSET
    assert not_found.attributes["error.type"] == "404"


async def test_an_escaping_exception_is_recorded_and_raised(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    middleware = ServerSpanMiddleware(failing, tracing=tracing, traced_paths=[CHAT])
    with pytest.raises(RuntimeError):
        await run(middleware, scope_for(CHAT, []))
    (span,) = exporter.get_finished_spans()
    assert span.attributes["error.type"] == "RuntimeError"
    assert span.status.status_code is StatusCode.ERROR


async def test_paths_not_listed_are_not_traced(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    middleware = ServerSpanMiddleware(
        answering(200, []),
        tracing=tracing,
        traced_paths=[CHAT],
    )
    await run(middleware, scope_for("/metrics", []))
    assert exporter.get_finished_spans() == ()
