"""The OpenAPI check (openapi_check.py) on a real client's traffic: an httpx transport that
passes every answer through unchanged and, once its body has been read to the end, validates it
against OpenAI's document (an answer left unread or cut by the client is not checked)::

    sdk = checked_openai(gateway.base_url)          # the openai SDK, every answer checked
    sdk.responses.create(model="tiny", input="hi")  # AssertionError if it does not conform
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai

from tests.conformance.openapi_check import Tolerated, check_answer


def _check(
    request: httpx.Request, response: httpx.Response, body: bytes, tolerate: Tolerated
) -> None:
    check_answer(
        request.method,
        request.url.path,
        response.status_code,
        response.headers.get("content-type", ""),
        body,
        tolerate,
    )


class _Tee(httpx.SyncByteStream):
    def __init__(
        self, inner: httpx.SyncByteStream, request: httpx.Request, tolerate: Tolerated
    ) -> None:
        self.inner, self.request, self.tolerate = inner, request, tolerate
        self.response: httpx.Response | None = None

    def __iter__(self) -> Iterator[bytes]:
        seen: list[bytes] = []
        for chunk in self.inner:
            seen.append(chunk)
            yield chunk
        assert self.response is not None
        _check(self.request, self.response, b"".join(seen), self.tolerate)

    def close(self) -> None:
        self.inner.close()


class _AsyncTee(httpx.AsyncByteStream):
    def __init__(
        self, inner: httpx.AsyncByteStream, request: httpx.Request, tolerate: Tolerated
    ) -> None:
        self.inner, self.request, self.tolerate = inner, request, tolerate
        self.response: httpx.Response | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        async for chunk in self.inner:
            seen.append(chunk)
            yield chunk
        assert self.response is not None
        _check(self.request, self.response, b"".join(seen), self.tolerate)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _teed(response: httpx.Response, tee: _Tee | _AsyncTee) -> httpx.Response:
    """``response`` with its body read through ``tee`` (which checks it once it is whole)."""
    checked = httpx.Response(
        response.status_code, headers=response.headers, stream=tee, extensions=response.extensions
    )
    tee.response = checked
    return checked


class CheckingTransport(httpx.BaseTransport):
    def __init__(
        self, inner: httpx.BaseTransport | None = None, tolerate: Tolerated = frozenset()
    ) -> None:
        self.inner = inner or httpx.HTTPTransport()
        self.tolerate = tolerate

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        return _teed(response, _Tee(response.stream, request, self.tolerate))

    def close(self) -> None:
        self.inner.close()


class AsyncCheckingTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, inner: httpx.AsyncBaseTransport | None = None, tolerate: Tolerated = frozenset()
    ) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.tolerate = tolerate

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return _teed(response, _AsyncTee(response.stream, request, self.tolerate))

    async def aclose(self) -> None:
        await self.inner.aclose()


def checked_openai(
    base_url: str, tolerate: Tolerated = frozenset(), **options: Any
) -> openai.OpenAI:
    """The openai SDK on ``base_url`` (retries off), every whole answer checked (``tolerate``:
    see ``openapi_check.VLLM_NULLS``)."""
    options.setdefault("max_retries", 0)
    transport = CheckingTransport(tolerate=tolerate)
    http = httpx.Client(transport=transport, timeout=options.pop("timeout", 120))
    return openai.OpenAI(base_url=base_url, api_key="unused", http_client=http, **options)


def checked_async_openai(base_url: str, **options: Any) -> openai.AsyncOpenAI:
    options.setdefault("max_retries", 0)
    http = httpx.AsyncClient(
        transport=AsyncCheckingTransport(), timeout=options.pop("timeout", 120)
    )
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", http_client=http, **options)
