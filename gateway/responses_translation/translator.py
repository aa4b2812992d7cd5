"""The relay's chunk translator for the Responses API: chat answers in, Responses bytes out.

The relay meters the upstream's chat chunks itself (one parse, one usage truth) and hands this
translator the decoded chunks; the translator only writes the events::

    translator = ResponsesTranslator(ResponseShell.of(source, request_id, created_at))
    translator.opening()                 # bytes: response.created, response.in_progress
    translator.chunks(decoded_chunks)    # bytes for the events these chat chunks make
    translator.closing(usage)            # bytes: the .done events and response.completed
    translator.failing(err)              # bytes: error and response.failed
    translator.whole(document, usage)    # a whole chat answer as a response object
    await translator.finished()          # before the last bytes: the keeper stores the response

A :class:`Keeper` (gateway/response_store/) is what keeps a stored response: told when a stream
opens (so a cut one is kept as far as it got) and awaited with the final object before the answer's
last bytes go out, so a follow-up that names it finds it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from gateway.errors import GatewayError
from gateway.responses_translation.objects import Json, ResponseShell, response_of_chat
from gateway.responses_translation.stream import ResponseEvents
from gateway.wire.request import Operation, ParsedRequest
from gateway.wire.usage import Usage


def sse_events(events: Iterable[Json]) -> bytes:
    """Events framed as the Responses API sends them: ``event: <type>`` then ``data:``."""
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


class Keeper(Protocol):
    """Keeps one request's response (gateway/response_store/service.py ``Turn``)."""

    created_at: int
    stored: bool
    """The response is kept (``store`` true or omitted, and the gateway stores responses)."""
    previous_response_id: str | None

    def opened(self, events: ResponseEvents) -> None:
        """The stream started: the client has the response's id."""

    async def keep(self, response: Json) -> None:
        """Store the finished response (never raises)."""


class ResponsesTranslator:
    __slots__ = ("events", "keeper", "shell")

    def __init__(self, shell: ResponseShell, keeper: Keeper | None = None) -> None:
        self.shell = shell
        self.events = ResponseEvents(shell)
        self.keeper = keeper

    def opening(self) -> bytes:
        if self.keeper is not None:
            self.keeper.opened(self.events)
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
        response = response_of_chat(
            self.shell,
            chat if isinstance(chat, dict) else {},
            usage,
            self.events.completed_at(),
        )
        self.events.final = response
        return orjson.dumps(response)

    async def finished(self) -> None:
        """The answer is complete (its last bytes not yet sent): keep the response."""
        if self.keeper is not None and self.events.final is not None:
            await self.keeper.keep(self.events.final)


def translator_for(
    request: ParsedRequest, request_id: str, *, native: bool, keeper: Keeper | None = None
) -> ResponsesTranslator | None:
    """The translator a request's answer needs: none for chat and the others, nor for a pool
    that serves the Responses API itself."""
    if request.operation is not Operation.RESPONSES or native or request.source is None:
        return None
    if keeper is None:
        return ResponsesTranslator(ResponseShell.of(request.source, request_id, int(time.time())))
    shell = ResponseShell.of(
        request.source,
        request_id,
        keeper.created_at,
        stored=keeper.stored,
        previous_response_id=keeper.previous_response_id,
    )
    return ResponsesTranslator(shell, keeper)
