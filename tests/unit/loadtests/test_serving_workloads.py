"""The serving-aware workloads of pd-loadtest: multi-turn conversations, tenants, prefix figures."""

from __future__ import annotations

import argparse
import itertools

import pytest

from loadtests.pdload.cli import parse_tenant
from loadtests.pdload.client import cached_tokens
from loadtests.pdload.records import RequestRecord
from loadtests.pdload.stats import Slo, summarize, summarize_by
from loadtests.pdload.tokenizer import load_tokenizer
from loadtests.pdload.workload import WorkloadSpec, build_items

SPEC = WorkloadSpec(
    kind="multi-turn", conversations=3, turns=4, prefix_tokens=20, input_tokens=7, output_tokens=5
)


def test_each_turn_resends_the_history_of_its_conversation() -> None:
    items = build_items(SPEC, load_tokenizer("words"), 12, seed=1, salt=0)
    # Turn by turn across the three conversations.
    assert [i.shape for i in items] == [f"turn-{t}" for t in range(1, 5) for _ in range(3)]
    for c in range(3):
        turns = [items[t * 3 + c] for t in range(4)]
        for earlier, later in itertools.pairwise(turns):
            assert earlier.messages is not None and later.messages is not None
            # The later turn is the earlier one plus an answer and a new question.
            assert later.messages[: len(earlier.messages)] == earlier.messages
            assert [m["role"] for m in later.messages[len(earlier.messages) :]] == [
                "assistant",
                "user",
            ]
            assert later.prompt_tokens == earlier.prompt_tokens + 5 + 7
        assert turns[0].prompt_tokens == 20 + 7
    # Conversations have their own system prompts.
    systems = {items[c].messages[0]["content"] for c in range(3)}  # type: ignore[index]
    assert len(systems) == 3


def test_more_items_than_one_round_start_fresh_conversations() -> None:
    items = build_items(SPEC, load_tokenizer("words"), 15, seed=1, salt=0)
    assert [i.shape for i in items[12:]] == ["turn-1"] * 3
    assert items[12].messages != items[0].messages


def test_salts_give_different_text() -> None:
    tok = load_tokenizer("words")
    a = build_items(SPEC, tok, 3, seed=1, salt=0)
    b = build_items(SPEC, tok, 3, seed=1, salt=1)
    assert a[0].messages != b[0].messages


def _rec(prompt: int, cached: int | None, pool: str, tenant: str | None = None) -> RequestRecord:
    return RequestRecord(
        target="t", step=0, index=0, shape="s", sent_at=0.0, lag=0.0, expected_prompt_tokens=prompt,
        max_tokens=4, ttft=0.1, e2e=0.2, completion_tokens=4, prompt_tokens=prompt,
        cached_tokens=cached, pool=pool, tenant=tenant,
    )  # fmt: skip


def test_prefix_hit_rate_and_prefill_tokens_per_pool() -> None:
    records = [_rec(100, 80, "colo"), _rec(100, 0, "colo"), _rec(300, 60, "pd")]
    s = summarize(records, 1.0, Slo())
    assert s["prompt_tokens_total"] == 500 and s["cached_tokens_total"] == 140
    assert s["prefill_tokens_total"] == 360
    assert s["prefix_hit_rate"] == pytest.approx(140 / 500)
    by_pool = summarize_by(records, lambda r: r.pool, 1.0, Slo())
    assert by_pool["colo"]["prefill_tokens_total"] == 120
    assert by_pool["pd"]["prefill_tokens_total"] == 240


def test_a_server_that_does_not_report_cached_tokens_has_no_hit_rate() -> None:
    s = summarize([_rec(100, None, "colo")], 1.0, Slo())
    assert s["prefix_hit_rate"] is None and s["prefill_tokens_total"] == 100


def test_cached_tokens_is_read_only_when_well_formed() -> None:
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": 32}}) == 32
    assert cached_tokens({"prompt_tokens_details": None}) is None
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": "9"}}) is None
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": True}}) is None
    assert cached_tokens({}) is None


def test_tenant_argument() -> None:
    t = parse_tenant("name=quiet,key_env=QUIET_KEY,load=0.2")
    assert (t.name, t.key_env, t.load) == ("quiet", "QUIET_KEY", 0.2)
    for bad in ("name=q,key_env=K", "name=q,key_env=K,load=0", "name=q,key_env=K,load=x,y=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_tenant(bad)
