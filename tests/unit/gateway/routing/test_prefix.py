"""The approximate prefix index: block names, matching, LRU bounds."""

from __future__ import annotations

from typing import Any

from gateway.routing.prefix import PrefixIndex, prompt_blocks
from gateway.wire.request import Operation

HISTORY = "You are a helpful assistant. " * 20


def chat(*turns: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": HISTORY}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"messages": messages}


def blocks(payload: dict[str, Any], seed: bytes = b"m", max_blocks: int = 512) -> Any:
    return prompt_blocks(Operation.CHAT, payload, block_chars=64, max_blocks=max_blocks, seed=seed)


def test_a_conversation_one_turn_on_starts_with_the_blocks_of_its_history() -> None:
    first = blocks(chat("What is the capital of France?"))
    later = blocks(chat("What is the capital of France?", "Paris.", "And of Spain? " * 10))
    assert len(later.hashes) > len(first.hashes)
    assert later.hashes[: len(first.hashes)] == first.hashes


def test_a_prompt_with_its_answer_names_the_next_turns_history_past_the_prompt() -> None:
    answer = "Paris is the capital of France, and has been for a long time. " * 3
    question = "What is the capital of France?"
    prompt = blocks(chat(question))
    answered = prompt_blocks(
        Operation.CHAT, chat(question), block_chars=64, max_blocks=512, seed=b"m", answer=answer
    )
    next_turn = blocks(chat(question, answer, "And of Spain?"))
    assert len(answered.hashes) > len(prompt.hashes)
    assert next_turn.hashes[: len(answered.hashes)] == answered.hashes  # all of it matches


def test_a_different_prefix_or_model_shares_no_block() -> None:
    one = blocks(chat("hello " * 50))
    other = blocks({"messages": [{"role": "system", "content": "x" + HISTORY}]})
    assert not set(one.hashes) & set(other.hashes)
    assert not set(one.hashes) & set(blocks(chat("hello " * 50), seed=b"other").hashes)


def test_only_whole_blocks_are_named_and_at_most_max_blocks() -> None:
    short = prompt_blocks(Operation.COMPLETION, {"prompt": "x" * 63}, block_chars=64, max_blocks=8)
    assert short.hashes == ()
    long = prompt_blocks(
        Operation.COMPLETION, {"prompt": "y" * 64 * 100}, block_chars=64, max_blocks=8
    )
    assert len(long.hashes) == 8
    assert long.chars == 6400  # the whole text still counts: the rest is uncached


def test_an_image_part_ends_the_text_the_index_reads() -> None:
    payload = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a" * 128},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                    {"type": "text", "text": "b" * 1280},
                ],
            }
        ]
    }
    assert blocks(payload).chars < 200


def test_match_finds_the_longest_recorded_run_per_pool_and_per_replica() -> None:
    index = PrefixIndex(max_blocks=10_000, replicas=2)
    turn1 = blocks(chat("question one " * 10))
    turn2 = blocks(chat("question one " * 10, "answer " * 10, "question two " * 10))
    assert index.match(turn2).pool_blocks == 0
    index.record(turn1, replica=1)
    found = index.match(turn2)
    assert found.pool_blocks == len(turn1.hashes)
    assert found.replica_blocks == (0, len(turn1.hashes))
    cached = found.uncached_tokens(prompt_tokens=1000)
    assert 0 < cached < 1000
    assert found.uncached_tokens(1000, matched_blocks=0) == 1000


def test_the_index_keeps_at_most_max_blocks_and_evicts_the_least_recent() -> None:
    index = PrefixIndex(max_blocks=50, replicas=1)
    hot = blocks(chat("hot " * 40))
    index.record(hot, 0)
    for n in range(20):
        index.record(blocks(chat(f"cold {n} " * 40)), 0)
        index.match(hot)  # touched: stays
        assert len(index) <= 50
    assert index.match(hot).pool_blocks == len(hot.hashes)
    assert index.match(blocks(chat("cold 0 " * 40))).pool_blocks < len(hot.hashes) + 1


def test_forget_takes_a_replica_out_of_every_block() -> None:
    index = PrefixIndex(max_blocks=1000, replicas=2)
    b = blocks(chat("shared " * 40))
    index.record(b, 0)
    index.record(b, 1)
    index.forget(0)
    assert index.match(b).replica_blocks == (0, len(b.hashes))
    index.forget(1)
    assert len(index) == 0
