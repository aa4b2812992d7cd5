"""Key format, parsing and hashing (no store needed)."""

from __future__ import annotations

import pytest

from gateway.auth.keys import KeyHasher, KeyKind, PresentedKey, new_key, parse_key


def test_a_new_key_parses_back_to_its_parts() -> None:
    key = new_key(KeyKind.TENANT)
    assert key.token.startswith(f"sk-pdg-{key.public_id}-")
    assert parse_key(key.token) == key
    admin = new_key(KeyKind.ADMIN)
    assert admin.token.startswith("sk-pdgadmin-")
    assert parse_key(admin.token) == admin


def test_keys_are_unique() -> None:
    keys = {new_key(KeyKind.TENANT) for _ in range(200)}
    assert len({k.public_id for k in keys}) == 200
    assert len({k.secret for k in keys}) == 200


@pytest.mark.parametrize(
    "token",
    [
        "",
        "sk-proj-abc",
        "dummy",
        "sk-pdg-abcdefabcdef",
        "sk-pdg-abcdefabcdef-",
        "sk-pdg-short-secret",
        "sk-other-abcdefabcdef-secret",
        "sk-pdg-abcdefabcdef-sec-ret",
        "sk-pdg-abcdefabcdef-secr et",
        "xk-pdg-abcdefabcdef-secret",
        "sk-pdg-abcdefabcdef-" + "s" * 300,
    ],
)
def test_malformed_keys_do_not_parse(token: str) -> None:
    assert parse_key(token) is None


def test_the_hash_depends_on_the_server_secret_and_matches_in_constant_time() -> None:
    key = new_key(KeyKind.TENANT)
    stored = KeyHasher(b"server-secret-one").hash(key.public_id, key.secret)
    assert KeyHasher(b"server-secret-one").matches(key, stored)
    assert not KeyHasher(b"server-secret-two").matches(key, stored)
    # Flip the last character to another one: replacing it with a fixed "x" is the right
    # secret whenever the secret already ends in "x" (one run in 62 failed).
    flipped = "A" if key.secret[-1] != "A" else "B"
    wrong = PresentedKey(KeyKind.TENANT, key.public_id, key.secret[:-1] + flipped)
    assert wrong.secret != key.secret
    assert not KeyHasher(b"server-secret-one").matches(wrong, stored)
    assert key.secret not in stored


def test_reprs_never_show_secrets() -> None:
    key = new_key(KeyKind.TENANT)
    hasher = KeyHasher(b"server-secret-one")
    assert key.secret not in repr(key)
    assert "server-secret" not in repr(hasher)
