"""Attempts own the replicas a request takes: every one is given back, however the block ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.routing.attempts import Attempts
from gateway.routing.breaker import BreakerState
from gateway.routing.config import BreakerConfig, PoolConfig
from gateway.routing.pools import Pool


class Answer:
    """An upstream response at its headers: what the attempts do with its connection."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.is_event_stream = False
        self.released = self.aborted = False

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        return []

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b""

    async def read(self) -> bytes:
        return b""

    def abort(self) -> None:
        self.aborted = True

    def release(self) -> None:
        self.released = True


def one_replica_pool() -> Pool:
    config = PoolConfig(urls=("http://127.0.0.1:9000",), breaker=BreakerConfig(failures=1))
    return Pool("pd", config)


def test_a_settled_answer_gives_its_replica_and_connection_back() -> None:
    pool = one_replica_pool()
    answer = Answer(200)
    with Attempts() as attempts:
        attempts.take(pool, (), "stable", "prompt_long")
        assert pool.load().replicas[0].outstanding == 1 and attempts.sent
        attempts.answered(answer)
        attempts.settle(None, reusable=True)
        assert pool.load().replicas[0].outstanding == 0
    assert answer.released and not answer.aborted
    assert attempts.route.pool == "pd" and attempts.route.reason == "prompt_long"


def test_a_block_left_without_a_verdict_still_gives_the_replica_back() -> None:
    """A bug between the answer and the relay (or a cancellation) frees the replica, drops the
    connection, and holds nothing against the replica."""
    pool = one_replica_pool()
    answer = Answer(200)
    with pytest.raises(RuntimeError), Attempts() as attempts:
        attempts.take(pool, (), "stable", "prompt_long")
        attempts.answered(answer)
        raise RuntimeError("a bug")
    assert pool.load().replicas[0].outstanding == 0
    assert answer.aborted and not answer.released
    assert pool.replicas[0].breaker.state is BreakerState.CLOSED


def test_an_unsettled_5xx_answer_counts_against_its_replica() -> None:
    pool = one_replica_pool()
    with Attempts() as attempts:
        attempts.take(pool, (), "stable", "prompt_long")
        attempts.answered(Answer(503))
    assert pool.load().replicas[0].outstanding == 0
    assert pool.replicas[0].breaker.state is BreakerState.OPEN


def test_a_failed_attempt_gives_its_replica_back_at_once() -> None:
    pool = one_replica_pool()
    with Attempts() as attempts:
        attempts.take(pool, (), "stable", "prompt_long")
        assert attempts.failed(ValueError("not the upstream's")) is None
        assert pool.load().replicas[0].outstanding == 0


def test_no_pool_says_why_and_sent_nothing() -> None:
    with Attempts() as attempts:
        attempts.unavailable("stable", "prompt_long+unavailable")
    assert not attempts.sent and attempts.route.reason == "prompt_long+unavailable"


def test_a_streamed_request_counts_as_starting_until_its_first_token_once() -> None:
    pool = one_replica_pool()
    released: list[int] = []
    pool.book.subscribe(lambda: released.append(pool.load().starting))
    with Attempts(streamed=True) as attempts:
        attempts.take(pool, (), "stable", "prompt_short")
        assert pool.load().starting == 1
        attempts.answered(Answer(200))
        assert pool.load().starting == 1  # headers are not a token
        attempts.first_token()
        attempts.first_token()  # later chunks change nothing
        assert pool.load().starting == 0 and pool.in_flight == 1
        assert released == [0]  # the queue was told at once
        attempts.settle(None, reusable=True)
    assert (pool.load().starting, pool.in_flight) == (0, 0)


def test_a_streamed_attempt_that_fails_before_its_first_token_stops_starting() -> None:
    pool = Pool("pd", PoolConfig(urls=("http://127.0.0.1:9000", "http://127.0.0.1:9001")))
    with Attempts(streamed=True) as attempts:
        attempts.take(pool, (), "stable", "prompt_short")
        attempts.retrying(Answer(503))
        assert pool.load().starting == 0
        attempts.take(pool, (), "stable", "prompt_short")
        assert pool.load().starting == 1
    assert (pool.load().starting, pool.in_flight) == (0, 0)  # the block's end gave it back
