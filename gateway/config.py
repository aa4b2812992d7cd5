"""The gateway's configuration: strict, frozen models loaded from YAML plus the environment.

Unknown keys are errors that name their path (``pools.pd.timeouts.idel: extra inputs are not
permitted``), so a typo never silently falls back to a default. String values may name
environment variables, ``${VAR}`` or ``${VAR:-default}``, which is how secrets reach the file::

    cfg = load_config("gateway.yaml")
    app = create_app(cfg)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.accounting.config import AccountingConfig
from gateway.accounting.tokens import TokenizerConfig
from gateway.auth.config import AuthConfig
from gateway.limits.config import LimitsConfig
from gateway.routing.config import (
    BreakerConfig,
    CanaryConfig,
    RetryConfig,
    RoutingPolicy,
    VariantConfig,
    model_pool_errors,
)
from gateway.storage.config import StorageConfig
from gateway.telemetry.config import TracingConfig

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


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(Strict):
    """Seconds. ``first_byte`` bounds the wait for the upstream's response headers; ``idle`` the gap
    between two body chunks; ``total`` the whole upstream exchange."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(300.0, gt=0)
    idle: float = Field(60.0, gt=0)
    total: float = Field(1800.0, gt=0)


class HealthCheck(Strict):
    path: str = "/v1/models"
    interval: float = Field(5.0, gt=0)
    timeout: float = Field(2.0, gt=0)


class PoolConfig(Strict):
    """One upstream pool: replicas (Ray Serve ingress base URLs) serving the same thing."""

    urls: tuple[str, ...] = Field(min_length=1)
    timeouts: Timeouts = Timeouts()
    health: HealthCheck = HealthCheck()
    max_connections: int = Field(1024, gt=0)
    forward_headers: frozenset[str] = frozenset()
    """Client request headers passed on to this pool, beyond the gateway's own."""
    capacity: int | None = Field(None, gt=0)
    """Requests in flight (all replicas) above which the pool counts as saturated."""
    breaker: BreakerConfig = BreakerConfig()

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


class ModelConfig(Strict):
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


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
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
    keep_alive_timeout: float = Field(5.0, gt=0)
    """Seconds an idle keep-alive connection is kept between requests."""
    send_timeout: float = Field(60.0, gt=0)
    """Seconds a client may leave the answer unread (the send buffer full) before it is cut."""
    max_connections: int = Field(4096, ge=1)
    """Open client connections; at the cap the longest-idle one (no request in progress) is closed
    to make room, else the new one gets 503. Lowered to fit the open-file limit."""
    max_requests_in_flight: int = Field(1024, ge=1)
    """Requests being served at once (probes excepted); more get 503 ``server_overloaded``."""


class GatewayConfig(Strict):
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
    storage: StorageConfig = StorageConfig()
    """The shared store of keys and usage (gateway/storage/config.py)."""
    auth: AuthConfig = AuthConfig()
    """API keys, the cache bound, the admin API (gateway/auth/config.py)."""

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


class ConfigError(Exception):
    """A configuration file that cannot be used; the message lists every problem with its path."""


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate_env(value: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {
            k: interpolate_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [interpolate_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{path}: environment variable {name} is not set")

        return _ENV_REF.sub(substitute, value)
    return value


def format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"{where}: {e['msg'].lower()}")
    return "\n".join(lines)


def parse_config(document: Any, env: Mapping[str, str] | None = None) -> GatewayConfig:
    if not isinstance(document, dict):
        raise ConfigError("the configuration must be a mapping at the top level")
    data = interpolate_env(document, os.environ if env is None else env)
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return parse_config(document, env)
