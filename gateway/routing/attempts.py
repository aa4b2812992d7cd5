"""One request's attempts at upstream replicas: where each went, and the replica each holds.

:class:`Attempts` is a context manager that owns every replica the request takes. The dispatcher
takes a replica through it (:meth:`Attempts.take`) and hands a failed attempt's replica back at
once (:meth:`Attempts.failed`, :meth:`Attempts.retrying`); the attempt that answered keeps its
replica while the answer is relayed, and gives it back with the verdict on how the replica did
(:meth:`Attempts.settle`), or, when the block ends without one (the client left, the gateway is
stopping, a bug), when the block ends, with no verdict held against the replica::

    with Attempts() as attempts:
        attempt = await dispatcher.first_answer(plan, send_to, attempts)
        clean = await relay(attempt.response)
        attempts.settle(failure, reusable=clean)
    attempts.route      # where the request was served (or, no pool could take it, why not)
    attempts.sent       # a replica was taken: the request left for the upstream
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from types import TracebackType

from gateway.errors import GatewayError, UpstreamTimeout
from gateway.routing.load import Hold, LoadSnapshot, PoolSnapshot
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan
from gateway.upstream.client import UpstreamConnectError, UpstreamResponse
from gateway.values import value
from gateway.wire.outcome import NOWHERE, RouteFacts


@value
class Attempt:
    """The attempt that answered: its pool, its replica (held), the response at its headers."""

    pool: Pool
    replica: Replica
    response: UpstreamResponse


class Attempts:
    """See the module docstring."""

    __slots__ = ("_held", "_hold", "answer", "route", "streamed", "tenant")

    def __init__(self, streamed: bool = False, tenant: str = "") -> None:
        self.streamed = streamed
        """The request asked for a stream: each replica taken counts it as starting (its
        pool's ``starting``, in the load book) until :meth:`first_token`."""
        self.tenant = tenant
        """Whose place each replica taken holds (flow control's reserve reads the book)."""
        self.route: RouteFacts = NOWHERE
        """The last attempt's route: where the request was served, or why no pool took it."""
        self.answer: Attempt | None = None
        """The attempt that answered, until it is settled."""
        self._held: tuple[Pool, Replica] | None = None
        self._hold: Hold | None = None
        """The load book's count of the replica held (the attempt sending, or the answer)."""

    @property
    def sent(self) -> bool:
        """A replica was taken: the request left for the upstream (which may have started)."""
        return self.route.replica is not None

    def __enter__(self) -> Attempts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Give back what is still held: no verdict unless the replica had answered 5xx."""
        if self.answer is not None:
            status = self.answer.response.status
            failure = f"status {status}" if status >= 500 else None
            self.settle(failure, reusable=False, abandoned=failure is None)
        elif self._held is not None:  # cancelled while sending: failed() was not reached
            pool, replica = self._held
            self._held = None
            self._give_back(pool)
            replica.breaker.abandon()

    def unavailable(self, variant: str, why: str) -> None:
        """No pool of the plan could take the request (nothing taken, nothing sent)."""
        self.route = RouteFacts(variant, None, None, why)

    def snapshot(self, plan: RoutePlan) -> LoadSnapshot:
        """A fresh snapshot of the plan's pools for this request (no gate's to reuse)."""
        return plan.preferred.book.snapshot(
            (pool for pool, _ in plan.pools), tenant=self.tenant, matches=plan.matches
        )

    def take(
        self,
        pool: Pool,
        tried: Collection[Replica],
        variant: str,
        why: str,
        plan: RoutePlan | None = None,
        load: PoolSnapshot | None = None,
    ) -> Replica:
        """A replica of ``pool`` (none of ``tried``), held until it is given back; ``plan``: the
        replica scorers' inputs, the prompt tokens counted on it while held, the prompt's blocks
        recorded in the pool's prefix index. ``load``: the request's snapshot of the pool, the
        choice's figures (none: the book's now)."""
        starting = self.streamed
        if plan is None:
            hold = pool.take(tried, starting=starting, tenant=self.tenant, load=load)
        else:
            hold = pool.take(
                tried,
                plan.scores(pool),
                plan.prompt_tokens,
                plan.blocks,
                starting,
                tenant=self.tenant,
                load=load,
            )
        replica = hold.replica
        self._hold = hold
        self._held = (pool, replica)
        predicted = None
        if plan is not None and plan.predicted is not None:
            predicted = plan.predicted.ttft_ms(pool.name)
        self.route = RouteFacts(variant, pool.name, replica.label, why, predicted)
        return replica

    def failed(self, err: BaseException) -> str | None:
        """The held attempt raised: its replica back, its breaker told; the cause when the
        request may go elsewhere (``connect``; ``timeout``, only to a canary's baseline)."""
        pool, replica = self._release()
        if isinstance(err, UpstreamConnectError):
            pool.trip(replica, err.message)
            return "connect"
        if isinstance(err, asyncio.CancelledError):
            replica.breaker.abandon()
        elif isinstance(err, GatewayError):
            pool.record(replica, err.code or "error")
            if isinstance(err, UpstreamTimeout):
                return "timeout"
        return None

    def retrying(self, response: UpstreamResponse) -> None:
        """The held attempt answered 5xx and is retried elsewhere: its replica back, failed."""
        pool, replica = self._release()
        response.abort()
        pool.record(replica, f"status {response.status}")

    def answered(self, response: UpstreamResponse) -> Attempt:
        """The held attempt answered: it keeps its replica until :meth:`settle`."""
        pool, replica = self._held or _nothing_held()
        self._held = None
        self.answer = Attempt(pool, replica, response)
        return self.answer

    def first_token(self) -> None:
        """The answer's first bytes of stream came back: its pool stops counting it as
        starting (once; a no-op for a request not counted)."""
        if self.answer is not None and self._hold is not None:
            self.answer.pool.book.first_token(self._hold)

    def _give_back(self, pool: Pool) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            pool.give_back(hold)

    def settle(self, failure: str | None, *, reusable: bool, abandoned: bool = False) -> None:
        """The answer's connection back to the pool (or dropped), its replica freed, its breaker
        told: ``failure`` None when the replica did its job; ``abandoned`` gives no verdict."""
        attempt = self.answer
        if attempt is None:
            return
        self.answer = None
        if reusable:
            attempt.response.release()
        else:  # unread bytes or a cancelled read: the connection cannot be reused
            attempt.response.abort()
        self._give_back(attempt.pool)
        if abandoned:
            attempt.replica.breaker.abandon()
        else:
            attempt.pool.record(attempt.replica, failure)

    def _release(self) -> tuple[Pool, Replica]:
        pool, replica = self._held or _nothing_held()
        self._held = None
        self._give_back(pool)
        return pool, replica


def _nothing_held() -> tuple[Pool, Replica]:
    raise RuntimeError("no attempt holds a replica")
