import pytest

from gateway.errors import NoHealthyUpstream
from gateway.routing.config import PoolConfig
from gateway.routing.pools import Pool, check_once


def make_pool(n: int) -> Pool:
    return Pool("p", PoolConfig(urls=tuple(f"http://127.0.0.1:{9000 + i}" for i in range(n))))


def test_least_outstanding_wins() -> None:
    pool = make_pool(3)
    with pool.acquire() as first, pool.acquire() as second, pool.acquire() as third:
        assert len({first.url, second.url, third.url}) == 3
        with pool.acquire() as fourth:
            assert pool.book.replica_counts(pool, fourth)[0] == 2
    assert all(r.outstanding == 0 for r in pool.load().replicas)


def test_equal_load_rotates() -> None:
    pool = make_pool(2)
    seen = [pool.choose().url for _ in range(4)]
    assert seen[0] != seen[1] and seen[0] == seen[2]


def test_unhealthy_replicas_are_skipped_and_all_down_is_503() -> None:
    pool = make_pool(2)
    pool.mark_down(pool.replicas[0], "refused")
    assert all(pool.choose() is pool.replicas[1] for _ in range(3))
    pool.mark_down(pool.replicas[1], "refused")
    assert not pool.healthy
    with pytest.raises(NoHealthyUpstream) as err:
        pool.choose()
    assert err.value.status == 503 and err.value.headers["retry-after"] == "1"


async def test_active_check_moves_replicas_in_and_out() -> None:
    pool = make_pool(2)
    down = {pool.replicas[0].url}

    async def probe(url: str) -> str | None:
        return "refused" if url in down else None

    await check_once(pool, probe)
    assert [r.healthy for r in pool.replicas] == [False, True]
    assert pool.replicas[0].last_error == "refused"
    down.clear()
    await check_once(pool, probe)
    assert [r.healthy for r in pool.replicas] == [True, True]
