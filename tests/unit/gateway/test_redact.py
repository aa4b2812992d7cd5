"""URLs shown anywhere lose their credentials."""

from __future__ import annotations

import pytest

from gateway.redact import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://ray:8000/pd", "http://ray:8000/pd"),
        ("http://user:pass@ray:8000/pd", "http://***@ray:8000/pd"),
        ("https://token@ray/pd?key=abc", "https://***@ray/pd"),
        ("http://ray:8000/pd?sig=1", "http://ray:8000/pd"),
    ],
)
def test_credentials_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown
