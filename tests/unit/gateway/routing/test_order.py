"""The P/D decision on the tokens a pool would have to prefill (gateway/routing/order.py)."""

from __future__ import annotations

from gateway.routing.config import Role, RoutingPolicy
from gateway.routing.order import RouteInput, pool_order, preferred_role

POLICY = RoutingPolicy(pd_threshold_tokens=1000)
BY_ROLE = {Role.PD: "pd", Role.COLOCATED: "colo"}


def decide(
    prompt: int, uncached: int, max_tokens: int | None = None, **policy: object
) -> tuple[Role, str]:
    chosen = POLICY.model_copy(update=policy) if policy else POLICY
    return preferred_role(chosen, RouteInput(prompt, uncached, max_tokens, None))


def test_a_long_uncached_prompt_goes_to_pd() -> None:
    assert decide(2000, 2000) == (Role.PD, "prompt_long")


def test_a_short_prompt_stays_colocated() -> None:
    assert decide(200, 200) == (Role.COLOCATED, "prompt_short")


def test_a_long_conversation_cached_on_colocated_stays_there_while_its_suffix_is_short() -> None:
    assert decide(3000, 300) == (Role.COLOCATED, "prefix_cached")
    assert decide(3000, 1000) == (Role.PD, "prompt_long")  # the new part is long: PD


def test_cached_or_not_a_prompt_past_the_colocated_context_goes_to_pd() -> None:
    assert decide(3000, 100, colocated_max_prompt_tokens=2048) == (Role.PD, "prompt_long")


def test_output_long_and_hint_as_before() -> None:
    assert decide(10, 10, 5000, pd_min_max_tokens=4096) == (Role.PD, "output_long")
    hinted = preferred_role(POLICY, RouteInput(5000, 5000, None, Role.COLOCATED))
    assert hinted == (Role.COLOCATED, "hint")


def test_order_puts_the_other_role_second_unless_too_long_for_colocated() -> None:
    assert pool_order(BY_ROLE, POLICY, RouteInput(2000, 2000, None, None), None) == (
        ("pd", "prompt_long"),
        ("colo", "prompt_long"),
    )
    capped = POLICY.model_copy(update={"colocated_max_prompt_tokens": 1500})
    assert pool_order(BY_ROLE, capped, RouteInput(2000, 2000, None, None), None) == (
        ("pd", "prompt_long"),
    )
    assert pool_order({Role.PD: "pd"}, POLICY, RouteInput(1, 1, None, None), "x") == (("pd", "x"),)


def test_a_predicted_choice_decides_where_the_threshold_would_not() -> None:
    # Today's H200: a long prompt predicted to meet its SLO only on colocated goes there.
    long = RouteInput(2000, 2000, None, None, (Role.COLOCATED, "meets_slo"))
    assert preferred_role(POLICY, long) == (Role.COLOCATED, "meets_slo")
    short = RouteInput(200, 200, None, None, (Role.PD, "best_effort"))
    assert preferred_role(POLICY, short) == (Role.PD, "best_effort")
    hinted = RouteInput(200, 200, None, Role.COLOCATED, (Role.PD, "meets_slo"))
    assert preferred_role(POLICY, hinted) == (Role.COLOCATED, "hint")  # a trusted hint first
    too_long = POLICY.model_copy(update={"colocated_max_prompt_tokens": 2048})
    past = RouteInput(3000, 3000, None, None, (Role.COLOCATED, "meets_slo"))
    assert preferred_role(too_long, past) == (Role.PD, "prompt_long")
