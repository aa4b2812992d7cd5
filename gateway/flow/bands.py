"""Which priority band a request waits in: its key's, its tenant's, or the default; lowered by
the client, never raised::

    band_of(config, principal, header(scope, PRIORITY_HEADER))   # "standard"

A key's label ``priority`` names its band; else ``tenant_bands`` names the tenant's; else
``default_band``. ``x-gateway-priority`` may name a band at or below that one; an unknown or
higher band in the header is ignored (the header is the client's, so it can only cost it).
"""

from __future__ import annotations

from gateway.auth.models import Principal
from gateway.flow.config import FlowConfig

PRIORITY_HEADER = b"x-gateway-priority"
PRIORITY_LABEL = "priority"


def band_of(config: FlowConfig, principal: Principal | None, asked: bytes | None) -> str:
    names = [b.name for b in config.bands]
    allowed = _allowed(config, principal, names)
    if asked is None or len(asked) > 32:
        return allowed
    wanted = asked.decode("latin-1").strip().lower()
    if wanted in names and names.index(wanted) >= names.index(allowed):
        return wanted
    return allowed


def _allowed(config: FlowConfig, principal: Principal | None, names: list[str]) -> str:
    if principal is not None:
        own = principal.labels.get(PRIORITY_LABEL)
        if own in names:
            return own
        tenant = config.tenant_bands.get(principal.tenant_id)
        if tenant is not None:
            return tenant
    return config.default_band
