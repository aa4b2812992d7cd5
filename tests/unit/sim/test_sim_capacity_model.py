"""The capacity model's pure parts: the block pool's prefix cache and the scheduler's steps.

No clock and no I/O: each step is asked for and completed by the test.
"""

from __future__ import annotations

import pytest

from gateway.routing.gauges import parse_engine_metrics
from serve_app.sim import text
from serve_app.sim.capacity import CapacitySettings
from serve_app.sim.prefix_cache import BlockPool, block_hashes
from serve_app.sim.scheduler import Scheduler, Sequence
from serve_app.sim.vllm_metrics import VllmMetrics


def toks(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def run_to_end(s: Scheduler, limit: int = 10_000) -> int:
    steps = 0
    while s.has_work():
        s.complete(s.schedule())
        steps += 1
        assert steps < limit, "the scheduler made no progress"
    return steps


# --- the block pool ------------------------------------------------------------------------


def test_hash_chain_shares_blocks_only_while_everything_before_is_equal() -> None:
    a = block_hashes(toks("a", 48), 16)
    b = block_hashes(toks("a", 32) + toks("b", 16), 16)
    c = block_hashes(toks("x", 16) + toks("a", 32)[16:], 16)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    # The second block's tokens are the same as a's, but its parent is not: no match.
    assert c[1] != a[1]
    assert block_hashes(toks("a", 15), 16) == []  # a partial block has no hash


def test_released_blocks_stay_cached_until_evicted_least_recent_first() -> None:
    pool = BlockPool(num_blocks=4, block_size=2)
    first = pool.allocate(2)
    assert first is not None
    pool.register(first[0], 101)
    pool.register(first[1], 102)
    pool.release(first)
    assert pool.usage() == 0.0 and pool.cached_blocks == 2
    assert pool.lookup([101, 102, 103]) == first
    # Two fresh blocks come from the never-used ones; the cached ones survive.
    other = pool.allocate(2)
    assert other is not None and not set(other) & set(first)
    assert pool.lookup([101, 102]) == first
    # One more block must evict: the tail of the released prompt goes first (freed last-first).
    more = pool.allocate(1)
    assert more == [first[1]]
    assert pool.lookup([101, 102]) == [first[0]]


def test_a_held_block_is_never_evicted_and_usage_counts_held_blocks() -> None:
    pool = BlockPool(num_blocks=2, block_size=2)
    held = pool.allocate(1)
    assert held is not None
    pool.register(held[0], 7)
    assert pool.usage() == 0.5
    assert pool.allocate(2) is None  # only one free block
    pool.take(pool.lookup([7]))  # a second request shares it
    pool.release(held)
    assert pool.usage() == 0.5  # still held by the second
    assert pool.allocate(1) is not None and pool.lookup([7]) == held


# --- the scheduler -------------------------------------------------------------------------


def test_batch_is_bounded_by_max_num_seqs_and_the_rest_waits_fcfs() -> None:
    s = Scheduler(CapacitySettings(max_num_seqs=2, num_gpu_blocks=64, block_size=4))
    seqs = [Sequence(toks(f"p{i}-", 8), max_tokens=3) for i in range(4)]
    for seq in seqs:
        s.add(seq)
    s.complete(s.schedule())
    assert s.running == seqs[:2] and list(s.waiting) == seqs[2:]
    run_to_end(s)
    assert all(seq.finished and seq.output_tokens == 3 for seq in seqs)
    assert s.pool.usage() == 0.0


def test_token_budget_chunks_a_long_prefill_over_several_steps() -> None:
    cap = CapacitySettings(max_num_batched_tokens=10, num_gpu_blocks=64, block_size=4)
    s = Scheduler(cap)
    seq = Sequence(toks("t", 25), max_tokens=2)
    s.add(seq)
    batches = []
    while seq.output_tokens == 0:
        batch = s.schedule()
        batches.append(batch.prefill_tokens)
        s.complete(batch)
    assert batches == [10, 10, 5]  # the first token comes with the last chunk


def test_step_cost_follows_prefill_tokens_and_decode_batch_size() -> None:
    cap = CapacitySettings(
        step_ms=2, prefill_per_token_ms=0.5, decode_per_seq_ms=1, num_gpu_blocks=64, block_size=4
    )
    s = Scheduler(cap)
    a, b = Sequence(toks("a", 8), 5), Sequence(toks("b", 8), 5)
    s.add(a)
    s.add(b)
    prefill = s.schedule()
    assert (prefill.prefill_tokens, prefill.decode_seqs) == (16, 0)
    assert prefill.seconds == pytest.approx((2 + 0.5 * 16) / 1000)
    s.complete(prefill)
    decode = s.schedule()
    assert (decode.prefill_tokens, decode.decode_seqs) == (0, 2)
    assert decode.seconds == pytest.approx((2 + 2 * 1) / 1000)


def test_a_repeated_prefix_is_not_prefilled_again_and_is_counted_as_hits() -> None:
    s = Scheduler(CapacitySettings(num_gpu_blocks=64, block_size=4))
    history = toks("h", 20)
    first = Sequence(history, max_tokens=2)
    s.add(first)
    run_to_end(s)
    computed_before = s.counters.prompt_tokens
    second = Sequence(history + toks("n", 6), max_tokens=2)
    s.add(second)
    run_to_end(s)
    assert first.cached_tokens == 0
    assert second.cached_tokens == 20  # five whole blocks of the history
    assert s.counters.prompt_tokens - computed_before == 6
    assert (s.counters.prefix_queries, s.counters.prefix_hits) == (20 + 26, 20)


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    s = Scheduler(CapacitySettings(num_gpu_blocks=64, block_size=4))
    prompt = toks("q", 16)
    for _ in range(2):
        s.add(Sequence(prompt, max_tokens=1))
        run_to_end(s)
    again = Sequence(prompt, max_tokens=1)
    s.add(again)
    run_to_end(s)
    assert again.cached_tokens == 12  # not 16: the last block is recomputed for the logits


def test_prefix_caching_off_never_hits() -> None:
    s = Scheduler(CapacitySettings(num_gpu_blocks=64, block_size=4, enable_prefix_caching=False))
    for _ in range(2):
        seq = Sequence(toks("h", 20), max_tokens=1)
        s.add(seq)
        run_to_end(s)
        assert seq.cached_tokens == 0
    assert s.counters.prefix_queries == 0


def test_bounded_kv_memory_evicts_old_prefixes_and_holds_admission() -> None:
    # 8 blocks of 4 tokens: one request of 12 prompt + 4 output tokens takes 4 blocks.
    s = Scheduler(CapacitySettings(num_gpu_blocks=8, block_size=4, max_num_seqs=8))
    a, b, c = (Sequence(toks(p, 12), max_tokens=4) for p in "abc")
    for seq in (a, b, c):
        s.add(seq)
    s.complete(s.schedule())
    assert s.running == [a, b] and list(s.waiting) == [c]  # memory, not max_num_seqs, binds
    assert s.pool.usage() == 1.0
    run_to_end(s)
    assert c.finished and s.pool.usage() == 0.0
    # c's blocks were taken from the least recently freed: a's prefix is gone, c's is cached.
    a_again, c_again = Sequence(toks("a", 12), 1), Sequence(toks("c", 12), 1)
    for seq in (a_again, c_again):
        s.add(seq)
        run_to_end(s)
    assert (a_again.cached_tokens, c_again.cached_tokens) == (0, 8)


def test_abort_frees_a_waiting_or_running_request() -> None:
    s = Scheduler(CapacitySettings(num_gpu_blocks=64, block_size=4, max_num_seqs=1))
    a, b = Sequence(toks("a", 8), 100), Sequence(toks("b", 8), 100)
    s.add(a)
    s.add(b)
    batch = s.schedule()
    s.abort(b)
    s.abort(a)  # while its step is in flight
    assert s.complete(batch) == []
    assert not s.has_work() and s.pool.usage() == 0.0


def test_chat_tokens_match_the_simulators_prompt_count() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there friend"},
    ]
    assert len(text.chat_tokens(messages)) == text.chat_prompt(messages)[1]
    longer = [*messages, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
    tokens, more = text.chat_tokens(messages), text.chat_tokens(longer)
    assert more[: len(tokens) - 2] == tokens[:-2]  # the history is a prefix of the next turn


def test_metrics_render_vllm_names_and_labels() -> None:
    s = Scheduler(CapacitySettings(num_gpu_blocks=10, block_size=4, max_num_seqs=1))
    m = VllmMetrics("sim-model")
    s.add(Sequence(toks("a", 8), 4))
    s.add(Sequence(toks("b", 8), 4))
    s.complete(s.schedule())
    m.observe_ttft(0.03)
    body = m.render(s).decode()
    labels = '{engine="0",model_name="sim-model"}'
    assert f"vllm:num_requests_running{labels} 1.0" in body
    assert f"vllm:num_requests_waiting{labels} 1.0" in body
    assert f"vllm:kv_cache_usage_perc{labels} 0.3" in body
    assert f"vllm:prefix_cache_queries_total{labels} 8.0" in body
    assert f"vllm:prefix_cache_hits_total{labels} 0.0" in body
    assert "# TYPE vllm:prefix_cache_hits_total counter" in body
    bucket = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="sim-model"}'
    assert f"{bucket} 1.0" in body
    run_to_end(s)
    again = m.render(s).decode()
    assert f"vllm:prefix_cache_queries_total{labels} 16.0" in again  # counted once per request
    assert f"vllm:num_requests_running{labels} 0.0" in again


def test_the_gateways_scraper_reads_the_simulators_metrics() -> None:
    # The other side of the wire: gateway/routing/gauges.py parses vLLM's text; so must it ours.
    s = Scheduler(CapacitySettings(num_gpu_blocks=10, block_size=4, max_num_seqs=1))
    for p in "ab":
        s.add(Sequence(toks(p, 8), 4))
    s.complete(s.schedule())
    reading = parse_engine_metrics(VllmMetrics("sim-model").render(s), {"model_name": "sim-model"})
    assert (reading.running, reading.waiting) == (1, 1)
    assert reading.kv_usage == pytest.approx(0.3)
    assert (reading.prefix_queries, reading.prefix_hits) == (8, 0)
