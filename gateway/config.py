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
from gateway.auth.config import AuthConfig
from gateway.limits.config import LimitsConfig
from gateway.routing.config import ModelConfig, PoolConfig, RetryConfig, model_pool_errors
from gateway.storage.config import StorageConfig
from gateway.telemetry.config import TracingConfig
from gateway.tokens.counting import TokenizerConfig
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
    max_tokens_limit: int = Field(1_000_000, gt=0)
    """Requests asking for more ``max_tokens`` than this are refused as absurd."""
    graceful_shutdown_seconds: float = Field(30.0, ge=0)
    proxy_headers: bool = False
    """Take the client address from X-Forwarded-For when the peer is a trusted proxy (uvicorn's
    ``proxy_headers``). Off by default: behind a Kubernetes Service nothing sets them, and the
    check costs time on every request."""


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
    storage: StorageConfig = StorageConfig()
    """The shared store of keys and usage (gateway/storage/config.py)."""
    auth: AuthConfig = AuthConfig()
    """API keys, the cache bound, the admin API (gateway/auth/config.py)."""
    console: ConsoleConfig = ConsoleConfig()

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


def parse_config(document: Any, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_model(GatewayConfig, document, env)


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_model(GatewayConfig, read_yaml(path), env)
