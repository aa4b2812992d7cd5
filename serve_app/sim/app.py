"""The simulated vLLM OpenAI server as one pure ASGI callable.

It stands in for Ray Serve LLM in gateway tests and overhead benchmarks only. Dispatch is a
dict lookup on the path; no framework sits on the hot path.

    app = create_sim_app(SimSettings(no_delay=True))
    uvicorn.run(app, loop="uvloop", http="httptools")
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from serve_app.sim import text
from serve_app.sim.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    header_dict,
    read_body,
    send_bytes,
    wait_disconnect,
)
from serve_app.sim.engine import RequestTooLarge, SimEngine
from serve_app.sim.generation import (
    Generation,
    TimingModel,
    answer_completion,
    stream_completion,
)
from serve_app.sim.plan import SimRequestError, plan_completion, resolve_model
from serve_app.sim.records import RequestLog, RequestRecord
from serve_app.sim.settings import SimSettings
from serve_app.sim.steering import NO_STEERING, Steering, SteeringError, has_steering
from serve_app.sim.vllm_metrics import CONTENT_TYPE, VllmMetrics
from serve_app.sim.wire import (
    ChatWireFormat,
    Completion,
    WireFormat,
    embeddings_body,
    error_body,
    models_body,
)

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class SimApp:
    """The simulator's ASGI application; state lives on the instance, made by the factory."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.log = RequestLog(settings.max_records)
        self.timing = TimingModel(settings)
        self._id_prefix = os.urandom(4).hex()
        self._served = 0  # model requests so far: the --fail-rate schedule
        self._chat = ChatWireFormat()
        self._text = WireFormat()
        self._models = models_body(settings.models, settings.max_model_len, int(time.time()))
        self._routes: dict[str, tuple[str, Handler]] = {
            "/v1/chat/completions": ("POST", self._chat_completions),
            "/v1/completions": ("POST", self._completions),
            "/v1/embeddings": ("POST", self._embeddings),
            "/v1/models": ("GET", self._list_models),
            "/health": ("GET", self._health),
            "/sim/requests": ("GET", self._list_requests),
            "/sim/reset": ("POST", self._reset),
        }
        self.engine: SimEngine | None = None
        if settings.capacity is not None:
            self.engine = SimEngine(settings.capacity, VllmMetrics(settings.models[0]))
            self._routes["/metrics"] = ("GET", self._metrics)
            self._routes["/reset_prefix_cache"] = ("POST", self._reset_prefix_cache)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        route = self._routes.get(scope["path"])
        if route is None:
            await send_bytes(send, 404, error_body(404, f"Not found: {scope['path']}"))
        elif scope["method"] != route[0]:
            await send_bytes(send, 405, error_body(405, "Method Not Allowed"))
        else:
            await route[1](scope, receive, send)

    # --- plain endpoints -------------------------------------------------------------------

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, b"")

    async def _list_models(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, self._models)

    async def _list_requests(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, orjson.dumps(self.log.snapshot()))

    async def _reset(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.log.clear()
        await send_bytes(send, 200, b"{}")

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.engine is not None
        body = self.engine.metrics.render(self.engine.scheduler)
        await send_bytes(send, 200, body, CONTENT_TYPE)

    async def _reset_prefix_cache(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.engine is not None
        self.engine.scheduler.pool.clear_cache()
        await send_bytes(send, 200, b"")

    # --- model endpoints -------------------------------------------------------------------

    async def _chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._completion(scope, receive, send, self._chat)

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._completion(scope, receive, send, self._text)

    async def _completion(
        self, scope: Scope, receive: Receive, send: Send, wire: WireFormat
    ) -> None:
        opened = await self._open(scope, receive, send)
        if opened is None:
            return
        body, record, steering = opened
        try:
            plan = plan_completion(body, self.settings, chat=wire is self._chat)
        except SimRequestError as e:
            await _reject(send, record, e.status, e.message, e.param)
            return
        record["model"] = plan.model
        record["stream"] = plan.stream
        completion = Completion(
            f"{wire.id_prefix}{self._id_prefix}{record['seq']:x}", int(time.time()), plan.model
        )
        g = Generation(plan, wire, completion, steering, record, self.timing, self.engine)
        if g.on_engine:
            assert self.engine is not None
            g.tokens = _prompt_tokens(body, wire is self._chat)
            try:
                self.engine.check(len(g.tokens), plan.max_tokens)
            except RequestTooLarge as e:
                await _reject(send, record, 400, str(e), "input_tokens")
                return
        run = stream_completion if plan.stream else answer_completion
        if not plan.stream and self.settings.no_delay and steering.fail_after is None:
            # Nothing awaits here but the send: no need to watch for the client leaving.
            await run(g, send, receive)
            return
        await _watch_client(run(g, send, receive), receive, record)

    async def _embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = await self._open(scope, receive, send)
        if opened is None:
            return
        body, record, _ = opened
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            await _reject(send, record, 400, "input must be a string or a list of strings", "input")
            return
        try:
            model = resolve_model(body, self.settings)
        except SimRequestError as e:
            await _reject(send, record, e.status, e.message, e.param)
            return
        record["model"] = model
        dim = self.settings.embedding_dim
        vectors = [text.embedding(i, dim) for i in inputs]
        tokens = sum(len(i.split()) for i in inputs)
        response = embeddings_body(
            model, vectors, tokens, f"embd-{self._id_prefix}{record['seq']:x}", int(time.time())
        )
        record["status"] = 200
        await send_bytes(send, 200, response)
        record["completed_at"] = time.time()

    async def _open(
        self, scope: Scope, receive: Receive, send: Send
    ) -> tuple[dict[str, Any], RequestRecord, Steering] | None:
        """Read, record and parse a model request; apply the steering that answers without it.

        None means the request was answered (or dropped) already.
        """
        headers = header_dict(scope)
        record = self.log.open(scope["path"], headers)
        try:
            raw = await read_body(receive)
        except ClientGone:
            _mark_cancelled(record)
            return None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            await _reject(send, record, 400, f"Invalid JSON body: {e}")
            return None
        if not isinstance(body, dict):
            await _reject(send, record, 400, "The request body must be a JSON object")
            return None
        record["body"] = body
        record["model"] = body.get("model")
        record["stream"] = bool(body.get("stream", False))
        if self._scheduled_failure():
            status = self.settings.fail_status
            await _reject(send, record, status, f"simulated error (--fail-rate): status {status}")
            return None
        steering = NO_STEERING
        if has_steering(headers):
            try:
                steering = Steering.from_headers(headers)
            except SteeringError as e:
                await _reject(send, record, 400, str(e))
                return None
            if await _steer_without_answer(steering, receive, send, record):
                return None
        return body, record, steering

    def _scheduled_failure(self) -> bool:
        rate = self.settings.fail_rate
        if not rate:
            return False
        n = self._served
        self._served += 1
        return int((n + 1) * rate) > int(n * rate)


def _prompt_tokens(body: dict[str, Any], chat: bool) -> list[str]:
    """The prompt as the simulator's tokens (the body was validated by the plan)."""
    if chat:
        return text.chat_tokens(body["messages"])
    return text.completion_tokens(body.get("prompt"))


async def _steer_without_answer(
    steering: Steering, receive: Receive, send: Send, record: RequestRecord
) -> bool:
    """``x-sim-status`` and ``x-sim-hang``: True when the request is settled by them."""
    if steering.status is not None:
        await _reject(send, record, steering.status, f"simulated error: status {steering.status}")
        return True
    if steering.hang:
        await wait_disconnect(receive)
        _mark_cancelled(record)
        return True
    return False


async def _reject(
    send: Send, record: RequestRecord, status: int, message: str, param: str | None = None
) -> None:
    record["status"] = status
    await send_bytes(send, status, error_body(status, message, param))
    record["completed_at"] = time.time()


def _mark_cancelled(record: RequestRecord) -> None:
    record["cancelled"] = True
    record["cancelled_at"] = time.time()


async def _watch_client(work: Awaitable[None], receive: Receive, record: RequestRecord) -> None:
    """Run ``work`` while listening for ``http.disconnect``; cancel it when the client leaves.

    Like Starlette's StreamingResponse: the disconnect is noticed at once, even while the work
    sleeps between tokens.
    """
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait((work_task, watch_task), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch_task.cancel()
        if not work_task.done():
            # The client went away first (or this handler itself was cancelled).
            work_task.cancel()
            if not record["aborted"]:
                _mark_cancelled(record)
            # Let the work run its clean-up (the decode count) before the handler returns.
            await asyncio.wait((work_task,))
    if work_task.cancelled():
        return
    work_task.result()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_sim_app(settings: SimSettings | None = None) -> SimApp:
    """Build the simulator's ASGI app (a fresh state per call)."""
    return SimApp(settings or SimSettings())
