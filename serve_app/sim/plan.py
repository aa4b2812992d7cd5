"""Validate a completion request the way vLLM does and turn it into a plan to generate.

Rejections carry vLLM's statuses: 400 for a bad body or a request longer than the context,
404 for a model the simulator does not serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve_app.sim import text
from serve_app.sim.settings import SimSettings
from serve_app.sim.tools import ToolCall, plan_tool_call


class SimRequestError(Exception):
    """A request the simulator rejects, rendered as vLLM's error body."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class CompletionPlan:
    """What one chat or text completion will produce."""

    model: str
    prompt_tokens: int
    max_tokens: int
    seed: int
    stream: bool
    include_usage: bool
    tool_call: ToolCall | None = None
    """A function call instead of text (serve_app/sim/tools.py); its pieces are the tokens."""


def resolve_model(body: dict[str, Any], settings: SimSettings) -> str:
    """The requested model; vLLM serves its first model when none is named."""
    model = body.get("model")
    if model is None:
        return settings.models[0]
    if model not in settings.models:
        raise SimRequestError(404, f"The model `{model}` does not exist.", "model")
    return str(model)


def _prompt(body: dict[str, Any], chat: bool) -> tuple[str, int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise SimRequestError(400, "messages must be a list of message objects", "messages")
        return text.chat_prompt(messages)
    try:
        return text.completion_prompt(body.get("prompt"))
    except ValueError as e:
        raise SimRequestError(400, str(e), "prompt") from e


def _max_tokens(body: dict[str, Any], settings: SimSettings) -> int:
    value = body.get("max_tokens")
    if value is None:
        value = body.get("max_completion_tokens")
    if value is None:
        return settings.output_tokens
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SimRequestError(400, f"max_tokens must be at least 1, got {value}.", "max_tokens")
    return value


def plan_completion(body: dict[str, Any], settings: SimSettings, chat: bool) -> CompletionPlan:
    """Check ``body`` and plan the completion; raises :class:`SimRequestError`."""
    model = resolve_model(body, settings)
    prompt, prompt_tokens = _prompt(body, chat)
    max_tokens = _max_tokens(body, settings)
    total = prompt_tokens + max_tokens
    if total > settings.max_model_len:
        raise SimRequestError(
            400,
            f"This model's maximum context length is {settings.max_model_len} tokens. "
            f"However, you requested {max_tokens} output tokens and your prompt contains "
            f"{prompt_tokens} input tokens, for a total of {total} tokens. Please reduce the "
            "length of the input prompt or the number of requested output tokens.",
            "input_tokens",
        )
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options and not stream:
        # vLLM rejects this too; a gateway must not inject stream_options into a non-stream.
        raise SimRequestError(
            400, "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    seed = text.prompt_seed(prompt)
    tool_call = plan_tool_call(body, seed, max_tokens) if chat else None
    return CompletionPlan(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens if tool_call is None else len(tool_call.pieces),
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        tool_call=tool_call,
    )
