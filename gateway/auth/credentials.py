"""What authentication keeps per key: the hashes to check a secret against, and the Principal.

Built from a stored key and its tenant; a revoked key or a disabled tenant gives no credential.
"""

from __future__ import annotations

import hmac

from gateway.auth.keys import KeyHasher, PresentedKey
from gateway.auth.models import ApiKey, Principal, Tenant, effective_models
from gateway.values import value


@value
class Credential:
    principal: Principal
    secret_hash: str
    expires_at: float | None
    previous_hash: str | None
    previous_until: float | None

    def accepts(self, key: PresentedKey, hasher: KeyHasher, now: float) -> bool:
        """The secret matches (or matches the rotated-out one in its grace period), unexpired."""
        if self.expires_at is not None and now >= self.expires_at:
            return False
        digest = hasher.hash(key.public_id, key.secret)
        if hmac.compare_digest(digest, self.secret_hash):
            return True
        return (
            self.previous_hash is not None
            and self.previous_until is not None
            and now < self.previous_until
            and hmac.compare_digest(digest, self.previous_hash)
        )


def credential_for(key: ApiKey, tenant: Tenant) -> Credential | None:
    if key.revoked_at is not None or not tenant.enabled:
        return None
    principal = Principal(
        key_id=key.id,
        key_name=key.name,
        tenant_id=tenant.id,
        allowed_models=effective_models(tenant.allowed_models, key.allowed_models),
        limits=key.limits.over(tenant.limits),
        tenant_limits=tenant.limits,
        labels=tenant.labels,
    )
    return Credential(
        principal,
        key.secret_hash,
        key.expires_at,
        key.previous_secret_hash,
        key.previous_secret_expires_at,
    )
