"""Run one step of a load test against one target: open loop (a schedule of arrivals) or closed
loop (a fixed number of users, each sending its next request when the last one ends).

A step stops after ``requests`` sends or ``duration`` seconds of sending, then waits for what is
in flight. Open-loop requests that cannot leave on time (the in-flight bound is reached, or the
tool itself is saturated) are sent late and their lateness is recorded as ``lag``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from loadtests.pdload import client
from loadtests.pdload.arrivals import Arrival, arrival_offsets
from loadtests.pdload.records import RequestRecord
from loadtests.pdload.workload import WorkItem

Mode = Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class Step:
    """One point of a sweep: a rate (open loop, requests/s) or a concurrency (closed loop)."""

    index: int
    mode: Mode
    load: float
    requests: int | None
    duration: float | None
    arrival: Arrival = "poisson"

    def expected_requests(self) -> int:
        if self.requests is not None:
            return self.requests
        assert self.duration is not None
        per_second = self.load if self.mode == "open" else self.load * 4
        return max(1, int(per_second * self.duration * 1.2) + 1)


@dataclass(frozen=True, slots=True)
class Request:
    """What every request of a step shares: the endpoint, headers and extra body fields."""

    target: client.Target
    api: client.Api
    extra: dict[str, Any]
    tenant: str | None = None
    """The tenant its records are reported under (``--tenant``); its key is the target's."""


@dataclass(slots=True)
class StepResult:
    step: Step
    target: str
    records: list[RequestRecord]
    duration: float


OnDone = Callable[[RequestRecord], None]


class _Sender:
    def __init__(
        self, session: aiohttp.ClientSession, req: Request, items: list[WorkItem], step: Step
    ) -> None:
        self.session = session
        self.urls = client.endpoints(req.target, req.api)
        self.headers = req.target.headers()
        self.bodies = [client.request_body(req.target, item, req.api, req.extra) for item in items]
        self.items = items
        self.step = step
        self.target = req.target.name
        self.tenant = req.tenant
        self.records: list[RequestRecord] = []

    async def one(self, index: int, sent_at: float, lag: float, on_done: OnDone) -> None:
        k = index % len(self.items)
        item = self.items[k]
        record = RequestRecord(
            target=self.target,
            step=self.step.index,
            index=index,
            shape=item.shape,
            sent_at=sent_at,
            lag=lag,
            expected_prompt_tokens=item.prompt_tokens,
            max_tokens=item.max_tokens,
            tenant=self.tenant,
        )
        self.records.append(record)
        url = self.urls[index % len(self.urls)]  # round robin over a target's replicas
        await client.send(self.session, url, self.headers, self.bodies[k], record)
        on_done(record)


async def _open_loop(
    sender: _Sender, step: Step, seed: int, max_inflight: int, on_done: OnDone
) -> None:
    slots = asyncio.Semaphore(max_inflight)
    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter()
    for index, offset in enumerate(arrival_offsets(step.arrival, step.load, seed)):
        if step.requests is not None and index >= step.requests:
            break
        if step.duration is not None and offset >= step.duration:
            break
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        now = time.perf_counter()
        task = asyncio.create_task(
            sender.one(index, now - t0, max(0.0, now - t0 - offset), on_done)
        )
        task.add_done_callback(lambda _: slots.release())
        tasks.append(task)
    await asyncio.gather(*tasks)


async def _closed_loop(sender: _Sender, step: Step, on_done: OnDone) -> None:
    counter = itertools.count()
    t0 = time.perf_counter()

    async def user() -> None:
        while True:
            index = next(counter)
            now = time.perf_counter()
            if step.requests is not None and index >= step.requests:
                return
            if step.duration is not None and now - t0 >= step.duration:
                return
            await sender.one(index, now - t0, 0.0, on_done)

    await asyncio.gather(*(user() for _ in range(int(step.load))))


async def run_step(
    session: aiohttp.ClientSession,
    req: Request,
    items: list[WorkItem],
    step: Step,
    *,
    seed: int,
    max_inflight: int,
    on_done: OnDone,
) -> StepResult:
    """Run ``step`` and return every request it sent; ``duration`` runs from the first send to
    the last answer, the span throughput is measured over."""
    sender = _Sender(session, req, items, step)
    t0 = time.perf_counter()
    if step.mode == "open":
        await _open_loop(sender, step, seed, max_inflight, on_done)
    else:
        await _closed_loop(sender, step, on_done)
    return StepResult(step, req.target.name, sender.records, time.perf_counter() - t0)


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """One tenant of a multi-tenant step: its requests, its items and its share of the load."""

    req: Request
    items: list[WorkItem]
    load: float
    """Multiplies the step's load: its own rate (open loop) or users (closed loop)."""


async def run_tenants_step(
    session: aiohttp.ClientSession,
    tenants: list[TenantLoad],
    step: Step,
    *,
    seed: int,
    max_inflight: int,
    on_done: OnDone,
) -> StepResult:
    """Every tenant's load at once against one target; one result with everyone's records.

    With ``requests`` per step, each tenant sends its share of them (by load), so that every
    tenant sends over about the same time."""
    t0 = time.perf_counter()
    total = sum(t.load for t in tenants)

    async def one(i: int, tenant: TenantLoad) -> StepResult:
        # A step of N requests gives each tenant its share, so that all send for as long.
        requests = step.requests
        if requests is not None:
            requests = max(1, round(requests * tenant.load / total))
        own = Step(
            step.index,
            step.mode,
            step.load * tenant.load,
            requests,
            step.duration,
            step.arrival,
        )
        return await run_step(
            session,
            tenant.req,
            tenant.items,
            own,
            seed=seed + 7919 * i,
            max_inflight=max_inflight,
            on_done=on_done,
        )

    results = await asyncio.gather(*(one(i, t) for i, t in enumerate(tenants)))
    records = [r for result in results for r in result.records]
    return StepResult(step, tenants[0].req.target.name, records, time.perf_counter() - t0)
