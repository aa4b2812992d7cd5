"""Chat completion chunks in, Responses API stream events out, one chunk at a time.

A small state machine; every event it returns carries the next ``sequence_number``::

    events = ResponseEvents(shell)
    events.opening()               # response.created, response.in_progress
    events.chunk(chat_chunk)       # output_item.added, content_part.added, output_text.delta,
                                   # function_call_arguments.delta ... as the chunk asks
    events.closing(usage)          # the open item's .done events, then response.completed
                                   # (response.incomplete when the output cap cut it)
    events.failing(message)        # error, then response.failed (the upstream broke mid-stream)

Only the first choice is read (the Responses API has no ``n``). The usage comes from the caller
(the relay's meter, which read the same chunks), so the number the client sees is the one billed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.responses_translation.objects import (
    Json,
    ResponseShell,
    function_call_item,
    incomplete_reason,
    message_item,
    obj,
    text_part,
)
from gateway.wire.usage import Usage


@dataclass(slots=True)
class _OpenItem:
    """The output item being streamed: a message's text, or a function call's arguments."""

    index: int
    item_id: str
    kind: str  # "message" or "function_call"
    parts: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    tool_index: int = -1

    @property
    def text(self) -> str:
        return "".join(self.parts)


class ResponseEvents:
    __slots__ = (
        "_finish_reason",
        "_open",
        "_output",
        "_sequence",
        "ended",
        "final",
        "shell",
        "wall",
    )

    def __init__(self, shell: ResponseShell, wall: Callable[[], float] = time.time) -> None:
        self.shell = shell
        self.wall = wall
        """The clock ``completed_at`` is read from (never before ``created_at``)."""
        self._sequence = 0
        self._output: list[Json] = []
        self._open: _OpenItem | None = None
        self._finish_reason: str | None = None
        self.ended = False
        """A terminal event (completed, incomplete or failed) was produced: nothing follows."""
        self.final: Json | None = None
        """The response object of the terminal event, once there is one."""

    def opening(self) -> list[Json]:
        response = self.shell.response("in_progress")
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def chunk(self, message: Mapping[str, Any]) -> list[Json]:
        """The events for one chat chunk (none for a role-only or usage-only chunk)."""
        if self.ended:
            return []
        error = message.get("error")
        if error is not None:  # vLLM reports a failure inside a started stream this way
            detail = error.get("message") if isinstance(error, dict) else None
            return self.failing(str(detail or "The upstream failed mid-stream."))
        choices = message.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return []
        choice = choices[0]
        events: list[Json] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                events += self._text(content)
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    events += self._call(call)
        if choice.get("finish_reason"):
            self._finish_reason = str(choice["finish_reason"])
        return events

    def closing(self, usage: Usage | None) -> list[Json]:
        """The end of a clean stream: close the open item, then the terminal event."""
        if self.ended:
            return []
        reason = incomplete_reason(self._finish_reason)
        events = self._close()
        self.ended = True
        status = "completed" if reason is None else "incomplete"
        response = self.shell.response(
            status,
            self._output,
            usage,
            incomplete_reason=reason,
            completed_at=self.completed_at(),
        )
        self.final = response
        return [*events, self._event(f"response.{status}", response=response)]

    def completed_at(self) -> int:
        return max(self.shell.created_at, int(self.wall()))

    def failing(self, message: str, code: str = "server_error") -> list[Json]:
        """The upstream broke: an ``error`` event, then ``response.failed`` with the items that
        were finished (the open one is dropped)."""
        if self.ended:
            return []
        self.ended = True
        self._open = None
        error = {"code": code, "message": message}
        response = self.shell.response("failed", self._output, error=error)
        self.final = response
        return [
            self._event("error", code=code, message=message, param=None),
            self._event("response.failed", response=response),
        ]

    def cut(self, status: str, error: Json | None = None) -> Json:
        """The response as far as it got, for a stream that ended without its terminal event
        (``cancelled``: the client left; ``failed``: the gateway stopped): the finished items."""
        return self.final or self.shell.response(status, self._output, error=error)

    # --- items ---------------------------------------------------------------------------

    def _text(self, content: str) -> list[Json]:
        events: list[Json] = []
        item = self._open
        if item is None or item.kind != "message":
            events += self._close()
            item = self._start(_OpenItem(len(self._output), "", "message"))
            events.append(self._added(message_item(item.item_id, None, "in_progress")))
            events.append(self._part_event("response.content_part.added", item, ""))
        item.parts.append(content)
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=item.item_id,
                output_index=item.index,
                content_index=0,
                delta=content,
                logprobs=[],
            )
        )
        return events

    def _call(self, call: Mapping[str, Any]) -> list[Json]:
        events: list[Json] = []
        tool_index = call.get("index", 0)
        function = obj(call.get("function"))
        item = self._open
        if item is None or item.kind != "function_call" or item.tool_index != tool_index:
            events += self._close()
            item = self._start(_OpenItem(len(self._output), "", "function_call"))
            item.tool_index = tool_index if isinstance(tool_index, int) else 0
            item.call_id = str(call.get("id") or self.shell.item_id("call", item.index))
            item.name = str(function.get("name") or "")
            events.append(
                self._added(
                    function_call_item(item.item_id, item.call_id, item.name, "", "in_progress")
                )
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts.append(arguments)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item.item_id,
                    output_index=item.index,
                    delta=arguments,
                )
            )
        return events

    def _start(self, item: _OpenItem) -> _OpenItem:
        kind = "msg" if item.kind == "message" else "fc"
        item.item_id = self.shell.item_id(kind, item.index)
        self._open = item
        return item

    def _close(self) -> list[Json]:
        """The ``.done`` events of the open item, which joins the output."""
        item, self._open = self._open, None
        if item is None:
            return []
        if item.kind == "message":
            status = "completed" if incomplete_reason(self._finish_reason) is None else "incomplete"
            done = message_item(item.item_id, item.text, status)
            events = [
                self._event(
                    "response.output_text.done",
                    item_id=item.item_id,
                    output_index=item.index,
                    content_index=0,
                    text=item.text,
                    logprobs=[],
                ),
                self._part_event("response.content_part.done", item, item.text),
            ]
        else:
            done = function_call_item(item.item_id, item.call_id, item.name, item.text, "completed")
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.item_id,
                    output_index=item.index,
                    name=item.name,
                    arguments=item.text,
                )
            ]
        self._output.append(done)
        events.append(self._event("response.output_item.done", output_index=item.index, item=done))
        return events

    def _added(self, item: Json) -> Json:
        return self._event("response.output_item.added", output_index=len(self._output), item=item)

    def _part_event(self, kind: str, item: _OpenItem, text: str) -> Json:
        return self._event(
            kind,
            item_id=item.item_id,
            output_index=item.index,
            content_index=0,
            part=text_part(text),
        )

    def _event(self, kind: str, **fields: Any) -> Json:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
