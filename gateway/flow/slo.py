"""Per-request latency objectives (issue 38): ``x-slo-ttft-ms`` / ``x-slo-tpot-ms``, bounded.

What a request may ask is its key's, its tenant's or its band's objective at loosest: a key's
labels ``slo_ttft_ms`` / ``slo_tpot_ms`` name its own; else ``tenants`` names the tenant's;
else ``bands`` the band's default. A client's header may tighten that, never loosen it: a
value that is not a whole number of milliseconds in ``[1, MAX_MS]``, or looser than the
request may have, is a 400 naming the header (the header is the client's: it is read only
up to ``MAX_HEADER_BYTES`` before it costs anything)::

    slo_of(config, principal, "interactive", header(scope, TTFT_HEADER), None)
    # Slo(ttft_ms=800, tpot_ms=50)
"""

from __future__ import annotations

from pydantic import Field

from configkit import StrictModel
from gateway.asgi import Headers, find_header
from gateway.auth.models import Principal
from gateway.errors import InvalidParameter
from gateway.flow.bands import PRIORITY_HEADER, band_of
from gateway.flow.config import FlowConfig
from gateway.routing.predicted import Objective
from gateway.values import value

TTFT_HEADER = b"x-slo-ttft-ms"
TPOT_HEADER = b"x-slo-tpot-ms"
TTFT_LABEL = "slo_ttft_ms"
TPOT_LABEL = "slo_tpot_ms"
MAX_MS = 600_000
MAX_HEADER_BYTES = 16


class SloTarget(StrictModel):
    ttft_ms: int | None = Field(None, ge=1, le=MAX_MS)
    tpot_ms: int | None = Field(None, ge=1, le=MAX_MS)


class SloConfig(StrictModel):
    bands: dict[str, SloTarget] = Field(default_factory=dict)
    """Per priority band, the objective a request of it gets when nothing else names one."""
    tenants: dict[str, SloTarget] = Field(default_factory=dict)


@value
class Slo:
    ttft_ms: int | None
    tpot_ms: int | None

    @property
    def any(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


NO_SLO = Slo(None, None)


def slo_of(
    config: SloConfig,
    principal: Principal | None,
    band: str | None,
    ttft_header: bytes | None,
    tpot_header: bytes | None,
) -> Slo:
    allowed = _allowed(config, principal, band)
    return Slo(
        _one(TTFT_HEADER, ttft_header, allowed.ttft_ms),
        _one(TPOT_HEADER, tpot_header, allowed.tpot_ms),
    )


def objective_of(
    slo: SloConfig, flow: FlowConfig, principal: Principal | None, headers: Headers
) -> Objective:
    """The request's objective for the latency-predicted decision: its band (flow control's
    rule, whether or not the queue is on), the SLO that band, tenant, key and headers give,
    and whether the band is sheddable (refused early rather than answered late)."""
    band = band_of(flow, principal, find_header(headers, PRIORITY_HEADER))
    found = slo_of(
        slo, principal, band, find_header(headers, TTFT_HEADER), find_header(headers, TPOT_HEADER)
    )
    sheddable = any(b.name == band and b.sheddable for b in flow.bands)
    return Objective(found.ttft_ms, found.tpot_ms, sheddable)


def _allowed(config: SloConfig, principal: Principal | None, band: str | None) -> Slo:
    base = config.bands.get(band) if band is not None else None
    ttft = base.ttft_ms if base is not None else None
    tpot = base.tpot_ms if base is not None else None
    if principal is not None:
        tenant = config.tenants.get(principal.tenant_id)
        if tenant is not None:
            ttft = tenant.ttft_ms if tenant.ttft_ms is not None else ttft
            tpot = tenant.tpot_ms if tenant.tpot_ms is not None else tpot
        ttft = _label(principal, TTFT_LABEL, ttft)
        tpot = _label(principal, TPOT_LABEL, tpot)
    return Slo(ttft, tpot)


def _label(principal: Principal, name: str, fallback: int | None) -> int | None:
    raw = principal.labels.get(name)
    if raw is None or not raw.isdigit() or len(raw) > 7:
        return fallback  # an operator's typo keeps the tenant's or band's objective
    value = int(raw)
    return value if 1 <= value <= MAX_MS else fallback


def _one(header: bytes, raw: bytes | None, allowed: int | None) -> int | None:
    if raw is None:
        return allowed
    name = header.decode()
    text = raw[: MAX_HEADER_BYTES + 1].decode("latin-1").strip()
    if len(raw) > MAX_HEADER_BYTES or not text.isdigit() or not 1 <= int(text) <= MAX_MS:
        raise InvalidParameter(
            f"{name} must be a whole number of milliseconds from 1 to {MAX_MS}", param=name
        )
    value = int(text)
    if allowed is not None and value > allowed:
        raise InvalidParameter(
            f"{name} may tighten this key's objective ({allowed} ms), not loosen it", param=name
        )
    return value
