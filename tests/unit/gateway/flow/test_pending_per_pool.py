"""Grants the flow queue has made but whose request has not resumed yet count against the pool
they were granted for, not against every pool (issue 35): real pools, the gate's room check, the
queue."""

from __future__ import annotations

import asyncio

from gateway.flow.config import FlowConfig
from gateway.flow.gate import room_in
from gateway.flow.queue import FlowQueue, Ticket
from gateway.routing.config import PoolConfig, VariantConfig, VariantPools
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan, Variant


def pool(name: str, port: int) -> Pool:
    return Pool(name, PoolConfig(urls=(f"http://127.0.0.1:{port}",), capacity=1))


def plan(target: Pool) -> RoutePlan:
    config = VariantConfig(weight=1, pools=VariantPools(pd=target.name))
    variant = Variant("stable", config, {target.name: target}, 60.0, None)
    return RoutePlan("m", variant, ((target, "prompt_long"),))


async def test_a_grant_for_one_pool_leaves_the_other_pools_headroom_alone() -> None:
    queue = FlowQueue(FlowConfig.model_validate({"enabled": True, "recheck_seconds": 3600}))
    a, b = pool("a", 9001), pool("b", 9002)
    held: dict[str, Replica] = {"a": a.take(), "b": b.take()}  # both full (capacity 1)

    async def one(target: Pool) -> None:
        await queue.enter(Ticket("standard", target.name, 1, 1), room_in(plan(target)))
        target.take()  # resumed: it takes its replica in the same step, as dispatch does

    waiting = [asyncio.create_task(one(a)), asyncio.create_task(one(b))]
    for _ in range(3):
        await asyncio.sleep(0)
    assert queue.waiting == 2
    a.give_back(held["a"])
    b.give_back(held["b"])
    queue.pump()  # one pump: a place is free on each pool, so both waiters go
    assert queue.waiting == 0
    await asyncio.gather(*waiting)
    assert (a.in_flight, b.in_flight) == (1, 1)
