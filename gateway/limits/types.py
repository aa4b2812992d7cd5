"""The values that pass between the admission stage and a limiter backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Literal, Protocol

from gateway.limits.budgets import BudgetAlert
from gateway.limits.config import LimitValues
from gateway.values import value

Scope = Literal["key", "tenant"]


@value
class Subject:
    """Who is limited: one key or one tenant, with the limit values that apply to it."""

    scope: Scope
    id: str
    limits: LimitValues
    name: str = field(init=False, compare=False)
    """``scope:id``, the counters' key; made once (a subject is looked up twice a request)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.scope}:{self.id}")


@value
class Quota:
    """One limit as the response headers report it; ``reset`` in seconds until fully refilled."""

    limit: int
    remaining: int
    reset: float


@value
class Refusal:
    """Why a request was not admitted; ``retry_after`` None when waiting cannot help."""

    subject: Subject
    limit_name: str
    limit: int
    used: int
    requested: int
    retry_after: float | None
    resets_at: float | None = None
    """A budget's: when its period ends (None: a budget that never resets)."""


@value
class Ticket:
    """What was reserved for one admitted request, to settle it later."""

    subjects: tuple[Subject, ...]
    tokens: int
    request_id: str
    day: int
    money: int = 0
    """Micro-units reserved against every subject's budget (0: none reserved)."""
    periods: tuple[int, ...] = ()
    """Each subject's budget period at admission (-1: no budget), to settle across a turn."""


@value
class Decision:
    """A backend's answer: a ticket, or a refusal; and the tightest quotas for the headers."""

    ticket: Ticket | None
    refusal: Refusal | None
    requests: Quota | None
    tokens: Quota | None


AlertSink = Callable[[BudgetAlert], None]
"""Where a backend hands the alerts its settlements decided (it never blocks or raises)."""


def no_alerts(alert: BudgetAlert) -> None:
    """The sink of a backend nobody listens to."""


class BackendUnavailable(Exception):
    """The limiter's store could not answer (Redis down, slow or full); the policy decides."""


class LimiterBackend(Protocol):
    """Where the counters live: this process (``memory``) or Redis, shared by every replica.

    ``acquire`` checks every limit of every subject and takes them all, or none, atomically;
    it raises :class:`BackendUnavailable` when the store cannot answer. ``money`` is the
    request's maximum cost in micro-units, reserved against the subjects' budgets with the
    tokens. ``settle`` never blocks the caller and never raises: it runs even while a request is
    being torn down by a disconnect; the budget alerts it decides go to ``on_alert``. ``drain``
    and ``aclose`` wait for the settlements still on their way.
    """

    on_alert: AlertSink

    async def acquire(
        self, subjects: tuple[Subject, ...], tokens: int, request_id: str, money: int = 0
    ) -> Decision: ...

    def settle(self, ticket: Ticket, used_tokens: int, used_money: int = 0) -> None: ...

    async def budget_state(self, subject: Subject) -> tuple[int, int, int]:
        """A budget's counters now: (period, committed, spent), refilled to the period."""

    async def ping(self) -> bool: ...

    async def drain(self) -> None:
        """Wait until every settlement sent so far has been applied."""

    async def aclose(self) -> None: ...
