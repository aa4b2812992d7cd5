"""Pool filters as named plugins: each says whether a pool is past one bound for a request.

A filter is a function of (the pool's config, a frozen :class:`PoolLoad` read for this one check)
that is True while the pool is past its bound; the first registered filter that is, names the
saturation reason (metrics label, admin view, the route's overflow reason), so the names are a
fixed set known from code, never from a client. A filter whose bound is not configured is off::

    def past_my_bound(config: PoolConfig, load: PoolLoad) -> bool: ...
    register_filter("my_bound", past_my_bound)         # checked after the built-in ones

Flow control's room check and dispatch's choice call the same filters (``policy.saturation``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.routing.config import PoolConfig
from gateway.routing.gauges import EngineReading


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One pool's load as a filter reads it, for one check."""

    in_flight: int
    """Requests in flight on the pool (every gateway replica's, and those granted, pending)."""
    prompt_tokens: int
    engine: EngineReading | None
    """The engines' reading while fresh, else None (a stale one leaves the gateway's own view)."""
    starting: int
    """Streamed requests sent whose first token has not come back (and those pending)."""
    held_back: tuple[int, int] = (0, 0)
    """Places and starts this request may not use (flow control's reserve)."""


Filter = Callable[[PoolConfig, PoolLoad], bool]
"""``past(config, load)``: True while the pool is past this filter's bound."""

_FILTERS: dict[str, Filter] = {}
_CHECKED: list[tuple[tuple[str, Filter], ...]] = [()]
"""The registry as a tuple, made at each registration (every request's checks read it)."""


def register_filter(name: str, past: Filter) -> Filter:
    if name in _FILTERS and _FILTERS[name] is not past:
        raise ValueError(f"a filter named {name!r} is registered already")
    _FILTERS[name] = past
    _CHECKED[0] = tuple(_FILTERS.items())
    return past


def filters() -> tuple[tuple[str, Filter], ...]:
    """The registered filters, in the order they are checked."""
    return _CHECKED[0]


def filter_names() -> tuple[str, ...]:
    return tuple(_FILTERS)


def in_flight(config: PoolConfig, load: PoolLoad) -> bool:
    return config.capacity is not None and load.in_flight + load.held_back[0] >= config.capacity


def starting(config: PoolConfig, load: PoolLoad) -> bool:
    bound = config.saturation.max_starting
    return bound is not None and load.starting + load.held_back[1] >= bound


def waiting(config: PoolConfig, load: PoolLoad) -> bool:
    bound = config.saturation.max_waiting
    return bound is not None and load.engine is not None and load.engine.waiting > bound


def kv_usage(config: PoolConfig, load: PoolLoad) -> bool:
    bound = config.saturation.max_kv_usage
    kv = None if load.engine is None else load.engine.kv_usage
    return bound is not None and kv is not None and kv >= bound


def prompt_tokens(config: PoolConfig, load: PoolLoad) -> bool:
    bound = config.saturation.max_prompt_tokens_in_flight
    return bound is not None and load.prompt_tokens >= bound


# The order is the reasons' precedence, as before: the gateway's own counts, then the engines'.
register_filter("in_flight", in_flight)
register_filter("starting", starting)
register_filter("prompt_tokens", prompt_tokens)
register_filter("waiting", waiting)
register_filter("kv_usage", kv_usage)
