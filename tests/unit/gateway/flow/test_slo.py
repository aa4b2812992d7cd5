"""Per-request SLOs: the band's, tenant's or key's objective at loosest; a header may tighten
it, never loosen it, and a bad value is a 400 naming the header."""

from __future__ import annotations

import pytest

from gateway.auth.models import Limits, Principal
from gateway.errors import InvalidParameter
from gateway.flow.slo import MAX_MS, NO_SLO, Slo, SloConfig, SloTarget, slo_of

CONFIG = SloConfig(
    bands={"interactive": SloTarget(ttft_ms=1000, tpot_ms=50), "batch": SloTarget(ttft_ms=30000)},
    tenants={"acme": SloTarget(ttft_ms=500)},
)


def _principal(tenant: str = "t1", **labels: str) -> Principal:
    return Principal("k1", "key", tenant, None, Limits(), Limits(), labels)


def test_band_then_tenant_then_key_label() -> None:
    assert slo_of(CONFIG, None, "interactive", None, None) == Slo(1000, 50)
    assert slo_of(CONFIG, None, "standard", None, None) == NO_SLO
    assert slo_of(CONFIG, _principal("acme"), "interactive", None, None) == Slo(500, 50)
    key = _principal("acme", slo_ttft_ms="300", slo_tpot_ms="20")
    assert slo_of(CONFIG, key, "interactive", None, None) == Slo(300, 20)
    typo = _principal("acme", slo_ttft_ms="fast")
    assert slo_of(CONFIG, typo, "interactive", None, None) == Slo(500, 50)


def test_a_header_tightens() -> None:
    assert slo_of(CONFIG, None, "interactive", b" 250 ", b"40") == Slo(250, 40)
    assert slo_of(CONFIG, None, "standard", b"2000", None) == Slo(2000, None)


def test_a_header_never_loosens_what_the_key_allows() -> None:
    key = _principal(slo_ttft_ms="300")
    with pytest.raises(InvalidParameter) as caught:
        slo_of(CONFIG, key, "interactive", b"301", None)
    assert caught.value.status == 400 and caught.value.param == "x-slo-ttft-ms"
    with pytest.raises(InvalidParameter):
        slo_of(CONFIG, None, "interactive", None, b"51")


@pytest.mark.parametrize(
    "raw", [b"", b"0", b"-5", b"1.5", b"abc", b"1e3", str(MAX_MS + 1).encode(), b"9" * 40]
)
def test_bad_values_are_a_clear_400(raw: bytes) -> None:
    with pytest.raises(InvalidParameter) as caught:
        slo_of(CONFIG, None, "standard", None, raw)
    assert caught.value.param == "x-slo-tpot-ms"
    assert "milliseconds" in caught.value.message


def test_config_bounds_its_own_values() -> None:
    with pytest.raises(ValueError):
        SloTarget(ttft_ms=0)
    with pytest.raises(ValueError):
        SloTarget(tpot_ms=MAX_MS + 1)
