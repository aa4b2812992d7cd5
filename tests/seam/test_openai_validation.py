"""OpenAI's own fields refused as OpenAI refuses them (its ranges, error codes and ``param``),
before anything is reserved; vLLM's extensions pass through untouched; and the answers conform
to OpenAI's document (the harness checks every one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
SCRIPTS = {"default": Script(kind="whole")}
USER = {"role": "user", "content": "hello"}


def chat(**extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "messages": [USER], **extra})


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"temperature": 3}, "temperature", "decimal_above_max_value"),
        ({"temperature": -0.1}, "temperature", "decimal_below_min_value"),
        ({"top_p": 1.5}, "top_p", "decimal_above_max_value"),
        ({"presence_penalty": -3}, "presence_penalty", "decimal_below_min_value"),
        ({"frequency_penalty": 2.5}, "frequency_penalty", "decimal_above_max_value"),
        ({"top_logprobs": 30}, "top_logprobs", "integer_above_max_value"),
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"messages": [USER, {"role": "wizard", "content": "x"}]}, "messages[1].role", None),
        ({"messages": [USER, "not a message"]}, "messages[1].role", None),
    ],
)
async def test_openai_fields_out_of_openai_range_are_a_400_naming_the_field(
    tmp_path: Path, extra: dict[str, Any], param: str, code: str | None
) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(CHAT, chat(**extra))
        assert reply.status == 400, reply.body
        error = reply.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error"
        assert error["code"] == (code or "invalid_value")
        assert gw.upstreams[0].sent == []
    assert gw.ledger_rows() == []


async def test_in_range_values_and_vllm_extensions_go_upstream_untouched(tmp_path: Path) -> None:
    extra = {
        "temperature": 2,
        "top_p": 0,
        "presence_penalty": -2,
        "top_logprobs": 20,
        "logprobs": True,
        "top_k": 5,  # vLLM's
        "min_p": 0.1,  # vLLM's
        "repetition_penalty": 1.3,  # vLLM's: OpenAI has no such field, nor a range for it
        "messages": [{"role": "developer", "content": "be brief"}, USER],
    }
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(CHAT, chat(**extra))
        assert reply.status == 200, reply.body
        sent = gw.upstreams[0].sent[0]["payload"]
        assert isinstance(sent, dict)
        assert {k: sent[k] for k in extra} == extra
