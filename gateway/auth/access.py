"""Which models a request may see: a model outside the key's list answers as if it did not exist."""

from __future__ import annotations

from gateway.auth.models import Principal


def may_see(principal: Principal | None, model: str) -> bool:
    """No principal means authentication is off: every model."""
    return principal is None or principal.may_use(model)
