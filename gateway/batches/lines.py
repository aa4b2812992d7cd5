"""An input file's lines checked as OpenAI checks them, and the output file's lines: pure.

Each input line is one JSON object ``{"custom_id", "method": "POST", "url", "body"}``; the
``custom_id`` is unique in the file and short, ``url`` one of the endpoints this gateway serves
in batches, ``body`` an object. The first bad line refuses the whole file (a 400 that names the
line), so nothing is stored half::

    checked = check_lines(chunks, bounds)          # CheckedFile(lines=(...), size=...)
    output_line(batch_line, status, request_id, body_json)   # OpenAI's output line
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from gateway.errors import BodyTooLarge, InvalidParameter
from gateway.values import value
from gateway.wire.request import Operation

Json = dict[str, Any]
MAX_CUSTOM_ID_CHARS = 512
BATCH_ENDPOINTS = {"/v1/" + op.value: op for op in Operation}
"""``url`` of a line and ``endpoint`` of a batch: every operation the gateway proxies."""


@value
class Bounds:
    max_bytes: int
    max_lines: int
    max_line_bytes: int


@value
class InputLine:
    number: int
    """1-based, as OpenAI's errors count lines."""
    custom_id: str
    url: str
    body: bytes
    """The line's ``body``, JSON, as the pipeline gets it."""


@value
class CheckedFile:
    lines: tuple[InputLine, ...]
    size: int


class LineChecker:
    """Fed the file as it arrives, one chunk at a time; 413 past ``max_bytes``, 400 for a line
    past ``max_line_bytes`` (checked before the line is whole: one endless line costs no more
    than the bound) or the first bad line::

        checker = LineChecker(bounds)
        for chunk in chunks:
            checker.feed(chunk)
        checked = checker.finish()
    """

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.size = 0
        self._tail = b""
        self._seen: set[str] = set()
        self._lines: list[InputLine] = []

    def feed(self, chunk: bytes) -> None:
        bounds = self.bounds
        self.size += len(chunk)
        if self.size > bounds.max_bytes:
            raise BodyTooLarge(f"The file is larger than the limit of {bounds.max_bytes} bytes.")
        *whole, self._tail = (self._tail + chunk).split(b"\n")
        for raw in whole:
            self._line(raw)
        if len(self._tail) > bounds.max_line_bytes:
            raise _line_error(len(self._lines) + 1, f"longer than {bounds.max_line_bytes} bytes")

    def finish(self) -> CheckedFile:
        self._line(self._tail)
        self._tail = b""
        if not self._lines:
            raise InvalidParameter("The file has no requests.", param="file", code="empty_file")
        return CheckedFile(tuple(self._lines), self.size)

    def _line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        number = len(self._lines) + 1
        if len(raw) > self.bounds.max_line_bytes:
            raise _line_error(number, f"longer than {self.bounds.max_line_bytes} bytes")
        if number > self.bounds.max_lines:
            raise InvalidParameter(
                f"The file has more than {self.bounds.max_lines} requests.",
                param="file",
                code="too_many_requests_in_file",
            )
        line = check_line(number, raw)
        if line.custom_id in self._seen:
            raise _line_error(number, f"custom_id '{line.custom_id}' is used twice", "duplicate")
        self._seen.add(line.custom_id)
        self._lines.append(line)


def check_lines(chunks: Iterable[bytes], bounds: Bounds) -> CheckedFile:
    checker = LineChecker(bounds)
    for chunk in chunks:
        checker.feed(chunk)
    return checker.finish()


def check_line(number: int, raw: bytes) -> InputLine:
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _line_error(number, "not valid JSON") from None
    if not isinstance(line, dict):
        raise _line_error(number, "not a JSON object")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= MAX_CUSTOM_ID_CHARS:
        raise _line_error(
            number, f"`custom_id` must be a string of 1 to {MAX_CUSTOM_ID_CHARS} characters"
        )
    if line.get("method") != "POST":
        raise _line_error(number, "`method` must be POST")
    url = line.get("url")
    if url not in BATCH_ENDPOINTS:
        raise _line_error(number, f"`url` must be one of {', '.join(sorted(BATCH_ENDPOINTS))}")
    body = line.get("body")
    if not isinstance(body, dict):
        raise _line_error(number, "`body` must be a JSON object")
    if body.get("stream") is True:
        raise _line_error(number, "`body.stream` is not supported in a batch")
    return InputLine(number, custom_id, str(url), orjson.dumps(body))


def _line_error(number: int | None, why: str, kind: str = "invalid") -> InvalidParameter:
    where = "The file" if number is None else f"Line {number} of the file"
    code = "duplicate_custom_id" if kind == "duplicate" else "invalid_batch_line"
    return InvalidParameter(f"{where}: {why}.", param="file", code=code)


def output_line(custom_id: str, batch_id: str, status: int, request_id: str, body: bytes) -> bytes:
    """One line of the output file (a 2xx answer) or the error file (any other), OpenAI's way:
    ``{id, custom_id, response: {status_code, request_id, body}, error}``."""
    try:
        answer: object = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        answer = body.decode("utf-8", "replace")
    error = None
    if status >= 300 and isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        inner = answer["error"]
        error = {"code": inner.get("code"), "message": inner.get("message")}
    line = {
        "id": f"{batch_id}_req_{request_id}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": answer},
        "error": error,
    }
    return orjson.dumps(line)


def failed_line(custom_id: str, batch_id: str, code: str, message: str) -> bytes:
    """A line that got no answer at all (the batch expired or was cancelled first)."""
    line = {
        "id": f"{batch_id}_req_{custom_id[:64]}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
    return orjson.dumps(line)
