"""A pure model of vLLM's (v1) scheduler for the simulator: a running batch and a waiting queue.

Each engine step, like vLLM's ``Scheduler.schedule``: first the running requests (one token for
each decoding one, the next chunk of a prompt still being prefilled), then waiting requests in
arrival order (FCFS) while the batch has fewer than ``max_num_seqs`` requests, the step's token
budget (``max_num_batched_tokens``) lasts and KV blocks can be had. A waiting request that does
not fit stops admission (head of line, as FCFS does). The longest cached prefix of its prompt
(whole blocks, never the last prompt token, which must be computed for its logits) is skipped.

Simplification: a request reserves the KV blocks of its prompt plus ``max_tokens`` when it is
admitted, so the simulator never preempts. Only prompt blocks are cached (not generated ones).

No clock and no I/O: the caller asks for a step, waits its ``seconds``, then completes it::

    s = Scheduler(CapacitySettings())
    seq = Sequence(tokens, max_tokens=16)
    s.add(seq)
    batch = s.schedule()
    s.complete(batch)          # seq.output_tokens, seq.cached_tokens, seq.finished
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Tokens
from dataclasses import dataclass, field

from serve_app.sim.capacity import CapacitySettings
from serve_app.sim.prefix_cache import BlockHash, BlockPool, block_hashes


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the simulated engine."""

    tokens: Tokens[str]
    max_tokens: int
    hashes: list[BlockHash] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    computed: int = 0
    """Prompt tokens that have KV (cached ones included)."""
    cached_tokens: int = 0
    output_tokens: int = 0
    finished: bool = False
    _registered: int = 0

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_len


@dataclass(frozen=True, slots=True)
class Batch:
    """One step's work: ``(sequence, tokens)`` pairs and what the step costs."""

    work: list[tuple[Sequence, int]]
    prefill_tokens: int
    decode_seqs: int
    seconds: float


@dataclass(slots=True)
class Counters:
    """Running totals, exported under vLLM's metric names."""

    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0  # of those, tokens found cached
    prompt_tokens: int = 0  # prompt tokens computed (prefill work)
    generation_tokens: int = 0


class Scheduler:
    """The running batch, the waiting queue and the KV block pool of one simulated engine."""

    def __init__(self, capacity: CapacitySettings) -> None:
        self.capacity = capacity
        self.pool = BlockPool(capacity.num_gpu_blocks, capacity.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = Counters()

    def add(self, seq: Sequence) -> None:
        if self.capacity.enable_prefix_caching and not seq.hashes:
            seq.hashes = block_hashes(seq.tokens, self.capacity.block_size)
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, seq: Sequence) -> None:
        """The client went away: drop ``seq`` wherever it is and free its blocks."""
        if seq.finished:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._finish(seq)

    def schedule(self) -> Batch:
        budget = self.capacity.max_num_batched_tokens
        work: list[tuple[Sequence, int]] = []
        for seq in self.running:
            if budget <= 0:
                break
            n = min(seq.prompt_len - seq.computed, budget) if seq.prefilling else 1
            work.append((seq, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.capacity.max_num_seqs:
            seq = self.waiting[0]
            if not self._admit(seq):
                break
            self.waiting.popleft()
            self.running.append(seq)
            n = min(seq.prompt_len - seq.computed, budget)
            work.append((seq, n))
            budget -= n
        prefill = sum(n for seq, n in work if seq.prefilling)
        decodes = len(work) - sum(1 for seq, _ in work if seq.prefilling)
        return Batch(work, prefill, decodes, self.capacity.step_seconds(prefill, decodes))

    def complete(self, batch: Batch) -> list[Sequence]:
        """Apply a finished step; the sequences that produced a token (finished ones included)."""
        produced: list[Sequence] = []
        for seq, n in batch.work:
            if seq.finished:  # aborted while the step ran
                continue
            if seq.prefilling:
                seq.computed += n
                self.counters.prompt_tokens += n
                self._register_full_blocks(seq)
                if seq.prefilling:
                    continue
            seq.output_tokens += 1
            self.counters.generation_tokens += 1
            produced.append(seq)
            if seq.output_tokens >= seq.max_tokens:
                self.running.remove(seq)
                self._finish(seq)
        return produced

    def _admit(self, seq: Sequence) -> bool:
        """Hold the cached prefix and reserve the rest of the request's blocks, or leave it."""
        size = self.capacity.block_size
        hit = self.pool.lookup(seq.hashes[: (seq.prompt_len - 1) // size])
        needed = -(-(seq.prompt_len + seq.max_tokens) // size)
        self.pool.take(hit)
        fresh = self.pool.allocate(needed - len(hit))
        if fresh is None:
            self.pool.release(hit)
            return False
        seq.blocks = hit + fresh
        seq.computed = seq.cached_tokens = len(hit) * size
        seq._registered = len(hit)
        if self.capacity.enable_prefix_caching:
            self.counters.prefix_queries += seq.prompt_len
            self.counters.prefix_hits += seq.cached_tokens
        return True

    def _register_full_blocks(self, seq: Sequence) -> None:
        full = min(seq.computed // self.capacity.block_size, len(seq.hashes))
        for i in range(seq._registered, full):
            self.pool.register(seq.blocks[i], seq.hashes[i])
        seq._registered = max(seq._registered, full)

    def _finish(self, seq: Sequence) -> None:
        seq.finished = True
        self.pool.release(seq.blocks)
        seq.blocks = []
