"""What the factory composes is what is served: the in-flight cap and the injected clock."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from gateway.server.overload import InFlightLimit
from tests.seam.harness import running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.upstream import Script

SCRIPTS = {"default": Script(), "held": Script(chunks=2, gap=300.0)}


def the_cap(layer: object) -> InFlightLimit | None:
    """The cap in the stack: just inside the request ids, before spans and auth."""
    while layer is not None and not isinstance(layer, InFlightLimit):
        layer = getattr(layer, "proxied", None) or getattr(layer, "app", None)
    return layer


async def test_the_in_flight_cap_is_applied_by_the_factory(tmp_path: Path) -> None:
    overrides = {"server": {"access_log": False, "max_requests_in_flight": 1}}
    async with running_gateway(tmp_path, SCRIPTS, **overrides) as gw:
        held = asyncio.create_task(gw.call(CHAT, chat("held", stream=True)))
        async with asyncio.timeout(30):  # the stack is built by the first call
            while (cap := the_cap(gw.app.middleware_stack)) is None:
                await asyncio.sleep(0.01)
            while cap.in_flight < 1:
                await asyncio.sleep(0.01)
        refused = await gw.call(CHAT, chat())
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "server_overloaded"
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held
        assert (await gw.call(CHAT, chat())).status == 200  # the slot is free again


async def test_the_ledger_row_is_stamped_by_the_apps_clock(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        gw.clock.advance(3600)
        reply = await gw.call(CHAT, chat())
        assert reply.outcome is not None
        assert reply.outcome.arrival.started_wall == gw.clock.wall()
    (row,) = gw.ledger_rows()
    assert row["created_at"] == gw.clock.wall()
