"""The OpenAPI check itself: it passes OpenAI's own shapes and fails the defects it exists for."""

from __future__ import annotations

import httpx
import orjson
import pytest

from gateway.responses_translation.objects import ResponseShell
from tests.conformance.httpx_check import CheckingTransport
from tests.conformance.openapi_check import VLLM_NULLS, check_answer, operation_of

SHELL = ResponseShell.of({"model": "m", "input": "hi"}, "ab12", 1_760_000_000)


def test_a_gateway_response_object_conforms_and_a_null_user_does_not() -> None:
    body = SHELL.response("completed", completed_at=1_760_000_001)
    assert check_answer("POST", "/v1/responses", 200, "application/json", orjson.dumps(body))
    with pytest.raises(AssertionError, match="user"):
        check_answer(
            "POST", "/v1/responses", 200, "application/json", orjson.dumps({**body, "user": None})
        )


def test_each_stream_event_is_checked_against_its_own_schema() -> None:
    created = {"type": "response.created", "sequence_number": 0, "response": SHELL.response("x")}
    good = b"event: response.created\ndata: " + orjson.dumps(created) + b"\n\n"
    with pytest.raises(AssertionError, match="status"):  # "x" is no status
        check_answer("POST", "/v1/responses", 200, "text/event-stream", good)
    created["response"] = SHELL.response("in_progress")
    good = b"data: " + orjson.dumps(created) + b"\n\n"
    assert check_answer("POST", "/v1/responses", 200, "text/event-stream", good)
    unnumbered = {k: v for k, v in created.items() if k != "sequence_number"}
    with pytest.raises(AssertionError, match="sequence_number"):
        check_answer(
            "POST", "/v1/responses", 200, "text/event-stream", b"data: " + orjson.dumps(unnumbered)
        )


def test_errors_are_openai_shaped_and_unknown_successes_fail() -> None:
    error = {
        "error": {"message": "no", "type": "invalid_request_error", "param": None, "code": None}
    }
    assert check_answer(
        "POST", "/v1/chat/completions", 400, "application/json", orjson.dumps(error)
    )
    with pytest.raises(AssertionError, match="param"):
        bare = {"error": {"message": "no", "type": "invalid_request_error", "code": None}}
        check_answer("POST", "/v1/chat/completions", 400, "application/json", orjson.dumps(bare))
    with pytest.raises(AssertionError, match="not an answer"):
        check_answer("POST", "/v1/chat/completions", 201, "application/json", b"{}")


def test_paths_resolve_literal_before_templated_and_the_gateways_own_are_not_checked() -> None:
    compact = operation_of("POST", "/v1/responses/compact")
    assert compact is not None and "200" in compact["responses"]
    assert operation_of("GET", "/v1/responses/resp_1") is not None
    assert not check_answer("GET", "/health", 200, "application/json", b"{}")


def test_the_transport_checks_a_whole_answer_and_passes_it_through() -> None:
    # httpx's MockTransport is the origin here: what is tested is the checking transport.
    good = SHELL.response("completed", completed_at=1_760_000_001)

    def origin(request: httpx.Request) -> httpx.Response:
        body = good if request.headers.get("x-answer") == "good" else {**good, "user": None}
        return httpx.Response(200, json=body)

    transport = CheckingTransport(httpx.MockTransport(origin))
    with httpx.Client(transport=transport, base_url="http://gw") as client:
        assert client.post("/v1/responses", headers={"x-answer": "good"}).json() == good
        with pytest.raises(AssertionError, match="user"):
            client.post("/v1/responses")


# A chat answer of vLLM 0.32 on the local stack, as the gateway relayed it (the e2e run).
VLLM_CHAT = {
    "id": "chatcmpl-a3d6c9807eddaa99759558ac",
    "object": "chat.completion",
    "created": 1796220586,
    "model": "tiny",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "iel r tuple",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": "vllm-0.32.0-ef772e41",
    "usage": {
        "prompt_tokens": 165,
        "total_tokens": 181,
        "completion_tokens": 16,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    },
}


def test_vllms_nulls_fail_unless_tolerated_by_name_and_no_other_null_passes() -> None:
    chat = "/v1/chat/completions"
    with pytest.raises(AssertionError, match="prompt_tokens_details"):
        check_answer("POST", chat, 200, "application/json", orjson.dumps(VLLM_CHAT))
    assert check_answer("POST", chat, 200, "application/json", orjson.dumps(VLLM_CHAT), VLLM_NULLS)
    other = {**VLLM_CHAT, "created": None}
    with pytest.raises(AssertionError, match="created"):
        check_answer("POST", chat, 200, "application/json", orjson.dumps(other), VLLM_NULLS)
