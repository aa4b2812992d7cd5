"""Notice a client that goes away while its request is being served, and cancel the work at once.

uvicorn silently drops what is sent to a closed connection, so the only prompt signal is the
``http.disconnect`` message from ``receive``; a small task waits for it and cancels the handler.
"""

from __future__ import annotations

import asyncio

from gateway.asgi import Receive


class DisconnectWatch:
    """Use around the upstream exchange, once the request body has been read::

    watch = DisconnectWatch(receive)
    try:
        await exchange()
    except asyncio.CancelledError:
        if not watch.client_gone():
            raise
    finally:
        watch.stop()
    """

    __slots__ = ("_finished", "_gone", "_task", "_watcher")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._gone = False
        self._finished = False
        self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
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
        self._watcher.cancel()
