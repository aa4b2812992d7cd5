"""The dispatcher's pure parts: which pool of a plan takes a request, and the retry budget."""

from __future__ import annotations

import pytest

from gateway.routing.config import PoolConfig, RetryConfig, VariantConfig, VariantPools
from gateway.routing.dispatch import RetryBudget, _NoPool, _pick
from gateway.routing.load import LocalLoadBook
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan, Variant

BOOK = LocalLoadBook()
"""The app's one book (a test's pools are named afresh: each test gets a book of its own)."""


def pool(name: str, replicas: int = 1, capacity: int | None = None) -> Pool:
    urls = tuple(f"http://127.0.0.1:{9000 + i}" for i in range(replicas))
    return Pool(name, PoolConfig(urls=urls, capacity=capacity), book=BOOK)


def pick(plan: RoutePlan, tried: list[Replica]) -> tuple[Pool, str, str | None]:
    """Dispatch's choice on a snapshot of the plan's pools, as its first take reads it."""
    return _pick(plan, tried, BOOK.snapshot(p for p, _ in plan.pools))


@pytest.fixture(autouse=True)
def fresh_book() -> None:
    global BOOK
    BOOK = LocalLoadBook()


def plan(*pools: Pool, reason: str = "prompt_long") -> RoutePlan:
    config = VariantConfig(weight=1, pools=VariantPools(pd=pools[0].name))
    variant = Variant("stable", config, {p.name: p for p in pools}, 60.0, None)
    return RoutePlan("m", variant, tuple((p, reason) for p in pools))


def test_preferred_pool_when_it_can_take_the_request() -> None:
    pd, colo = pool("pd"), pool("colo")
    assert pick(plan(pd, colo), []) == (pd, "prompt_long", None)


def test_saturated_preferred_overflows_and_says_why() -> None:
    pd, colo = pool("pd", capacity=1), pool("colo")
    pd.take()
    assert pick(plan(pd, colo), []) == (colo, "prompt_long", "saturated")


def test_unhealthy_and_tried_preferred() -> None:
    pd, colo = pool("pd", replicas=2), pool("colo")
    pd.trip(pd.replicas[0], "refused")
    assert pick(plan(pd, colo), [])[0] is pd  # one replica left
    assert pick(plan(pd, colo), [pd.replicas[1]]) == (colo, "prompt_long", "failed")
    pd.mark_down(pd.replicas[1], "refused")
    assert pick(plan(pd, colo), []) == (colo, "prompt_long", "unhealthy")


def test_nothing_left_names_every_pool() -> None:
    pd, colo = pool("pd", capacity=1), pool("colo")
    pd.take()
    colo.mark_down(colo.replicas[0], "refused")
    with pytest.raises(_NoPool, match="pool colo unavailable and pool pd saturated"):
        pick(plan(pd, colo), [])


def test_retry_budget_ratio_and_floor() -> None:
    now = [0.0]
    budget = RetryBudget(
        RetryConfig(budget_ratio=0.5, budget_min_per_second=1.0), clock=lambda: now[0]
    )
    spent = sum(budget.try_spend() for _ in range(100))
    assert spent == 10  # the bucket starts full (10 retries), then it is empty
    assert not budget.try_spend()
    for _ in range(4):
        budget.on_request()  # 4 requests x 0.5
    assert [budget.try_spend() for _ in range(3)] == [True, True, False]
    now[0] += 1.0  # the floor refills one per second
    assert budget.try_spend() and not budget.try_spend()
