"""Pool order: which of a variant's pools to try first, and why (the P/D decision).

Pure policy over values: it reads the prompt's length, what each pool probably holds of it (the
prefix index, gateway/routing/prefix.py), the output cap and a trusted hint; it owns no state
(the canary's state machine is gateway/routing/router.py's). The decision, in order:

- a trusted ``x-gateway-pool-hint``: that role (``hint``);
- a latency-predicted choice (``RouteInput.predicted``, issue 38): that role, for its reason;
- the tokens the colocated pool would have to prefill (the whole prompt, less the prefix it
  probably holds when ``prefix.enabled``) of at least ``pd_threshold_tokens``: PD
  (``prompt_long``);
- an output cap of at least ``pd_min_max_tokens``: PD (``output_long``);
- else colocated: ``prompt_short``, or ``prefix_cached`` when the prompt is long but the
  colocated pool holds enough of it that the rest is short.

The other role follows as the failover, unless the prompt is too long for colocated. The
dispatcher skips a saturated or unhealthy pool (``+failover_saturated``)::

    order = pool_order(by_role, policy, RouteInput(2000, 2000, 64, None), via=None)
    order  # ((pd pool, "prompt_long"), (colocated pool, "prompt_long"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from gateway.routing.config import Role, RoutingPolicy
from gateway.values import value

P = TypeVar("P")

PROMPT_LONG = "prompt_long"
PROMPT_SHORT = "prompt_short"
PREFIX_CACHED = "prefix_cached"
OUTPUT_LONG = "output_long"
HINT = "hint"
SINGLE_POOL = "single_pool"


@value
class RouteInput:
    """What the P/D decision reads of one request."""

    prompt_tokens: int
    colocated_uncached: int
    """Prompt tokens the colocated pool would have to prefill (``prompt_tokens`` without an
    index)."""
    max_tokens: int | None
    hint: Role | None
    predicted: tuple[Role, str] | None = None
    """The latency-predicted choice (gateway/routing/slo_choice.py: a role and its reason,
    ``meets_slo``, ``best_effort`` or ``fastest``), once every pool's model is confident; None:
    the fixed threshold decides. The seam issue 38's decision fills (not filled yet)."""


def pool_order(
    by_role: Mapping[Role, P], policy: RoutingPolicy, request: RouteInput, via: str | None
) -> tuple[tuple[P, str], ...]:
    """The pools in the order to try them, each with the reason of the decision."""
    if len(by_role) == 1:
        (pool,) = by_role.values()
        return ((pool, via or SINGLE_POOL),)
    role, reason = preferred_role(policy, request)
    if via is not None:
        reason = f"{reason}+{via}"
    other = Role.COLOCATED if role is Role.PD else Role.PD
    order = [(by_role[role], reason)]
    limit = policy.colocated_max_prompt_tokens
    if other is Role.PD or limit is None or request.prompt_tokens <= limit:
        order.append((by_role[other], reason))
    return tuple(order)


def preferred_role(policy: RoutingPolicy, request: RouteInput) -> tuple[Role, str]:
    if request.hint is not None:
        return request.hint, HINT
    predicted = request.predicted
    if predicted is not None:
        limit = policy.colocated_max_prompt_tokens
        too_long = limit is not None and request.prompt_tokens > limit
        if not (predicted[0] is Role.COLOCATED and too_long):  # its context cannot take it
            return predicted
    threshold = policy.pd_threshold_tokens
    if request.colocated_uncached >= threshold:
        return Role.PD, PROMPT_LONG
    long_output = policy.pd_min_max_tokens
    if long_output is not None and (request.max_tokens or 0) >= long_output:
        return Role.PD, OUTPUT_LONG
    if request.prompt_tokens >= threshold:  # long, but the colocated pool holds most of it
        limit = policy.colocated_max_prompt_tokens
        if limit is not None and request.prompt_tokens > limit:
            return Role.PD, PROMPT_LONG  # its context cannot take the whole, cached or not
        return Role.COLOCATED, PREFIX_CACHED
    return Role.COLOCATED, PROMPT_SHORT
