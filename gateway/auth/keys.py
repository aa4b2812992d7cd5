"""API key format and hashing.

A key reads ``sk-pdg-<public id>-<secret>`` (tenant keys) or ``sk-pdgadmin-<public id>-<secret>``
(admin keys). The public id names the key in logs, metrics, spans and limits; the secret is shown
once, at creation, and only its HMAC-SHA256 under a server-side secret is stored, so a copy of the
database alone neither reveals a key nor lets anyone test guesses offline.

    hasher = KeyHasher(b"server-side secret")
    key = new_key(KeyKind.TENANT)
    stored = hasher.hash(key.public_id, key.secret)
    presented = parse_key(key.token)
    assert presented and hasher.matches(presented, stored)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from enum import StrEnum

from gateway.values import value

PUBLIC_ID_LENGTH = 12
SECRET_LENGTH = 40
# Letters and digits only: the key splits on "-" and survives copy-paste and URL encoding.
_ALPHABET = string.ascii_lowercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits
_MAX_KEY_LENGTH = 200


class KeyKind(StrEnum):
    TENANT = "pdg"
    ADMIN = "pdgadmin"


_KINDS = {kind.value: kind for kind in KeyKind}


@value
class PresentedKey:
    """A key split into its parts; says nothing yet about whether it is valid."""

    kind: KeyKind
    public_id: str
    secret: str

    @property
    def token(self) -> str:
        return f"sk-{self.kind.value}-{self.public_id}-{self.secret}"

    def __repr__(self) -> str:  # never print the secret
        return f"PresentedKey({self.kind.value}, {self.public_id})"


def new_key(kind: KeyKind) -> PresentedKey:
    public_id = "".join(secrets.choice(_ALPHABET) for _ in range(PUBLIC_ID_LENGTH))
    return PresentedKey(kind, public_id, new_secret())


def new_secret() -> str:
    return "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(SECRET_LENGTH))


def parse_key(token: str) -> PresentedKey | None:
    """The parts of a well-formed key, or None for anything else."""
    if len(token) > _MAX_KEY_LENGTH:
        return None
    parts = token.split("-")
    if len(parts) != 4 or parts[0] != "sk":
        return None
    _, prefix, public_id, secret = parts
    kind = _KINDS.get(prefix)
    if kind is None or len(public_id) != PUBLIC_ID_LENGTH:
        return None
    if not public_id.isalnum() or not secret.isalnum():
        return None
    return PresentedKey(kind, public_id, secret)


class KeyHasher:
    """HMAC-SHA256 of ``public id + secret`` under the server's key-hash secret, hex encoded."""

    def __init__(self, server_secret: bytes) -> None:
        # Keyed once; each hash copies the keyed state (twice as fast as hmac.digest per call).
        self._keyed = hmac.new(server_secret, digestmod=hashlib.sha256)

    def hash(self, public_id: str, secret: str) -> str:
        mac = self._keyed.copy()
        mac.update(f"{public_id}:{secret}".encode())
        return mac.hexdigest()

    def matches(self, key: PresentedKey, stored_hash: str) -> bool:
        """Constant-time comparison with a stored hash."""
        return hmac.compare_digest(self.hash(key.public_id, key.secret), stored_hash)

    def __repr__(self) -> str:
        return "KeyHasher(<secret>)"
