"""``@value``: the gateway's immutable value types, checked by the type checker, cheap to build.

A request builds a few dozen small values (its arrival, reservation, route facts, usage, outcome,
ledger row...). ``@dataclass(frozen=True)`` enforces immutability at run time by setting each
field through ``object.__setattr__`` in ``__init__``, which made a value several times dearer
to build than an unfrozen one, and a request builds dozens (measured: README, Performance).
``@value``
gives the same promise where it is enforced on every change, by mypy (``frozen_default``: an
assignment to a field is a type error), and builds a plain slotted dataclass. Values compare and
hash by their fields, as frozen dataclasses do::

    @value
    class Quota:
        limit: int
        remaining: int
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
