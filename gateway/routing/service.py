"""The route stage: choose a variant and a pool order (a :class:`RoutePlan`), and learn from the
outcome (variant metrics, the canary's rollback window)::

    plan = routing.plan(router, request, headers, caller, prompt)
    ...                                        # dispatch, relay, settle
    routing.observe(router, plan, outcome)     # once, from the request's one outcome

A request the client abandoned, or one the client got wrong (a 4xx), gives no verdict on the
variant: one tenant cannot roll a canary back for everyone. A request failed over from a canary to
its baseline gives two: an error for the canary (its attempt failed, whatever came after), and
the served request's for the baseline (without its time to first token, which includes the
canary's failed attempt).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.asgi import Headers, find_header
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.errors import Shed
from gateway.routing.config import Role, RoutingPolicy
from gateway.routing.dispatch import Dispatcher
from gateway.routing.latency import LatencyBook
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.predicted import (
    NO_OBJECTIVE,
    Objective,
    PredictedRoute,
    learn,
    predict_route,
)
from gateway.routing.prefix import NO_BLOCKS, prompt_blocks
from gateway.routing.router import ROLLED_BACK, ModelRouter, Predict, RoutePlan, Variant
from gateway.routing.slo_choice import SHED
from gateway.tokens.counting import PromptTokens
from gateway.wire.outcome import Outcome
from gateway.wire.request import ParsedRequest

FORCE_VARIANT_HEADER = b"x-gateway-variant"
POOL_HINT_HEADER = b"x-gateway-pool-hint"

TRUSTED_LABEL = "routing.force"
"""A key whose labels say ``routing.force: "true"`` may force a variant or a pool."""


class Caller:
    """Who is asking, as routing sees it: the key's public id and labels (None: auth off), and
    the client's address (None: it did not come over the network, a batch job's line)."""

    __slots__ = ("address", "key_id", "labels")

    def __init__(
        self, key_id: str | None, labels: dict[str, str] | None, address: str | None = None
    ) -> None:
        self.key_id = key_id
        self.labels = labels or {}
        self.address = address


def sticky_key(caller: Caller, request: ParsedRequest) -> bytes:
    """What keeps a caller on one variant: the API key's public id when there is one, else the
    request's ``user`` field, else the client address."""
    if caller.key_id:
        return b"key:" + caller.key_id.encode()
    user = request.payload.get("user")
    if isinstance(user, str) and user:
        return b"user:" + user.encode()
    return f"addr:{caller.address or ''}".encode()


def may_steer(policy: RoutingPolicy, caller: Caller) -> bool:
    if policy.force_headers == "always":
        return True
    if policy.force_headers == "never":
        return False
    return caller.key_id is not None and caller.labels.get(TRUSTED_LABEL) == "true"


class Routing:
    """Routing for the whole gateway: the dispatcher, the metrics and the latency models
    (``latency``: per pool and replica, carried over a reload with the routing)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        metrics: RoutingMetrics,
        latency: LatencyBook | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.clock = clock
        """Spaces what the latency models learn (the app's: a test's manual clock holds it)."""
        self.latency = latency if latency is not None else LatencyBook()
        metrics.prediction_errors.book = self.latency

    def plan(
        self,
        router: ModelRouter,
        request: ParsedRequest,
        headers: Headers,
        caller: Caller,
        prompt: PromptTokens,
        objective: Callable[[], Objective] | None = None,
    ) -> RoutePlan:
        """The variant and its pools in order; the prompt is counted only if length matters.
        ``headers``: the request's, for the steering ones (a forced variant, a pool hint).
        ``objective``: the request's latency objective, read only when ``routing.latency``
        is on (its headers are the client's: a bad one is a 400 then)."""
        variant, forced, via = self._variant(router, headers, caller, request)
        policy = router.policy
        mode = policy.latency.mode
        needs_length = (
            mode != "off"
            or len(variant.by_role) > 1
            or (not forced and router.canary is not None and len(router.baseline.by_role) > 1)
        )
        blocks = NO_BLOCKS
        hint = self._hint(policy, headers, caller) if needs_length else None
        if needs_length or policy.prefix.enabled:  # length and cached prefixes matter
            tokens = prompt.count()
            if policy.prefix.enabled:  # for the P/D decision and the replica's affinity
                blocks = prompt_blocks(
                    request.operation,
                    request.payload,
                    block_chars=policy.prefix.block_chars,
                    max_blocks=policy.prefix.max_prompt_blocks,
                    seed=router.name.encode(),
                    stable=router.stable_hashes,
                )
        else:  # the count, when admission made it, still weighs on the pool's load
            tokens = prompt.counted or 0
        predict = None
        if mode != "off":  # a trusted hint decides itself: predictions are only reported then
            wanted = objective() if objective is not None else NO_OBJECTIVE
            predict = self._predictor(wanted, "shadow" if hint is not None else mode)
        try:
            return router.plan(
                variant,
                tokens,
                request.max_tokens,
                hint,
                failover=not forced,
                via=via,
                blocks=blocks,
                predict=predict,
            )
        except Shed:
            self.metrics.decision(router.name, variant.name, "", SHED).inc()
            raise

    def _predictor(self, objective: Objective, mode: str) -> Predict:
        book = self.latency

        def predict(by_role: Mapping[Role, Pool], prefill: Mapping[str, int]) -> PredictedRoute:
            pools = list(by_role.values())
            snapshot = pools[0].book.snapshot(pools)  # the load the choice is made on
            loads = {role: snapshot.pool(pool.name) for role, pool in by_role.items()}
            return predict_route(book, loads, prefill, objective, mode)  # type: ignore[arg-type]

        return predict

    def remember_answer(
        self,
        router: ModelRouter,
        request: ParsedRequest,
        plan: RoutePlan,
        pool: Pool,
        replica: Replica,
        answer: Callable[[], str],
    ) -> None:
        """A stream answered cleanly by ``replica``: its engine now holds the prompt's blocks
        and the answer's (vLLM caches output tokens too), so the conversation's next turn,
        which resends both, matches past this prompt. ``answer()``: the text delivered (read
        only when the model's prefix index is on). One choice only (``n`` > 1: which one the
        next turn resends is not known)."""
        prefix = router.policy.prefix
        if not prefix.enabled or request.payload.get("n") not in (None, 1):
            return
        if not plan.blocks.chars:  # no prompt text the index reads (or a failover's own plan)
            return
        blocks = prompt_blocks(
            request.operation,
            request.payload,
            block_chars=prefix.block_chars,
            max_blocks=prefix.max_prompt_blocks,
            seed=router.name.encode(),
            answer=answer(),
            stable=pool.book.stable_hashes,
        )
        if len(blocks.hashes) > len(plan.blocks.hashes):  # the answer filled a block more
            pool.book.remember(pool, replica, blocks)

    def _variant(
        self, router: ModelRouter, headers: Headers, caller: Caller, request: ParsedRequest
    ) -> tuple[Variant, bool, str | None]:
        """The variant, whether it was forced (no failover then: the caller asked for that
        one), and why it serves when the key's own variant was rolled back."""
        if len(router.variants) == 1:
            return router.choose_variant(b"", None), False, None  # no key needed
        forced = find_header(headers, FORCE_VARIANT_HEADER)
        if forced is not None and may_steer(router.policy, caller):
            return router.choose_variant(b"", forced.decode("latin-1")), True, None
        key = sticky_key(caller, request)
        chosen = router.choose_variant(key, None)
        return chosen, False, ROLLED_BACK if router.diverted(key) else None

    def _hint(self, policy: RoutingPolicy, headers: Headers, caller: Caller) -> Role | None:
        value = find_header(headers, POOL_HINT_HEADER)
        if value is None or not may_steer(policy, caller):
            return None
        try:
            return Role(value.decode("latin-1").lower())
        except ValueError:
            return None

    def observe(self, router: ModelRouter, plan: RoutePlan, outcome: Outcome) -> None:
        """The variant's verdict from the request's outcome (none for client-caused ends)."""
        if not outcome.admitted:
            return
        if plan.predicted is not None:
            learn(self.latency, plan.predicted, outcome, self.clock.monotonic())
        variant = plan.variant
        served = outcome.route.variant
        failed_over = plan.fallback is not None and served == plan.fallback.variant.name
        if failed_over:  # the canary's attempt failed, whatever the client did afterwards
            self.metrics.variant_request(router.name, variant.name, "error").inc()
            router.observe(variant, True, None)
            assert plan.fallback is not None
            variant = plan.fallback.variant
        if outcome.client_caused:
            return
        error = outcome.upstream_failed
        model = router.name
        if outcome.route.pool is not None:
            self.metrics.decision(
                model, variant.name, outcome.route.pool, outcome.route.reason or ""
            ).inc()
        self.metrics.variant_request(model, variant.name, "error" if error else "ok").inc()
        # A failed-over request's TTFT includes the canary's failed attempt: not the baseline's.
        ttft = None if error or failed_over else outcome.time_to_first_token
        if ttft is not None:
            self.metrics.variant_first_token(model, variant.name).observe(ttft)
            rate = outcome.tokens_per_second
            if rate is not None and outcome.usage.source == "upstream":
                self.metrics.variant_speed(model, variant.name).observe(rate)
        router.observe(variant, error, ttft)

    def on_rollback(self, router: ModelRouter) -> Callable[[Variant, bool], None]:
        def rolled_back(variant: Variant, decided_here: bool) -> None:
            if decided_here:  # counted once for the deployment, where it was decided
                self.metrics.rollbacks.labels(router.name, variant.name).inc()
            self.metrics.variant_weight.labels(router.name, variant.name).set(0)
            self.metrics.rolled_back.labels(router.name, variant.name).set(1)

        return rolled_back
