"""A model's chat template, rendered (sandboxed) to measure its per-message and reply overheads
in tokens, so that prompt counts match what the engine will count."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from gateway.tokens.config import TokenizerConfig, TokenizerUnavailable
from gateway.tokens.counting import EncodeCount

_OVERHEAD_FIELDS = frozenset({"tokens_per_message", "tokens_per_reply"})


def with_template_overhead(
    config: TokenizerConfig, tokenizer_file: Path, count: EncodeCount
) -> TokenizerConfig:
    """The config with the overheads measured from the model's chat template, if it has one
    and the config does not set them itself."""
    if _OVERHEAD_FIELDS & config.model_fields_set:
        return config
    template = find_chat_template(tokenizer_file.parent)
    if template is None:
        return config
    per_message, per_reply = measure_template_overhead(template, count)
    return config.model_copy(
        update={"tokens_per_message": per_message, "tokens_per_reply": per_reply}
    )


def find_chat_template(folder: Path) -> ChatTemplate | None:
    """The chat template of a Hugging Face model folder, with its special-token strings."""
    settings: dict[str, Any] = {}
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        settings = orjson.loads(config_file.read_bytes())
    source = settings.get("chat_template")
    template_file = folder / "chat_template.jinja"
    if template_file.is_file():
        source = template_file.read_text()
    if not isinstance(source, str):
        return None
    specials = {k: v for k, v in settings.items() if k.endswith("_token") and isinstance(v, str)}
    return ChatTemplate(source, specials)


class ChatTemplate:
    """A model's Jinja chat template, rendered in a sandbox the way transformers renders it."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_template_error
        self._template = env.from_string(source)
        self._specials = dict(special_tokens)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self._specials
        )


def _raise_template_error(message: str) -> None:
    raise TokenizerUnavailable(f"the chat template refused a probe conversation: {message}")


def measure_template_overhead(template: ChatTemplate, count: EncodeCount) -> tuple[int, int]:
    """(tokens a message adds besides its role and content, tokens added once per request: the
    reply's priming and anything the template puts before the first message, like a BOS).

    Rendered with empty contents, so no content token can merge with the template's own.
    """
    user = [{"role": "user", "content": ""}]
    two = [*user, {"role": "assistant", "content": ""}]
    one_message = count(template.render(user, False))
    per_message = count(template.render(two, False)) - one_message - count("assistant")
    per_request = count(template.render(user, True)) - per_message - count("user")
    return max(per_message, 0), max(per_request, 0)
