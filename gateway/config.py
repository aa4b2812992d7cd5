"""The gateway's configuration: strict, frozen models loaded from YAML plus the environment.

Unknown keys are errors that name their path (``pools.pd.timeouts.idel: unknown key (did you mean
'idle'?)``), so a typo never silently falls back to a default. String values may name environment
variables, ``${VAR}`` or ``${VAR:-default}``, which is how secrets reach the file. The loader is
the shared one (:mod:`configkit`); each section's models live with the package that uses them,
and this module only assembles them::

    cfg = load_config("gateway.yaml")
    app = create_app(cfg)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from configkit import ConfigError, StrictModel, format_validation_error, parse_model, read_yaml
from gateway.accounting.config import AccountingConfig
from gateway.accounting.prices import PricesConfig, price_errors
from gateway.auth.config import AuthConfig
from gateway.batches.config import BatchesConfig
from gateway.database.config import StorageConfig
from gateway.extras import MissingExtra, require
from gateway.flow.config import FlowConfig
from gateway.flow.slo import SloConfig
from gateway.limits.config import LimitsConfig
from gateway.response_store.config import ResponsesConfig
from gateway.routing.config import ModelConfig, PoolConfig, RetryConfig, model_pool_errors
from gateway.routing.load_config import LoadSharingConfig
from gateway.telemetry.config import TracingConfig
from gateway.tokens.config import TokenizerConfig
from gateway.upstream.config import Timeouts

__all__ = [
    "ConfigError",
    "ConsoleConfig",
    "GatewayConfig",
    "ModelConfig",
    "PoolConfig",
    "ServerConfig",
    "Timeouts",
    "format_validation_error",
    "load_config",
    "parse_config",
]


class ServerConfig(StrictModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    max_json_containers: int = Field(200_000, gt=0)
    """JSON objects plus arrays in one request body (checked on the bytes, before parsing)."""
    max_list_items: int = Field(10_000, gt=0)
    """Entries in ``messages`` or in a list ``prompt``/``input``."""
    max_tokens_limit: int = Field(1_000_000, gt=0)
    """Requests asking for more ``max_tokens`` than this are refused as absurd."""
    graceful_shutdown_seconds: float = Field(30.0, ge=0)
    proxy_headers: bool = False
    """Take the client address from X-Forwarded-For when the peer is a trusted proxy (uvicorn's
    ``proxy_headers``). Off by default: behind a Kubernetes Service nothing sets them, and the
    check costs time on every request."""
    # Edge limits (gateway/server/protocol.py), per worker process; see README "Hardening".
    max_header_bytes: int = Field(32 * 1024, ge=1024)
    """Request line plus headers; more is refused with 431 and the connection closed."""
    max_headers: int = Field(100, ge=8)
    """Header lines per request; more is refused with 431."""
    header_timeout: float = Field(10.0, gt=0)
    """Seconds from a connection's (or request's) first byte to the end of its headers; an idle
    new connection counts from its accept. Slowloris senders are closed after it (408)."""
    body_timeout: float = Field(60.0, gt=0)
    """Seconds from the end of the headers to the end of the body; a dribbled body gets 408."""
    min_body_rate: float = Field(1024.0, gt=0)
    """Bytes per second a body must keep up after ``body_grace``: a body that has taken longer
    than ``body_grace`` plus its bytes at this rate gets 408 and the connection closed."""
    body_grace: float = Field(5.0, gt=0)
    """Seconds a body may take whatever its rate (then ``min_body_rate`` applies)."""
    upload_grace: float = Field(0.25, ge=0)
    """Seconds a body that did not come whole with its headers is read before it counts as an
    upload: a body trailing its headers by a segment or two (a loaded client, a NAT's many
    clients) is a normal request, and only one still arriving after this meets the upload caps."""
    max_uploads: int = Field(256, ge=1)
    """Bodies still arriving at once past ``upload_grace``; more get 503 ``server_overloaded``.
    A request takes a serving slot only once its body is in."""
    max_uploads_per_client: int = Field(16, ge=1)
    """Bodies still arriving at once past ``upload_grace`` from one client address; more get
    429 ``too_many_uploads``."""
    linger_timeout: float = Field(5.0, gt=0)
    """Seconds a connection refused while its body is still arriving (429, 503, 408, 431) keeps
    reading and dropping what the client sends, after the answer and a half-close: a client
    still writing then reads the answer instead of a reset. It ends sooner when the client
    closes, or past ``max_body_bytes`` dropped; the connection cap may close it to make room."""
    keep_alive_timeout: float = Field(5.0, gt=0)
    """Seconds an idle keep-alive connection is kept between requests."""
    send_timeout: float = Field(60.0, gt=0)
    """Seconds a client may leave the answer unread (the send buffer full) before it is cut."""
    max_connections: int = Field(4096, ge=1)
    """Open client connections; at the cap the longest-idle one (no request in progress) is closed
    to make room, else the new one gets 503. Lowered to fit the open-file limit."""
    max_requests_in_flight: int = Field(1024, ge=1)
    """Requests being served at once (probes excepted), counted once their body is in; more get
    503 ``server_overloaded``."""
    # The event loop's lag probe (gateway/server/loop_watch.py); see README, issue 41.
    loop_lag_interval_seconds: float = Field(0.1, ge=0)
    """How often the probe samples how late the event loop wakes a sleeping task (0: off)."""
    loop_lag_warn_seconds: float = Field(0.1, gt=0)
    """A sample later than this logs a warning (at most one per ``loop_lag_log_every_seconds``)."""
    loop_lag_log_every_seconds: float = Field(10.0, ge=0)
    loop_lag_unready_seconds: float | None = Field(None, gt=0)
    """With a value, ``/readyz`` answers 503 while a sample later than this is younger than
    ``loop_lag_unready_for_seconds``. Off by default: every replica of an overloaded deployment
    lags together, and taking them all out of rotation at once helps nobody."""
    loop_lag_unready_for_seconds: float = Field(10.0, gt=0)


class ConsoleConfig(StrictModel):
    enabled: bool = False
    """Serve the web console at ``/console`` (static files only; its data comes from the JSON
    API with the key the user signs in with). Off by default; on in the local profile."""


class GatewayConfig(StrictModel):
    server: ServerConfig = ServerConfig()
    pools: dict[str, PoolConfig] = Field(min_length=1)
    models: dict[str, ModelConfig] = Field(min_length=1)
    tracing: TracingConfig = TracingConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    """Counts prompt tokens for admission and routing, unless a model names its own."""
    retries: RetryConfig = RetryConfig()
    limits: LimitsConfig = LimitsConfig()
    """Rate limits per key and tenant (gateway/limits/config.py)."""
    accounting: AccountingConfig = AccountingConfig()
    prices: PricesConfig = PricesConfig()
    """Prices per model and variant, the cost on each ledger row (gateway/accounting/prices.py)."""
    storage: StorageConfig = StorageConfig()
    """The shared store of keys and usage (gateway/database/config.py)."""
    auth: AuthConfig = AuthConfig()
    """API keys, the cache bound, the admin API (gateway/auth/config.py)."""
    console: ConsoleConfig = ConsoleConfig()
    responses: ResponsesConfig = ResponsesConfig()
    """Stored Responses API answers: retention and bounds (gateway/response_store/config.py)."""
    flow: FlowConfig = FlowConfig()
    """Flow control: the queue for requests no pool has room for (gateway/flow/config.py)."""
    slo: SloConfig = SloConfig()
    """Latency objectives per band and tenant, bounds for ``x-slo-*`` (gateway/flow/slo.py)."""
    batches: BatchesConfig = BatchesConfig()
    """The Batch API: file bounds, retention, the runner's concurrency and leases
    (gateway/batches/config.py)."""
    load_sharing: LoadSharingConfig = LoadSharingConfig()
    """Where the load book is shared between gateway replicas (gateway/routing/load_config.py)."""

    @model_validator(mode="after")
    def _limits_exact_across_workers(self) -> GatewayConfig:
        problem = workers_problem(self, self.server.workers)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _models_name_known_pools(self) -> GatewayConfig:
        problems = [
            problem
            for name, m in self.models.items()
            for problem in model_pool_errors(name, m.pool, m.variants, m.canary, self.pools)
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="after")
    def _prices_name_known_models(self) -> GatewayConfig:
        variants = {name: set(m.variants or ()) for name, m in self.models.items()}
        problems = price_errors(self.prices, variants)
        if problems:
            raise ValueError("\n".join(problems))
        return self


def workers_problem(config: GatewayConfig, workers: int) -> str | None:
    """Why ``workers`` processes cannot serve ``config``, if they cannot: the in-process limiter
    counts in each worker alone, so N workers would admit N times every limit (keys carry their
    own limits, so with auth on any limit may apply). The Redis
    backend shares the counters and stays exact; the ledger is exact either way (each worker
    writes the rows of the requests it served, one per request)."""
    limits = config.limits
    # Without keys every caller gets the defaults; with none set, nothing is ever limited.
    can_limit = limits.enabled and (config.auth.enabled or not limits.defaults.unlimited)
    if workers > 1 and can_limit and limits.backend == "memory":
        return (
            f"server.workers: {workers} workers would each count rate limits alone; "
            "use limits.backend: redis (shared counters) or one worker"
        )
    return None


def extras_problem(config: GatewayConfig) -> str | None:
    """What ``config`` needs that is not installed, with the command that installs it."""
    needs = []
    if config.storage.backend == "postgresql":
        needs.append(("postgres", "storage.url: postgresql"))
    if config.limits.enabled and config.limits.backend == "redis":
        needs.append(("redis", "limits.backend: redis"))
    if config.load_sharing.backend == "redis":
        needs.append(("redis", "load_sharing.backend: redis"))
    if config.tracing.enabled and config.tracing.protocol == "grpc":
        needs.append(("otlp-grpc", "tracing.protocol: grpc"))
    for extra, why in needs:
        try:
            require(extra, why)
        except MissingExtra as err:
            return str(err)
    return None


def parse_config(document: Any, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_model(GatewayConfig, document, env)


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_model(GatewayConfig, read_yaml(path), env)
