"""Simulated function calling: when the simulator calls a tool, and with what arguments.

The rule (documented, deterministic): a chat request that offers ``tools`` gets a call of one of
them unless ``tool_choice`` is ``"none"`` or the last message is a tool's result (so a tool
round trip ends with text, as a model would answer it). A named ``tool_choice`` picks the
function, else the first tool is called. Its arguments are a JSON object with each of the
function's parameter ``properties`` (at most :data:`MAX_ARGUMENTS`) set to a simulated value.
The arguments stream in pieces, one per chunk (at most ``max_tokens`` of them), and each piece
counts as one output token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from serve_app.sim import text

MAX_ARGUMENTS = 8
_VALUES: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    pieces: tuple[str, ...]
    """The arguments (JSON), in the pieces they stream in."""

    @property
    def arguments(self) -> str:
        return "".join(self.pieces)


def plan_tool_call(body: dict[str, Any], seed: int, max_tokens: int) -> ToolCall | None:
    function = _chosen(body)
    if function is None:
        return None
    arguments = orjson.dumps(_arguments(function.get("parameters"), seed)).decode()
    count = max(1, min(max_tokens, len(arguments)))
    size = math.ceil(len(arguments) / count)
    pieces = tuple(arguments[i : i + size] for i in range(0, len(arguments), size))
    return ToolCall(f"chatcmpl-tool-{seed:08x}", str(function.get("name", "")), pieces)


def _chosen(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    messages = body.get("messages") or [{}]
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    if isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
        return None
    functions = [
        t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == name), None)
    return functions[0] if functions else None


def _arguments(parameters: object, seed: int) -> dict[str, Any]:
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return {}
    found: dict[str, Any] = {}
    for index, (name, schema) in enumerate(list(properties.items())[:MAX_ARGUMENTS]):
        kind = schema.get("type") if isinstance(schema, dict) else None
        found[name] = _VALUES.get(str(kind), text.token_text(seed, index).strip())
    return found
