"""Bad requests get the right 4xx in the OpenAI envelope and reach no upstream."""

from __future__ import annotations

import httpx
import pytest

from tests.gatewayproc import GatewayProcess
from tests.integration.proxy.conftest import MODEL
from tests.simproc import SimProcess

OK_MESSAGES = [{"role": "user", "content": "hi"}]


def _assert_envelope(response: httpx.Response, status: int, code: str | None) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    assert error["code"] == code
    return error  # type: ignore[no-any-return]


@pytest.fixture
def http(gateway: GatewayProcess) -> httpx.Client:
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        yield client  # type: ignore[misc]


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("content", "headers", "status", "code"),
    [
        (b"{not json", JSON, 400, "invalid_json"),
        (b"", JSON, 400, "invalid_json"),
        (b"[1, 2, 3]", JSON, 400, "invalid_json"),
        (b'"just a string"', JSON, 400, "invalid_json"),
        (b'{"messages": []}', JSON, 400, "invalid_value"),
        (
            b"model=x",
            {"content-type": "application/x-www-form-urlencoded"},
            415,
            "unsupported_media_type",
        ),
        (b"x" * 70000, JSON, 413, "request_too_large"),
    ],
)
def test_malformed_bodies(
    http: httpx.Client,
    sim: SimProcess,
    content: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    sim.reset()
    response = http.post("/chat/completions", content=content, headers=headers)
    _assert_envelope(response, status, code)
    assert sim.requests() == []


def test_body_over_limit_without_content_length(http: httpx.Client) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b"x" * 8192

    response = http.post("/chat/completions", content=chunks(), headers=JSON)
    _assert_envelope(response, 413, "request_too_large")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": OK_MESSAGES}, "model"),
        ({"model": 42, "messages": OK_MESSAGES}, "model"),
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": OK_MESSAGES, "max_tokens": 10**9}, "max_tokens"),
        ({"model": MODEL, "messages": OK_MESSAGES, "max_tokens": "lots"}, "max_tokens"),
        ({"model": MODEL, "messages": OK_MESSAGES, "stream": "please"}, "stream"),
    ],
)
def test_bad_parameters(http: httpx.Client, body: dict[str, object], param: str) -> None:
    response = http.post("/chat/completions", json=body)
    code = "missing_required_parameter" if param == "messages" else "invalid_value"
    error = _assert_envelope(response, 400, code)
    assert error["param"] == param


def test_unknown_model_is_404(http: httpx.Client) -> None:
    response = http.post("/completions", json={"model": "nope", "prompt": "x"})
    error = _assert_envelope(response, 404, "model_not_found")
    assert error["param"] == "model"


def test_wrong_method_and_unknown_path(http: httpx.Client) -> None:
    response = http.get("/chat/completions")
    _assert_envelope(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]
    _assert_envelope(http.post("/nothing/here", json={}), 404, "not_found")
