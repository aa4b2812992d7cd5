"""The simulator's KV block pool with a prefix cache, shaped like vLLM's (v1 ``BlockPool``).

KV memory is ``num_blocks`` blocks of ``block_size`` tokens. A request holds blocks while it
runs; a full block of prompt tokens is registered under its hash, and the hashes form a chain
(each block's hash covers its parent's hash and its own tokens), so two prompts share a cached
block only when everything before it is the same too. A block no request holds goes to the free
queue but keeps its hash: a later prompt with the same prefix takes it back (a hit); allocation
evicts from the free queue's head, the least recently freed block first. Blocks are freed last
block first, as vLLM does, so a prompt's tail is evicted before its head::

    pool = BlockPool(num_blocks=1024, block_size=16)
    hashes = block_hashes(tokens, 16)
    hit = pool.lookup(hashes)        # cached blocks of the longest matching prefix
    pool.take(hit)                   # hold them (out of the free queue)
    fresh = pool.allocate(3)         # or None when memory is short
    pool.register(fresh[0], hashes[len(hit)])
    pool.release(hit + fresh)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BlockHash = int


def block_hashes(tokens: Sequence[str], block_size: int) -> list[BlockHash]:
    """The hash chain of the full blocks of ``tokens`` (a partial last block has none)."""
    hashes: list[BlockHash] = []
    parent: BlockHash = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        hashes.append(parent)
    return hashes


class BlockPool:
    """Blocks with reference counts, a hash index of cached blocks and an LRU free queue."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._refs = [0] * num_blocks
        self._hash_of: dict[int, BlockHash] = {}
        self._by_hash: dict[BlockHash, int] = {}
        # Insertion order is eviction order: the head is the least recently freed block.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def cached_blocks(self) -> int:
        return len(self._by_hash)

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: the fraction of blocks held by requests (0..1)."""
        return 1.0 - len(self._free) / self.num_blocks

    def lookup(self, hashes: Sequence[BlockHash]) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes``; nothing is held yet."""
        hit: list[int] = []
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            hit.append(block)
        return hit

    def take(self, blocks: Sequence[int]) -> None:
        """Hold cached ``blocks`` (from :meth:`lookup`): they leave the free queue."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def allocate(self, count: int) -> list[int] | None:
        """``count`` blocks from the free queue's head (evicting their cached hashes), or None."""
        if count > len(self._free):
            return None
        blocks = [self._free.popitem(last=False)[0] for _ in range(count)]
        for block in blocks:
            old = self._hash_of.pop(block, None)
            if old is not None:
                del self._by_hash[old]
            self._refs[block] = 1
        return blocks

    def register(self, block: int, block_hash: BlockHash) -> None:
        """Mark a held, full ``block`` as caching ``block_hash`` (first writer wins)."""
        if block_hash in self._by_hash or block in self._hash_of:
            return
        self._hash_of[block] = block_hash
        self._by_hash[block_hash] = block

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one hold on each block; a block nobody holds joins the free queue's tail.

        Last block first, so a prompt's head stays cached longest.
        """
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None

    def clear_cache(self) -> None:
        """Forget every cached hash (vLLM's ``reset_prefix_cache``); held blocks stay held."""
        self._hash_of.clear()
        self._by_hash.clear()
