"""The upstream client's deadlines (a pool's ``timeouts`` section)."""

from __future__ import annotations

from pydantic import Field

from configkit import StrictModel


class Timeouts(StrictModel):
    """Seconds. ``first_byte`` bounds the wait for the upstream's response headers; ``idle`` the gap
    between two body chunks; ``total`` the whole upstream exchange."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(300.0, gt=0)
    idle: float = Field(60.0, gt=0)
    total: float = Field(1800.0, gt=0)
