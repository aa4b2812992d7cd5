"""The flow-control queue: bounds, bands, fairness by tokens, time limits (gateway/flow/queue.py).

Room is a plain counter the test moves; the queue's own ``pending`` is honoured as the pools do.
No test waits on a timer except the one of max_wait (it can only end one way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from gateway.errors import QueueRefused, Shed
from gateway.flow.config import FlowConfig
from gateway.flow.queue import FlowQueue, Ticket


class Room:
    """Places free on one pool, "p"; a dispatched request takes one until it is freed."""

    def __init__(self, free: int = 0) -> None:
        self.free = free

    def __call__(self, pending: Mapping[str, int]) -> str | None:
        return "p" if self.free - pending.get("p", 0) > 0 else None


def config(**changes: object) -> FlowConfig:
    return FlowConfig.model_validate({"enabled": True, "recheck_seconds": 3600, **changes})


async def enter(queue: FlowQueue, room: Room, ticket: Ticket, served: list[str]) -> None:
    await queue.enter(ticket, room)
    room.free -= 1  # takes its replica, synchronously, as dispatch does
    served.append(ticket.tenant)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def release(queue: FlowQueue, room: Room, n: int = 1) -> None:
    room.free += n
    queue.pump()
    await settle()


async def test_with_room_and_nobody_waiting_it_goes_straight_on() -> None:
    queue = FlowQueue(config())
    assert await queue.enter(Ticket("standard", "a", 10, 10), Room(1)) == 0.0
    assert queue.waiting == 0


async def test_a_sheddable_request_is_refused_at_once_while_no_pool_has_room() -> None:
    queue = FlowQueue(config())
    with pytest.raises(Shed) as refused:
        await queue.enter(Ticket("sheddable", "a", 10, 10), Room(0))
    assert refused.value.status == 429 and refused.value.headers["retry-after"] == "1"


async def test_waiters_go_in_order_of_band_then_fairly_by_tokens_across_tenants() -> None:
    queue = FlowQueue(config())
    room = Room(0)
    served: list[str] = []
    tasks = []
    # Tenant "big" queues four long requests first, then "small" four short ones.
    for _ in range(4):
        tasks.append(
            asyncio.create_task(enter(queue, room, Ticket("standard", "big", 8000, 1), served))
        )
    await settle()
    for _ in range(4):
        tasks.append(
            asyncio.create_task(enter(queue, room, Ticket("standard", "small", 1000, 1), served))
        )
    await settle()
    tasks.append(
        asyncio.create_task(enter(queue, room, Ticket("interactive", "vip", 1000, 1), served))
    )
    await settle()
    assert queue.waiting == 9
    for _ in range(9):
        await release(queue, room)
    await asyncio.gather(*tasks)
    assert served[0] == "vip"  # the higher band first, though it came last
    # Start-time fair queuing by tokens: one long request of "big" is worth eight short ones,
    # so "small" is not stuck behind all of "big"'s.
    assert served[1:] == ["big", "small", "small", "small", "small", "big", "big", "big"]


async def test_one_pump_grants_no_more_places_than_there_are() -> None:
    queue = FlowQueue(config())
    room = Room(0)
    served: list[str] = []
    tasks = [
        asyncio.create_task(enter(queue, room, Ticket("standard", str(i), 1, 1), served))
        for i in range(5)
    ]
    await settle()
    await release(queue, room, 2)
    assert len(served) == 2 and queue.waiting == 3 and not queue.pending
    await release(queue, room, 3)
    await asyncio.gather(*tasks)


async def test_past_the_count_bound_the_lowest_band_gives_way_or_the_newcomer_is_refused() -> None:
    queue = FlowQueue(config(max_queued=2))
    room = Room(0)
    served: list[str] = []
    low = asyncio.create_task(enter(queue, room, Ticket("standard", "low", 1, 1), served))
    same = asyncio.create_task(enter(queue, room, Ticket("standard", "same", 1, 1), served))
    await settle()
    with pytest.raises(QueueRefused) as full:
        await queue.enter(Ticket("standard", "late", 1, 1), room)
    assert full.value.code == "queue_full" and full.value.status == 503
    high = asyncio.create_task(enter(queue, room, Ticket("interactive", "high", 1, 1), served))
    await settle()
    with pytest.raises(QueueRefused):
        await same  # the newest of the lower band made room
    assert queue.waiting == 2
    await release(queue, room, 2)
    await asyncio.gather(low, high)
    assert served == ["high", "low"]


async def test_the_bytes_bound_holds_too() -> None:
    queue = FlowQueue(config(max_queued_bytes=100))
    room = Room(0)
    first = asyncio.create_task(queue.enter(Ticket("standard", "a", 1, 80), room))
    await settle()
    with pytest.raises(QueueRefused):
        await queue.enter(Ticket("standard", "b", 1, 30), room)
    first.cancel()
    await settle()
    assert queue.waiting == 0 and queue.bytes == 0


async def test_a_request_that_waits_past_max_wait_is_refused_with_retry_after() -> None:
    queue = FlowQueue(config(max_wait_seconds=0.01, retry_after_seconds=2))
    with pytest.raises(QueueRefused) as late:
        await queue.enter(Ticket("standard", "a", 1, 1), Room(0))
    assert late.value.code == "queue_timeout" and late.value.headers["retry-after"] == "2"
    assert queue.waiting == 0


async def test_a_client_that_leaves_while_waiting_leaves_the_queue() -> None:
    results: list[tuple[str, str]] = []
    queue = FlowQueue(config(), observe=lambda band, result, waited: results.append((band, result)))
    room = Room(0)
    task = asyncio.create_task(queue.enter(Ticket("standard", "a", 1, 1), room))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.waiting == 0 and not queue.pending
    assert results == [("standard", "gone")]


async def test_a_granted_request_cancelled_before_it_resumed_gives_its_place_back() -> None:
    queue = FlowQueue(config())
    room = Room(0)
    served: list[str] = []
    first = asyncio.create_task(queue.enter(Ticket("standard", "a", 1, 1), room))
    second = asyncio.create_task(enter(queue, room, Ticket("standard", "b", 1, 1), served))
    await settle()
    room.free = 1
    queue.pump()  # grants "a"; it is cancelled before it runs
    first.cancel()
    await settle()
    assert not queue.pending
    await second
    assert served == ["b"]


async def test_the_recheck_timer_dispatches_when_room_appears_without_a_release() -> None:
    queue = FlowQueue(config(recheck_seconds=0.001))
    room = Room(0)
    task = asyncio.create_task(queue.enter(Ticket("standard", "a", 1, 1), room))
    await settle()
    room.free = 1  # the engines' gauges changed; nobody called pump
    await asyncio.wait_for(task, timeout=30)
    queue.close()


async def test_a_head_without_room_does_not_hold_back_another_tenants_head_with_room() -> None:
    """Heads are tried in start-tag order; the first whose plan has room goes (its pools differ,
    or the reserve keeps places from the other's tenant), within the highest band waiting."""
    queue = FlowQueue(config())
    none, some = Room(0), Room(0)
    served: list[str] = []
    blocked = asyncio.create_task(enter(queue, none, Ticket("standard", "a", 10, 1), served))
    await settle()
    other = asyncio.create_task(enter(queue, some, Ticket("standard", "b", 10, 1), served))
    low = asyncio.create_task(enter(queue, some, Ticket("sheddable", "c", 10, 1), served))
    await settle()
    assert queue.waiting == 2  # "a" first by its tag; the sheddable one was refused at once
    with pytest.raises(Shed):
        await low
    await release(queue, some)
    assert served == ["b"] and queue.waiting == 1
    await release(queue, none)
    await blocked
    await other
    assert served == ["b", "a"]
