"""The simulator's capacity settings: vLLM's scheduler and cache knobs, and the step cost model.

Off unless given (``SimSettings.capacity is None``): the simulator then paces each request on
its own, as before. With it, requests share one simulated engine (see ``scheduler.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CapacitySettings:
    """A simulated engine's limits, named as vLLM names its flags, and its step cost.

    One engine step costs
    ``step_ms + prefill_per_token_ms * prefill_tokens + decode_per_seq_ms * decode_seqs``:
    prefill time follows the prompt tokens actually computed (cached ones cost nothing), decode
    time grows with the batch. ``kv_transfer_per_token_ms`` (a PD pool) holds each request's
    first token back by that much per prompt token once its prefill is done (the KV link's
    bandwidth: about 1 ms per prompt token is the llama-3-8b shape at ~300 MB/s).
    ``kv_transfer_parallel`` is how many transfers the link carries at once (0: any number);
    a transfer beyond it waits for the link, as NIXL over one TCP connection queues them::

        CapacitySettings(max_num_seqs=16, num_gpu_blocks=2048, prefill_per_token_ms=0.05)
    """

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    num_gpu_blocks: int = 4096
    enable_prefix_caching: bool = True
    step_ms: float = 5.0
    prefill_per_token_ms: float = 0.02
    decode_per_seq_ms: float = 0.2
    kv_transfer_per_token_ms: float = 0.0
    kv_transfer_parallel: int = 0

    def __post_init__(self) -> None:
        counts = (self.max_num_seqs, self.max_num_batched_tokens, self.block_size)
        if min(counts) < 1 or self.num_gpu_blocks < 1 or self.kv_transfer_parallel < 0:
            raise ValueError("capacity limits must be positive")
        costs = (
            self.step_ms,
            self.prefill_per_token_ms,
            self.decode_per_seq_ms,
            self.kv_transfer_per_token_ms,
        )
        if min(costs) < 0:
            raise ValueError("step costs must not be negative")

    def step_seconds(self, prefill_tokens: int, decode_seqs: int) -> float:
        ms = (
            self.step_ms
            + self.prefill_per_token_ms * prefill_tokens
            + self.decode_per_seq_ms * decode_seqs
        )
        return ms / 1000
