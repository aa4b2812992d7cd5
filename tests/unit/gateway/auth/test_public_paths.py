"""The one list of public paths, the headers a key is taken from, and the OpenAPI description."""

from __future__ import annotations

from typing import Any

from gateway.auth.config import AuthConfig
from gateway.auth.middleware import ALWAYS_PUBLIC, presented_token, public_paths
from gateway.openapi import openapi_document


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


def test_public_paths_are_short_and_never_hold_metrics() -> None:
    assert public_paths(AuthConfig()) == {"/healthz", "/readyz", "/openapi.json"}
    assert public_paths(AuthConfig(public_metrics=True)) == set(ALWAYS_PUBLIC)
    assert AuthConfig().public_metrics is False  # private by default


def test_keys_come_from_bearer_or_api_key_headers() -> None:
    assert presented_token(_scope((b"authorization", b"Bearer sk-a"))) == "sk-a"
    assert presented_token(_scope((b"authorization", b"bearer  sk-a "))) == "sk-a"
    assert presented_token(_scope((b"api-key", b"sk-b"))) == "sk-b"
    both = _scope((b"api-key", b"sk-b"), (b"authorization", b"Bearer sk-a"))
    assert presented_token(both) == "sk-a"
    assert presented_token(_scope((b"authorization", b"Basic dXNlcjpwdw=="))) is None
    assert presented_token(_scope()) is None


def test_the_openapi_document_marks_only_public_paths_as_keyless() -> None:
    doc = openapi_document()
    assert doc["security"] == [{"bearer": []}, {"apiKeyHeader": []}]
    keyless = {
        path
        for path, item in doc["paths"].items()
        if any(op.get("security") == [] for op in item.values())
    }
    assert keyless <= set(ALWAYS_PUBLIC)
    for path, item in doc["paths"].items():
        if path not in keyless:
            assert all("401" in op["responses"] for op in item.values()), path


def test_the_console_adds_its_exact_files_and_nothing_under_them() -> None:
    from gateway.auth.middleware import CONSOLE_PATHS

    with_console = public_paths(AuthConfig(), console=True)
    assert with_console - public_paths(AuthConfig()) == set(CONSOLE_PATHS)
    assert set(CONSOLE_PATHS) == {
        "/console",
        "/console/",
        "/console/console.css",
        "/console/console.js",
    }
