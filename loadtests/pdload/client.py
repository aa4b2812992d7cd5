"""One streamed OpenAI request over aiohttp, timed chunk by chunk, and the pre-flight check.

aiohttp's client (already the gateway's upstream client) keeps thousands of concurrent streams on
one event loop at a few hundred microseconds of CPU each; its errors are translated here, once,
into the short error types of :class:`~loadtests.pdload.records.RequestRecord`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from loadtests.pdload.records import RequestRecord
from loadtests.pdload.sse import StreamProtocolError, StreamTimer, timing
from loadtests.pdload.workload import WorkItem

Api = Literal["chat", "completions"]
# Route headers are echoed into the report; a misbehaving server must not blow it up.
MAX_HEADER_CHARS = 64
MAX_ERROR_BODY = 4096
ROUTE_HEADERS = {
    "pool": "x-gateway-pool",
    "variant": "x-gateway-variant",
    "route_reason": "x-gateway-route-reason",
    "predicted_ttft_ms": "x-gateway-predicted-ttft-ms",
}


@dataclass(frozen=True, slots=True)
class Target:
    """An OpenAI-compatible endpoint: ``base_url`` ends where ``/chat/completions`` is added."""

    name: str
    base_url: str
    model: str
    api_key: str | None = None
    mirrors: tuple[str, ...] = ()
    """More base URLs of the same service (N gateway replicas): requests go round robin over
    ``base_url`` and these, by request index (``--target gw=URL1|URL2``)."""

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers


class TargetError(Exception):
    """The target cannot be load-tested at all; ``exit_code`` says why (see the CLI)."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


EXIT_UNREACHABLE = 3
EXIT_KEY_REFUSED = 4


def request_body(target: Target, item: WorkItem, api: Api, extra: dict[str, Any]) -> bytes:
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": item.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    if api == "chat":
        messages = item.messages or ({"role": "user", "content": item.prompt},)
        body["messages"] = list(messages)
    else:
        body["prompt"] = item.prompt
    return orjson.dumps(body)


def _error_detail(status: int, raw: bytes) -> str:
    try:
        error = orjson.loads(raw).get("error", {})
        return f"{error.get('type') or error.get('code') or ''}: {error.get('message', '')}"[:200]
    except (orjson.JSONDecodeError, AttributeError):
        return raw[:200].decode(errors="replace")


async def _read_stream(response: aiohttp.ClientResponse, timer: StreamTimer) -> None:
    async for data in response.content.iter_any():
        timer.feed(data, time.perf_counter())


def cached_tokens(usage: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` when the server reports it (vLLM, OpenAI)."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _finish(record: RequestRecord, timer: StreamTimer, start: float) -> None:
    usage = timer.usage or {}
    record.prompt_tokens = usage.get("prompt_tokens")
    record.cached_tokens = cached_tokens(usage)
    record.completion_tokens = usage.get("completion_tokens", len(timer.token_times))
    t = timing(start, time.perf_counter(), timer.token_times, record.completion_tokens)
    record.ttft, record.tpot, record.e2e, record.itls = t.ttft, t.tpot, t.e2e, list(t.itls)
    record.chunks = len(timer.token_times)
    if timer.error is not None:
        record.error, record.error_message = "stream_error", timer.error
    elif not timer.done:
        record.error = "truncated"


def endpoint(target: Target, api: Api) -> str:
    return target.base_url + ("/chat/completions" if api == "chat" else "/completions")


def endpoints(target: Target, api: Api) -> tuple[str, ...]:
    """Every base URL's endpoint, the target's own first (round robin over them)."""
    path = "/chat/completions" if api == "chat" else "/completions"
    return tuple(base + path for base in (target.base_url, *target.mirrors))


async def send(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: bytes,
    record: RequestRecord,
) -> RequestRecord:
    """Send one streamed request and fill ``record`` with what happened; never raises."""
    start = time.perf_counter()
    timer = StreamTimer()
    try:
        async with session.post(url, data=body, headers=headers) as r:
            record.status = r.status
            for field, header in ROUTE_HEADERS.items():
                value = r.headers.get(header)
                setattr(record, field, value[:MAX_HEADER_CHARS] if value else None)
            if r.status != 200:
                record.error = f"http_{r.status}"
                record.error_message = _error_detail(r.status, await r.content.read(MAX_ERROR_BODY))
                record.e2e = time.perf_counter() - start
                return record
            await _read_stream(r, timer)
        _finish(record, timer, start)
    except (aiohttp.ClientConnectorError, ConnectionRefusedError) as e:
        record.error, record.error_message = "connect", str(e)[:200]
    except TimeoutError:
        record.error = "timeout"
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as e:
        _finish(record, timer, start)
        record.error, record.error_message = "truncated", str(e)[:200]
    except StreamProtocolError as e:
        record.error, record.error_message = "protocol", str(e)[:200]
    except aiohttp.ClientError as e:
        record.error, record.error_message = "client_error", f"{type(e).__name__}: {e}"[:200]
    if record.e2e is None:
        record.e2e = time.perf_counter() - start
    return record


async def preflight(session: aiohttp.ClientSession, target: Target) -> list[str]:
    """``GET <base>/models`` once: unreachable or a refused key raise :class:`TargetError`.

    Returns warnings (a server without ``/models``, a model it does not list).
    """
    url = target.base_url + "/models"
    try:
        async with session.get(
            url, headers=target.headers(), timeout=aiohttp.ClientTimeout(total=15)
        ) as r:
            raw = await r.content.read(1 << 20)
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as e:
        raise TargetError(
            EXIT_UNREACHABLE,
            f"target {target.name!r} is unreachable at {url}: {type(e).__name__}: {e}",
        ) from e
    if status in (401, 403):
        raise TargetError(
            EXIT_KEY_REFUSED,
            f"target {target.name!r} refused the API key ({status} {_error_detail(status, raw)}); "
            "set it with --api-key-env VAR or key_env= in --target",
        )
    if status != 200:
        return [f"target {target.name!r}: GET {url} answered {status}; going on"]
    try:
        listed = {m.get("id") for m in orjson.loads(raw).get("data", [])}
    except (orjson.JSONDecodeError, AttributeError):
        return [f"target {target.name!r}: GET {url} did not return a model list"]
    if target.model not in listed:
        return [
            f"target {target.name!r} does not list model {target.model!r} "
            f"(lists {sorted(map(str, listed))[:8]})"
        ]
    return []
