"""The admission stage: limit values resolved key -> tenant -> config, OpenAI's header and
refusal wording, and the failure policy when the store cannot be reached (a real socket that
nothing listens on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.auth.models import Limits, Principal
from gateway.errors import LimiterUnavailable, RateLimited, TokensRateLimited
from gateway.limits.admission import RateLimiter
from gateway.limits.config import LimitsConfig, LimitValues
from gateway.limits.headers import duration
from gateway.limits.memory import MemoryLimiter
from gateway.limits.metrics import LimitMetrics
from gateway.metrics import GatewayMetrics
from tests.redisserver import socket_url


def principal(key: Limits, tenant: Limits) -> Principal:
    return Principal(
        key_id="k1",
        key_name="n",
        tenant_id="t1",
        allowed_models=None,
        limits=key.over(tenant),
        tenant_limits=tenant,
        labels={},
    )


def limiter(**config: object) -> RateLimiter:
    return RateLimiter.build(LimitsConfig.model_validate(config), GatewayMetrics())


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.0201, "21ms"), (0.5, "500ms"), (1, "1s"), (1.5, "1.5s"), (59.9991, "60s"),
     (60, "1m0s"), (360, "6m0s"), (3725, "1h2m5s")],
)  # fmt: skip
def test_durations_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_values_come_from_the_key_then_the_tenant_then_the_config() -> None:
    stage = limiter(defaults={"concurrent_requests": 3, "tokens_per_minute": 9})
    who = principal(
        Limits(requests_per_minute=5), Limits(tokens_per_minute=100, daily_tokens=10_000)
    )
    key, tenant = stage.subjects(who)
    assert (key.scope, key.id, tenant.scope, tenant.id) == ("key", "k1", "tenant", "t1")
    assert key.limits == LimitValues(
        requests_per_minute=5, tokens_per_minute=100, concurrent_requests=3, daily_tokens=10_000
    )
    assert tenant.limits == LimitValues(
        tokens_per_minute=100, concurrent_requests=3, daily_tokens=10_000
    )


def test_nothing_to_limit_means_no_subjects() -> None:
    assert limiter().subjects(None) == ()
    assert limiter().subjects(principal(Limits(), Limits())) == ()
    assert limiter(enabled=False, defaults={"requests_per_minute": 1}).subjects(None) == ()
    (anonymous,) = limiter(defaults={"requests_per_minute": 1}).subjects(None)
    assert anonymous.id == "anonymous"


async def test_refusals_name_the_limit_and_carry_the_headers() -> None:
    config = LimitsConfig(defaults=LimitValues(requests_per_minute=1, tokens_per_minute=1000))
    metrics = GatewayMetrics()
    frozen = MemoryLimiter(clock=lambda: 1_800_000_000.0)  # no refill between the two
    stage = RateLimiter(config, frozen, LimitMetrics(metrics))
    subjects = stage.subjects(None)
    reservation = await stage.admit("r1", subjects, 100)
    assert dict(reservation.headers)[b"x-ratelimit-remaining-tokens"] == b"900"
    with pytest.raises(RateLimited) as refused:
        await stage.admit("r2", subjects, 100)
    err = refused.value
    assert err.headers["x-ratelimit-remaining-requests"] == "0"  # the quotas ride on the 429
    assert type(err) is RateLimited and err.error_type == "requests"
    assert err.message.startswith("Rate limit reached for requests per minute on key anonymous")
    assert err.headers["retry-after"] == "60" and err.headers["retry-after-ms"] == "60000"
    small = limiter(defaults={"tokens_per_minute": 10})
    with pytest.raises(TokensRateLimited, match="Request too large for tokens per minute"):
        await small.admit("r3", small.subjects(None), 11)


async def test_unreachable_store_fails_open_or_closed(tmp_path: Path) -> None:
    dead = socket_url(tmp_path)  # a socket no server listens on
    for policy in ("open", "closed"):
        stage = limiter(
            backend="redis", redis_url=dead, redis_timeout=0.2, on_backend_error=policy,
            defaults={"requests_per_minute": 1},
        )  # fmt: skip
        try:
            if policy == "open":
                reservation = await stage.admit("r", stage.subjects(None), 2)
                assert reservation.ticket is None and not stage.reachable
            else:
                with pytest.raises(LimiterUnavailable):
                    await stage.admit("r", stage.subjects(None), 2)
            assert (await stage.readiness())["ready"] is (policy == "open")
        finally:
            await stage.aclose()
