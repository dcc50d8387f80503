"""The pool of physical KV blocks: ref counts, the LRU free queue, and the hash -> block map.

Invariants (checked by the property tests):
- every block is either referenced (ref_cnt > 0) or in the free queue, never both;
- a block in `cached_blocks` carries that hash; a referenced cached block is never handed out;
- evicting a cached block (taking it from the free queue) removes its hash and records the event.
Every operation is O(1) per block touched; nothing scans the pool.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.core.free_block_queue import FreeBlockQueue
from engine.core.kv_cache_block import KVCacheBlock
from engine.core.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedock.kv.block_hash import BlockHash


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached_blocks: dict[BlockHash, KVCacheBlock] = {}
        self._pending_events: list[KVEvent] = []

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by requests (free-but-cached blocks count as free)."""
        return self.num_used_blocks / self.num_blocks

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        return self.cached_blocks.get(block_hash)

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take blocks from the LRU end of the free queue, evicting their cached hashes."""
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"asked for {num_blocks} blocks, {self.num_free_blocks} free")
        blocks = []
        removed: list[BlockHash] = []
        for _ in range(num_blocks):
            block = self.free_queue.popleft()
            if block.block_hash is not None:
                removed.append(block.block_hash)
                del self.cached_blocks[block.block_hash]
                block.block_hash = None
            block.ref_cnt = 1
            blocks.append(block)
        if removed:
            self._pending_events.append(BlockRemoved(removed))
        return blocks

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on cached blocks found by a prefix hit (reviving free ones)."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop a reference; blocks reaching zero join the free queue's tail in the given order,
        so the first given is evicted first."""
        for block in ordered_blocks:
            if block.ref_cnt <= 0:
                raise ValueError(f"freeing block {block.block_id} with ref_cnt {block.ref_cnt}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue.append(block)

    def cache_full_blocks(
        self,
        blocks: list[KVCacheBlock],
        block_hashes: list[BlockHash],
        parent_block_hash: BlockHash | None,
        token_ids: list[int] | None = None,
        lora: tuple[int | None, str | None] = (None, None),
        cache_salt: str | None = None,
    ) -> None:
        """Publish newly filled blocks under their hashes. A hash already cached by another block
        (two requests computed the same prefix at once) leaves the duplicate uncached.

        `token_ids` are the blocks' tokens (block_size each); `lora` the (lora_id, lora_name) of
        the adapter they were computed with ((None, None): the base model), `cache_salt` the
        salt of the request's chain (None: unsalted). One BlockStored event is recorded per run
        of consecutive newly cached blocks, so each event's parent is the block just before its
        first: a consumer can chain hashes from the events alone."""
        runs: list[tuple[list[BlockHash], BlockHash | None, int]] = []
        run: list[BlockHash] = []
        parent = parent_block_hash
        for i, (block, block_hash) in enumerate(zip(blocks, block_hashes, strict=True)):
            if block.block_hash is None and block_hash not in self.cached_blocks:
                block.block_hash = block_hash
                self.cached_blocks[block_hash] = block
                if not run:  # NOTE: a run is listed as it starts, then grows in place
                    runs.append((run, parent, i))
                run.append(block_hash)
                continue
            run, parent = [], block_hash
        bs = self.block_size
        for hashes, run_parent, start in runs:
            tokens = [] if token_ids is None else token_ids[start * bs : (start + len(hashes)) * bs]
            event = BlockStored(hashes, run_parent, bs, tokens, lora[0], lora[1], cache_salt)
            self._pending_events.append(event)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible while no block is referenced."""
        if self.num_used_blocks:
            return False
        for block in self.cached_blocks.values():
            block.block_hash = None
        self.cached_blocks.clear()
        self._pending_events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVEvent]:
        events, self._pending_events = self._pending_events, []
        return events
