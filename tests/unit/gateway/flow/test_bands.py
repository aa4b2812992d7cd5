"""Priority bands: the key's, the tenant's, the default; a header may lower, never raise."""

from __future__ import annotations

from gateway.auth.models import Limits, Principal
from gateway.flow.bands import band_of
from gateway.flow.config import FlowConfig

CONFIG = FlowConfig(tenant_bands={"vip": "interactive"})


def principal(tenant: str = "t", **labels: str) -> Principal:
    return Principal("k1", "key", tenant, None, Limits(), Limits(), labels)


def test_key_label_over_tenant_over_default() -> None:
    assert band_of(CONFIG, None, None) == "standard"
    assert band_of(CONFIG, principal("vip"), None) == "interactive"
    assert band_of(CONFIG, principal("vip", priority="sheddable"), None) == "sheddable"
    assert band_of(CONFIG, principal(priority="nonsense"), None) == "standard"


def test_a_client_header_lowers_but_never_raises() -> None:
    assert band_of(CONFIG, principal(), b"sheddable") == "sheddable"
    assert band_of(CONFIG, principal(), b"interactive") == "standard"
    assert band_of(CONFIG, principal("vip"), b"Standard ") == "standard"
    assert band_of(CONFIG, principal(), b"x" * 1000) == "standard"
