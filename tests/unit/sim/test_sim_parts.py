"""The simulator's pure parts: prompt token estimate, output words, settings, command line."""

from __future__ import annotations

import pytest

from serve_app.sim import SimSettings, text
from serve_app.sim.cli import build_parser, settings_from_args
from serve_app.sim.steering import Steering, SteeringError


def test_chat_prompt_estimate_counts_words_and_per_message_overhead() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one two three"}]},
    ]
    joined, tokens = text.chat_prompt(messages)
    assert joined == "be brief\none two three"
    assert tokens == 5 + 2 * text.MESSAGE_OVERHEAD_TOKENS + text.REPLY_PRIMING_TOKENS


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [("a b  c\n d", 4), (["x y"], 2), ([5, 6, 7], 3), ("", 0)],
)
def test_completion_prompt_estimate(prompt: object, tokens: int) -> None:
    assert text.completion_prompt(prompt)[1] == tokens


@pytest.mark.parametrize("prompt", [None, 3, ["a", "b"], [{"x": 1}]])
def test_completion_prompt_rejects_other_shapes(prompt: object) -> None:
    with pytest.raises(ValueError, match="prompt must be"):
        text.completion_prompt(prompt)


def test_output_words_depend_on_prompt_and_position_only() -> None:
    seed = text.prompt_seed("hello")
    assert text.output_text(seed, 5) == text.output_text(text.prompt_seed("hello"), 5)
    assert text.output_text(seed, 5) != text.output_text(text.prompt_seed("bye"), 5)
    assert text.token_text(seed, 0) in text.WORDS
    assert text.token_text(seed, 3).startswith(" ")
    assert text.output_text(seed, 3) == "".join(text.token_text(seed, k) for k in range(3))


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="at least one model"):
        SimSettings(models=())
    with pytest.raises(ValueError, match="positive"):
        SimSettings(output_tokens=0)
    with pytest.raises(ValueError, match="fail_rate"):
        SimSettings(fail_rate=1.5)


def test_command_line_builds_settings() -> None:
    args = build_parser().parse_args(
        ["--port", "0", "--model", "a", "--model", "b", "--no-delay", "--itl-ms", "2.5"]
    )
    settings = settings_from_args(args)
    assert settings.models == ("a", "b")
    assert settings.no_delay is True
    assert settings.itl_ms == 2.5
    assert settings_from_args(build_parser().parse_args([])).models == ("sim-model",)


def test_help_says_it_is_a_simulator() -> None:
    assert "SIMULATOR" in build_parser().format_help()


def test_steering_headers_parse() -> None:
    steering = Steering.from_headers(
        {"x-sim-ttft-ms": "12.5", "x-sim-status": "503", "x-sim-fail-after": "2", "x-sim-hang": "1"}
    )
    assert steering == Steering(ttft_ms=12.5, status=503, fail_after=2, hang=True)
    assert Steering.from_headers({"x-sim-hang": "0"}).hang is False
    with pytest.raises(SteeringError, match="x-sim-itl-ms"):
        Steering.from_headers({"x-sim-itl-ms": "fast"})
