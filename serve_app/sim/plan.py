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
    output_tokens: int = 0
    """The tokens it generates: its answer's own length (``settings.output_tokens``, ended by a
    natural stop) unless ``max_tokens`` cuts it, or exactly ``max_tokens`` with vLLM's
    ``ignore_eos``. 0: ``max_tokens``."""
    finish_reason: str = "length"
    """``stop``: the answer ended by itself; ``length``: the cap cut it."""
    choices: int = 1
    """``n``: completions per prompt, each of ``output_tokens``."""

    @property
    def generated(self) -> int:
        """Tokens per choice."""
        return self.output_tokens or self.max_tokens


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


def _given_cap(body: dict[str, Any]) -> object:
    value = body.get("max_tokens")
    return body.get("max_completion_tokens") if value is None else value


def _length(body: dict[str, Any], settings: SimSettings, cap: int) -> tuple[int, str]:
    """How long the answer is and why it ends (see ``CompletionPlan.output_tokens``)."""
    if body.get("ignore_eos") is True or cap < settings.output_tokens:
        return cap, "length"
    return settings.output_tokens, "stop"


def _choices(body: dict[str, Any]) -> int:
    value = body.get("n", 1)
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 128:
        raise SimRequestError(400, f"n must be between 1 and 128, got {value}.", "n")
    return value


def _max_tokens(body: dict[str, Any], settings: SimSettings) -> int:
    value = _given_cap(body)
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
    output_tokens, finish_reason = _length(body, settings, max_tokens)
    if tool_call is not None:
        output_tokens, finish_reason = len(tool_call.pieces), "tool_calls"
    return CompletionPlan(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens if tool_call is None else len(tool_call.pieces),
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        tool_call=tool_call,
        output_tokens=output_tokens,
        finish_reason=finish_reason,
        choices=_choices(body) if tool_call is None else 1,
    )
