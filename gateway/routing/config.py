"""Configuration of routing: per-model variants and pools, the length policy, breakers, retries.

A model names either one pool (``pool: NAME``, the simple case) or variants, each with a PD pool,
a colocated pool or both, and a weight::

    models:
      llama:
        variants:
          stable: {weight: 95, pools: {pd: pd-a, colocated: colo-a}}
          canary: {weight: 5, pools: {colocated: colo-b}, upstream_model: llama-v2}
        routing: {pd_threshold_tokens: 1024}
        canary: {baseline: stable, window_seconds: 60, error_rate_margin: 0.05}

These models do not import :mod:`gateway.config` (which imports them); they reject unknown keys
and are frozen like the rest of the configuration.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from configkit import StrictModel
from gateway.routing.scorers import scorer_names
from gateway.tokens.config import TokenizerConfig
from gateway.upstream.config import Timeouts


class _Strict(StrictModel):
    """The routing sections' models (strict and frozen like the rest of the config)."""


class Role(StrEnum):
    """Which kind of deployment a pool is: disaggregated prefill/decode, or colocated."""

    PD = "pd"
    COLOCATED = "colocated"


class VariantPools(_Strict):
    pd: str | None = None
    colocated: str | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> VariantPools:
        if self.pd is None and self.colocated is None:
            raise ValueError("name a pd pool, a colocated pool, or both")
        return self


class VariantConfig(_Strict):
    weight: float = Field(ge=0)
    """Relative share of keys; 0 takes the variant out of the split (forcing it still works)."""
    pools: VariantPools
    upstream_model: str | None = None
    """The name this variant's upstream serves the model under, if not the model's own."""


class PrefixPolicy(_Strict):
    """The approximate prefix index (gateway/routing/prefix.py): what a pool would prefill."""

    enabled: bool = False
    """Decide on the tokens a pool would have to prefill (its cached prefix taken off), and
    prefer the replica that holds the prefix. Off: decide on the whole prompt's length."""
    block_chars: int = Field(64, ge=8, le=4096)
    """Characters per hashed block (64 is about 16 tokens, vLLM's default block)."""
    max_prompt_blocks: int = Field(512, ge=1, le=16384)
    """Blocks hashed per prompt at most (32k characters at 64); the rest counts as uncached."""


class LatencyPolicy(_Strict):
    """The latency-predicted P/D decision (issue 38; gateway/routing/predicted.py)."""

    mode: Literal["off", "shadow", "decide"] = "off"
    """``off``: the fixed threshold alone, nothing learned (as before). ``shadow``: each pool's
    model learns and predicts (span, access log, ``x-gateway-predicted-ttft-ms``, the error
    metric) while the threshold still decides. ``decide``: once every pool's model is
    confident, the pool predicted to meet the request's SLO with most headroom."""


class ScorerWeights(_Strict):
    """How a replica is chosen within a pool: the weighted sum of named scorers, each 0 to 1
    (gateway/routing/scorers.py, where a new one is registered). A weight of 0 turns a scorer
    off; a built-in one left out keeps its default; a name no scorer is registered under is
    refused."""

    model_config = ConfigDict(extra="allow", frozen=True)

    prefix: float = Field(2.0, ge=0)
    """The share of the prompt the replica probably holds (the prefix index)."""
    queue: float = Field(1.0, ge=0)
    """Fewest requests waiting or in flight, relative to the pool's replicas."""
    kv_usage: float = Field(1.0, ge=0)
    """Emptiest KV cache (the engine's own gauge, when fresh)."""
    _active: tuple[tuple[str, float], ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_suggest(cls, data: Any) -> Any:
        """The keys are scorer names: the registered ones, not only the fields."""
        if isinstance(data, dict):
            known = set(scorer_names())
            for name, weight in data.items():
                if name not in known:
                    close = difflib.get_close_matches(str(name), sorted(known), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"{name}: no scorer is registered under this name{hint}")
                if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
                    raise ValueError(f"{name}: a scorer's weight is a number >= 0")
        return data

    @model_validator(mode="after")
    def _weights(self) -> ScorerWeights:
        extra = self.__pydantic_extra__ or {}
        weights = {"prefix": self.prefix, "queue": self.queue, "kv_usage": self.kv_usage}
        weights.update((name, float(weight)) for name, weight in extra.items())
        self._active = tuple((name, w) for name, w in weights.items() if w > 0)
        return self

    @property
    def active(self) -> tuple[tuple[str, float], ...]:
        """The scorers turned on, with their weights, in config order (the built-in ones
        first)."""
        return self._active


class RoutingPolicy(_Strict):
    """How one request chooses between a variant's PD and colocated pools."""

    pd_threshold_tokens: int = Field(1024, ge=1)
    """Prompts of at least this many tokens (template overhead included) go to PD; with
    ``prefix.enabled``, prompts that would leave at least this many tokens to prefill on the
    colocated pool (its cached prefix taken off)."""
    prefix: PrefixPolicy = PrefixPolicy()
    scorers: ScorerWeights = ScorerWeights()
    pd_min_max_tokens: int | None = Field(None, ge=1)
    """Optional: requests asking for at least this many output tokens go to PD too."""
    colocated_max_prompt_tokens: int | None = Field(None, ge=1)
    """Optional: longer prompts never fail over to colocated (its context is too short)."""
    latency: LatencyPolicy = LatencyPolicy()
    force_headers: Literal["trusted", "always", "never"] = "trusted"
    """Who may steer with ``x-gateway-variant`` and ``x-gateway-pool-hint``: trusted keys (admin
    or flagged), everyone (development only), or no one."""


class CanaryConfig(_Strict):
    """Automatic rollback: a variant worse than the baseline over the window, or past an absolute
    ceiling, loses its weight. Until then an attempt that fails on it before the answer started
    is retried on the baseline (within the retry budget). With the Redis limiter backend the
    samples and the rollback are shared by every gateway replica (one decision)."""

    baseline: str = "stable"
    window_seconds: float = Field(60.0, gt=0)
    min_requests: int = Field(20, ge=1)
    """Neither side is judged on fewer requests than this within the window."""
    error_rate_margin: float = Field(0.05, ge=0)
    """Roll back when the variant's error rate exceeds the baseline's by more than this."""
    ttft_p95_margin: float = Field(0.5, ge=0)
    """Roll back when the variant's p95 time to first token exceeds the baseline's by more than
    this fraction (0.5: 50% slower)..."""
    ttft_p95_min_delta_seconds: float = Field(0.05, ge=0)
    """...and by at least this many seconds: at millisecond latencies, noise alone is 50%."""
    error_rate_ceiling: float | None = Field(0.2, ge=0, le=1)
    """Absolute guard: roll back when the variant's error rate passes this, whatever the
    baseline's (a failed attempt that was failed over to the baseline counts as an error).
    None turns it off."""
    ttft_p95_ceiling_seconds: float | None = Field(10.0, gt=0)
    """Absolute guard: roll back when the variant's p95 time to first token passes this many
    seconds, whatever the baseline's. None turns it off."""


class BreakerConfig(_Strict):
    """Passive health per replica: consecutive failures open its circuit for ``open_seconds``;
    then one probe request is let through (half-open) and its outcome closes or reopens it."""

    failures: int = Field(3, ge=1)
    open_seconds: float = Field(5.0, gt=0)


class RetryConfig(_Strict):
    """Retries happen only before any byte reached the client, on connect errors and 5xx."""

    max_attempts: int = Field(3, ge=1)
    """Attempts per request, the first included."""
    budget_ratio: float = Field(0.2, ge=0)
    """Retries may add at most this fraction of the requests' volume (a retry storm guard)..."""
    budget_min_per_second: float = Field(5.0, ge=0)
    """...plus this many retries per second, so a quiet gateway can still retry."""


def model_pool_errors(
    model: str,
    pool: str | None,
    variants: Mapping[str, VariantConfig] | None,
    canary: CanaryConfig | None,
    known: Collection[str],
) -> list[str]:
    """Problems with the pools and variants one model names, each with its config path."""
    where = f"models.{model}"
    if (pool is None) == (variants is None):
        return [f"{where}: give either `pool` or `variants`"]
    known_list = ", ".join(sorted(known))
    if pool is not None:
        return (
            [] if pool in known else [f"{where}.pool: unknown pool {pool!r} (known: {known_list})"]
        )
    assert variants is not None
    errors = []
    if not variants:
        errors.append(f"{where}.variants: name at least one variant")
    for name, variant in variants.items():
        for role in Role:
            named = getattr(variant.pools, role.value)
            if named is not None and named not in known:
                errors.append(
                    f"{where}.variants.{name}.pools.{role.value}: unknown pool {named!r} "
                    f"(known: {known_list})"
                )
    if canary is not None and canary.baseline not in variants:
        errors.append(f"{where}.canary.baseline: no variant named {canary.baseline!r}")
    return errors


# Client headers a pool may never be told to forward: the caller's gateway credentials, its
# cookies, the gateway's own routing (host, forwarding) and hop-by-hop headers.
NEVER_FORWARDED = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "cookie",
        "host",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "te",
        "trailer",
        "upgrade",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
    }
)


class HealthCheck(_Strict):
    path: str = "/v1/models"
    interval: float = Field(5.0, gt=0)
    timeout: float = Field(2.0, gt=0)


class SignalsConfig(_Strict):
    """Where the pool's engines export vLLM's Prometheus metrics (gateway/routing/gauges.py)."""

    metrics_urls: tuple[str, ...] = ()
    """Endpoints read for the whole pool, summed (on Ray Serve LLM: Ray's metrics export of
    every node that runs the pool's engines)."""
    replica_metrics: bool = False
    """Also read each replica's own ``/metrics`` (vLLM's server, or the simulator), for the
    choice of a replica."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels a series must carry to count for this pool (``model_name``, when one Ray
    exports several apps)."""
    interval: float = Field(1.0, gt=0)
    timeout: float = Field(1.0, gt=0)
    max_age: float = Field(3.0, gt=0)
    """A reading older than this is stale: routing uses the gateway's own view instead."""

    @field_validator("metrics_urls")
    @classmethod
    def _http_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
                raise ValueError(f"not an http(s) URL: {url!r}")
        return urls


class SaturationConfig(_Strict):
    """Bounds past which a pool counts as saturated: routing prefers the other pool, and when
    every eligible pool is saturated the request waits in the flow-control queue. Each bound
    is optional; the engines' gauges count only while fresh."""

    max_waiting: int | None = Field(None, ge=0)
    """Requests waiting in the engines' own queues (``vllm:num_requests_waiting``)."""
    max_kv_usage: float | None = Field(None, gt=0, le=1)
    """The fullest engine's KV cache usage (``vllm:kv_cache_usage_perc``, 0 to 1)."""
    max_prompt_tokens_in_flight: int | None = Field(None, gt=0)
    """Prompt tokens of the requests this gateway has in flight on the pool."""
    max_starting: int | None = Field(None, gt=0)
    """Streamed requests this gateway sent to the pool whose first token has not come back
    (waiting in an engine or prefilling): the gateway's own, always fresh view of the engines'
    queues. A bound near 1 per engine paces requests into a full engine one step at a time, so
    a burst of freed places is not refilled by one burst of prefills that every request
    admitted with it (a quiet tenant's included) waits behind; see README, "Flow control"."""


class PoolConfig(_Strict):
    """One upstream pool: replicas (Ray Serve ingress base URLs) serving the same thing."""

    urls: tuple[str, ...] = Field(min_length=1)
    timeouts: Timeouts = Timeouts()
    health: HealthCheck = HealthCheck()
    max_connections: int = Field(1024, gt=0)
    forward_headers: frozenset[str] = frozenset()
    """Client request headers passed on to this pool, beyond the gateway's own."""
    capacity: int | None = Field(None, gt=0)
    """Requests in flight (all replicas) above which the pool counts as saturated."""
    saturation: SaturationConfig = SaturationConfig()
    signals: SignalsConfig = SignalsConfig()
    prefix_index_blocks: int = Field(32768, ge=0, le=4_000_000)
    """Block names the pool's prefix index keeps (LRU; about 100 bytes each; 0: none)."""
    breaker: BreakerConfig = BreakerConfig()
    responses: Literal["translate", "native"] = "translate"
    """``POST /v1/responses``: translated to chat completions (Ray Serve LLM's ingress has no
    Responses API), or ``native``: passed through unchanged to a pool that serves it (vLLM's
    own server does)."""

    @field_validator("forward_headers")
    @classmethod
    def _lower_case(cls, names: frozenset[str]) -> frozenset[str]:
        lowered = frozenset(n.lower() for n in names)
        refused = sorted(lowered & NEVER_FORWARDED)
        if refused:
            raise ValueError(
                f"{', '.join(refused)} cannot be forwarded: credentials, cookies and connection "
                "headers of one client must not reach a shared upstream"
            )
        return lowered

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
                raise ValueError(f"not an http(s) base URL: {url!r}")
        return tuple(u.rstrip("/") for u in urls)


class ModelConfig(_Strict):
    pool: str | None = None
    """The simple case: one pool. Otherwise ``variants`` (see gateway/routing/config.py)."""
    upstream_model: str | None = None
    """The name the upstream serves it under, when it differs from the name clients use."""
    owned_by: str = "pd-gateway"
    variants: dict[str, VariantConfig] | None = None
    routing: RoutingPolicy = RoutingPolicy()
    canary: CanaryConfig | None = None
    tokenizer: TokenizerConfig | None = None
    """This model's own tokenizer, when it differs from the gateway-wide ``tokenizer``."""
    default_max_tokens: int | None = Field(None, ge=1)
    """Output tokens reserved for a request of this model that sets no output cap (None: the
    limits' ``default_max_tokens``)."""
