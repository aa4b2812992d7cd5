"""The relay's chunk translator for the Responses API: chat answers in, Responses bytes out.

The relay meters the upstream's chat chunks itself (one parse, one usage truth) and hands this
translator the decoded chunks; the translator only writes the events::

    translator = ResponsesTranslator(ResponseShell.of(source, request_id, created_at))
    translator.opening()                 # bytes: response.created, response.in_progress
    translator.chunks(decoded_chunks)    # bytes for the events these chat chunks make
    translator.closing(usage)            # bytes: the .done events and response.completed
    translator.failing(err)              # bytes: error and response.failed
    translator.whole(document, usage)    # a whole chat answer as a response object
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.responses.objects import Json, ResponseShell, response_of_chat
from gateway.responses.stream import ResponseEvents
from gateway.wire.request import Operation, ParsedRequest
from gateway.wire.usage import Usage


def sse_events(events: Iterable[Json]) -> bytes:
    """Events framed as the Responses API sends them: ``event: <type>`` then ``data:``."""
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


class ResponsesTranslator:
    __slots__ = ("events", "shell")

    def __init__(self, shell: ResponseShell) -> None:
        self.shell = shell
        self.events = ResponseEvents(shell)

    def opening(self) -> bytes:
        return sse_events(self.events.opening())

    def chunks(self, messages: Iterable[Mapping[str, Any]]) -> bytes:
        return sse_events(e for m in messages for e in self.events.chunk(m))

    def closing(self, usage: Usage | None) -> bytes:
        return sse_events(self.events.closing(usage))

    def failing(self, err: GatewayError) -> bytes:
        return sse_events(self.events.failing(err.message))

    def whole(self, document: bytes, usage: Usage | None) -> bytes:
        try:
            chat = orjson.loads(document)
        except orjson.JSONDecodeError:
            chat = {}
        return orjson.dumps(
            response_of_chat(self.shell, chat if isinstance(chat, dict) else {}, usage)
        )


def translator_for(
    request: ParsedRequest, request_id: str, *, native: bool
) -> ResponsesTranslator | None:
    """The translator a request's answer needs: none for chat and the others, nor for a pool
    that serves the Responses API itself."""
    if request.operation is not Operation.RESPONSES or native or request.source is None:
        return None
    return ResponsesTranslator(ResponseShell.of(request.source, request_id, int(time.time())))
