"""The optional parts of the gateway and the pip extra that installs each.

The base install serves on SQLite with the in-process limiter and OTLP over HTTP; PostgreSQL,
Redis and OTLP over gRPC each come with an extra. A config that needs one that is missing is
refused at start-up (and by ``pd-gateway check-config``) with the command that installs it,
instead of an ImportError at the first request that reaches the driver::

    require("redis", "limits.backend: redis")       # or MissingExtra, naming the extra
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtra", "missing", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("asyncpg",),
    "redis": ("redis",),
    "otlp-grpc": ("grpc", "opentelemetry.exporter.otlp.proto.grpc"),
}
"""Each extra of the distribution, and the modules it brings."""


class MissingExtra(RuntimeError):
    """A configured feature whose extra is not installed."""


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def require(extra: str, why: str) -> None:
    """Raise :class:`MissingExtra` when ``extra`` is not installed, saying what needs it."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(
            f"{why} needs the {extra!r} extra ({', '.join(absent)} not installed): "
            f"pip install 'pd-gateway[{extra}]'"
        )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
