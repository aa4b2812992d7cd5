"""The ``x-ratelimit-*`` response headers and the 429 refusal, worded as OpenAI words them."""

from __future__ import annotations

import math

from gateway.errors import BudgetExhausted, RateLimited, TokensRateLimited
from gateway.limits.budgets import MICROS, iso
from gateway.limits.types import Decision, Quota, Refusal

Header = tuple[bytes, bytes]


def duration(seconds: float) -> str:
    """Go-style durations as OpenAI sends them: ``20ms``, ``1.5s``, ``6m0s``, ``1h0m0s``."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s"


def quota_headers(decision: Decision) -> list[Header]:
    headers: list[Header] = []
    _add(headers, b"requests", decision.requests)
    _add(headers, b"tokens", decision.tokens)
    return headers


def _add(headers: list[Header], kind: bytes, quota: Quota | None) -> None:
    if quota is None:
        return
    headers += [
        (b"x-ratelimit-limit-" + kind, str(quota.limit).encode()),
        (b"x-ratelimit-remaining-" + kind, str(quota.remaining).encode()),
        (b"x-ratelimit-reset-" + kind, duration(quota.reset).encode()),
    ]


def refusal_error(refusal: Refusal, quota: tuple[Header, ...] = ()) -> RateLimited:
    """The 429, with ``retry-after``/``retry-after-ms`` when waiting will help (the SDKs obey),
    and the quota headers."""
    subject = refusal.subject
    if refusal.limit_name == "budget":
        return budget_error(refusal, quota)
    where = f"{refusal.limit_name} on {subject.scope} {subject.id}"
    cls = TokensRateLimited if "tokens" in refusal.limit_name else RateLimited
    headers = {k.decode(): v.decode() for k, v in quota}
    if refusal.retry_after is None:
        return cls(
            f"Request too large for {where}: Limit {refusal.limit}, Requested "
            f"{refusal.requested}. Reduce the prompt or max_tokens.",
            headers=headers,
        )
    wait = refusal.retry_after
    headers["retry-after"] = str(max(1, math.ceil(wait)))
    headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
    return cls(
        f"Rate limit reached for {where}: Limit {refusal.limit}, Used {refusal.used}, "
        f"Requested {refusal.requested}. Please try again in {duration(wait)}.",
        headers=headers,
    )


def budget_error(refusal: Refusal, quota: tuple[Header, ...] = ()) -> BudgetExhausted:
    """OpenAI's ``insufficient_quota``: which budget, its figures and when it resets (UTC);
    ``x-should-retry: false`` so the SDKs do not retry what only a new period can admit."""
    subject = refusal.subject
    headers = {k.decode(): v.decode() for k, v in quota}
    headers["x-should-retry"] = "false"
    resets = iso(refusal.resets_at)
    when = f"It resets at {resets}." if resets else "It does not reset (period none)."
    return BudgetExhausted(
        f"Budget exhausted for {subject.scope} {subject.id}: Limit {_units(refusal.limit)}, "
        f"Committed {_units(refusal.used)}, Requested {_units(refusal.requested)} (the "
        f"request's maximum cost). {when}",
        headers=headers,
    )


def _units(micros: int) -> str:
    units, rest = divmod(micros, MICROS)
    return f"{units}.{rest:06d}"
