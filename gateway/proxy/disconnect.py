"""Notice a client that goes away while its request is being served, and cancel the work at once.

uvicorn silently drops what is sent to a closed connection, so the only prompt signal is the
``http.disconnect`` message from ``receive``, which the ASGI sink's ``departed`` waits for
(gateway/proxy/endpoint.py); a small task waits on it and cancels the pipeline.

The task starts only once the request has run for ``WATCH_AFTER`` seconds: most answers come
sooner, and a task per request (created, woken, cancelled) cost more than the rest of the
gateway's own work on them. A client that leaves earlier is noticed at that moment instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

WATCH_AFTER = 0.02  # seconds


class DisconnectWatch:
    """Use around the upstream exchange, once the request body has been read::

    watch = DisconnectWatch(sink.departed)
    try:
        await exchange()
    except asyncio.CancelledError:
        if not watch.client_gone():
            raise
    finally:
        watch.stop()
    """

    __slots__ = ("_finished", "_gone", "_task", "_timer", "_watcher")

    def __init__(self, departed: Callable[[], Awaitable[None]], after: float = WATCH_AFTER) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._gone = False
        self._finished = False
        self._watcher: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            after, self._start, departed
        )

    def _start(self, departed: Callable[[], Awaitable[None]]) -> None:
        self._timer = None
        if not self._finished:
            self._watcher = asyncio.ensure_future(self._watch(departed))

    async def _watch(self, departed: Callable[[], Awaitable[None]]) -> None:
        await departed()
        if not self._finished:
            self._gone = True
            self._task.cancel()

    def client_gone(self) -> bool:
        """True if the client left; the cancellation it caused is then consumed."""
        if self._gone:
            self._task.uncancel()
            return True
        return False

    def stop(self) -> None:
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
